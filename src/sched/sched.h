/* sched.h: schedules: graph rewriting, applying a schedule statement by
 * statement, the transformations, and the enumeration of schedules.
 * Files of src/sched/ may include the front end and the core, nothing above. */
#ifndef COCO_SCHED_H
#define COCO_SCHED_H

#include "front/front.h"

/* ---- rewrite.c: graph surgery shared by the transformations ---- */
Program *program_clone(Program *base);          /* deep copy for scheduling */
Program *program_exact(Program *base);          /* a clone computing everything in FP64 */
Node *node_copy(Program *p, int id, double seq); /* a new node like id */
void replace_uses(Program *p, int old, int with, int after_seq_of);
/* the reader index replace_uses keeps to while splits run unsorted */
void readers_start(Program *p);                /* list every node's readers */
void readers_update(Program *p);               /* list the nodes added since */
void readers_stop(Program *p);                 /* replace_uses scans again */
void program_resort(Program *p);               /* topological, by seq; drops dead */
int fusion_new(Program *p, const char *name, FuseKind kind);
int ref_members(Program *p, Ref r, int *out, int max); /* node ids of a ref */
int ref_uses(Program *p, Ref a, Ref b);        /* does b read a value of a? */
int statement_head(Program *p, int id);        /* named node writing id inline */

/* ---- xform.c: what the transformations share: names, refusals ---- */
typedef struct {
    Program *p;
    const SchedStmt *st;
    const char *sched;
    const char **got; /* optional: the names of the results, in order */
    int *ngot;        /* how many got[] holds */
} Xform;
_Noreturn void refuse(const Xform *x, const char *fmt, ...);
Ref xform_arg(const Xform *x, int i);           /* the value or fusion argument i names */
void xform_outs(const Xform *x, int n, const char *what); /* requires n output names */
/* gives output name i to r; without output names, a fresh name from dflt */
void xform_name(const Xform *x, int i, Ref r, const char *dflt);
const char *overlap_name_check(const Xform *x); /* the overlap's name */
int statement_nodes(Program *p, int id, int *out, int max); /* id and its inline parts */
int is_computation(const Node *n); /* unary, binary, ternary, update or reduction */
void check_node(const Xform *x, Node *n);       /* infer_node, a failure refuses */
const char *schedule_fresh_name(Program *p, const char *dflt); /* dflt, or dflt_2, ... */
/* verb(args) with policy (or P_NONE), no output names (a statement the
 * compiler makes) */
SchedStmt schedule_stmt(Arena *a, Verb verb, const char **args, int nargs, Policy policy);

/* ---- sched.c: applying a schedule, statement by statement ---- */
void schedule_apply(Program *clone, const Schedule *s); /* user error on refusal */
/* statements made by the compiler, applied as schedule `sched` would be */
void schedule_apply_stmts(Program *p, const char *sched, const SchedStmt *st, int n);
const Schedule *schedule_find(Program *p, const char *name);
/* p under schedule s, a new program; NULL with the user error in err (if
 * errlen) when a statement is refused */
Program *schedule_applied(Program *p, const Schedule *s, char *err, size_t errlen);

/* ---- paper_name.c: an enumerated schedule's name in the paper's notation ---- */
/* q's name ("MM-fuse(RS-C-AG)"), with the paper's other spelling if any */
const char *paper_note(Arena *a, Program *q);

/* ---- enum_graph.c: the enumerator's questions about one state's graph ---- */
typedef struct StateGraph StateGraph;
StateGraph *state_graph_new(Program *q); /* q's facts, gathered once */
void state_graph_free(StateGraph *g);
int state_statement_head(const StateGraph *g, int id); /* statement_head */
int state_sliced_after(const StateGraph *g, int id);   /* read by a Slice (ARSliceAG)? */
const char *state_unit_of(const StateGraph *g, int id); /* its unit's name, or NULL */
/* the units downstream of node from through units, by name, in program
 * order (room for q->nnode); their count */
int state_downstream_units(StateGraph *g, int from, const char **units);
/* rs's name, then the unfused AllGathers downstream of ReduceScatter rs
 * through computations and collectives, in program order, but those that
 * gather a value computed from a reduction along a dimension rs cuts (no
 * FusedAllReduce holds one); their count */
int state_gathers_after(StateGraph *g, int rs, const char **names);
int state_overlap_units(StateGraph *g);                /* the overlap candidates */
Ref state_unit(const StateGraph *g, int u);            /* candidate u */
/* the candidates that read a value of candidate u, ascending; their count */
int state_unit_readers(const StateGraph *g, int u, const int **readers);

/* ---- enumerate.c: every distinct valid schedule, added to p->sched ---- */
int enumerate_schedules(Program *p);

/* ---- xform_*.c: the transformations ---- */
void xform_split(const Xform *x);
int split_target(Program *p, int id); /* the AllReduce split(id) splits, or id */
void xform_reorder(const Xform *x);
void xform_fuse(const Xform *x);
/* xform_fuse_ar.c: the verb fuse: fuse(allreduce, C..., AllReduceFuse) as
 * split + reorder + fuse, anything else xform_fuse */
void xform_fuse_verb(const Xform *x);
/* xform_overlap.c */
void xform_overlap(const Xform *x);
int in_some_overlap(Program *p, Ref r); /* is r an item of an overlap? */
/* the node an overlap item stands for: r itself, or the one MatMul that
 * computation statement r writes inline; -1 for a fused operation */
int overlap_operation(Program *p, Ref r);
void xform_asslice(const Xform *x);
void xform_dead(const Xform *x);


#endif

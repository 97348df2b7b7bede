/* sched.c: applies a named schedule to a clone of the program, one
 * statement at a time, re-sorting and verifying the whole graph after each
 * but a run of splits (below); what the transformations share, names and
 * refusals, is in xform.c. */
#include "sched/sched.h"

#include <string.h>

/* each verb's transformation */
static void (*const apply_verb[V_UNKNOWN])(const Xform *) = {
    [V_SPLIT] = xform_split,     [V_REORDER] = xform_reorder, [V_FUSE] = xform_fuse_verb,
    [V_OVERLAP] = xform_overlap, [V_ASSLICE] = xform_asslice, [V_DEAD] = xform_dead,
};

/* Re-sorting and verifying the whole graph after every statement would make
 * applying a schedule quadratic in its statements. A split of an AllReduce
 * that has its sorted place (seq = id) and was not split since only adds
 * nodes right after it (seq + 0.25, + 0.5), names them, and rewires the
 * readers of it that come after it: nothing there asks for the order of
 * ids. Such splits are applied to the unsorted graph, their readers found
 * through the reader index (rewrite.c); the graph is re-sorted and verified
 * before the next other statement and at the end, and is then the graph a
 * re-sort after each split makes (every node's inputs have smaller seqs, so
 * the re-sort orders by seq, and the seqs nest alike). */
typedef struct {
    int nsorted;   /* nodes when last sorted: ids below it have seq = id */
    char *split;   /* split[id]: an AllReduce split since (nsorted, in the arena) */
    int unsorted;  /* splits applied since the graph was sorted */
} Order;

static void order_sorted(Program *p, Order *o)
{
    o->split = NULL;
    o->unsorted = 0;
    o->nsorted = p->nnode;
    for (int i = 0; i < p->nnode; i++)
        if (p->node[i].seq != i)
            o->nsorted = 0; /* not as a re-sort leaves it: defer nothing */
}

static void order_settle(Program *p, Order *o)
{
    if (!o->unsorted)
        return;
    readers_stop(p);
    program_resort(p);
    verify_program(p);
    order_sorted(p, o);
}

/* The AllReduce statement x splits, when it may be split unsorted; else -1. */
static int deferred_split(const Order *o, const Xform *x)
{
    if (x->st->verb != V_SPLIT || x->st->narg != 1)
        return -1;
    int id = program_find(x->p, x->st->arg[0]);
    if (id < 0)
        return -1;
    id = split_target(x->p, id);
    const Node *n = node_of(x->p, id);
    int clean = id < o->nsorted && !(o->split && o->split[id]);
    return clean && n->op == O_ALLREDUCE && n->fusion < 0 && n->ndim > 0 ? id : -1;
}

static void apply_deferred(Order *o, const Xform *x, int ar)
{
    if (!o->unsorted) {
        o->split = arena_alloc(x->p->arena, (size_t)o->nsorted);
        readers_start(x->p);
    }
    xform_split(x);
    readers_update(x->p);
    o->split[ar] = 1;
    o->unsorted++;
}

static void apply_stmt(const Xform *x)
{
    if (x->st->verb == V_UNKNOWN)
        error_at(x->st->pos, "schedule '%s': unknown transformation '%s' (use split, reorder, "
                 "fuse, overlap, asSlice or dead)", x->sched, x->st->unknown);
    apply_verb[x->st->verb](x);
    program_resort(x->p);
    verify_program(x->p);
}

static void apply_ordered(Order *o, const Xform *x)
{
    int ar = deferred_split(o, x);
    if (ar >= 0) {
        apply_deferred(o, x, ar);
        return;
    }
    order_settle(x->p, o);
    apply_stmt(x);
    order_sorted(x->p, o);
}

void schedule_apply_stmts(Program *p, const char *sched, const SchedStmt *st, int n)
{
    Order o = {0, NULL, 0};
    readers_stop(p);
    order_sorted(p, &o);
    for (int i = 0; i < n; i++) {
        Xform x = {.p = p, .st = &st[i], .sched = sched};
        apply_ordered(&o, &x);
    }
    order_settle(p, &o);
}

const Schedule *schedule_find(Program *p, const char *name)
{
    for (int i = 0; i < p->nsched; i++)
        if (!strcmp(p->sched[i].name, name))
            return &p->sched[i];
    return NULL;
}

void schedule_apply(Program *p, const Schedule *s)
{
    p->applied = s->name;
    schedule_apply_stmts(p, s->name, s->stmt, s->nstmt);
}

Program *schedule_applied(Program *p, const Schedule *s, char *err, size_t errlen)
{
    Program *clone = program_clone(p);
    char ignored[8];
    ErrorCtx ctx;
    error_push(&ctx, errlen ? err : ignored, errlen ? errlen : sizeof ignored,
               s->file ? s->file : p->file, s->src ? s->src : p->src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        program_free(clone);
        return NULL;
    }
    schedule_apply(clone, s);
    error_pop(&ctx);
    return clone;
}

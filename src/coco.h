/* coco.h: the core header of the coconet compiler: the data structures
 * (types, layouts, the program graph), then a section of prototypes per
 * file of src/core/ (the memory pool and errors, element types, operation
 * facts, the words of schedule statements, building the graph).
 *
 * Each layer above has its own header, which includes the one below it:
 * core (coco.h) <- front/front.h <- sched/sched.h <- cpu/cpu.h <- api.h
 * <- gen/gen.h <- cuda/cuda.h <- tune/tune.h. A file includes its own
 * layer's header and nothing from a layer above it (tests/layers.py checks
 * this).
 * Everything a program owns lives in its arena and is freed with it. */
#ifndef COCO_H
#define COCO_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "coconet.h"

enum { MAXDIM = 8, MAXIN = 4, MAXNAME = 64 };
#define MAX_ELEMENTS (1L << 40) /* elements of one logical tensor */
/* The largest size, and of any size expression's step: in the file and on
 * the command line (-D, tune's --sizes and --check-size) alike */
#define MAX_SIZE 10000000000000L /* 10^13 */

/* ---- element types ---- */
typedef enum { T_FP16, T_BF16, T_FP32, T_FP64, NTYPE } Type;

/* ---- layouts and groups ---- */
typedef enum { L_REPLICATED, L_SLICED, L_LOCAL } LayoutKind;
typedef struct {
    LayoutKind kind;
    int dim; /* sliced dimension, for L_SLICED */
} Layout;

typedef enum { G_WORLD, G_GROUP } GroupKind;

/* reduction operators of collectives and ReduceTensor */
/* R_SUMSQ (sum of squares) only in PartialReduce, made by reorder from Norm */
typedef enum { R_SUM, R_PROD, R_MAX, R_MIN, R_SUMSQ } RedOp;

/* ---- source positions and user errors ---- */
typedef struct {
    int line, col; /* 1-based; line 0 means "no position" */
} Pos;

/* ---- operations: one row each in ops.def ---- */
/* O_INPUT is a Tensor declaration, O_SCALAR a Scalar's (an input, or a
 * constant when it has a value), O_CONST a numeric literal */
typedef enum {
#define OP(id, name, kind, nin, elementwise, keyword, paper) id,
#include "ops.def"
#undef OP
    NOP
} Op;

typedef enum {
    K_LEAF, K_UNARY, K_BINARY, K_TERNARY, K_LAYER, K_REDUCTION, K_UPDATE, K_COMM
} OpKind;

typedef struct {              /* a row of ops.def */
    const char *name;        /* in messages and printed programs */
    OpKind kind;
    int nin;                 /* number of tensor inputs */
    int elementwise;         /* fuses into one kernel, element by element */
    const char *keyword;     /* the word a program calls it by, or NULL */
    const char *paper;       /* its token in a schedule's paper name, or NULL */
} OpInfo;

/* ---- the program graph ---- */

/* One dimension of a shape: its value for the bound sizes and its text
 * ("B", "4*H", "12") so that the printer can write it back symbolically. */
typedef struct {
    long n;
    const char *text;
} Dim;

typedef struct Node {
    int id;
    Op op;
    const char *name; /* Var / Tensor / Scalar name, or a generated temporary */
    int named;        /* 1 when the user (or a schedule) named it */
    Pos pos;
    int nin;
    int in[MAXIN];
    /* inferred facts */
    Type type;
    int ndim; /* 0 for scalars */
    Dim dim[MAXDIM];
    Layout layout;
    GroupKind group;
    /* attributes, meaning depends on op */
    double value;    /* O_CONST, O_SCALAR with value, O_DROPOUT probability */
    int has_value;   /* O_SCALAR: declared with a value */
    int has_rank;    /* O_INPUT: declared with RANK */
    /* O_INPUT declared Scattered[...]: a list of tensors, each its own
     * allocation; its value is their 1-D concatenation (dim[0] = the total) */
    int nmember;
    const Dim *member;
    /* a 1-D value read from or computed elementwise from a scattered tensor:
     * that tensor's members partition it (for Norm(x, Members)); 0: none */
    int npart;
    const Dim *part;
    RedOp redop;     /* collectives, O_REDUCE_TENSOR */
    int axis;        /* O_SLICE, O_REDUCESCATTER, O_NORM/O_REDUCE_TENSOR (-1: all) */
    int keepdim;     /* O_NORM/O_REDUCE_TENSOR/O_PARTIAL_REDUCE along axis: written
                        with Keep, the reduced dimension stays with extent 1 */
    int root;        /* O_REDUCE, O_BROADCAST: rank within the group */
    int shift;       /* O_SEND: destination group = group + shift (mod groups) */
    int is_recv;     /* O_SEND written as Recv(x, GroupRank(GROUP-k, RANK)) */
    int linear;      /* O_SEND: GroupRank(..., Linear): no wrap-around; a rank
                        no group sends to keeps its own value */
    int stride, pad; /* O_CONV2D */
    Type to;         /* O_CAST */
    Type fill_type;  /* inputs: type their data is rounded to (NTYPE: `type`) */
    int dropout_id;  /* O_DROPOUT: key of its random stream */
    int input_index; /* O_INPUT / O_SCALAR: declaration order among inputs */
    int target;      /* O_UPDATE: node id of the updated O_INPUT */
    int updated_by;  /* O_INPUT: node id of its O_UPDATE, or -1 */
    int dead;        /* removed by a transformation */
    int fusion;      /* index of its fused operation, or -1 */
    double seq;      /* position used when re-sorting after a transformation */
} Node;

/* A fused operation made by a schedule's fuse: its members are the nodes
 * whose `fusion` is its index. */
typedef enum { F_COMPUTATION, F_ALLREDUCE, F_SEND } FuseKind;
typedef struct {
    const char *name;
    FuseKind kind;
    int dead;
} Fusion;

/* A reference to a node (>= 0) or a fusion f (encoded -(f+1)). */
typedef int Ref;
#define REF_FUSION(f) (-(f) - 1)
#define REF_IS_FUSION(r) ((r) < 0)
#define REF_FUSION_INDEX(r) (-(r) - 1)

/* overlap(a, b, ...): a producer-consumer chain run overlapped */
typedef struct {
    const char *name;
    Ref *item;
    int nitem;
} Overlap;

/* ---- schedule statements: the one table of their words ---- */
/* SCHED_VERB(ID, WORD): a transformation and the word a schedule calls it
 * by. Adding a verb: a row here, its transformation in sched/sched.c's
 * apply_verb. */
#define SCHED_VERBS(SCHED_VERB)      \
    SCHED_VERB(V_SPLIT, "split")     \
    SCHED_VERB(V_REORDER, "reorder") \
    SCHED_VERB(V_FUSE, "fuse")       \
    SCHED_VERB(V_OVERLAP, "overlap") \
    SCHED_VERB(V_ASSLICE, "asSlice") \
    SCHED_VERB(V_DEAD, "dead")
/* SCHED_POLICY(ID, WORD, FUSE): a policy, its word (a statement's last
 * argument of that spelling is its policy) and, for fuse's, the kind of
 * fused operation it makes (-1: not fuse's). ARFuse is AllReduceFuse's
 * short form; a fused operation is named by the first row of its kind. */
#define SCHED_POLICIES(SCHED_POLICY)                                   \
    SCHED_POLICY(P_AR_SPLIT_RS_AG, "ARSplitRSAG", -1)                  \
    SCHED_POLICY(P_AR_SLICE_AG, "ARSliceAG", -1)                       \
    SCHED_POLICY(P_AG_REORDER, "AGReorder", -1)                        \
    SCHED_POLICY(P_COMPUTATION_FUSE, "ComputationFuse", F_COMPUTATION) \
    SCHED_POLICY(P_ALLREDUCE_FUSE, "AllReduceFuse", F_ALLREDUCE)       \
    SCHED_POLICY(P_AR_FUSE, "ARFuse", F_ALLREDUCE)                     \
    SCHED_POLICY(P_SEND_FUSE, "SendFuse", F_SEND)

/* V_UNKNOWN: a word that is no verb (refused when the schedule is applied) */
typedef enum {
#define SCHED_VERB(id, word) id,
    SCHED_VERBS(SCHED_VERB)
#undef SCHED_VERB
    V_UNKNOWN
} Verb;

/* P_NONE: the statement gives no policy */
typedef enum {
    P_NONE,
#define SCHED_POLICY(id, word, fuse) id,
    SCHED_POLICIES(SCHED_POLICY)
#undef SCHED_POLICY
    NPOLICY
} Policy;

/* One schedule statement, parsed once: outs = verb(args, policy); */
typedef struct {
    Pos pos;
    Verb verb;
    const char *unknown;  /* V_UNKNOWN: the word as written */
    const char **out;
    int nout;
    const char **arg;
    Pos *argpos;
    int narg;
    Policy policy;        /* the trailing policy, or P_NONE */
} SchedStmt;

typedef struct {
    const char *name;
    Pos pos;
    SchedStmt *stmt;
    int nstmt;
    const char *note; /* enumerated: its name in the paper's notation */
    const char *file, *src; /* where it is written (errors point there) */
    int generated;    /* made by the enumeration, not written in the file */
} Schedule;

typedef struct {
    const char *name;
    const char *default_text; /* NULL when the file gives no default */
    long value;
    int bound;
    Pos pos;
} SizeDecl;

typedef struct Arena Arena;
typedef struct NameIndex NameIndex; /* graph.c: name -> node or size */
typedef struct Readers Readers;     /* src/sched/rewrite.c: node -> its readers */

typedef struct Program {
    Arena *arena;
    const char *file;
    const char *src;
    Node *node;
    int nnode, capnode;
    SizeDecl *size;
    int nsize, capsize;
    /* GROUP: consecutive ranks; group_text is the declared size expression */
    const char *group_text;
    Pos group_pos;
    long group_size; /* 0 when GROUP is not used / not declared */
    int nranks;
    int uses_group;
    /* Execute */
    const char *exec_name;
    int *exec_in, nexec_in;
    int *exec_out, nexec_out;
    int ndropout;
    int ninput;
    /* schedules written in the file, and what applying one made */
    Schedule *sched;
    int nsched;
    Fusion *fusion;
    int nfusion;
    Overlap *overlap;
    int noverlap;
    const char *applied;   /* name of the schedule applied, or NULL */
    struct Program *base;  /* a clone's original: owns the shared sizes and text */
    NameIndex *names;      /* of named nodes and sizes: through graph.c only */
    Readers *readers;      /* while splits are applied unsorted, or NULL */
} Program;

/* ---- util.c: arena, user errors, strings ---- */
/* memcpy that accepts an empty (possibly NULL) source */
void copy_bytes(void *dst, const void *src, size_t n);
Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t n);     /* zeroed */
char *arena_strdup(Arena *a, const char *s);
void text_unify_line_ends(char *text);     /* \r\n and a lone \r become \n */
/* path opened for reading when it is a regular file (never waiting, as
 * opening a FIFO would); NULL with "PATH: error: ..." in err otherwise */
FILE *open_regular_file(const char *path, char *err, size_t errlen);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...);
void *xmalloc(size_t n);                   /* aborts on exhaustion */
void *xcalloc(size_t n, size_t size);
/* a (n elements of size bytes, room for *cap) with room for one more: as is,
 * or copied into a zeroed block of twice the room (first when *cap is 0) */
void *xgrow(void *a, int n, int *cap, int first, size_t size);

/* A user error unwinds to the innermost error_catch() with its message in
 * the error buffer: "file:line:col: error: msg\n  line text\n  ^". */
typedef struct ErrorCtx {
    jmp_buf jb;
    char *buf;
    size_t len;
    const char *file;
    const char *src;
    int config;       /* set by error_plain: the configuration's error */
    struct ErrorCtx *prev;
} ErrorCtx;
void error_push(ErrorCtx *ctx, char *buf, size_t len, const char *file, const char *src);
void error_pop(ErrorCtx *ctx);
_Noreturn void error_at(Pos pos, const char *fmt, ...);
/* An error of the configuration (a -D binding, the ranks, the group size),
 * which has no place in the source: "file: error: msg", ErrorCtx.config set */
_Noreturn void error_plain(const char *fmt, ...);
_Noreturn void error_again(const char *msg); /* a caught error, to the enclosing context */
_Noreturn void internal_error(const char *file, int line, const char *fmt, ...);
#define BUG(...) internal_error(__FILE__, __LINE__, __VA_ARGS__)
#define ASSERT(c) ((c) ? (void)0 : BUG("assertion failed: %s", #c))

/* ---- types.c: element types ---- */
const char *type_name(Type t);
int type_parse(const char *s, Type *t);   /* 1 on success */
Type type_promote(Type a, Type b);
size_t type_size(Type t);
double type_round(Type t, double x);       /* round to the nearest value of t */
uint64_t type_bits(Type t, double x);      /* bit pattern of x (already rounded) */
double half_to_double(uint16_t h);
uint16_t double_to_half(double x);
double bf16_to_double(uint16_t h);
uint16_t double_to_bf16(double x);
uint64_t double_bits(double x);            /* the IEEE bits of x */
double bits_double(uint64_t u);            /* the double of those bits */

/* ---- ops.c: operation facts ---- */
const OpInfo *op_info(Op op);
const char *article(const char *word);     /* "a" or "an" */
const char *op_phrase(Arena *a, Op op);    /* "an Update", "a MatMul", "an addition" */
int op_is_comm(Op op);
const char *redop_name(RedOp r);           /* "+", "*", "max", "min" */
int redop_parse(const char *s, RedOp *r);
int layout_equal(Layout a, Layout b);
const char *layout_str(Arena *a, Layout l);
const char *group_name(GroupKind g);

/* ---- sched_words.c: the words of schedule statements (SCHED_VERBS) ---- */
const char *verb_word(Verb v);             /* "split"; V_UNKNOWN: NULL */
Verb verb_parse(const char *word);         /* V_UNKNOWN when no verb */
const char *stmt_verb_word(const SchedStmt *st); /* the verb as written */
const char *policy_word(Policy p);         /* "ARSplitRSAG"; P_NONE: NULL */
Policy policy_parse(const char *word);     /* P_NONE when no policy */
int policy_fuse_kind(Policy p);            /* its FuseKind, or -1 */
Policy fuse_kind_policy(FuseKind k);       /* the policy that makes kind k */

/* ---- graph.c: building the graph ---- */
Program *program_new(const char *file, const char *src);
void program_free(Program *p);
Node *node_new(Program *p, Op op, Pos pos);
Node *node_of(Program *p, int id);
/* Names: give names through node_set_name and size_named (after adding
 * p->size[i]) so that lookups find them; after moving nodes to other ids,
 * call program_names_changed. */
void node_set_name(Program *p, Node *n, const char *name); /* named = 1 */
void size_named(Program *p, int i);
void program_names_changed(Program *p);
int program_find(Program *p, const char *name); /* newest live named node or -1 */
int program_input(const Program *p, const char *name); /* Execute input or -1 */
SizeDecl *size_find(Program *p, const char *name);
long dim_count(const Node *n);                    /* elements of the logical tensor */
int node_users(Program *p, int id, int *users, int max);
const char *ref_name(Program *p, Ref r);          /* a value's or a fusion's name */
int is_output(const Program *p, int id);          /* an Execute output? */

#endif

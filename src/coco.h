/* coco.h: the one internal header of the coconet compiler and CPU runtime.
 *
 * Data structures first (types, layouts, the program graph), then one section
 * of prototypes per source file, in the order data flows through them:
 * text -> lex -> parse -> infer/verify -> (schedule) -> interp / print.
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

/* ---- operations (table in ops.c) ---- */
typedef enum {
    /* leaves */
    O_INPUT,  /* Tensor declaration */
    O_SCALAR, /* Scalar declaration (input, or constant when it has a value) */
    O_CONST,  /* numeric literal */
    /* pointwise */
    O_NEG, O_SQRT, O_TANH, O_RELU, O_DROPOUT, O_CAST, O_SLICE,
    O_ADD, O_SUB, O_MUL, O_DIV, O_POW,
    /* layers */
    O_MATMUL, O_CONV2D,
    /* reductions within a rank */
    O_NORM, O_REDUCE_TENSOR,
    O_PARTIAL_REDUCE, /* reduces what each rank holds of a Sliced value: Local */
    /* state */
    O_UPDATE,
    /* communication */
    O_ALLREDUCE, O_REDUCESCATTER, O_ALLGATHER, O_REDUCE, O_BROADCAST, O_SEND,
    NOP
} Op;

typedef enum {
    K_LEAF, K_UNARY, K_BINARY, K_LAYER, K_REDUCTION, K_UPDATE, K_COMM
} OpKind;

typedef struct {
    const char *name; /* as written in programs */
    OpKind kind;
    int nin;          /* number of tensor inputs */
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
    RedOp redop;     /* collectives, O_REDUCE_TENSOR */
    int axis;        /* O_SLICE, O_REDUCESCATTER, O_NORM/O_REDUCE_TENSOR (-1: all) */
    int root;        /* O_REDUCE, O_BROADCAST: rank within the group */
    int shift;       /* O_SEND: destination group = group + shift (mod groups) */
    int is_recv;     /* O_SEND written as Recv(x, GroupRank(GROUP-k, RANK)) */
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

/* One schedule statement: outs = verb(args); */
typedef struct {
    Pos pos;
    const char *verb;
    const char **out;
    int nout;
    const char **arg;
    Pos *argpos;
    int narg;
    const char *policy; /* trailing policy name, or NULL */
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
} Program;

/* ---- api.c ---- */
char *read_source_file(const char *path, char *err, size_t errlen);

/* ---- util.c: arena, user errors, strings ---- */
/* memcpy that accepts an empty (possibly NULL) source */
void copy_bytes(void *dst, const void *src, size_t n);
Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t n);     /* zeroed */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...);
void *xmalloc(size_t n);                   /* aborts on exhaustion */
void *xcalloc(size_t n, size_t size);

/* A user error unwinds to the innermost error_catch() with its message in
 * the error buffer: "file:line:col: error: msg\n  line text\n  ^". */
typedef struct ErrorCtx {
    jmp_buf jb;
    char *buf;
    size_t len;
    const char *file;
    const char *src;
    struct ErrorCtx *prev;
} ErrorCtx;
void error_push(ErrorCtx *ctx, char *buf, size_t len, const char *file, const char *src);
void error_pop(ErrorCtx *ctx);
_Noreturn void error_at(Pos pos, const char *fmt, ...);
_Noreturn void error_plain(const char *fmt, ...);
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
int op_is_pointwise(Op op);
int op_is_comm(Op op);
const char *redop_name(RedOp r);           /* "+", "*", "max", "min" */
int redop_parse(const char *s, RedOp *r);
const char *layout_str(Arena *a, Layout l);
const char *group_name(GroupKind g);

/* ---- graph.c: building the graph ---- */
Program *program_new(const char *file, const char *src);
void program_free(Program *p);
Node *node_new(Program *p, Op op, Pos pos);
Node *node_of(Program *p, int id);
int program_find(Program *p, const char *name); /* node id or -1 */
int program_input(const Program *p, const char *name); /* Execute input or -1 */
SizeDecl *size_find(Program *p, const char *name);
long dim_count(const Node *n);                    /* elements of the logical tensor */
int node_users(Program *p, int id, int *users, int max);

/* ---- rewrite.c: graph surgery shared by the transformations ---- */
Program *program_clone(Program *base);          /* deep copy for scheduling */
Program *program_exact(Program *base);          /* a clone computing everything in FP64 */
Node *node_copy(Program *p, int id, double seq); /* a new node like id */
void replace_uses(Program *p, int old, int with, int after_seq_of);
void program_resort(Program *p);               /* topological, by seq; drops dead */
int fusion_new(Program *p, const char *name, FuseKind kind);
int ref_members(Program *p, Ref r, int *out, int max); /* node ids of a ref */
int ref_uses(Program *p, Ref a, Ref b);        /* does b read a value of a? */
int statement_head(Program *p, int id);        /* named node writing id inline */
const char *ref_name(Program *p, Ref r);
int is_output(const Program *p, int id);
int state_value(const Program *p, int input);  /* node holding an input's new value */

/* ---- lex.c ---- */
typedef enum { TK_IDENT, TK_NUM, TK_STR, TK_PUNCT, TK_EOF } TokKind;
typedef struct {
    TokKind kind;
    const char *start;
    int len;
    double num;
    int is_int;
    Pos pos;
} Token;
typedef struct {
    const char *src;
    const char *p;
    int line;
    const char *line_start;
} Lexer;
void lex_init(Lexer *lx, const char *src);
Token lex_next(Lexer *lx);

/* ---- parse.c: text -> graph (inference runs as each node is made) ---- */
typedef struct {
    const char *name;
    const char *value;
} Binding;
void parse_program(Program *p, const Binding *b, int nb, int nranks, long group_size);
void parse_schedules(Program *p, const char *file, const char *src); /* Schedule blocks */
int is_reserved(const char *s);                    /* a keyword of the language */

/* ---- infer.c: type, shape and layout of one node from its inputs ---- */
void infer_node(Program *p, Node *n);      /* user error on a violated rule */
int layout_equal(Layout a, Layout b);
int same_members(const Node *a, const Node *b); /* scattered alike (both contiguous: 1) */

/* ---- shape.c: where each rank's part of a value lies ---- */
long group_size_of(const Program *p, GroupKind g);  /* ranks in one group */
int ngroups_of(const Program *p, GroupKind g);      /* number of groups */
int group_index(const Program *p, GroupKind g, int rank); /* which group */
int group_rank(const Program *p, GroupKind g, int rank);  /* index within it */
int rank_of(const Program *p, GroupKind g, int group, int index);
/* blocks of c = ceil(n/parts): part idx is [min(n, idx*c), min(n, (idx+1)*c)) */
void slice_range(long n, long parts, long idx, long *lo, long *hi);
/* the shape one rank holds, and where it starts in the logical tensor */
void local_shape(const Program *p, const Node *n, int rank, long *shape, long *offset);
long local_count(const Program *p, const Node *n, int rank);
int same_place(const Node *a, const Node *b); /* the same local part on every rank */
/* Walks one rank's local elements in local row-major order, giving each
 * one's row-major index in the node's logical shape (added for fill.c,
 * dropout and the collectives). */
typedef struct {
    int ndim;
    long shape[MAXDIM];  /* local shape */
    long stride[MAXDIM]; /* row-major strides of the logical shape */
    long idx[MAXDIM];    /* local coordinates of the current element */
    long gidx;           /* logical row-major index of the current element */
} GlobalIter;
void global_iter_start(GlobalIter *it, const Program *p, const Node *n, int rank);
void global_iter_next(GlobalIter *it);

/* ---- verify.c: whole-graph consistency, run after every step ---- */
void verify_program(Program *p);           /* BUG() on an internal inconsistency */

/* ---- sched.c: applying a schedule, statement by statement ---- */
typedef struct {
    Program *p;
    const SchedStmt *st;
    const char *sched;
} Xform;
_Noreturn void refuse(const Xform *x, const char *fmt, ...);
Ref xform_arg(const Xform *x, int i);           /* the value or fusion argument i names */
void xform_outs(const Xform *x, int n, const char *what); /* requires n output names */
/* gives output name i to r; without output names, a fresh name from dflt */
void xform_name(const Xform *x, int i, Ref r, const char *dflt);
const char *overlap_name_check(const Xform *x); /* the overlap's name */
int statement_nodes(Program *p, int id, int *out, int max); /* id and its inline parts */
void check_node(const Xform *x, Node *n);       /* infer_node, a failure refuses */
void schedule_apply(Program *clone, const Schedule *s); /* user error on refusal */
/* statements made by the compiler, applied as schedule `sched` would be */
void schedule_apply_stmts(Program *p, const char *sched, const SchedStmt *st, int n);
/* verb(args) with policy, no output names */
SchedStmt schedule_stmt(Arena *a, const char *verb, const char **args, int nargs,
                        const char *policy);
const char *schedule_fresh_name(Program *p, const char *dflt); /* dflt, or dflt_2, ... */
const Schedule *schedule_find(Program *p, const char *name);

/* ---- enum.c: every distinct valid schedule, added to p->sched ---- */
int enumerate_schedules(Program *p);
void print_schedule(const Schedule *s, FILE *out);

/* ---- xform_*.c: the transformations ---- */
void xform_split(const Xform *x);
void xform_reorder(const Xform *x);
void xform_fuse(const Xform *x);
void xform_overlap(const Xform *x);
int in_some_overlap(Program *p, Ref r); /* is r an item of an overlap? */
void xform_asslice(const Xform *x);
void xform_dead(const Xform *x);

/* ---- lower_scattered.c: the CUDA backend's lowering of collectives over scattered tensors ---- */
Program *lower_scattered_allreduces(Program *p); /* a lowered clone, or NULL: nothing to lower */

/* ---- emit_cuda.c: CUDA source for a program and its scheduled variants ---- */
void emit_cuda(Program **variants, int n, FILE *out); /* variants[0]: the program */

/* ---- print.c: graph -> .coco text ---- */
void print_program(Program *p, FILE *out);

/* ---- rng.c: counter-based random numbers ---- */
uint64_t rng_hash(uint64_t seed, uint64_t stream, uint64_t index);
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index); /* [0,1), 24 bits */

/* ---- interp.c: the CPU reference executor ---- */
typedef struct {
    Program *prog;
    uint64_t seed;
    int nthreads;
    double **val;  /* val[node * nranks + rank]: that rank's data, or NULL */
    long *count;   /* elements per (node, rank) */
    int keep_all;  /* 1: keep every intermediate value (default 0) */
} Exec;
Exec *exec_new(Program *p, uint64_t seed, int nthreads);
void exec_free(Exec *e);
void exec_fill_inputs(Exec *e);           /* seeded data, see fill.c */
void exec_run(Exec *e);                    /* evaluates every node in order */
double *exec_data(Exec *e, int node, int rank, long *count);
double exec_value_at(Exec *e, const Node *n, int rank, long gidx);
/* (Re)allocates the value of (node, rank) with count elements, uninitialized. */
double *exec_alloc(Exec *e, int node, int rank, long count);

/* a run of the public API: a program and its executor */
struct coco_run {
    Program *prog;
    Exec *exec;
};

/* ---- fill.c ---- */
void fill_input(Exec *e, const Node *n);

/* ---- interp_ops.c: computation on one rank ---- */
void eval_pointwise(Exec *e, const Node *n, int rank);
void eval_matmul(Exec *e, const Node *n, int rank);
void eval_conv2d(Exec *e, const Node *n, int rank);
void eval_reduction(Exec *e, const Node *n, int rank);
double reduce_step(RedOp r, double acc, double x); /* acc (op) x; NaN propagates */

/* ---- interp_comm.c: communication across simulated ranks ---- */
void eval_comm(Exec *e, const Node *n);

/* ---- interp_fast.c: exact fast rounding and threads of the executor ---- */
double exec_round(Type t, double x);            /* type_round's bits, faster */
uint16_t exec_bits16(Type t, double x);         /* FP16/BF16 bits of x */
double exec_value16(Type t, uint16_t h);        /* the value of FP16/BF16 bits */
typedef void (*RangeFn)(void *ctx, long lo, long hi);
void parallel_ranges(int nthreads, long n, RangeFn fn, void *ctx); /* fn over [0,n) split */
void global_iter_seek(GlobalIter *it, long local); /* jump to a local element */
int exec_threads(const Exec *e, long count);    /* threads worth using for count */

/* ---- tolerance.c: is a value right, judged against an FP64 evaluation ---- */
/* What a value's elements are allowed: see within_tolerance. */
typedef struct {
    double worst;  /* the reference's largest distance from exact over the value */
    double scale;  /* the largest exact magnitude of the value */
    double slack;  /* an extra absolute allowance (0 for schedule comparisons) */
    int nranks;
} Tolerance;
double type_ulp(Type t, double v);          /* spacing of t's values near |v| */
/* The largest |e's value - exact| of node id over all ranks, x64 holding the
 * exact evaluation (node xid); *scale gets the largest finite |exact|. */
double value_error(Exec *e, int id, Exec *x64, int xid, double *scale);
int within_tolerance(Type t, double ref, double got, double exact, const Tolerance *tol);

/* ---- cuda_build.c: toolchain, nvcc command, build cache (no CUDA) ---- */
enum { CUDA_PATH_MAX = 1024 };
#define FNV_INIT 14695981039346656037ULL
uint64_t fnv1a(uint64_t h, const void *data, size_t n);
void pathf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
typedef struct {
    char nvcc[CUDA_PATH_MAX], cuda_lib[CUDA_PATH_MAX];
    char nccl_include[CUDA_PATH_MAX], nccl_lib[CUDA_PATH_MAX], nccl_link[CUDA_PATH_MAX];
    char arch[CUDA_PATH_MAX];     /* nvcc -arch: "native" unless COCONET_CUDA_ARCH */
} CudaToolchain;
typedef struct {
    int argc;
    char *argv[64];
    char buf[16384];
    size_t used;
} Argv;
typedef struct {
    CudaToolchain tool;
    char home[CUDA_PATH_MAX];     /* coco_home(): include/, rt/kernels/ */
    char cache[CUDA_PATH_MAX];
    double timeout_s;             /* for nvcc */
    FILE *progress;               /* where a build says it begins (flushed), or NULL */
    uint64_t key;                 /* results of cuda_build: */
    char so[CUDA_PATH_MAX + 64];
    int cached;
    double seconds;
} CudaBuild;
void cuda_runtime_path(const char *home, char *buf, size_t len);
int cuda_cache_dir(char *buf, size_t len);            /* -1: no HOME */
void cuda_toolchain_defaults(CudaToolchain *t);       /* from CUDA_HOME, NCCL_HOME */
void cuda_toolchain_read(CudaToolchain *t, const char *conf); /* build/cuda.conf */
int nccl_header_version(const char *include_dir);     /* NCCL_VERSION_CODE, or -1 */
void argv_add(Argv *a, const char *fmt, ...);
void cuda_nvcc_argv(const CudaToolchain *t, const char *home, const char *src, const char *out,
                    Argv *a);
uint64_t cuda_cache_key(const char *src, size_t n, const Argv *cmd, const char *nvcc_version,
                        int nccl_version, const char *gpu, const char *home);
/* argv[0] with a time limit, output to log_path or into out; its exit
 * status, 128 + signal, -1 (not started) or -2 (timed out, killed) */
int run_capture(char *const argv[], const char *log_path, char *out, size_t len, double timeout_s);
int cuda_build(CudaBuild *b, const char *src, size_t n, char *err, size_t errlen);
/* a file's text, or emit_cuda of the variants (user error -> NULL, err) */
char *cuda_source(Program **v, int nv, const char *path, size_t *n, char *err, size_t errlen);

/* ---- cuda_job.c, cuda_report.c, cuda_rank.c, cuda_launch.c, cuda_mpi.c:
 * running on GPUs, one process per rank ---- */
/* One value a variant's GPU run is checked on: an output, or the new value
 * of an Updated tensor (found in that input's buffer). */
typedef struct {
    const char *name;
    int node;          /* in the variant */
    int output;        /* its position among the outputs, or -1 */
    int input;         /* the Execute input holding it, or -1 */
    Exec *ref;         /* the CPU values it is compared with: node rnode
                          (NULL when the job is unchecked: only its hash) */
    int rnode;
    int xnode;         /* the same value in the FP64 evaluation */
    Tolerance tol;
    int replicated;    /* every rank of a group must hold the same bits */
} CudaCheck;
typedef struct {
    Program *prog;     /* the program, or a scheduled clone */
    const char *name;  /* "program", or the schedule's name */
    const char *note;  /* the schedule's name in the paper's notation */
    Exec *own;         /* its own CPU run, or NULL when checked against the program's */
    CudaCheck *check;
    int ncheck;
} CudaVariant;
typedef struct {
    Program *base;     /* the program: variant 0 */
    Exec *data;        /* its CPU run, holding every variant's input data
                          (unchecked: the inputs alone, the program not run) */
    Program *exact;
    Exec *x64;         /* the FP64 evaluation of the program (unchecked: NULL) */
    int unchecked;     /* --reference none: no CPU reference, no value compared */
    CudaVariant *v;
    int nv;
    char so[CUDA_PATH_MAX + 64];     /* the generated code, built */
    char runtime[CUDA_PATH_MAX + 64];
    int iters, warmup;
    double timeout_s;
    double cpu_ms;     /* the CPU reference's time (unchecked: drawing the inputs) */
    uint64_t seed;
} CudaJob;
/* cuda_job.c: the CPU references and the checks, before any fork */
int cuda_job_prepare(CudaJob *job, Program **variants, int nv, const coco_cuda_options *o,
                     char *err, size_t errlen);
void cuda_job_free(CudaJob *job);
/* What the ranks said, gathered: rows[v * nranks + rank]. */
typedef struct {
    int seen;
    long differing, elements, outside;
    double max_abs, max_rel, median_ms, min_ms, max_ms;
    char worst[MAXNAME];
    uint64_t hash[64]; /* of each checked value's bytes (the first 64 checks) */
    int fault;         /* the runtime's own checks: COCO_RT_FAULT_* (rt/cuda_child.h) */
    char fault_msg[512];
} RankRow;
typedef struct {
    int nranks, nv;
    RankRow *rows;
    char gpu[512];
    char **error;      /* per rank: why it failed, or NULL */
    int first_failure; /* the rank that failed first, or -1 */
    int *done;         /* per rank: said DONE */
    int *at;           /* per rank: the step it said it began (REPORT_AT_*, or a variant) */
} Report;
/* the lines ranks send: "GPU text", "AT step", "ROW v ...", "FAULT v GUARD|REPEAT
 * text", "ERR text", "DONE"; a step is a variant's index, or one of: */
enum { REPORT_AT_OPEN = -1, REPORT_AT_CLOSE = -2 };
typedef void (*EmitFn)(void *ctx, const char *line);
/* cuda_report.c */
void report_init(Report *r, int nranks, int nv);
void report_free(Report *r);
void report_line(Report *r, int rank, const char *line);
void report_error(Report *r, int rank, const char *msg); /* the first one counts */
/* where rank was by its last AT line, e.g. "in variant 'fused'" */
void report_where(const CudaJob *job, const Report *r, int rank, char *buf, size_t len);
int report_print(const CudaJob *job, const Report *r, FILE *out); /* 0: all passed */
void rank_row_line(char *buf, size_t len, int v, const RankRow *row, int nhash);
/* cuda_rank.c: in a rank's process, load the runtime, run every variant, check it */
typedef struct CocoRtApi CocoRtApi;
const CocoRtApi *cuda_load_runtime(const char *path, char *err, size_t errlen);
int cuda_rank_work(const CudaJob *job, const CocoRtApi *api, int rank, int local_rank,
                   const unsigned char *nccl_id, EmitFn emit, void *ctx);
void cuda_watchdog(int rank, double seconds, const char *what); /* 0 s: off */
void cuda_emit_error(EmitFn emit, void *ctx, int rank, const char *msg); /* ERR line */
int cuda_unique_id(const CocoRtApi *api, unsigned char *id, char *err, size_t errlen);
/* cuda_launch.c: one forked process per rank, watched by the parent */
int cuda_launch(const CudaJob *job, Report *rep);
int cuda_gpu_count(void);  /* GPUs the driver shows (no CUDA call), -1: unknown */
/* cuda_mpi.c: one MPI process per rank (without COCO_HAVE_MPI: never active) */
int cuda_mpi_init(int *nranks);       /* 1: this process is a rank of an MPI job */
int cuda_mpi_active(void);
int cuda_mpi_rank(void);
int cuda_mpi_local_rank(void);
int cuda_mpi_local_size(void);        /* processes on this host */
int cuda_mpi_all_ok(int ok);          /* 1 when ok on every rank (collective) */
int cuda_mpi_run(const CudaJob *job, FILE *out); /* this rank's work; rank 0 prints */
void cuda_mpi_finish(void);

#endif

/* cpu.h: the CPU reference executor, which defines what is correct: simulated
 * ranks, seeded input data, the counter-based random generator, and the
 * tolerance a value is judged by. Files of src/cpu/ may include schedules,
 * the front end and the core, nothing above. */
#ifndef COCO_CPU_H
#define COCO_CPU_H

#include "sched/sched.h"

/* ---- rng.c: counter-based random numbers ---- */
uint64_t rng_hash(uint64_t seed, uint64_t stream, uint64_t index);
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index); /* [0,1), 24 bits */

/* ---- exec.c: the CPU reference executor ---- */
enum { EXEC_SCRATCH = 8 };
typedef struct {
    Program *prog;
    uint64_t seed;
    int nthreads;
    double **val;  /* val[node * nranks + rank]: that rank's data, or NULL */
    long *count;   /* elements per (node, rank) */
    int keep_all;  /* 1: keep every intermediate value (default 0) */
    /* bytes asked of malloc for values and scratch, now and at most (the
     * figures exec_footprint predicts), in all and per rank */
    double held, held_peak;
    double *rank_held, rank_peak;
    /* scratch buffers of the node being evaluated (freed on a failure) */
    void *scratch[EXEC_SCRATCH];
    size_t scratch_bytes[EXEC_SCRATCH];
    int scratch_rank[EXEC_SCRATCH];
    /* an allocation that fails: with recover set (the API sets it), exec_run
     * and exec_fill_inputs return -1 (through on_oom); without, the message
     * is printed and the process exits with status 1 */
    int recover;
    jmp_buf *on_oom;
    int oom_node, oom_rank; /* what was being allocated */
    double oom_bytes;
    int failed; /* an allocation failed: no value may be read */
    int ran;    /* exec_run finished */
} Exec;
/* 0, or -1 when an allocation failed (e->oom_*; exec_oom_message says it):
 * the values made so far stay owned by e, for exec_free. */
int exec_fill_inputs(Exec *e);             /* seeded data, see inputs.c */
int exec_run(Exec *e);                     /* evaluates every node in order */
/* The liveness exec_run follows, shared with exec_footprint. */
int *exec_last_uses(const Program *p);     /* largest id of a live reader, or the id */
int exec_may_free(const Program *p, int keep_all, const Node *n);
int exec_reusable_input(const Program *p, int keep_all, const int *last, const Node *n);
/* "out of memory: ..." for the failed allocation, into buf. */
void exec_oom_message(const Exec *e, char *buf, size_t len);

/* ---- footprint.c: the memory a run will hold, before running it ---- */
typedef struct {
    double peak;      /* bytes held at once at the run's peak, all ranks together */
    double rank_peak; /* the most bytes one rank holds at once */
    double kept;      /* bytes still held after the run (inputs, outputs, updates) */
    int kept_values;  /* tensor values */
    int at;           /* the node being evaluated at the peak; -1: the inputs */
    int values;       /* tensor values (not scalars) held at the peak */
    int largest;      /* the largest of them (node id) */
    double largest_bytes;
} Footprint;
/* What exec_run(keep_all) of p allocates, value by value (exec_alloc's
 * sizes, the scratch of MatMul and Conv2D), freed where it frees them. */
void exec_footprint(const Program *p, int keep_all, Footprint *f);
double value_bytes(const Program *p, const Node *n, int rank); /* exec_alloc's size */

/* a run of the public API: a program and its executor */
struct coco_run {
    Program *prog;
    Exec *exec;
    /* an exact run's program run again with every operation rounded upward
     * and downward ([0], [1]), made by coco_run_compare the first time an
     * element is outside within_tolerance's terms; tried once */
    struct coco_run *directed[2];
    int directed_tried;
};

/* ---- buffers.c: the executor's values, a buffer per (node, rank) ---- */
Exec *exec_new(Program *p, uint64_t seed, int nthreads);
void exec_free(Exec *e);
double *exec_data(Exec *e, int node, int rank, long *count);
double exec_value_at(Exec *e, const Node *n, int rank, long gidx);
/* (Re)allocates the value of (node, rank) with count elements, uninitialized. */
double *exec_alloc(Exec *e, int node, int rank, long count);
void exec_release(Exec *e, int node);       /* frees its value on every rank */
void exec_drop(Exec *e, int node, int rank); /* frees its value on rank */
/* Scratch memory of node's evaluation on rank (main thread only); a failed
 * allocation ends the run (e->on_oom). Give it back with exec_scratch_free. */
void *exec_scratch(Exec *e, int node, int rank, size_t bytes);
void exec_scratch_free(Exec *e, void *p);
void exec_scratch_free_all(Exec *e);
_Noreturn void exec_out_of_memory(Exec *e, int node, int rank, double bytes);

/* ---- inputs.c: seeded input data ---- */
void fill_input(Exec *e, const Node *n);

/* ---- exec_ops.c: computation on one rank ---- */
void eval_pointwise(Exec *e, const Node *n, int rank);
void eval_matmul(Exec *e, const Node *n, int rank);
void eval_conv2d(Exec *e, const Node *n, int rank);
void eval_reduction(Exec *e, const Node *n, int rank);
/* Bytes of scratch node n's evaluation on rank allocates beside its value
 * (MatMul's packed operands and maps, Conv2D's float copies). */
double eval_scratch_bytes(const Program *p, const Node *n, int rank);
double reduce_step(RedOp r, double acc, double x); /* acc (op) x; NaN propagates */

/* ---- exec_comm.c: communication across simulated ranks ---- */
void eval_comm(Exec *e, const Node *n);

/* ---- exec_members.c: Norm(x, Members), on every rank at once ---- */
void eval_member_norm(Exec *e, const Node *n);

/* ---- exec_fast.c: exact fast rounding and threads of the executor ---- */
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
/* Is got right as far as rounding anywhere in the program can move the
 * exact value (up, down: the FP64 evaluation rounded upward, downward)? */
int within_directed(double got, double exact, double up, double down);


#endif

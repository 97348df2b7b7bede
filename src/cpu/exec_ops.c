/* exec_ops.c: the computations one rank performs on its local data.
 *
 * This is the language's reference arithmetic.  All shapes are LOCAL shapes
 * (local_shape()); the checker guarantees they fit together.
 *  - Pointwise ops compute in double from their (already rounded) inputs and
 *    round once to the node's type (Tanh, Exp, Log, Erf: the C library's
 *    double functions).  Binary ops broadcast as PyTorch does
 *    (right-aligned; missing or size-1 dimensions repeat); scalars broadcast.
 *    Max(a, b) and Min(a, b) are the "max" and "min" reductions' step
 *    folding b into a: b where larger (smaller) or NaN, else a.
 *  - Update(t, v) is evaluated as the binary op (t, v) -> v: the new value
 *    broadcast to the tensor's shape and rounded to its type.
 *  - Comparisons give 1 or 0 (C's comparisons of doubles: false with a NaN
 *    operand but for !=); Ite(c, a, b) is a where c != 0 (a NaN c too),
 *    else b, broadcast over all three operands and rounded.
 *  - Dropout keeps an element iff
 *      rng_uniform(seed, 2^63 | dropout_id, gidx) >= p,  y = x * (1 / (1 - p)),
 *    gidx being the element's row-major index in the LOGICAL shape, so the
 *    mask does not depend on the layout.
 *  - MatMul ([..., M, K] x [..., K, N], batch dims of b broadcast against
 *    a's) accumulates each output element in float, in increasing k, with
 *    acc += (float)a * (float)b, then rounds to the node's type; FP64
 *    accumulates in double.  Blocks of output rows are shared among
 *    e->nthreads threads and computed a register block at a time in vector
 *    lanes; each element is summed by one lane in the same order, so results
 *    depend neither on the thread count nor on the vector width.
 *  - Large pointwise ops are cut into element ranges over threads, each
 *    element computed by one thread.
 *  - Conv2D (x [N,C,H,W], w [K,C,R,S], stride, zero padding) accumulates in
 *    float in the order c, r, s; padded positions are skipped (for finite
 *    weights this equals adding 0 * w).
 *  - Reductions (Norm, ReduceTensor) accumulate in double in index order,
 *    starting from the first element, and round once; with Keep (extent 1
 *    along the reduced dimension) the values are the same.
 *  - Transpose copies each rank's block with its last two dimensions
 *    swapped.
 * Assumes the build uses -ffp-contract=off (no fused multiply-add). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

/* ---- helpers ---- */

static long shape_count(const long *shape, int ndim)
{
    long c = 1;
    for (int i = 0; i < ndim; i++)
        c *= shape[i];
    return c;
}

static long logical_count(const Node *n)
{
    long c = 1;
    for (int i = 0; i < n->ndim; i++)
        c *= n->dim[i].n;
    return c;
}

static const double *input_data(Exec *e, const Node *n, int k, int rank, long *count)
{
    const double *d = exec_data(e, n->in[k], rank, count);
    ASSERT(d != NULL);
    return d;
}

/* How operand x is read along output n on one rank, over the leading
 * dimensions of both (all but their last `skip`): per output dimension the
 * stride in x's local data, counted in blocks of x's trailing `skip`
 * dimensions (0 where x is missing or has logical extent 1: broadcast), and,
 * returned, the position of the output's first element in x.  Dimensions
 * are matched through logical coordinates (local index + slice offset), so
 * an operand holding more of a dimension than the output (a Replicated
 * operand of a Sliced result) is read at the output's part. */
static long operand_walk(const Program *p, const Node *n, const Node *x, int rank, int skip,
                         long *stride)
{
    long os[MAXDIM], oo[MAXDIM], xs[MAXDIM], xo[MAXDIM];
    local_shape(p, n, rank, os, oo);
    local_shape(p, x, rank, xs, xo);
    int ond = n->ndim - skip, xnd = x->ndim - skip;
    ASSERT(xnd <= ond);
    long s = 1, base = 0;
    for (int i = ond - 1; i >= 0; i--) {
        int j = i - (ond - xnd);
        stride[i] = 0;
        if (j < 0 || x->dim[j].n == 1)
            continue;
        long start = oo[i] - xo[j];
        ASSERT(start >= 0 && start + os[i] <= xs[j]);
        stride[i] = s;
        base += start * s;
        s *= xs[j];
    }
    return base;
}

double reduce_step(RedOp r, double acc, double x)
{
    switch (r) {
    case R_SUM: return acc + x;
    case R_PROD: return acc * x;
    case R_MAX: return (x > acc || isnan(x)) ? x : acc;
    case R_MIN: return (x < acc || isnan(x)) ? x : acc;
    default: BUG("bad reduction %d", (int)r);
    }
}

/* The value of an empty reduction. */
static double reduce_identity(RedOp r)
{
    switch (r) {
    case R_SUM: return 0.0;
    case R_PROD: return 1.0;
    case R_MAX: return -INFINITY;
    case R_MIN: return INFINITY;
    default: BUG("bad reduction %d", (int)r);
    }
}

/* ---- pointwise ---- */

static double unary_value(Op op, double x)
{
    switch (op) {
    case O_NEG: return -x;
    case O_SQRT: return sqrt(x);
    case O_TANH: return tanh(x);
    case O_RELU: return x > 0 ? x : 0.0;
    case O_EXP: return exp(x);
    case O_LOG: return log(x);
    case O_ERF: return erf(x);
    case O_ABS: return fabs(x);
    case O_CAST: return x;
    default: BUG("not a simple unary op: %d", (int)op);
    }
}

static double binary_value(Op op, double a, double b)
{
    switch (op) {
    case O_ADD: return a + b;
    case O_SUB: return a - b;
    case O_MUL: return a * b;
    case O_DIV: return a / b;
    case O_POW: return pow(a, b);
    case O_MAX: return reduce_step(R_MAX, a, b); /* as the reduction's fold of a, b */
    case O_MIN: return reduce_step(R_MIN, a, b);
    case O_LT: return a < b;
    case O_LE: return a <= b;
    case O_GT: return a > b;
    case O_GE: return a >= b;
    case O_EQ: return a == b;
    case O_NE: return a != b;
    case O_UPDATE: return b; /* the new value, broadcast to the tensor */
    default: BUG("not a binary op: %d", (int)op);
    }
}

typedef struct {
    const Node *n;
    const double *x;
    double *y;
    /* Dropout */
    uint64_t seed, stream;
    const Program *p;
    int rank;
} UnaryJob;

static void unary_range(void *ctx, long lo, long hi)
{
    const UnaryJob *j = ctx;
    for (long i = lo; i < hi; i++)
        j->y[i] = exec_round(j->n->type, unary_value(j->n->op, j->x[i]));
}

static void eval_unary(Exec *e, const Node *n, int rank)
{
    long count;
    const double *x = input_data(e, n, 0, rank, &count);
    ASSERT(count == local_count(e->prog, n, rank));
    UnaryJob j = {n, x, exec_alloc(e, n->id, rank, count), 0, 0, e->prog, rank};
    parallel_ranges(exec_threads(e, count), count, unary_range, &j);
}

/* The logical index of local element lo, then an odometer from there. */
static void dropout_range(void *ctx, long lo, long hi)
{
    const UnaryJob *j = ctx;
    double p = j->n->value, scale = 1.0 / (1.0 - p);
    GlobalIter it;
    global_iter_start(&it, j->p, j->n, j->rank);
    global_iter_seek(&it, lo);
    for (long i = lo; i < hi; i++, global_iter_next(&it)) {
        int keep = rng_uniform(j->seed, j->stream, (uint64_t)it.gidx) >= p;
        j->y[i] = keep ? exec_round(j->n->type, j->x[i] * scale) : 0.0;
    }
}

static void eval_dropout(Exec *e, const Node *n, int rank)
{
    long count;
    const double *x = input_data(e, n, 0, rank, &count);
    ASSERT(count == local_count(e->prog, n, rank));
    UnaryJob j = {n, x, exec_alloc(e, n->id, rank, count), e->seed,
                  (UINT64_C(1) << 63) | (uint64_t)n->dropout_id, e->prog, rank};
    parallel_ranges(exec_threads(e, count), count, dropout_range, &j);
}

/* Slice: the input holds the whole logical tensor; keep this rank's part. */
static void slice_copy_range(void *ctx, long lo, long hi)
{
    const UnaryJob *j = ctx;
    GlobalIter it;
    global_iter_start(&it, j->p, j->n, j->rank);
    global_iter_seek(&it, lo);
    for (long i = lo; i < hi; i++, global_iter_next(&it))
        j->y[i] = exec_round(j->n->type, j->x[it.gidx]);
}

static void eval_slice(Exec *e, const Node *n, int rank)
{
    long in_count;
    const double *x = input_data(e, n, 0, rank, &in_count);
    ASSERT(in_count == logical_count(n));
    long count = local_count(e->prog, n, rank);
    UnaryJob j = {n, x, exec_alloc(e, n->id, rank, count), 0, 0, e->prog, rank};
    parallel_ranges(exec_threads(e, count), count, slice_copy_range, &j);
}

/* Transpose: output element (m, r, c) of its matrices [rows][cols] is
 * element (m, c, r) of the input's [cols][rows] (local shapes: a Sliced
 * value's block is the transpose of the input's block). */
typedef struct {
    const double *x;
    double *y;
    long rows, cols;
} TransposeJob;

static void transpose_range(void *ctx, long lo, long hi)
{
    const TransposeJob *j = ctx;
    long per = j->rows * j->cols;
    for (long i = lo; i < hi; i++) {
        long m = i / per, r = i % per / j->cols, c = i % j->cols;
        j->y[i] = j->x[m * per + c * j->rows + r];
    }
}

static void eval_transpose(Exec *e, const Node *n, int rank)
{
    long os[MAXDIM], count;
    local_shape(e->prog, n, rank, os, NULL);
    const double *x = input_data(e, n, 0, rank, &count);
    ASSERT(n->ndim >= 2 && count == shape_count(os, n->ndim));
    TransposeJob j = {x, exec_alloc(e, n->id, rank, count), os[n->ndim - 2], os[n->ndim - 1]};
    parallel_ranges(exec_threads(e, count), count, transpose_range, &j);
}

/* An elementwise operation of NIN operands (binary ones, Update, Ite). */
enum { NOPERAND = 3 };
typedef struct {
    const Node *n;
    int nin;
    const double *x[NOPERAND];
    double *y;
    long os[MAXDIM], stride[NOPERAND][MAXDIM];
    long first[NOPERAND];
    int nd;
} OperandsJob;

static double operands_value(const OperandsJob *j, const long *at)
{
    if (j->n->op == O_ITE)
        return j->x[0][at[0]] != 0 ? j->x[1][at[1]] : j->x[2][at[2]];
    return binary_value(j->n->op, j->x[0][at[0]], j->x[1][at[1]]);
}

/* Elements [lo, hi): operand offsets from lo's coordinates, then an
 * odometer over the output's dimensions (broadcast ones have stride 0). */
static void operands_range(void *ctx, long lo, long hi)
{
    const OperandsJob *j = ctx;
    long idx[MAXDIM], rest = lo, at[NOPERAND];
    for (int k = 0; k < j->nin; k++)
        at[k] = j->first[k];
    for (int d = j->nd - 1; d >= 0; d--) {
        idx[d] = rest % j->os[d];
        rest /= j->os[d];
        for (int k = 0; k < j->nin; k++)
            at[k] += idx[d] * j->stride[k][d];
    }
    for (long i = lo; i < hi; i++) {
        j->y[i] = exec_round(j->n->type, operands_value(j, at));
        for (int d = j->nd - 1; d >= 0; d--) {
            idx[d]++;
            for (int k = 0; k < j->nin; k++)
                at[k] += j->stride[k][d];
            if (idx[d] < j->os[d])
                break;
            for (int k = 0; k < j->nin; k++)
                at[k] -= j->os[d] * j->stride[k][d];
            idx[d] = 0;
        }
    }
}

static void eval_operands(Exec *e, const Node *n, int rank)
{
    const Program *p = e->prog;
    OperandsJob j;
    memset(&j, 0, sizeof j);
    j.n = n;
    j.nin = n->nin;
    j.nd = n->ndim;
    ASSERT(j.nin >= 2 && j.nin <= NOPERAND);
    local_shape(p, n, rank, j.os, NULL);
    for (int k = 0; k < j.nin; k++) {
        const Node *x = &p->node[n->in[k]];
        long c;
        j.x[k] = input_data(e, n, k, rank, &c);
        ASSERT(c == local_count(p, x, rank));
        j.first[k] = operand_walk(p, n, x, rank, 0, j.stride[k]);
    }
    long count = shape_count(j.os, j.nd);
    j.y = exec_alloc(e, n->id, rank, count);
    parallel_ranges(exec_threads(e, count), count, operands_range, &j);
}

void eval_pointwise(Exec *e, const Node *n, int rank)
{
    switch (n->op) {
    case O_DROPOUT: eval_dropout(e, n, rank); break;
    case O_SLICE: eval_slice(e, n, rank); break;
    case O_TRANSPOSE: eval_transpose(e, n, rank); break;
    case O_ADD: case O_SUB: case O_MUL: case O_DIV: case O_POW: case O_MAX: case O_MIN:
    case O_UPDATE: case O_LT: case O_LE: case O_GT: case O_GE: case O_EQ: case O_NE: case O_ITE:
        eval_operands(e, n, rank);
        break;
    default: eval_unary(e, n, rank); break;
    }
}

/* ---- MatMul ---- */

/* A block of the output is MR rows by NR columns: MR rows of A, packed
 * k-major ([k][MR]), times a panel of NR columns of B, packed [k][NR]. The
 * kernels keep the block's sums in vector registers; a lane does exactly
 * the scalar steps (product rounded, then sum rounded: no fused
 * multiply-add), so every element is the same whatever the vector width.
 * Each kernel is built plain and for AVX2 and AVX-512 (x86-64, chosen by
 * the CPU at run time). */
enum { MR = 8, NR = 16, ROW_CHUNK = 8 /* micro-rows per cache block of A */ };

typedef float VecF __attribute__((vector_size(NR * sizeof(float))));       /* a block row */
typedef double VecD __attribute__((vector_size(NR / 2 * sizeof(double)))); /* half of one */

/* out[r][j] = sum over k, in order, of a[k][r] * b[k][j], in float; one
 * named accumulator per row, so that all stay in registers. */
static inline __attribute__((always_inline)) void block_f32(const float *a, const float *b,
                                                            long K, float *out)
{
    _Static_assert(MR == 8, "block_f32 has MR accumulators");
    VecF c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0}, c6 = {0}, c7 = {0};
    for (long k = 0; k < K; k++, a += MR, b += NR) {
        VecF bk;
        memcpy(&bk, b, sizeof bk);
        c0 += a[0] * bk;
        c1 += a[1] * bk;
        c2 += a[2] * bk;
        c3 += a[3] * bk;
        c4 += a[4] * bk;
        c5 += a[5] * bk;
        c6 += a[6] * bk;
        c7 += a[7] * bk;
    }
    VecF c[MR] = {c0, c1, c2, c3, c4, c5, c6, c7};
    memcpy(out, c, sizeof c);
}

/* The same in double, a row in two vectors. */
static inline __attribute__((always_inline)) void block_f64(const double *a, const double *b,
                                                            long K, double *out)
{
    VecD c00 = {0}, c10 = {0}, c20 = {0}, c30 = {0}, c40 = {0}, c50 = {0}, c60 = {0}, c70 = {0};
    VecD c01 = {0}, c11 = {0}, c21 = {0}, c31 = {0}, c41 = {0}, c51 = {0}, c61 = {0}, c71 = {0};
    for (long k = 0; k < K; k++, a += MR, b += NR) {
        VecD b0, b1;
        memcpy(&b0, b, sizeof b0);
        memcpy(&b1, b + NR / 2, sizeof b1);
        c00 += a[0] * b0;
        c01 += a[0] * b1;
        c10 += a[1] * b0;
        c11 += a[1] * b1;
        c20 += a[2] * b0;
        c21 += a[2] * b1;
        c30 += a[3] * b0;
        c31 += a[3] * b1;
        c40 += a[4] * b0;
        c41 += a[4] * b1;
        c50 += a[5] * b0;
        c51 += a[5] * b1;
        c60 += a[6] * b0;
        c61 += a[6] * b1;
        c70 += a[7] * b0;
        c71 += a[7] * b1;
    }
    VecD c[2 * MR] = {c00, c01, c10, c11, c20, c21, c30, c31,
                      c40, c41, c50, c51, c60, c61, c70, c71};
    memcpy(out, c, sizeof c);
}

typedef void (*BlockF32)(const float *, const float *, long, float *);
typedef void (*BlockF64)(const double *, const double *, long, double *);

#define BLOCK_KERNELS(suffix, attr)                                                         \
    attr static void block_f32_##suffix(const float *a, const float *b, long K, float *out) \
    {                                                                                       \
        block_f32(a, b, K, out);                                                            \
    }                                                                                       \
    attr static void block_f64_##suffix(const double *a, const double *b, long K,           \
                                        double *out)                                        \
    {                                                                                       \
        block_f64(a, b, K, out);                                                            \
    }

BLOCK_KERNELS(plain, )
#if defined(__x86_64__)
BLOCK_KERNELS(avx2, __attribute__((target("avx2"))))
BLOCK_KERNELS(avx512, __attribute__((target("avx512f"))))
#endif

/* The widest kernels this CPU runs. */
static void pick_kernels(BlockF32 *f32, BlockF64 *f64)
{
    *f32 = block_f32_plain;
    *f64 = block_f64_plain;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        *f32 = block_f32_avx512;
        *f64 = block_f64_avx512;
    } else if (__builtin_cpu_supports("avx2")) {
        *f32 = block_f32_avx2;
        *f64 = block_f64_avx2;
    }
#endif
}

/* Operands are packed once per call, as float (FP16/BF16/FP32 outputs) or
 * as double (FP64): A in blocks of MR rows ([matrix][block][k][MR], zero
 * rows pad M), B in panels of NR columns ([matrix][panel][k][NR], zero
 * columns pad N). */
typedef struct {
    const float *a, *b;      /* float packing, or NULL */
    const double *a64, *b64; /* double packing, or NULL */
    BlockF32 f32;
    BlockF64 f64;
    const long *amap, *bmap; /* output batch -> a / b matrix */
    long M, K, N, nblock, npanel;
    Type type;
    double *out;
} MatmulJob;

/* One MR x NR block: rows from i0, columns of panel pnl, of one batch. */
static void matmul_tile(const MatmulJob *j, long batch, long i0, long pnl, const void *a,
                        const void *b)
{
    float f[MR * NR];
    double d[MR * NR];
    if (j->a)
        j->f32(a, b, j->K, f);
    else
        j->f64(a, b, j->K, d);
    long j0 = pnl * NR;
    for (int r = 0; r < MR && i0 + r < j->M; r++) {
        double *row = j->out + (batch * j->M + i0 + r) * j->N;
        for (int c = 0; c < NR && j0 + c < j->N; c++)
            row[j0 + c] = exec_round(j->type, j->a ? (double)f[r * NR + c] : d[r * NR + c]);
    }
}

/* Row blocks [u0, u1) of one batch, panel by panel, so that a B panel is
 * read from cache by every row block. */
static void matmul_rows(const MatmulJob *j, long batch, long u0, long u1)
{
    long K = j->K, amat = j->amap[batch] * j->nblock, bmat = j->bmap[batch] * j->npanel;
    for (long pnl = 0; pnl < j->npanel; pnl++) {
        long boff = (bmat + pnl) * K * NR;
        for (long u = u0; u < u1; u++) {
            long aoff = (amat + u) * K * MR;
            if (j->a)
                matmul_tile(j, batch, u * MR, pnl, j->a + aoff, j->b + boff);
            else
                matmul_tile(j, batch, u * MR, pnl, j->a64 + aoff, j->b64 + boff);
        }
    }
}

/* Work units are row blocks (MR output rows of one batch). */
static void matmul_range(void *ctx, long lo, long hi)
{
    const MatmulJob *j = ctx;
    while (lo < hi) {
        long batch = lo / j->nblock, u0 = lo % j->nblock;
        long u1 = u0 + ROW_CHUNK;
        if (u1 > j->nblock)
            u1 = j->nblock;
        if (u1 - u0 > hi - lo)
            u1 = u0 + (hi - lo);
        matmul_rows(j, batch, u0, u1);
        lo += u1 - u0;
    }
}

/* Packing: src holds nmat row-major matrices of rows x cols; the packed
 * copy goes to f or d, whichever is not NULL. */
typedef struct {
    const double *src;
    long rows, cols, nblock;
    float *f;
    double *d;
} Pack;

static void pack_put(const Pack *pk, long to, double v)
{
    if (pk->f)
        pk->f[to] = (float)v;
    else
        pk->d[to] = v;
}

/* A: units are (matrix, block of MR rows) */
static void pack_a_range(void *ctx, long lo, long hi)
{
    const Pack *pk = ctx;
    long M = pk->rows, K = pk->cols;
    for (long t = lo; t < hi; t++) {
        const double *m = pk->src + t / pk->nblock * M * K;
        long i0 = t % pk->nblock * MR;
        for (long k = 0; k < K; k++)
            for (int r = 0; r < MR; r++)
                pack_put(pk, (t * K + k) * MR + r, i0 + r < M ? m[(i0 + r) * K + k] : 0.0);
    }
}

/* B: units are (matrix, row k) */
static void pack_b_range(void *ctx, long lo, long hi)
{
    const Pack *pk = ctx;
    long K = pk->rows, N = pk->cols;
    for (long t = lo; t < hi; t++) {
        long mat = t / K, k = t % K;
        const double *row = pk->src + t * N;
        for (long c = 0; c < pk->nblock * NR; c++)
            pack_put(pk, ((mat * pk->nblock + c / NR) * K + k) * NR + c % NR,
                     c < N ? row[c] : 0.0);
    }
}

/* map[t] = index of the matrix of operand x used by output batch t. */
static long *batch_map(Exec *e, const Node *n, const Node *x, int rank, long nbatch)
{
    const Program *p = e->prog;
    long os[MAXDIM], stride[MAXDIM], idx[MAXDIM] = {0};
    local_shape(p, n, rank, os, NULL);
    long *map = exec_scratch(e, n->id, rank, (size_t)(nbatch > 0 ? nbatch : 1) * sizeof *map);
    long off = operand_walk(p, n, x, rank, 2, stride);
    int ond = n->ndim - 2;
    for (long t = 0; t < nbatch; t++) {
        map[t] = off;
        for (int d = ond - 1; d >= 0; d--) {
            idx[d]++;
            off += stride[d];
            if (idx[d] < os[d])
                break;
            off -= os[d] * stride[d];
            idx[d] = 0;
        }
    }
    return map;
}

/* A new float or double buffer of size elements, filled by fn (pack_a_range
 * or pack_b_range) over units. */
static void *pack(Exec *e, const Node *n, int rank, RangeFn fn, Pack pk, long units, long size,
                  int f64)
{
    void *buf = exec_scratch(e, n->id, rank,
                             (size_t)(size > 0 ? size : 1) * (f64 ? sizeof(double) : sizeof(float)));
    pk.f = f64 ? NULL : buf;
    pk.d = f64 ? buf : NULL;
    parallel_ranges(exec_threads(e, size), units, fn, &pk);
    return buf;
}

/* The sizes of a MatMul on one rank: its matrices, how many of each
 * operand and of the output, and the packed operands' elements. */
typedef struct {
    long M, K, N, nblock, npanel;
    long nbatch, na_mat, nb_mat;
    long asize, bsize;
} MatmulDims;

static MatmulDims matmul_dims(const Program *p, const Node *n, int rank)
{
    const Node *na = &p->node[n->in[0]], *nb = &p->node[n->in[1]];
    long as[MAXDIM], bs[MAXDIM], os[MAXDIM];
    ASSERT(na->ndim >= 2 && nb->ndim >= 2 && n->ndim >= 2);
    local_shape(p, na, rank, as, NULL);
    local_shape(p, nb, rank, bs, NULL);
    local_shape(p, n, rank, os, NULL);
    MatmulDims d;
    int obd = n->ndim - 2;
    d.M = as[na->ndim - 2];
    d.K = as[na->ndim - 1];
    d.N = bs[nb->ndim - 1];
    d.nblock = (d.M + MR - 1) / MR;
    d.npanel = (d.N + NR - 1) / NR;
    ASSERT(bs[nb->ndim - 2] == d.K && os[obd] == d.M && os[obd + 1] == d.N);
    d.nbatch = shape_count(os, obd);
    d.na_mat = shape_count(as, na->ndim - 2);
    d.nb_mat = shape_count(bs, nb->ndim - 2);
    d.asize = d.na_mat * d.nblock * MR * d.K;
    d.bsize = d.nb_mat * d.npanel * NR * d.K;
    return d;
}

/* What eval_matmul's batch_map and pack ask for. */
static double matmul_scratch(const Program *p, const Node *n, int rank)
{
    MatmulDims d = matmul_dims(p, n, rank);
    double elem = n->type == T_FP64 ? sizeof(double) : sizeof(float);
    long maps = d.nbatch > 0 ? d.nbatch : 1;
    return 2.0 * (double)maps * sizeof(long) + (double)(d.asize > 0 ? d.asize : 1) * elem +
           (double)(d.bsize > 0 ? d.bsize : 1) * elem;
}

void eval_matmul(Exec *e, const Node *n, int rank)
{
    const Program *p = e->prog;
    const Node *na = &p->node[n->in[0]], *nb = &p->node[n->in[1]];
    long ca, cb;
    MatmulDims d = matmul_dims(p, n, rank);
    const double *a = input_data(e, n, 0, rank, &ca);
    const double *b = input_data(e, n, 1, rank, &cb);

    MatmulJob j = {0};
    j.M = d.M;
    j.K = d.K;
    j.N = d.N;
    j.nblock = d.nblock;
    j.npanel = d.npanel;
    j.type = n->type;
    long nbatch = d.nbatch;
    ASSERT(ca == d.na_mat * j.M * j.K && cb == d.nb_mat * j.K * j.N);
    long *amap = batch_map(e, n, na, rank, nbatch);
    long *bmap = batch_map(e, n, nb, rank, nbatch);
    j.amap = amap;
    j.bmap = bmap;
    j.out = exec_alloc(e, n->id, rank, nbatch * j.M * j.N);
    pick_kernels(&j.f32, &j.f64);

    int f64 = n->type == T_FP64;
    void *pa = pack(e, n, rank, pack_a_range, (Pack){a, j.M, j.K, j.nblock, NULL, NULL},
                    d.na_mat * j.nblock, d.asize, f64);
    void *pb = pack(e, n, rank, pack_b_range, (Pack){b, j.K, j.N, j.npanel, NULL, NULL},
                    d.nb_mat * j.K, d.bsize, f64);
    if (f64) {
        j.a64 = pa;
        j.b64 = pb;
    } else {
        j.a = pa;
        j.b = pb;
    }
    if (j.N > 0)
        parallel_ranges(e->nthreads, nbatch * j.nblock, matmul_range, &j);
    exec_scratch_free(e, pa);
    exec_scratch_free(e, pb);
    exec_scratch_free(e, amap);
    exec_scratch_free(e, bmap);
}

/* ---- Conv2D ---- */

typedef struct {
    const float *x, *w;
    long N, C, H, W, K, R, S, OH, OW;
    long stride, pad;
    Type type;
    double *out;
    int failed; /* a thread could not get its row of sums */
} ConvJob;

/* ceil(a / b) for b > 0, any sign of a */
static long div_ceil(long a, long b)
{
    return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

/* Adds x * w over the output row (fixed c, r, s) where the input is real. */
static void conv_row_add(const ConvJob *j, float *acc, const float *xrow, float wv, long s)
{
    long off = s - j->pad;              /* iw = ow * stride + off */
    long lo = off >= 0 ? 0 : div_ceil(-off, j->stride);
    long hi = j->W - 1 - off >= 0 ? (j->W - 1 - off) / j->stride + 1 : 0;
    if (hi > j->OW)
        hi = j->OW;
    for (long ow = lo; ow < hi; ow++)
        acc[ow] += xrow[ow * j->stride + off] * wv;
}

/* Work units are (image, output channel) pairs. */
static void conv_range(void *ctx, long lo, long hi)
{
    ConvJob *j = ctx;
    float *acc = malloc((size_t)(j->OW > 0 ? j->OW : 1) * sizeof *acc);
    if (!acc) { /* a worker thread: eval_conv2d ends the run */
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (long t = lo; t < hi; t++) {
        long img = t / j->K, k = t % j->K;
        for (long oh = 0; oh < j->OH; oh++) {
            memset(acc, 0, (size_t)j->OW * sizeof *acc);
            for (long c = 0; c < j->C; c++) {
                for (long r = 0; r < j->R; r++) {
                    long ih = oh * j->stride - j->pad + r;
                    if (ih < 0 || ih >= j->H)
                        continue;
                    const float *xrow = j->x + ((img * j->C + c) * j->H + ih) * j->W;
                    const float *wrow = j->w + ((k * j->C + c) * j->R + r) * j->S;
                    for (long s = 0; s < j->S; s++)
                        conv_row_add(j, acc, xrow, wrow[s], s);
                }
            }
            double *orow = j->out + ((img * j->K + k) * j->OH + oh) * j->OW;
            for (long ow = 0; ow < j->OW; ow++)
                orow[ow] = exec_round(j->type, (double)acc[ow]);
        }
    }
    free(acc);
}

/* FP64 Conv2D: the same order (c, r, s) accumulated in double. */
static void conv_fp64(const ConvJob *j, const double *x, const double *w)
{
    for (long img = 0; img < j->N; img++)
        for (long k = 0; k < j->K; k++)
            for (long oh = 0; oh < j->OH; oh++)
                for (long ow = 0; ow < j->OW; ow++) {
                    double acc = 0;
                    for (long c = 0; c < j->C; c++)
                        for (long r = 0; r < j->R; r++)
                            for (long s = 0; s < j->S; s++) {
                                long ih = oh * j->stride - j->pad + r;
                                long iw = ow * j->stride - j->pad + s;
                                if (ih < 0 || ih >= j->H || iw < 0 || iw >= j->W)
                                    continue;
                                acc += x[((img * j->C + c) * j->H + ih) * j->W + iw] *
                                       w[((k * j->C + c) * j->R + r) * j->S + s];
                            }
                    j->out[((img * j->K + k) * j->OH + oh) * j->OW + ow] = acc;
                }
}

static float *to_float(Exec *e, const Node *n, int rank, const double *v, long count)
{
    float *f = exec_scratch(e, n->id, rank, (size_t)(count > 0 ? count : 1) * sizeof *f);
    for (long i = 0; i < count; i++)
        f[i] = (float)v[i];
    return f;
}

void eval_conv2d(Exec *e, const Node *n, int rank)
{
    const Program *p = e->prog;
    long xs[MAXDIM], ws[MAXDIM], os[MAXDIM], cx, cw;
    ASSERT(p->node[n->in[0]].ndim == 4 && p->node[n->in[1]].ndim == 4 && n->ndim == 4);
    local_shape(p, &p->node[n->in[0]], rank, xs, NULL);
    local_shape(p, &p->node[n->in[1]], rank, ws, NULL);
    local_shape(p, n, rank, os, NULL);
    const double *x = input_data(e, n, 0, rank, &cx);
    const double *w = input_data(e, n, 1, rank, &cw);
    ConvJob j = {.N = xs[0], .C = xs[1], .H = xs[2], .W = xs[3],
                 .K = ws[0], .R = ws[2], .S = ws[3],
                 .stride = n->stride, .pad = n->pad, .type = n->type};
    ASSERT(j.stride > 0 && ws[1] == j.C);
    j.OH = (j.H + 2 * j.pad - j.R) / j.stride + 1;
    j.OW = (j.W + 2 * j.pad - j.S) / j.stride + 1;
    ASSERT(os[0] == j.N && os[1] == j.K && os[2] == j.OH && os[3] == j.OW);
    ASSERT(cx == shape_count(xs, 4) && cw == shape_count(ws, 4));
    j.out = exec_alloc(e, n->id, rank, shape_count(os, 4));
    if (n->type == T_FP64) {
        conv_fp64(&j, x, w);
        return;
    }
    float *fx = to_float(e, n, rank, x, cx), *fw = to_float(e, n, rank, w, cw);
    j.x = fx;
    j.w = fw;
    parallel_ranges(e->nthreads, j.N * j.K, conv_range, &j);
    exec_scratch_free(e, fx);
    exec_scratch_free(e, fw);
    if (j.failed)
        exec_out_of_memory(e, n->id, rank, (double)j.OW * sizeof(float));
}

/* What eval_conv2d's to_float asks for (FP64 needs none). */
static double conv_scratch(const Program *p, const Node *n, int rank)
{
    if (n->type == T_FP64)
        return 0;
    double b = 0;
    for (int k = 0; k < 2; k++) {
        long c = local_count(p, &p->node[n->in[k]], rank);
        b += (double)(c > 0 ? c : 1) * sizeof(float);
    }
    return b;
}

double eval_scratch_bytes(const Program *p, const Node *n, int rank)
{
    if (n->op == O_MATMUL)
        return matmul_scratch(p, n, rank);
    if (n->op == O_CONV2D)
        return conv_scratch(p, n, rank);
    return 0;
}

/* ---- reductions within a rank ---- */

void eval_reduction(Exec *e, const Node *n, int rank)
{
    const Program *p = e->prog;
    const Node *in = &p->node[n->in[0]];
    long is[MAXDIM], count;
    local_shape(p, in, rank, is, NULL);
    const double *x = input_data(e, n, 0, rank, &count);
    ASSERT(count == shape_count(is, in->ndim));
    long outer = 1, len = count, inner = 1;
    if (n->axis >= 0) {
        ASSERT(n->axis < in->ndim);
        outer = shape_count(is, n->axis);
        len = is[n->axis];
        inner = shape_count(is + n->axis + 1, in->ndim - n->axis - 1);
    }
    ASSERT(local_count(p, n, rank) == outer * inner);
    double *y = exec_alloc(e, n->id, rank, outer * inner);
    int norm = n->op == O_NORM;
    int squares = norm || n->redop == R_SUMSQ; /* Norm and PartialReduce("sumsq") */
    for (long o = 0; o < outer; o++) {
        double *yo = y + o * inner;
        const double *xo = x + o * len * inner;
        for (long i = 0; i < inner; i++) /* start: the first element */
            yo[i] = len == 0 ? reduce_identity(squares ? R_SUM : n->redop)
                             : squares ? xo[i] * xo[i] : xo[i];
        for (long a = 1; a < len; a++) {
            const double *xa = xo + a * inner;
            for (long i = 0; i < inner; i++)
                yo[i] = squares ? yo[i] + xa[i] * xa[i] : reduce_step(n->redop, yo[i], xa[i]);
        }
        for (long i = 0; i < inner; i++)
            yo[i] = exec_round(n->type, norm ? sqrt(yo[i]) : yo[i]);
    }
}

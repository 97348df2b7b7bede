/* interp_ops.c: the computations one rank performs on its local data.
 *
 * This is the language's reference arithmetic.  All shapes are LOCAL shapes
 * (local_shape()); the checker guarantees they fit together.
 *  - Pointwise ops compute in double from their (already rounded) inputs and
 *    round once to the node's type.  Binary ops broadcast as PyTorch does
 *    (right-aligned; missing or size-1 dimensions repeat); scalars broadcast.
 *  - Dropout keeps an element iff
 *      rng_uniform(seed, 2^63 | dropout_id, gidx) >= p,  y = x / (1 - p),
 *    gidx being the element's row-major index in the LOGICAL shape, so the
 *    mask does not depend on the layout.
 *  - MatMul ([..., M, K] x [..., K, N], batch dims of b broadcast against
 *    a's) accumulates each output element in float, in increasing k, with
 *    acc += (float)a * (float)b, then rounds to the node's type; FP64
 *    accumulates in double.  Output rows are shared among e->nthreads
 *    threads; each element is computed by one thread in the same order, so
 *    results do not depend on the thread count.
 *  - Conv2D (x [N,C,H,W], w [K,C,R,S], stride, zero padding) accumulates in
 *    float in the order c, r, s; padded positions are skipped (for finite
 *    weights this equals adding 0 * w).
 *  - Reductions (Norm, ReduceTensor) accumulate in double in index order,
 *    starting from the first element, and round once.
 * Assumes the build uses -ffp-contract=off (no fused multiply-add). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "coco.h"

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

/* Element strides of `in` (row-major, ind dims) when broadcast to the
 * output shape `out` (ond dims): 0 for missing or repeated dimensions. */
static void broadcast_strides(const long *out, int ond, const long *in, int ind, long *stride)
{
    ASSERT(ind <= ond);
    long s = 1;
    for (int i = ond - 1; i >= 0; i--) {
        int j = i - (ond - ind);
        if (j < 0) {
            stride[i] = 0;
            continue;
        }
        ASSERT(in[j] == out[i] || in[j] == 1);
        stride[i] = in[j] == 1 ? 0 : s;
        s *= in[j];
    }
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

/* Runs fn(ctx, lo, hi) over [0, n) cut into nthreads contiguous ranges. */
typedef void (*RangeFn)(void *ctx, long lo, long hi);
typedef struct {
    RangeFn fn;
    void *ctx;
    long lo, hi;
} RangeTask;

static void *range_thread(void *arg)
{
    RangeTask *t = arg;
    t->fn(t->ctx, t->lo, t->hi);
    return NULL;
}

static void parallel_ranges(int nthreads, long n, RangeFn fn, void *ctx)
{
    if (nthreads > n)
        nthreads = (int)n;
    if (nthreads <= 1) {
        if (n > 0)
            fn(ctx, 0, n);
        return;
    }
    RangeTask *task = xcalloc((size_t)nthreads, sizeof *task);
    pthread_t *tid = xcalloc((size_t)nthreads, sizeof *tid);
    int *started = xcalloc((size_t)nthreads, sizeof *started);
    for (int t = 0; t < nthreads; t++) {
        task[t] = (RangeTask){fn, ctx, n * t / nthreads, n * (t + 1) / nthreads};
        if (t > 0)
            started[t] = pthread_create(&tid[t], NULL, range_thread, &task[t]) == 0;
    }
    range_thread(&task[0]);
    for (int t = 1; t < nthreads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            range_thread(&task[t]); /* no thread to spare: same result */
    }
    free(task);
    free(tid);
    free(started);
}

/* ---- pointwise ---- */

static double unary_value(Op op, double x)
{
    switch (op) {
    case O_NEG: return -x;
    case O_SQRT: return sqrt(x);
    case O_TANH: return tanh(x);
    case O_RELU: return x > 0 ? x : 0.0;
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
    default: BUG("not a binary op: %d", (int)op);
    }
}

static void eval_unary(Exec *e, const Node *n, int rank)
{
    long count;
    const double *x = input_data(e, n, 0, rank, &count);
    ASSERT(count == local_count(e->prog, n, rank));
    double *y = exec_alloc(e, n->id, rank, count);
    for (long i = 0; i < count; i++)
        y[i] = type_round(n->type, unary_value(n->op, x[i]));
}

static void eval_dropout(Exec *e, const Node *n, int rank)
{
    long count;
    const double *x = input_data(e, n, 0, rank, &count);
    ASSERT(count == local_count(e->prog, n, rank));
    double *y = exec_alloc(e, n->id, rank, count);
    double p = n->value;
    uint64_t stream = (UINT64_C(1) << 63) | (uint64_t)n->dropout_id;
    GlobalIter it;
    global_iter_start(&it, e->prog, n, rank);
    for (long i = 0; i < count; i++, global_iter_next(&it)) {
        int keep = rng_uniform(e->seed, stream, (uint64_t)it.gidx) >= p;
        y[i] = keep ? type_round(n->type, x[i] / (1.0 - p)) : 0.0;
    }
}

/* Slice: the input holds the whole logical tensor; keep this rank's part. */
static void eval_slice(Exec *e, const Node *n, int rank)
{
    long in_count;
    const double *x = input_data(e, n, 0, rank, &in_count);
    ASSERT(in_count == logical_count(n));
    long count = local_count(e->prog, n, rank);
    double *y = exec_alloc(e, n->id, rank, count);
    GlobalIter it;
    global_iter_start(&it, e->prog, n, rank);
    for (long i = 0; i < count; i++, global_iter_next(&it))
        y[i] = type_round(n->type, x[it.gidx]);
}

/* Binary ops, row by row over the output's last dimension. */
static void eval_binary(Exec *e, const Node *n, int rank)
{
    const Program *p = e->prog;
    const Node *na = &p->node[n->in[0]], *nb = &p->node[n->in[1]];
    long os[MAXDIM], as[MAXDIM], bs[MAXDIM], sa[MAXDIM], sb[MAXDIM], idx[MAXDIM] = {0};
    long ca, cb;
    local_shape(p, n, rank, os, NULL);
    local_shape(p, na, rank, as, NULL);
    local_shape(p, nb, rank, bs, NULL);
    const double *a = input_data(e, n, 0, rank, &ca);
    const double *b = input_data(e, n, 1, rank, &cb);
    ASSERT(ca == shape_count(as, na->ndim) && cb == shape_count(bs, nb->ndim));
    int nd = n->ndim;
    broadcast_strides(os, nd, as, na->ndim, sa);
    broadcast_strides(os, nd, bs, nb->ndim, sb);
    long count = shape_count(os, nd);
    double *y = exec_alloc(e, n->id, rank, count);
    if (count == 0)
        return;
    long len = nd > 0 ? os[nd - 1] : 1;
    long ja = nd > 0 ? sa[nd - 1] : 0, jb = nd > 0 ? sb[nd - 1] : 0;
    long oa = 0, ob = 0;
    for (long row = 0; row < count / len; row++) {
        double *yr = y + row * len;
        for (long j = 0; j < len; j++)
            yr[j] = type_round(n->type, binary_value(n->op, a[oa + j * ja], b[ob + j * jb]));
        for (int d = nd - 2; d >= 0; d--) { /* next row: odometer over dims 0..nd-2 */
            idx[d]++;
            oa += sa[d];
            ob += sb[d];
            if (idx[d] < os[d])
                break;
            oa -= os[d] * sa[d];
            ob -= os[d] * sb[d];
            idx[d] = 0;
        }
    }
}

void eval_pointwise(Exec *e, const Node *n, int rank)
{
    switch (n->op) {
    case O_DROPOUT: eval_dropout(e, n, rank); break;
    case O_SLICE: eval_slice(e, n, rank); break;
    case O_ADD: case O_SUB: case O_MUL: case O_DIV: case O_POW: eval_binary(e, n, rank); break;
    default: eval_unary(e, n, rank); break;
    }
}

/* ---- MatMul ---- */

/* Register block of the float kernel: MR rows by NR columns of C. */
enum { MR = 4, NR = 8, ROW_CHUNK = 16 /* micro-rows per cache block of A */ };

typedef struct {
    const float *a; /* per a-matrix: Mp x K rows (zero rows pad M to Mp) */
    const float *b; /* per b-matrix: npanel panels of K x NR (zero padded) */
    const double *da, *db; /* FP64: the operands as they are */
    const long *amap, *bmap; /* output batch -> a / b matrix */
    long M, K, N, Mp, npanel;
    Type type;
    double *out;
} MatmulJob;

/* acc[r][j] = sum over k, in order, of a[r][k] * b[k][j]. */
static void matmul_kernel(const float *a, long K, const float *bp, float acc[MR][NR])
{
    float c[MR][NR];
    memset(c, 0, sizeof c);
    for (long k = 0; k < K; k++) {
        const float *b = bp + k * NR;
        for (int r = 0; r < MR; r++) {
            float av = a[r * K + k];
            for (int j = 0; j < NR; j++)
                c[r][j] += av * b[j];
        }
    }
    memcpy(acc, c, sizeof c);
}

static void matmul_store(const MatmulJob *j, long batch, long i0, long panel, float acc[MR][NR])
{
    long j0 = panel * NR;
    for (int r = 0; r < MR && i0 + r < j->M; r++) {
        double *row = j->out + (batch * j->M + i0 + r) * j->N;
        for (int c = 0; c < NR && j0 + c < j->N; c++)
            row[j0 + c] = type_round(j->type, (double)acc[r][c]);
    }
}

/* One block of micro-rows [u0, u1) of one batch: panel by panel, so that a
 * B panel stays in L1 while the block of A stays in L2. */
static void matmul_block(const MatmulJob *j, long batch, long u0, long u1)
{
    const float *a = j->a + j->amap[batch] * j->Mp * j->K;
    const float *b = j->b + j->bmap[batch] * j->npanel * j->K * NR;
    float acc[MR][NR];
    for (long pnl = 0; pnl < j->npanel; pnl++) {
        for (long u = u0; u < u1; u++) {
            matmul_kernel(a + u * MR * j->K, j->K, b + pnl * j->K * NR, acc);
            matmul_store(j, batch, u * MR, pnl, acc);
        }
    }
}

/* Work units are micro-rows (MR output rows of one batch). */
static void matmul_range(void *ctx, long lo, long hi)
{
    const MatmulJob *j = ctx;
    long per = j->Mp / MR;
    while (lo < hi) {
        long batch = lo / per, u0 = lo % per;
        long u1 = u0 + ROW_CHUNK;
        if (u1 > per)
            u1 = per;
        if (u1 - u0 > hi - lo)
            u1 = u0 + (hi - lo);
        matmul_block(j, batch, u0, u1);
        lo += u1 - u0;
    }
}

/* FP64: one output row at a time, accumulated in double in k order. */
static void matmul_range_f64(void *ctx, long lo, long hi)
{
    const MatmulJob *j = ctx;
    double *acc = xmalloc((size_t)(j->N > 0 ? j->N : 1) * sizeof *acc);
    for (long row = lo; row < hi; row++) {
        long batch = row / j->M, i = row % j->M;
        const double *a = j->da + (j->amap[batch] * j->M + i) * j->K;
        const double *b = j->db + j->bmap[batch] * j->K * j->N;
        memset(acc, 0, (size_t)j->N * sizeof *acc);
        for (long k = 0; k < j->K; k++)
            for (long c = 0; c < j->N; c++)
                acc[c] += a[k] * b[k * j->N + c];
        memcpy(j->out + row * j->N, acc, (size_t)j->N * sizeof *acc);
    }
    free(acc);
}

static float *pack_a(const double *a, long nmat, long M, long K, long Mp)
{
    float *pa = xcalloc((size_t)(nmat * Mp * K > 0 ? nmat * Mp * K : 1), sizeof *pa);
    for (long m = 0; m < nmat; m++)
        for (long i = 0; i < M * K; i++)
            pa[m * Mp * K + i] = (float)a[m * M * K + i];
    return pa;
}

static float *pack_b(const double *b, long nmat, long K, long N, long npanel)
{
    long size = nmat * npanel * K * NR;
    float *pb = xcalloc((size_t)(size > 0 ? size : 1), sizeof *pb);
    for (long m = 0; m < nmat; m++)
        for (long k = 0; k < K; k++)
            for (long c = 0; c < N; c++)
                pb[((m * npanel + c / NR) * K + k) * NR + c % NR] = (float)b[(m * K + k) * N + c];
    return pb;
}

/* map[t] = index of the input matrix used by output batch t. */
static long *batch_map(const long *obatch, int ond, const long *ibatch, int ind)
{
    long stride[MAXDIM], idx[MAXDIM] = {0};
    long nb = shape_count(obatch, ond);
    long *map = xmalloc((size_t)(nb > 0 ? nb : 1) * sizeof *map);
    broadcast_strides(obatch, ond, ibatch, ind, stride);
    long off = 0;
    for (long t = 0; t < nb; t++) {
        map[t] = off;
        for (int d = ond - 1; d >= 0; d--) {
            idx[d]++;
            off += stride[d];
            if (idx[d] < obatch[d])
                break;
            off -= obatch[d] * stride[d];
            idx[d] = 0;
        }
    }
    return map;
}

void eval_matmul(Exec *e, const Node *n, int rank)
{
    const Program *p = e->prog;
    const Node *na = &p->node[n->in[0]], *nb = &p->node[n->in[1]];
    long as[MAXDIM], bs[MAXDIM], os[MAXDIM], ca, cb;
    ASSERT(na->ndim >= 2 && nb->ndim >= 2 && n->ndim >= 2);
    local_shape(p, na, rank, as, NULL);
    local_shape(p, nb, rank, bs, NULL);
    local_shape(p, n, rank, os, NULL);
    const double *a = input_data(e, n, 0, rank, &ca);
    const double *b = input_data(e, n, 1, rank, &cb);

    MatmulJob j = {0};
    int obd = n->ndim - 2;
    j.M = as[na->ndim - 2];
    j.K = as[na->ndim - 1];
    j.N = bs[nb->ndim - 1];
    j.type = n->type;
    ASSERT(bs[nb->ndim - 2] == j.K && os[obd] == j.M && os[obd + 1] == j.N);
    long nbatch = shape_count(os, obd);
    long na_mat = shape_count(as, na->ndim - 2), nb_mat = shape_count(bs, nb->ndim - 2);
    ASSERT(ca == na_mat * j.M * j.K && cb == nb_mat * j.K * j.N);
    long *amap = batch_map(os, obd, as, na->ndim - 2);
    long *bmap = batch_map(os, obd, bs, nb->ndim - 2);
    j.amap = amap;
    j.bmap = bmap;
    j.out = exec_alloc(e, n->id, rank, nbatch * j.M * j.N);

    if (n->type == T_FP64) {
        j.da = a;
        j.db = b;
        parallel_ranges(e->nthreads, nbatch * j.M, matmul_range_f64, &j);
    } else {
        j.Mp = (j.M + MR - 1) / MR * MR;
        j.npanel = (j.N + NR - 1) / NR;
        float *pa = pack_a(a, na_mat, j.M, j.K, j.Mp);
        float *pb = pack_b(b, nb_mat, j.K, j.N, j.npanel);
        j.a = pa;
        j.b = pb;
        if (j.N > 0)
            parallel_ranges(e->nthreads, nbatch * (j.Mp / MR), matmul_range, &j);
        free(pa);
        free(pb);
    }
    free(amap);
    free(bmap);
}

/* ---- Conv2D ---- */

typedef struct {
    const float *x, *w;
    long N, C, H, W, K, R, S, OH, OW;
    long stride, pad;
    Type type;
    double *out;
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
    const ConvJob *j = ctx;
    float *acc = xmalloc((size_t)(j->OW > 0 ? j->OW : 1) * sizeof *acc);
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
                orow[ow] = type_round(j->type, (double)acc[ow]);
        }
    }
    free(acc);
}

static float *to_float(const double *v, long count)
{
    float *f = xmalloc((size_t)(count > 0 ? count : 1) * sizeof *f);
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
    float *fx = to_float(x, cx), *fw = to_float(w, cw);
    j.x = fx;
    j.w = fw;
    parallel_ranges(e->nthreads, j.N * j.K, conv_range, &j);
    free(fx);
    free(fw);
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
    for (long o = 0; o < outer; o++) {
        double *yo = y + o * inner;
        const double *xo = x + o * len * inner;
        for (long i = 0; i < inner; i++) /* start: the first element */
            yo[i] = len == 0 ? reduce_identity(norm ? R_SUM : n->redop)
                             : norm ? xo[i] * xo[i] : xo[i];
        for (long a = 1; a < len; a++) {
            const double *xa = xo + a * inner;
            for (long i = 0; i < inner; i++)
                yo[i] = norm ? yo[i] + xa[i] * xa[i] : reduce_step(n->redop, yo[i], xa[i]);
        }
        for (long i = 0; i < inner; i++)
            yo[i] = type_round(n->type, norm ? sqrt(yo[i]) : yo[i]);
    }
}

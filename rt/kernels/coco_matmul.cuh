// coco_matmul.cuh: MatMul through cuBLASLt, included by coco_device.cuh.
//
// Row-major C[batch][M][N] = A[batch][M][K] * B[batch or 1][K][N], done as
// the column-major product C^T = B^T A^T. FP16/BF16 use tensor cores with
// FP32 accumulation; FP32 accumulates in FP32 (no TF32); FP64 in FP64. An
// operand given transposed (a Transpose the MatMul reads in place: A stored
// [K][M], B stored [N][K]) is read through cuBLASLt's transpose flag.
//
// Each shape's plan (the operation and layout descriptors and the
// algorithm cuBLASLt's heuristic ranks first for them with the runtime's
// workspace) is made on its first call and kept for the process: later
// calls make no descriptor and ask no heuristic. The key is everything the
// descriptors hold: type, M, N, K, the batch and its strides, and the SM
// target (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: the overlapped MatMul of
// emit_lsa.c leaves SMs to the collective's kernels; 0: all SMs).
//
// A chunk of rows of a larger product (coco_matmul_rows: the overlaps of
// src/gen/emit_overlap_blocks.c) takes the algorithm of the whole product's
// plan, not one of its own: one algorithm fixes how each element's sum over
// K is split and ordered (tile, split-K count, reduction scheme), whatever
// rows a call covers, so every chunk computes its elements as the whole
// product under that key does, bit for bit. Where cuBLASLt refuses that
// algorithm for a chunk (cublasLtMatmulAlgoCheck), the chunk takes its own
// heuristic's (within the MatMul's tolerance: doc/gpu.md, Tolerance).
#ifndef COCO_MATMUL_CUH
#define COCO_MATMUL_CUH

struct CocoMatmulKey {
    int t, sms, align; // align: the largest power of two up to 256 dividing every address
    long M, N, K, batch, sa, sb, sc;
    int ta, tb; // A, B stored transposed
    long whole; // a chunk of rows: the rows of the product whose algorithm it takes; 0: none
};

struct CocoMatmulPlan {
    CocoMatmulKey key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int has_algo; // 0: cuBLASLt found none; cublasLtMatmul then chooses per call
};

enum { COCO_MATMUL_PLANS = 64 };

static bool coco_matmul_same(const CocoMatmulKey &a, const CocoMatmulKey &b)
{
    return a.t == b.t && a.sms == b.sms && a.align == b.align && a.M == b.M && a.N == b.N && a.K == b.K &&
           a.batch == b.batch && a.sa == b.sa && a.sb == b.sb && a.sc == b.sc && a.ta == b.ta &&
           a.tb == b.tb && a.whole == b.whole;
}

static void coco_matmul_plan_free(CocoMatmulPlan *p)
{
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

static cublasStatus_t coco_matmul_batched(cublasLtMatrixLayout_t l, int32_t count, int64_t stride)
{
    cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof count);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride, sizeof stride);
    return s;
}

// Sets operand attribute `which` of op to "transposed" where `on`.
static cublasStatus_t coco_matmul_transposed(cublasLtMatmulDesc_t op,
                                             cublasLtMatmulDescAttributes_t which, int on)
{
    cublasOperation_t t = CUBLAS_OP_T;
    return on ? cublasLtMatmulDescSetAttribute(op, which, &t, sizeof t) : CUBLAS_STATUS_SUCCESS;
}

// Asks the heuristic for algorithms that take addresses aligned to `align`.
static bool coco_matmul_pref(cublasLtMatmulPreference_t pref, uint64_t workspace, uint32_t align)
{
    const cublasLtMatmulPreferenceAttributes_t at[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace, sizeof workspace) != CUBLAS_STATUS_SUCCESS)
        return false;
    for (int i = 0; i < 4; i++)
        if (cublasLtMatmulPreferenceSetAttribute(pref, at[i], &align, sizeof align) !=
            CUBLAS_STATUS_SUCCESS)
            return false;
    return true;
}

// The heuristic's first algorithm for p's descriptors, with the runtime's
// workspace and addresses aligned to k.align (none found: has_algo 0).
static void coco_matmul_heuristic(const coco_cuda_ctx *ctx, CocoMatmulPlan *p)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t best;
    int found = 0;
    if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
        coco_matmul_pref(pref, ctx->lt_workspace_bytes, (uint32_t)p->key.align) &&
        cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->lt, p->op, p->la, p->lb, p->lc,
                                       p->lc, pref, 1, &best, &found) == CUBLAS_STATUS_SUCCESS &&
        found > 0) {
        p->algo = best.algo;
        p->has_algo = 1;
    }
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
}

// Algorithm `pin` for p's descriptors, if cuBLASLt takes it there within the
// runtime's workspace: true, and it is p's.
static bool coco_matmul_pin(const coco_cuda_ctx *ctx, CocoMatmulPlan *p,
                            const cublasLtMatmulAlgo_t *pin)
{
    cublasLtMatmulHeuristicResult_t r;
    if (cublasLtMatmulAlgoCheck((cublasLtHandle_t)ctx->lt, p->op, p->la, p->lb, p->lc, p->lc, pin,
                                &r) != CUBLAS_STATUS_SUCCESS ||
        r.workspaceSize > ctx->lt_workspace_bytes)
        return false;
    p->algo = *pin;
    p->has_algo = 1;
    return true;
}

// The descriptors of key k and their algorithm: `pin` where given and
// taken (coco_matmul_pin), else the heuristic's first.
static cublasStatus_t coco_matmul_plan_make(const coco_cuda_ctx *ctx, const CocoMatmulKey &k,
                                            CocoMatmulPlan *p, const cublasLtMatmulAlgo_t *pin)
{
    cudaDataType_t dt = k.t == COCO_FP16 ? CUDA_R_16F : k.t == COCO_BF16 ? CUDA_R_16BF
                        : k.t == COCO_FP32 ? CUDA_R_32F : CUDA_R_64F;
    cublasComputeType_t ct = k.t == COCO_FP64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    cudaDataType_t st = k.t == COCO_FP64 ? CUDA_R_64F : CUDA_R_32F;
    memset(p, 0, sizeof *p);
    p->key = k;
    // "A" of the column-major product is B (N x K), "B" is A (K x M).
    cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, ct, st);
    if (s == CUBLAS_STATUS_SUCCESS && k.sms > 0) {
        int32_t sms = k.sms;
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms,
                                           sizeof sms);
    }
    if (s == CUBLAS_STATUS_SUCCESS)
        s = coco_matmul_transposed(p->op, CUBLASLT_MATMUL_DESC_TRANSA, k.tb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = coco_matmul_transposed(p->op, CUBLASLT_MATMUL_DESC_TRANSB, k.ta);
    // stored as they lie: B^T is N x K (ld N), or K x N (ld K) when B is [N][K]
    if (s == CUBLAS_STATUS_SUCCESS)
        s = k.tb ? cublasLtMatrixLayoutCreate(&p->la, dt, k.K, k.N, k.K)
                 : cublasLtMatrixLayoutCreate(&p->la, dt, k.N, k.K, k.N);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = k.ta ? cublasLtMatrixLayoutCreate(&p->lb, dt, k.M, k.K, k.M)
                 : cublasLtMatrixLayoutCreate(&p->lb, dt, k.K, k.M, k.K);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->lc, dt, k.N, k.M, k.N);
    if (s == CUBLAS_STATUS_SUCCESS && k.batch > 1)
        s = coco_matmul_batched(p->la, (int32_t)k.batch, k.sb);
    if (s == CUBLAS_STATUS_SUCCESS && k.batch > 1)
        s = coco_matmul_batched(p->lb, (int32_t)k.batch, k.sa);
    if (s == CUBLAS_STATUS_SUCCESS && k.batch > 1)
        s = coco_matmul_batched(p->lc, (int32_t)k.batch, k.sc);
    if (s != CUBLAS_STATUS_SUCCESS) {
        coco_matmul_plan_free(p);
        return s;
    }
    if (!pin || !coco_matmul_pin(ctx, p, pin))
        coco_matmul_heuristic(ctx, p);
    return CUBLAS_STATUS_SUCCESS;
}

// The key of the whole product a chunk of rows (k.whole) takes its
// algorithm from: the key of that product as one call of one batch.
static CocoMatmulKey coco_matmul_whole_key(const CocoMatmulKey &k)
{
    CocoMatmulKey w = k;
    w.M = k.whole;
    w.sa = k.whole * k.K;
    w.sb = 0;
    w.sc = k.whole * k.N;
    w.whole = 0;
    return w;
}

// The plan of key k: kept, or made now (the oldest one given up when all
// COCO_MATMUL_PLANS are taken); a chunk of rows' after its whole product's,
// whose algorithm it takes. NULL with *status on a cuBLASLt error.
static CocoMatmulPlan *coco_matmul_plan(const coco_cuda_ctx *ctx, const CocoMatmulKey &k,
                                        cublasStatus_t *status)
{
    static CocoMatmulPlan plans[COCO_MATMUL_PLANS];
    static int used, next;
    for (int i = 0; i < used; i++)
        if (coco_matmul_same(plans[i].key, k))
            return &plans[i];
    cublasLtMatmulAlgo_t pin = {};
    int pinned = 0;
    if (k.whole > 0) { // the whole product's algorithm, copied before any plan is given up
        const CocoMatmulPlan *w = coco_matmul_plan(ctx, coco_matmul_whole_key(k), status);
        if (!w)
            return NULL;
        pin = w->algo;
        pinned = w->has_algo;
    }
    int at = used < COCO_MATMUL_PLANS ? used++ : next++ % COCO_MATMUL_PLANS;
    if (plans[at].op)
        coco_matmul_plan_free(&plans[at]);
    *status = coco_matmul_plan_make(ctx, k, &plans[at], pinned ? &pin : NULL);
    if (*status != CUBLAS_STATUS_SUCCESS) {
        if (at == used - 1)
            used--;
        return NULL;
    }
    return &plans[at];
}

// The product of key k (A, B, C at these addresses) on `stream`.
static int coco_matmul_run(coco_cuda_ctx *ctx, int line, const CocoMatmulKey &k, const void *A,
                           const void *B, void *Cm, cudaStream_t stream)
{
    float f1 = 1, f0 = 0;
    double d1 = 1, d0 = 0;
    const void *one = k.t == COCO_FP64 ? (const void *)&d1 : (const void *)&f1;
    const void *zero = k.t == COCO_FP64 ? (const void *)&d0 : (const void *)&f0;
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    CocoMatmulPlan *p = coco_matmul_plan(ctx, k, &s);
    if (p)
        s = cublasLtMatmul((cublasLtHandle_t)ctx->lt, p->op, one, B, p->la, A, p->lb, zero, Cm,
                           p->lc, Cm, p->lc, p->has_algo ? &p->algo : NULL, ctx->lt_workspace,
                           ctx->lt_workspace_bytes, stream);
    if (s != CUBLAS_STATUS_SUCCESS)
        COCO_FAIL(ctx, "MatMul", line, "cublasLtMatmul (M=%ld N=%ld K=%ld batch=%ld): status %d",
                  k.M, k.N, k.K, k.batch, (int)s);
    return 0;
}

// The largest power of two up to 256 dividing `bits`.
static inline int coco_matmul_align_of(size_t bits)
{
    bits |= 256;
    return (int)(bits & (~bits + 1));
}

// C = A * B on stream `stream`: `batch` products, A, B and C of product j
// at j * strideA, j * strideB (0: one B for all), j * strideC elements;
// sms > 0 asks cuBLASLt to use that many SMs; ta, tb: A, B stored
// transposed.
static int coco_matmul_op(coco_cuda_ctx *ctx, int line, int t, const void *A, int ta,
                          const void *B, int tb, void *Cm, long M, long N, long K, long batch,
                          long strideA, long strideB, long strideC, int sms, cudaStream_t stream)
{
    CocoMatmulKey k = {t, sms, coco_matmul_align_of((size_t)A | (size_t)B | (size_t)Cm), M, N, K,
                       batch, strideA, strideB, strideC, ta, tb, 0};
    return coco_matmul_run(ctx, line, k, A, B, Cm, stream);
}

// The alignment every chunk of rows of a product keeps: A and C at any row
// (K and N elements of es bytes a row), B, and `other` (where the chunks
// also read A's rows: coco_matmul_rows).
static inline int coco_matmul_rows_align(const void *A, const void *B, const void *Cm,
                                         const void *other, long K, long N, long es)
{
    return coco_matmul_align_of((size_t)A | (size_t)B | (size_t)Cm | (size_t)other |
                                (size_t)(K * es) | (size_t)(N * es));
}

// Rows of C = A * B (one batch, A as it lies, B stored [N][K] where tb):
// `rows` of them, A and C given at the first, by the algorithm of the whole
// product of `whole` rows (the file's top says why) with `align`
// (coco_matmul_rows_align) and `sms` (0: all), on `stream`. No mark: the
// overlaps' chunks make one step (src/gen/emit_overlap_blocks.c).
static int coco_matmul_rows(coco_cuda_ctx *ctx, int line, int t, const void *A, const void *B,
                            int tb, void *Cm, long rows, long N, long K, long whole, int align,
                            int sms, cudaStream_t stream)
{
    CocoMatmulKey k = {t, sms, align, rows, N, K, 1, rows * K, 0, rows * N, 0, tb, whole};
    return coco_matmul_run(ctx, line, k, A, B, Cm, stream);
}

// The same with both operands as they lie.
static int coco_matmul_on(coco_cuda_ctx *ctx, int line, int t, const void *A, const void *B,
                          void *Cm, long M, long N, long K, long batch, long strideA,
                          long strideB, long strideC, int sms, cudaStream_t stream)
{
    return coco_matmul_op(ctx, line, t, A, 0, B, 0, Cm, M, N, K, batch, strideA, strideB,
                          strideC, sms, stream);
}

// The program's MatMul of operands read transposed where ta, tb (a
// Transpose read in place): contiguous batches of A and C, on ctx->stream.
static int coco_matmul_t(coco_cuda_ctx *ctx, int line, int t, const void *A, int ta,
                         const void *B, int tb, void *Cm, long M, long N, long K, long batch,
                         long strideB)
{
    if (coco_matmul_op(ctx, line, t, A, ta, B, tb, Cm, M, N, K, batch, M * K, strideB, M * N, 0,
                       (cudaStream_t)ctx->stream))
        return 1;
    COCO_MARK(ctx, COCO_MARK_CUBLAS, "MatMul", line, "cublasLtMatmul");
    return 0;
}

// The program's MatMul: contiguous batches of A and C, on ctx->stream.
static int coco_matmul(coco_cuda_ctx *ctx, int line, int t, const void *A, const void *B,
                       void *Cm, long M, long N, long K, long batch, long strideB)
{
    if (coco_matmul_on(ctx, line, t, A, B, Cm, M, N, K, batch, M * K, strideB, M * N, 0,
                       (cudaStream_t)ctx->stream))
        return 1;
    COCO_MARK(ctx, COCO_MARK_CUBLAS, "MatMul", line, "cublasLtMatmul");
    return 0;
}

#endif

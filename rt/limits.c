/* limits.c: what one GPU of this machine can do, for the roofline columns
 * of the report: the bandwidth of a large device-to-device copy (1 GiB,
 * cudaMemcpyAsync; bytes read plus bytes written per second), of a copy to
 * the next GPU when there are two or more (cudaMemcpyPeerAsync, 1 GiB; bytes
 * per second, one direction), and the rate of an FP16 GEMM of 8192^3
 * through cuBLASLt with FP32 accumulation (coconet's MatMul's own call),
 * each the best of LIMIT_RUNS after a warm-up run. The launcher caches the
 * figures by the key machine_key gives (src/cuda/cuda_rank.c); nothing here
 * is kept. Called before the rank opens its communicators. */
#include "rt_internal.h"

#include <stdio.h>
#include <string.h>

enum { LIMIT_RUNS = 5, GEMM_N = 8192 };
#define COPY_BYTES ((size_t)1 << 30)

/* The message of a failed call in err (the caller then goes to `out`) */
static void limit_failed(char *err, size_t errlen, const char *call, const char *file, int line,
                         const char *why)
{
    snprintf(err, errlen, "%s failed at %s:%d: %s", call, file, line, why);
}
#define TRY(call) COCO_CHECK_GOTO(CUDA, call, #call, out, limit_failed, err, errlen)
#define TRY_LT(call) COCO_CHECK_GOTO(LT, call, #call, out, limit_failed, err, errlen)

static int device_of(int local_rank, int *dev, int *count, char *err, size_t errlen)
{
    cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess || *count < 1) {
        snprintf(err, errlen, "no GPU to measure: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
        return -1;
    }
    *dev = local_rank % *count;
    return 0;
}

int rt_machine_key(int local_rank, char *key, size_t keylen, char *err, size_t errlen)
{
    int dev, count, driver = 0, runtime = 0, rc = -1;
    struct cudaDeviceProp prop;
    if (device_of(local_rank, &dev, &count, err, errlen))
        return -1;
    TRY(cudaGetDeviceProperties(&prop, dev));
    TRY(cudaDriverGetVersion(&driver));
    TRY(cudaRuntimeGetVersion(&runtime));
    char uuid[40];
    for (int i = 0; i < 16; i++)
        snprintf(uuid + 2 * i, sizeof uuid - 2 * (size_t)i, "%02x",
                 (unsigned char)prop.uuid.bytes[i]);
    snprintf(key, keylen, "%s uuid %s pci %04x:%02x:%02x driver %d cuda %d gpus %d", prop.name,
             uuid, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, driver, runtime, count);
    rc = 0;
out:
    return rc;
}

/* The best of LIMIT_RUNS of one copy on `st` (after a warm-up copy), in ms;
 * peer >= 0: from `src` on dev to `dst` on peer. */
static int best_copy_ms(void *dst, int peer, const void *src, int dev, cudaStream_t st,
                        float *best, char *err, size_t errlen)
{
    cudaEvent_t a = NULL, b = NULL;
    int rc = -1;
    TRY(cudaEventCreate(&a));
    TRY(cudaEventCreate(&b));
    *best = 0;
    for (int i = 0; i <= LIMIT_RUNS; i++) {
        float ms;
        TRY(cudaEventRecord(a, st));
        if (peer >= 0)
            TRY(cudaMemcpyPeerAsync(dst, peer, src, dev, COPY_BYTES, st));
        else
            TRY(cudaMemcpyAsync(dst, src, COPY_BYTES, cudaMemcpyDeviceToDevice, st));
        TRY(cudaEventRecord(b, st));
        TRY(cudaEventSynchronize(b));
        TRY(cudaEventElapsedTime(&ms, a, b));
        if (i > 0 && (*best == 0 || ms < *best))
            *best = ms;
    }
    rc = 0;
out:
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    return rc;
}

static int measure_copy(int dev, double *gbs, char *err, size_t errlen)
{
    void *src = NULL, *dst = NULL;
    int rc = -1;
    float ms;
    TRY(cudaSetDevice(dev));
    TRY(cudaMalloc(&src, COPY_BYTES));
    TRY(cudaMalloc(&dst, COPY_BYTES));
    TRY(cudaMemset(src, 1, COPY_BYTES));
    if (best_copy_ms(dst, -1, src, dev, 0, &ms, err, errlen))
        goto out;
    *gbs = 2.0 * (double)COPY_BYTES / (ms * 1e-3) / 1e9; /* read and written */
    rc = 0;
out:
    if (src)
        cudaFree(src);
    if (dst)
        cudaFree(dst);
    return rc;
}

/* From dev to the next GPU; its context is made here and reset after, so
 * that the rank that owns that GPU finds it as it was. */
static int measure_peer(int dev, int count, double *gbs, char *err, size_t errlen)
{
    int peer = (dev + 1) % count, can = 0, rc = -1, enabled = 0;
    void *src = NULL, *dst = NULL;
    float ms;
    TRY(cudaDeviceCanAccessPeer(&can, dev, peer));
    TRY(cudaSetDevice(peer));
    TRY(cudaMalloc(&dst, COPY_BYTES));
    TRY(cudaSetDevice(dev));
    if (can) {
        cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
            snprintf(err, errlen, "cudaDeviceEnablePeerAccess(%d) failed: %s", peer,
                     cudaGetErrorString(e));
            goto out;
        }
        cudaGetLastError(); /* an access already enabled is no error */
        enabled = e == cudaSuccess;
    }
    TRY(cudaMalloc(&src, COPY_BYTES));
    TRY(cudaMemset(src, 1, COPY_BYTES));
    if (best_copy_ms(dst, peer, src, dev, 0, &ms, err, errlen))
        goto out;
    *gbs = (double)COPY_BYTES / (ms * 1e-3) / 1e9;
    rc = 0;
out:
    cudaSetDevice(dev);
    if (src)
        cudaFree(src);
    if (enabled)
        cudaDeviceDisablePeerAccess(peer);
    if (dst) {
        cudaSetDevice(peer);
        cudaFree(dst);
        cudaDeviceReset();
        cudaSetDevice(dev);
    }
    return rc;
}

typedef struct {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t layout;
    void *a, *b, *c, *work;
} Gemm;

static int gemm_setup(Gemm *g, char *err, size_t errlen)
{
    size_t bytes = (size_t)GEMM_N * GEMM_N * 2;
    int rc = -1;
    TRY(cudaMalloc(&g->a, bytes));
    TRY(cudaMalloc(&g->b, bytes));
    TRY(cudaMalloc(&g->c, bytes));
    TRY(cudaMalloc(&g->work, LT_WORKSPACE));
    TRY(cudaMemset(g->a, 0x3c, bytes)); /* FP16 0x3c3c: about 1.06 */
    TRY(cudaMemset(g->b, 0x3c, bytes));
    TRY_LT(cublasLtCreate(&g->lt));
    TRY_LT(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    TRY_LT(cublasLtMatrixLayoutCreate(&g->layout, CUDA_R_16F, GEMM_N, GEMM_N, GEMM_N));
    rc = 0;
out:
    return rc;
}

static void gemm_free(Gemm *g)
{
    if (g->layout)
        cublasLtMatrixLayoutDestroy(g->layout);
    if (g->op)
        cublasLtMatmulDescDestroy(g->op);
    if (g->lt)
        cublasLtDestroy(g->lt);
    void *bufs[] = {g->a, g->b, g->c, g->work};
    for (int i = 0; i < 4; i++)
        if (bufs[i])
            cudaFree(bufs[i]);
}

static int gemm_once(Gemm *g, char *err, size_t errlen)
{
    float one = 1, zero = 0;
    int rc = -1;
    TRY_LT(cublasLtMatmul(g->lt, g->op, &one, g->a, g->layout, g->b, g->layout, &zero, g->c,
                          g->layout, g->c, g->layout, NULL, g->work, LT_WORKSPACE, 0));
    rc = 0;
out:
    return rc;
}

static int measure_gemm(int dev, double *tflops, char *err, size_t errlen)
{
    Gemm g;
    memset(&g, 0, sizeof g);
    cudaEvent_t a = NULL, b = NULL;
    int rc = -1;
    float best = 0;
    TRY(cudaSetDevice(dev));
    if (gemm_setup(&g, err, errlen))
        goto out;
    TRY(cudaEventCreate(&a));
    TRY(cudaEventCreate(&b));
    for (int i = 0; i <= LIMIT_RUNS; i++) {
        float ms;
        TRY(cudaEventRecord(a, 0));
        if (gemm_once(&g, err, errlen))
            goto out;
        TRY(cudaEventRecord(b, 0));
        TRY(cudaEventSynchronize(b));
        TRY(cudaEventElapsedTime(&ms, a, b));
        if (i > 0 && (best == 0 || ms < best))
            best = ms;
    }
    *tflops = 2.0 * GEMM_N * (double)GEMM_N * GEMM_N / (best * 1e-3) / 1e12;
    rc = 0;
out:
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    gemm_free(&g);
    return rc;
}

int rt_measure_limits(int local_rank, CocoRtLimits *l, char *err, size_t errlen)
{
    int dev, count;
    memset(l, 0, sizeof *l);
    if (device_of(local_rank, &dev, &count, err, errlen) ||
        measure_copy(dev, &l->copy_gbs, err, errlen) ||
        (count > 1 && measure_peer(dev, count, &l->peer_gbs, err, errlen)) ||
        measure_gemm(dev, &l->gemm_tflops, err, errlen))
        return -1;
    return 0;
}

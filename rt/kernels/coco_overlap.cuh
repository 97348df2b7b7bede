// coco_overlap.cuh: the host side of overlap(MatMul, FusedAllReduce) chunk
// by chunk (src/cuda/emit_overlap.c says how the chunks and the kernels
// meet), included by coco_device.cuh after coco_lsa.cuh.
#ifndef COCO_OVERLAP_CUH
#define COCO_OVERLAP_CUH

// The default is no chunks: on 4 x H100 every chunk count from 2 to 8 was
// slower than none for the paper's layers (doc/gpu.md, Overlap).
enum { COCO_OVERLAP_DEFAULT_CHUNKS = 1, COCO_OVERLAP_MAX_EVENTS = 65 };

// The chunks of each rank's part: ctx's knob (default 1), at most the
// part's rows; 1 (no chunks) unless the MatMul's M rows of N part the
// tensor the way the kernels do: P parts of M / P whole rows (cs elements
// each, nall in all).
static inline int coco_overlap_chunks(const coco_cuda_ctx *ctx, long M, long N, long P, long cs,
                                      long nall)
{
    long want = ctx->overlap_chunks > 0 ? ctx->overlap_chunks : COCO_OVERLAP_DEFAULT_CHUNKS;
    if (want < 2 || M <= 0 || N <= 0 || M % P || cs != M / P * N || nall != M * N)
        return 1;
    long rows = M / P;
    return (int)(want < rows ? want : rows);
}

// n events of this process (kept for its life; n at most
// COCO_OVERLAP_MAX_EVENTS), or NULL with ctx->err set.
static inline cudaEvent_t *coco_overlap_events(coco_cuda_ctx *ctx, int n)
{
    static cudaEvent_t ev[COCO_OVERLAP_MAX_EVENTS];
    static int made;
    if (n > COCO_OVERLAP_MAX_EVENTS) {
        snprintf(ctx->err, ctx->errlen, "rank %d: overlap: %d chunks, at most %d", ctx->rank,
                 n - 1, COCO_OVERLAP_MAX_EVENTS - 1);
        return NULL;
    }
    for (; made < n; made++) {
        cudaError_t e = cudaEventCreateWithFlags(&ev[made], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            snprintf(ctx->err, ctx->errlen, "rank %d: overlap: cudaEventCreateWithFlags: %s",
                     ctx->rank, cudaGetErrorString(e));
            return NULL;
        }
    }
    return ev;
}

// The SMs of this process's GPU (asked once).
static inline int coco_overlap_device_sms(void)
{
    static int sms;
    if (!sms) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            sms = -1;
    }
    return sms;
}

// The MatMul's SM target: all but ctx->overlap_sms (0: no target).
static inline int coco_overlap_matmul_sms(const coco_cuda_ctx *ctx)
{
    int all = coco_overlap_device_sms();
    return ctx->overlap_sms > 0 && all > ctx->overlap_sms ? all - ctx->overlap_sms : 0;
}

// The chunks' kernels' grid: two blocks an SM left to them (the kernels'
// __launch_bounds__), at most the whole part's grid. The same on every rank.
static inline dim3 coco_overlap_grid(const coco_cuda_ctx *ctx, dim3 grid)
{
    if (ctx->overlap_sms > 0 && (unsigned)(2 * ctx->overlap_sms) < grid.x)
        grid.x = (unsigned)(2 * ctx->overlap_sms);
    return grid;
}

#endif

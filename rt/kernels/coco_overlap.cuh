// coco_overlap.cuh: the host side of overlap(MatMul, FusedAllReduce) chunk
// by chunk (src/gen/emit_overlap.c says how the chunks and the kernels
// meet), and of overlap(AllGather, MatMul) and overlap(MatMul,
// ReduceScatter) by the collective's blocks (src/gen/emit_overlap_blocks.c),
// included by coco_device.cuh after coco_lsa.cuh.
#ifndef COCO_OVERLAP_CUH
#define COCO_OVERLAP_CUH

// The flags' count bounds the chunks (at most 64). The default count:
// coco_overlap_default_chunks (include/coconet_cuda.h).
enum { COCO_OVERLAP_MAX_CHUNKS = 64 };

// The chunks of each rank's part: ctx's knob, else the default, at
// most the part's rows; 1 (no chunks) unless the MatMul's M rows of N (K
// deep, es-byte elements) part the tensor the way the kernels do: P parts
// of M / P whole rows (cs elements each, nall in all).
static inline int coco_overlap_chunks(const coco_cuda_ctx *ctx, long M, long N, long K, long es,
                                      long P, long cs, long nall)
{
    long want =
        ctx->overlap_chunks > 0 ? ctx->overlap_chunks : coco_overlap_default_chunks(M, N, K, P, es);
    if (want < 2 || M <= 0 || N <= 0 || M % P || cs != M / P * N || nall != M * N)
        return 1;
    long rows = M / P, most = want < COCO_OVERLAP_MAX_CHUNKS ? want : COCO_OVERLAP_MAX_CHUNKS;
    return (int)(most < rows ? most : rows);
}

// Which elements of each part a fused kernel takes, and when: chunks
// [from, to) of `count`, chunk c being rows [rows*c/count, rows*(c+1)/count)
// of the part's `rows` rows of `cols` elements; with `flag`, the kernel
// waits before chunk c until flag[c] is set (the MatMul's chunk c is
// written: coco_chunk_signal); with count > 1 it then meets the peers at
// its barrier (without `flag`: a launch after the MatMul, whose chunks its
// first barrier already found written on every rank).
struct CocoChunks {
    int count;
    long rows, cols;
    const unsigned *flag;
    int from, to;
};

// The whole part at once, no waits.
static inline CocoChunks coco_chunks_all(long cs)
{
    CocoChunks c = {1, 1, cs, NULL, 0, 1};
    return c;
}

__device__ __forceinline__ long coco_chunk_lo(const CocoChunks &ck, int c)
{
    return ck.rows * c / ck.count * ck.cols;
}

// Thread 0 of the block waits for chunk c's flag, bounded: after
// COCO_CHUNK_WAIT_NS it reports and traps (the run fails with a launch
// error, the runtime names the rank) rather than spin forever.
#define COCO_CHUNK_WAIT_NS 20000000000ull
__device__ __forceinline__ void coco_chunk_wait(const CocoChunks &ck, int c)
{
    if (threadIdx.x == 0) {
        const unsigned long long t0 = coco_globaltimer_ns();
        while (*(const volatile unsigned *)&ck.flag[c] == 0) {
            __nanosleep(200);
            if (coco_globaltimer_ns() - t0 > COCO_CHUNK_WAIT_NS) {
                printf("coconet: block %d waited 20 s for MatMul chunk %d: trap\n", blockIdx.x, c);
                __trap();
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// Stream-ordered after chunk c of the MatMul: its flag.
static __global__ void coco_chunk_signal(unsigned *flag, int c)
{
    __threadfence();
    *(volatile unsigned *)&flag[c] = 1;
    __threadfence();
}

// Two events of this process (kept for its life), or NULL with ctx->err.
static inline cudaEvent_t *coco_overlap_events(coco_cuda_ctx *ctx)
{
    static cudaEvent_t ev[2];
    static int made;
    for (; made < 2; made++) {
        cudaError_t e = cudaEventCreateWithFlags(&ev[made], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            snprintf(ctx->err, ctx->errlen, "rank %d: overlap: cudaEventCreateWithFlags: %s",
                     ctx->rank, cudaGetErrorString(e));
            return NULL;
        }
    }
    return ev;
}

// The chunks' flags of this process (COCO_OVERLAP_MAX_CHUNKS, made once
// and kept), or NULL with ctx->err. Each overlapped launch clears its
// chunks' flags on its stream first (emit_overlap.c), so that a launch
// replayed from a CUDA graph waits as the first did.
static inline unsigned *coco_overlap_flags(coco_cuda_ctx *ctx)
{
    static unsigned *flags;
    if (!flags) {
        cudaError_t e = cudaMalloc((void **)&flags, COCO_OVERLAP_MAX_CHUNKS * sizeof(unsigned));
        if (e == cudaSuccess)
            e = cudaMemset(flags, 0, COCO_OVERLAP_MAX_CHUNKS * sizeof(unsigned));
        if (e != cudaSuccess) {
            flags = NULL;
            snprintf(ctx->err, ctx->errlen, "rank %d: overlap: the chunks' flags: %s", ctx->rank,
                     cudaGetErrorString(e));
            return NULL;
        }
    }
    return flags;
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

// The SMs the chunked kernels keep while the MatMul runs: ctx's knob, else
// 32; always fewer than the GPU has, so that the MatMul (and each chunk's
// signal) finds SMs while the kernels wait: never a deadlock.
static inline int coco_overlap_comm_sms(const coco_cuda_ctx *ctx)
{
    int all = coco_overlap_device_sms(), want = ctx->overlap_sms > 0 ? ctx->overlap_sms : 32;
    if (all > 0 && want > all / 2)
        want = all / 2;
    return want > 0 ? want : 1;
}

// The MatMul's SM target: the rest.
static inline int coco_overlap_matmul_sms(const coco_cuda_ctx *ctx)
{
    int all = coco_overlap_device_sms();
    return all > 0 ? all - coco_overlap_comm_sms(ctx) : 0;
}

// The chunked kernels' grid: two blocks an SM they keep (the kernels'
// __launch_bounds__), at most the whole part's grid. The same on every rank.
static inline dim3 coco_overlap_grid(const coco_cuda_ctx *ctx, dim3 grid)
{
    unsigned most = 2u * (unsigned)coco_overlap_comm_sms(ctx);
    if (most < grid.x)
        grid.x = most;
    return grid;
}

// ---- overlap(AllGather, MatMul), overlap(MatMul, ReduceScatter): the
// MatMul's rows by the collective's blocks (src/gen/emit_overlap_blocks.c) ----

// The chunks of each rank's block of MatMul rows under ctx's knob
// (coco_overlap_block_count, include/coconet_cuda.h: 0 for none). Every
// argument is the same on every rank, and so is the count: the ranks issue
// the same NCCL calls.
static inline int coco_overlap_block_chunks(const coco_cuda_ctx *ctx, long P, long most, long M,
                                            long width)
{
    return coco_overlap_block_count(ctx->overlap_chunks, P, most, M, width);
}

// Rows [*lo, *hi) of chunk c of `sub` of block q: block q of a dimension of
// n indices over P ranks (language.md 6), rpi MatMul rows an index; *first,
// the block's first row.
static inline void coco_block_rows(long n, long P, long q, long rpi, int sub, int c, long *first,
                                   long *lo, long *hi)
{
    long len = coco_part_len(n, P, q) * rpi;
    *first = coco_part_lo(n, P, q) * rpi;
    *lo = *first + len * c / sub;
    *hi = *first + len * (c + 1) / sub;
}

// n events of this process (made as needed, kept for its life), or NULL
// with ctx->err.
static inline cudaEvent_t *coco_overlap_block_events(coco_cuda_ctx *ctx, int n)
{
    static cudaEvent_t ev[COCO_OVERLAP_MAX_BLOCK_CHUNKS + 2];
    static int made;
    if (n > COCO_OVERLAP_MAX_BLOCK_CHUNKS + 2) {
        snprintf(ctx->err, ctx->errlen, "rank %d: overlap: %d events asked, %d at most", ctx->rank,
                 n, COCO_OVERLAP_MAX_BLOCK_CHUNKS + 2);
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

// The overlapped MatMul's SM target: over P > 1 ranks what the collective's
// SMs leave (coco_overlap_comm_sms: NCCL's kernels find SMs while the
// MatMul runs); on one rank all (0), as the MatMul alone takes.
static inline int coco_overlap_block_sms(const coco_cuda_ctx *ctx, long P)
{
    return P > 1 ? coco_overlap_matmul_sms(ctx) : 0;
}

#endif

// coco_rows.cuh: helpers of the row kernels that coconet generates for
// computations holding row reductions (Norm or ReduceTensor along the last
// dimension, with Keep): a FusedAllReduce whose slices are whole rows, over
// the peers' memory (coco_lsa.cuh), and a fused computation's kernel
// (src/gen/emit_rows.c says what they compute in which order).
//
// A row (the H elements of the last dimension) goes to a group of W warps,
// each thread R vectors of V consecutive elements, held in registers:
// vector k of thread t of the group is elements (k * 32W + t) * V to + V - 1
// of the row. The host takes the first shape (R, W) of COCO_ROWS_SHAPES
// (include/coconet_cuda.h: the least W, then the least R) that holds the
// row (a block of 256 threads: 8 / W rows, or one row of W warps); R and W
// are the kernel's template parameters, so that a vector's place is a
// constant offset. A longer row (or V = 1: a buffer not aligned for
// vectors) takes the streaming form, R = 0: each phase of the row loads its
// operands again (W warps, up to 8, stride over the row), the same
// arithmetic in the same order.
//
// A row reduction is deterministic, its order fixed by H, V, R and W: each
// thread folds its elements in double, vector by vector in increasing k,
// then v; the warp folds its lanes' values by a butterfly over the lane
// masks 16, 8, 4, 2, 1, each pair folded lower lane first (so that every
// lane ends with the same bits); then every thread folds the W warps'
// values in warp order from shared memory. A sum of FP16 values in double
// is exact whatever the order for rows of up to 8192 elements (every FP16
// value is a multiple of 2^-24 below 2^16), so there it is the CPU's bit
// for bit; max and min are too (but for the sign of a zero maximum);
// other sums differ from the CPU's sequential fold by rounding in double
// at most, within the documented tolerance (doc/gpu.md, Row kernels).
#pragma once

#include <stdlib.h>
#include <string.h>

// Threads of a block of a row kernel
enum { COCO_ROWS_THREADS = 256 };
// The most warps of a row in the streaming form
enum { COCO_ROWS_MAXW = 8 };

// A row group's shape: R vectors a thread (0: the streaming form), W warps
struct CocoRowsShape {
    int r, w;
};

#define COCO_ROWS_SHAPE_ITEM(r, w) {r, w},

// The streaming form's warps for rows of H elements: one for each 8 vectors
// a lane, at most COCO_ROWS_MAXW
__host__ __device__ inline int coco_rows_stream_warps(long H, int V)
{
    const long w = (H + 32L * 8 * V - 1) / (32L * 8 * V);
    return w < 1 ? 1 : w > COCO_ROWS_MAXW ? COCO_ROWS_MAXW : (int)w;
}

// COCONET_ROWS_SHAPE=R,W (for measurements): that shape of
// COCO_ROWS_SHAPES wherever it holds the row, or "stream": the streaming
// form; read once. {0, 0} when unset or another value.
static inline CocoRowsShape coco_rows_asked(void)
{
    static CocoRowsShape asked = {-1, -1};
    if (asked.r < 0) {
        const char *s = getenv("COCONET_ROWS_SHAPE");
        asked.r = asked.w = 0;
        if (s && !strcmp(s, "stream"))
            asked.w = -1;
        else if (s && sscanf(s, "%d,%d", &asked.r, &asked.w) != 2)
            asked.r = asked.w = 0;
    }
    return asked;
}

// The shape for rows of H elements, V a vector: the first of
// COCO_ROWS_SHAPES that holds the row (or the one asked for), else (or
// V = 1) the streaming form
static inline CocoRowsShape coco_rows_shape(long H, int V)
{
    static const CocoRowsShape set[] = {COCO_ROWS_SHAPES(COCO_ROWS_SHAPE_ITEM)};
    const CocoRowsShape asked = coco_rows_asked();
    for (int k = 0; V > 1 && asked.w >= 0 && k < (int)(sizeof set / sizeof *set); k++)
        if (asked.r && set[k].r == asked.r && set[k].w == asked.w &&
            32L * set[k].w * set[k].r * V >= H)
            return set[k];
    for (int k = 0; V > 1 && asked.w >= 0 && k < (int)(sizeof set / sizeof *set); k++)
        if (32L * set[k].w * set[k].r * V >= H)
            return set[k];
    const CocoRowsShape stream = {0, coco_rows_stream_warps(H, V)};
    return stream;
}

// Rows a block: 8 / W of them, or one row of W warps
__host__ __device__ inline int coco_rows_per_block(int W)
{
    return W >= COCO_ROWS_THREADS / 32 ? 1 : COCO_ROWS_THREADS / 32 / W;
}

static inline dim3 coco_rows_block(long H, int V)
{
    const int W = coco_rows_shape(H, V).w;
    return dim3((unsigned)(32 * W * coco_rows_per_block(W)));
}

// Blocks for `rows` rows, each block taking its rows (a block at least, at
// most `most`; with fewer, the blocks stride over the rows)
static inline dim3 coco_rows_grid(long rows, long H, int V, long most)
{
    const long per = coco_rows_per_block(coco_rows_shape(H, V).w);
    const long want = (rows + per - 1) / per;
    return dim3((unsigned)(want < 1 ? 1 : want > most ? most : want));
}

// A FusedAllReduce's grid: over a part's rows (cs / H: the same on every
// rank, so that every rank syncs each block's barrier equally often, and
// from vmax, not V, for the same reason), at most one block a barrier
// (coco_lsa_grid's bound) where there are peers, else no bound but the
// knob's (ctx->fused_blocks).
static inline void coco_rows_lsa_grid(const coco_cuda_ctx *ctx, long cs, long H, int vmax,
                                      dim3 *grid, dim3 *block)
{
    long most = 65535;
    if (ctx->nranks > 1)
        most = ctx->lsa_blocks < COCO_LSA_MAXBLOCKS ? ctx->lsa_blocks : COCO_LSA_MAXBLOCKS;
    if (ctx->fused_blocks > 0 && ctx->fused_blocks < most)
        most = ctx->fused_blocks;
    *grid = coco_rows_grid(H > 0 ? cs / H : 0, H, vmax, most);
    *block = coco_rows_block(H, vmax);
}

// The rows of shape s: its elements but along the last dimension
__host__ __device__ inline long coco_rows_count(const CocoShape &s)
{
    long c = 1;
    for (int k = 0; k + 1 < s.nd; k++)
        c *= s.dim[k];
    return c;
}

// A row reduction's start: the identity of its fold (-0 for sums: -0 + x
// is x for every x, so the fold equals one starting from the first element)
__device__ __forceinline__ double coco_rows_identity(int op)
{
    return op == COCO_SUM || op == COCO_SUMSQ ? -0.0 : coco_red_identity(op);
}

// The fold (op, a combining operation of coco_red_step) of the values `a`
// of a row's threads (W warps), every thread getting it (the order: the top
// of this file). Every thread of the block calls it, W > 1 syncing the
// block (sh: COCO_ROWS_THREADS / 32 doubles of shared memory).
__device__ __forceinline__ double coco_rows_fold(int op, double a, int W, double *sh)
{
    const int lane = (int)threadIdx.x & 31;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
        const double b = __shfl_xor_sync(0xffffffffu, a, m);
        a = (lane & m) ? coco_red_step(op, b, a) : coco_red_step(op, a, b);
    }
    if (W == 1)
        return a;
    const int warp = (int)threadIdx.x >> 5, first = warp - warp % W;
    __syncthreads(); /* the last fold's values read */
    if (lane == 0)
        sh[warp] = a;
    __syncthreads();
    a = sh[first];
    for (int j = 1; j < W; j++)
        a = coco_red_step(op, a, sh[first + j]);
    return a;
}

// A row kernel's FP16 and BF16 registers (src/gen/emit_value.c): their
// own type; as a float or a double, exactly; stored.
__device__ __forceinline__ float coco_f32(__half x)
{
    return __half2float(x);
}

__device__ __forceinline__ float coco_f32(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}

// As a double: FP16 in one conversion (cuda_fp16's are inline assembly, which
// the compiler does not fold: through float it took two)
__device__ __forceinline__ double coco_f64(__half x)
{
#ifdef __CUDA_ARCH__
    double d;
    asm("cvt.f64.f16 %0, %1;" : "=d"(d) : "h"(__half_as_ushort(x)));
    return d;
#else
    return (double)__half2float(x);
#endif
}

__device__ __forceinline__ double coco_f64(__nv_bfloat16 x)
{
    return (double)__bfloat162float(x);
}

// x rounded once to T (FP16 or BF16)
template <int T> __device__ __forceinline__ CocoRaw<T> coco_raw16(float x)
{
    if constexpr (T == COCO_FP16)
        return __float2half_rn(x);
    else
        return __float2bfloat16_rn(x);
}

__device__ __forceinline__ void coco_st(void *p, long i, int, __half x)
{
    ((__half *)p)[i] = x;
}

__device__ __forceinline__ void coco_st(void *p, long i, int, __nv_bfloat16 x)
{
    ((__nv_bfloat16 *)p)[i] = x;
}

// x (exact in double) rounded once to type T, as stored
template <int T> __device__ __forceinline__ CocoRaw<T> coco_rows_raw(double x)
{
    if constexpr (T == COCO_FP16)
        return __double2half(x);
    else if constexpr (T == COCO_BF16)
        return __double2bfloat16(x);
    else if constexpr (T == COCO_FP32)
        return __double2float_rn(x);
    else
        return x;
}

// A vector of V elements of T held across a row's phases, as 32-bit words
// (uint32_t w[CocoRowWords<V, T>::N], 16-byte aligned): two 16-bit
// elements a word. The kernels touch the words only by whole-vector
// copies (coco_rows_ld, coco_rows_pack, coco_rows_unpack) and read the
// elements from a vector's raw copy, so that the compiler keeps the words
// packed (an array of 16-bit elements took a register an element).
template <int V, int T> struct CocoRowWords {
    enum { N = (V * (int)sizeof(CocoRaw<T>) + 3) / 4 };
};

// The V elements of T at p + i0 into dst (words or a raw vector): one load,
// the vector whole and aligned (a row kernel's vectors are: V divides H)
template <int V, int T> __device__ __forceinline__ void coco_rows_ld(const void *p, long i0, void *dst)
{
    coco_copy_bytes<V * (int)sizeof(CocoRaw<T>)>(dst, (const CocoRaw<T> *)p + i0);
}

template <int V, int T>
__device__ __forceinline__ void coco_rows_unpack(const uint32_t *w, CocoRaw<T> *raw)
{
    coco_copy_bytes<V * (int)sizeof(CocoRaw<T>)>(raw, w);
}

template <int V, int T> __device__ __forceinline__ void coco_rows_pack(uint32_t *w, const CocoRaw<T> *raw)
{
    coco_copy_bytes<V * (int)sizeof(CocoRaw<T>)>(w, raw);
}

// Words w = the reduction (op) over the P peers, in rank order, of elements
// base + i0 .. + V - 1 of the window buffer at offset off, each rounded
// once to T (coco_lsa_reduce); one rank's own elements as they are.
template <int V, int T, int P>
__device__ __forceinline__ void coco_rows_reduce(ncclWindow_t win, size_t off, long base, long i0,
                                                 long n, int op, uint32_t *w)
{
    if constexpr (P == 1) {
        coco_rows_ld<V, T>((const CocoRaw<T> *)coco_lsa_ptr<1>(win, off, 0) + base, i0, w);
    } else {
        double acc[V];
        alignas(16) CocoRaw<T> raw[V];
        coco_lsa_reduce<V, T, P, 0>(win, off, base, i0, n, op, acc);
#pragma unroll
        for (int v = 0; v < V; v++)
            raw[v] = coco_rows_raw<T>(acc[v]);
        coco_rows_pack<V, T>(w, raw);
    }
}

// The V elements of raw at p + i0, or at window offset off + base + i0 in
// every peer: a whole aligned vector, one store each
template <int V, int T> __device__ __forceinline__ void coco_rows_st(void *p, long i0, const CocoRaw<T> *raw)
{
    coco_store_bytes<V * (int)sizeof(CocoRaw<T>)>((CocoRaw<T> *)p + i0, raw);
}

template <int V, int T, int P>
__device__ __forceinline__ void coco_rows_store(ncclWindow_t win, size_t off, long base, long i0,
                                                const CocoRaw<T> *raw)
{
#pragma unroll
    for (int q = 0; q < P; q++)
        coco_rows_st<V, T>((CocoRaw<T> *)coco_lsa_ptr<P>(win, off, q) + base, i0, raw);
}

// Element i of the window buffer at offset off = x (a value of T), in every
// peer: a row's value gathered
template <int T, int P>
__device__ __forceinline__ void coco_rows_store_one(ncclWindow_t win, size_t off, long i, double x)
{
    const CocoRaw<T> r = coco_rows_raw<T>(x);
#pragma unroll
    for (int q = 0; q < P; q++)
        ((CocoRaw<T> *)coco_lsa_ptr<P>(win, off, q))[i] = r;
}

// coco_vec.cuh: vector loads and stores for generated elementwise kernels.
// A thread handles V consecutive elements: coco_ldv reads them with 16-byte
// (or narrower) memory operations into doubles, coco_stv rounds and writes
// them back. Both fall back to single elements at the tail (the last V
// elements when n is not a multiple of V). The host picks V with
// coco_pick_vec: the widest that every flat buffer's alignment allows.
#pragma once

template <int T> struct CocoElem;
template <> struct CocoElem<COCO_FP16> { typedef __half type; };
template <> struct CocoElem<COCO_BF16> { typedef __nv_bfloat16 type; };
template <> struct CocoElem<COCO_FP32> { typedef float type; };
template <> struct CocoElem<COCO_FP64> { typedef double type; };

// Copies B bytes (B a power of two) between aligned addresses, in the widest
// operations available (16 bytes at most).
template <int B> __device__ __forceinline__ void coco_copy_bytes(void *dst, const void *src)
{
    if constexpr (B >= 16) {
#pragma unroll
        for (int k = 0; k < B / 16; k++)
            ((uint4 *)dst)[k] = ((const uint4 *)src)[k];
    } else if constexpr (B == 8) {
        *(uint2 *)dst = *(const uint2 *)src;
    } else if constexpr (B == 4) {
        *(unsigned *)dst = *(const unsigned *)src;
    } else {
        *(unsigned short *)dst = *(const unsigned short *)src;
    }
}

// out[v] = element i0 + v of p (0 past n).
template <int V, int T>
__device__ __forceinline__ void coco_ldv(const void *p, long i0, long n, double *out)
{
    typedef typename CocoElem<T>::type E;
    const E *q = (const E *)p + i0;
    if (V > 1 && i0 + V <= n) {
        alignas(16) E tmp[V];
        coco_copy_bytes<V * (int)sizeof(E)>(tmp, q);
#pragma unroll
        for (int v = 0; v < V; v++)
            out[v] = coco_ld(tmp, v, T);
    } else {
#pragma unroll
        for (int v = 0; v < V; v++)
            out[v] = i0 + v < n ? coco_ld(q, v, T) : 0.0;
    }
}

// Elements i0 + v of p (those before n) = val[v], rounded to type T.
template <int V, int T>
__device__ __forceinline__ void coco_stv(void *p, long i0, long n, const double *val)
{
    typedef typename CocoElem<T>::type E;
    E *q = (E *)p + i0;
    if (V > 1 && i0 + V <= n) {
        alignas(16) E tmp[V];
#pragma unroll
        for (int v = 0; v < V; v++)
            coco_st(tmp, v, T, val[v]);
        coco_copy_bytes<V * (int)sizeof(E)>(q, tmp);
    } else {
#pragma unroll
        for (int v = 0; v < V; v++)
            if (i0 + v < n)
                coco_st(q, v, T, val[v]);
    }
}

// The widest V in {vmax, vmax/2, ..., 1} for which every buffer ptr[k] (of
// elements of size[k] bytes) is aligned for V-element vector operations
// (to V * size[k] bytes, 16 at most).
static inline int coco_pick_vec(int vmax, const void *const *ptr, const int *size, int n)
{
    int v = vmax;
    for (int k = 0; k < n && v > 1; k++)
        while (v > 1 && (uintptr_t)ptr[k] % (uintptr_t)(v * size[k] < 16 ? v * size[k] : 16))
            v /= 2;
    return v;
}

static inline dim3 coco_grid_vec(long n, int v)
{
    return coco_grid((n + v - 1) / v);
}

// coco_vec.cuh: vector loads and stores for generated elementwise kernels.
// A thread handles V consecutive elements: coco_ldv reads them with 16-byte
// (or narrower) memory operations into an array of the element type (few
// registers; kernels convert each element to double where they use it),
// coco_stv writes such an array back. Both fall back to single elements at the tail (the last V
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

// The same copy from memory through the read-only data path (ld.global.nc)
template <int B> __device__ __forceinline__ void coco_copy_bytes_ro(void *dst, const void *src)
{
    if constexpr (B >= 16) {
#pragma unroll
        for (int k = 0; k < B / 16; k++)
            ((uint4 *)dst)[k] = __ldg((const uint4 *)src + k);
    } else if constexpr (B == 8) {
        *(uint2 *)dst = __ldg((const uint2 *)src);
    } else if constexpr (B == 4) {
        *(unsigned *)dst = __ldg((const unsigned *)src);
    } else {
        *(unsigned short *)dst = __ldg((const unsigned short *)src);
    }
}

template <int T> using CocoRaw = typename CocoElem<T>::type;

// The one-element paths of the loads and stores below: raw[v] = element
// i0 + v of p (0 past n); elements i0 + v of p (those before n) = raw[v].
template <int V, int T>
__device__ __forceinline__ void coco_ld_each(const void *p, long i0, long n, CocoRaw<T> *raw)
{
    const CocoRaw<T> *q = (const CocoRaw<T> *)p + i0;
#pragma unroll
    for (int v = 0; v < V; v++)
        raw[v] = i0 + v < n ? q[v] : CocoRaw<T>();
}

template <int V, int T>
__device__ __forceinline__ void coco_st_each(void *p, long i0, long n, const CocoRaw<T> *raw)
{
    CocoRaw<T> *q = (CocoRaw<T> *)p + i0;
#pragma unroll
    for (int v = 0; v < V; v++)
        if (i0 + v < n)
            q[v] = raw[v];
}

// raw[v] = element i0 + v of p (0 past n), as stored.
template <int V, int T>
__device__ __forceinline__ void coco_ldv(const void *p, long i0, long n, CocoRaw<T> *raw)
{
    if (V > 1 && i0 + V <= n)
        coco_copy_bytes<V * (int)sizeof(CocoRaw<T>)>(raw, (const CocoRaw<T> *)p + i0);
    else
        coco_ld_each<V, T>(p, i0, n, raw);
}

// The same; RO = 1: its vectors through the read-only data path, for a
// kernel in which each element is read by the thread that may later write
// it and by no other, and that waits on nothing written while it runs (the
// one-rank elementwise form of a fused kernel, emit_lsa.c): whatever the
// non-coherent cache holds of a line, the elements a thread reads there are
// not yet written. These are the loads the elementwise kernels take
// through their __restrict__ parameters.
template <int RO, int V, int T>
__device__ __forceinline__ void coco_ldv_in(const void *p, long i0, long n, CocoRaw<T> *raw)
{
    if (RO && V > 1 && i0 + V <= n)
        coco_copy_bytes_ro<V * (int)sizeof(CocoRaw<T>)>(raw, (const CocoRaw<T> *)p + i0);
    else
        coco_ldv<V, T>(p, i0, n, raw);
}

// The same copy into memory (B a power of two, aligned), the 16- and 8-byte
// stores written out as such: for some loop shapes the compiler split
// coco_copy_bytes's into four 4-byte ones (PTX, sm_90: a one-shot
// AllReduce's stores, the push's slot stores, the scattered kernels'
// stores), which slowed the fused AllReduce (doc/design.md, The CUDA
// backend; tests/gen/split_vectors.py checks the generated kernels' PTX).
template <int B> __device__ __forceinline__ void coco_store_bytes(void *dst, const void *src)
{
    if constexpr (B >= 16) {
#pragma unroll
        for (int k = 0; k < B / 16; k++) {
            const uint4 w = ((const uint4 *)src)[k];
            asm volatile("st.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"((uint4 *)dst + k), "r"(w.x),
                         "r"(w.y), "r"(w.z), "r"(w.w)
                         : "memory");
        }
    } else if constexpr (B == 8) {
        const uint2 w = *(const uint2 *)src;
        asm volatile("st.v2.b32 [%0], {%1, %2};" ::"l"(dst), "r"(w.x), "r"(w.y) : "memory");
    } else {
        coco_copy_bytes<B>(dst, src);
    }
}

// Elements i0 + v of p (those before n) = raw[v].
template <int V, int T>
__device__ __forceinline__ void coco_stv(void *p, long i0, long n, const CocoRaw<T> *raw)
{
    if (V > 1 && i0 + V <= n)
        coco_store_bytes<V * (int)sizeof(CocoRaw<T>)>((CocoRaw<T> *)p + i0, raw);
    else
        coco_st_each<V, T>(p, i0, n, raw);
}

// coco_ldv/coco_stv at any alignment: the vector path only where p + i0 is
// aligned for it (a scattered tensor's buckets start anywhere in a member; a
// fused kernel's part-local arrays sit a shift away from its peers' vectors:
// coco_lsa_shift). The test is uniform across a warp's bucket or row.
template <int V, int T>
__device__ __forceinline__ bool coco_vec_aligned(const void *p, long i0)
{
    const int b = V * (int)sizeof(CocoRaw<T>);
    return (uintptr_t)((const CocoRaw<T> *)p + i0) % (uintptr_t)(b < 16 ? b : 16) == 0;
}

template <int V, int T>
__device__ __forceinline__ void coco_ldv_any(const void *p, long i0, long n, CocoRaw<T> *raw)
{
    if (V > 1 && coco_vec_aligned<V, T>(p, i0))
        coco_ldv<V, T>(p, i0, n, raw);
    else
        coco_ld_each<V, T>(p, i0, n, raw);
}

template <int V, int T>
__device__ __forceinline__ void coco_stv_any(void *p, long i0, long n, const CocoRaw<T> *raw)
{
    if (V > 1 && coco_vec_aligned<V, T>(p, i0))
        coco_stv<V, T>(p, i0, n, raw);
    else
        coco_st_each<V, T>(p, i0, n, raw);
}

// A broadcast operand's elements for the V linear elements from i0 under
// LIN (element i reads x at i modulo x's count m; q = i0 modulo m, V <= m):
// one vector load where they are whole and aligned in x (a bias row's
// vector), else each alone at its wrapped index; the kernels then read
// them as they read a flat operand's vector (8 loads of 2 bytes an FP16
// vector before: the pointwise chain's bias).
template <int V, int T>
__device__ __forceinline__ void coco_ld_wrapped(const void *x, long q, long m, CocoRaw<T> *raw)
{
    if (V > 1 && q + V <= m && coco_vec_aligned<V, T>(x, q)) {
        coco_copy_bytes<V * (int)sizeof(CocoRaw<T>)>(raw, (const CocoRaw<T> *)x + q);
        return;
    }
#pragma unroll
    for (int v = 0; v < V; v++)
        raw[v] = ((const CocoRaw<T> *)x)[coco_wrap(q + v, m)];
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

// coco_conv.cuh: Conv2D, included after coco_device.cuh (whose element
// types, COCO_FP16 ... COCO_FP64, and loads it uses) by the generated code of
// the programs that have a Conv2D alone (src/gen/emit_cuda.c): its kernel
// instances took most of every other program's first build. coco_conv2d,
// at the end, calls coco_conv_igemm and falls back to the direct kernel.
//
// y [N,K,OH,OW] = x [N,C,H,W] (*) w [K,C,R,S] is the matrix product
//   A [M = N*OH*OW][CRS = C*R*S]  A[m][(c*R + r)*S + s] = x[n][c][oh*stride - pad + r]
//                                                             [ow*stride - pad + s]
//                                 (0 in the padding), m = (n*OH + oh)*OW + ow,
//   B [CRS][K]                    B[kk][k] = w[k*CRS + kk]  (w as it is stored),
// y[n][k][oh][ow] = sum over kk of A[m][kk] * B[kk][k]. A is never built: a
// block of BM x BN outputs gathers its BM x BK tile of A straight from x (each
// thread one output position m, so that neighbouring threads read neighbouring
// pixels; where each kk of the tile is, (c, r, s) and its offset in an image,
// comes from a small table in shared memory that a few threads keep two tiles
// ahead, so the gather has no division and no branch) and its BK x BN tile of
// B from w into shared memory, two buffers deep (the next tile is loaded into
// registers while the current one is multiplied), and each thread (FP32,
// FP64) or warp (FP16, BF16) keeps a register tile of the sums.
//
// Arithmetic: FP16 and BF16 multiply on tensor cores (WMMA 16x16x16) with FP32
// accumulation, rounded once to the type at the end; FP32 accumulates in FP32
// and FP64 in FP64, on the ordinary units (never TF32). Every thread adds its
// products in the order of kk, which is the reference executor's order (c, r,
// s), with padded positions contributing 0 * w (the same sum for finite
// weights). FP32 and FP64 use fused multiply-adds, so they differ from the CPU
// by rounding within the Conv2D slack of the GPU check
// (src/cuda/cuda_job.c: K * 2^-24 of the value's scale for a contraction of
// K = C*R*S products); built with -DCOCO_CONV_EXACT=1 they multiply and add
// separately as the CPU does and equal it bit for bit, at about half the
// arithmetic rate. FP16/BF16
// sums on tensor cores are grouped differently: within an ulp of the result
// type almost always, always within the GPU check's tolerance.
#pragma once

#include "coco_device.cuh"

#include <mma.h>

#ifndef COCO_CONV_EXACT
#define COCO_CONV_EXACT 0
#endif

// Sizes of one Conv2D (one rank's part), checked on the host to fit the
// 32-bit indexing used here: C*H*W, K*C*R*S and N*OH*OW below 2^31.
struct CocoConvGeom {
    int N, C, H, W, K, R, S, OH, OW, stride, pad;
    int M;     // N*OH*OW: rows of the product
    int CRS;   // C*R*S: the reduction
    int OHW;   // OH*OW
    long CHW;  // one image of x
    long KOHW; // one image of y
    int vecw;  // w 16-byte aligned and CRS % 8 == 0: weights of 2-byte types by 16 bytes
};

// Reduction index kk = (c*R + r)*S + s as (c, r, s).
struct CocoConvK {
    int c, r, s;
};

__device__ __forceinline__ CocoConvK coco_conv_k(int kk, const CocoConvGeom &g)
{
    int rs = g.R * g.S;
    CocoConvK p;
    p.c = kk / rs;
    int q = kk - p.c * rs;
    p.r = q / g.S;
    p.s = q - p.r * g.S;
    return p;
}

// p += d, d = coco_conv_k(step) for any step
__device__ __forceinline__ void coco_conv_k_add(CocoConvK &p, CocoConvK d, const CocoConvGeom &g)
{
    p.s += d.s;
    p.r += d.r;
    p.c += d.c;
    if (p.s >= g.S) {
        p.s -= g.S;
        p.r++;
    }
    if (p.r >= g.R) {
        p.r -= g.R;
        p.c++;
    }
}

// The reduction positions of a tile of BK: kk -> (c*H + r)*W + s, r, s.
// Past the end (c >= C), r is far negative so that no input is read.
struct __align__(16) CocoConvTab {
    int delta, r, s, unused;
};

// Lanes 0 .. BK-1 of warp 0 keep p at kk = tile * BK + lane and write the
// tile's entries: tab[lane] for tile p is in, then p moves on by BK.
__device__ __forceinline__ void coco_conv_tab_put(CocoConvTab *tab, int lane, CocoConvK &p,
                                                  CocoConvK step, const CocoConvGeom &g)
{
    CocoConvTab e;
    e.delta = p.c < g.C ? (p.c * g.H + p.r) * g.W + p.s : 0;
    e.r = p.c < g.C ? p.r : -0x40000000;
    e.s = p.s;
    e.unused = 0;
    tab[lane] = e;
    coco_conv_k_add(p, step, g);
}

// Output row m as the corner of its receptive field in image n of x.
struct CocoConvM {
    long base; // n*C*H*W
    int off;   // ih*W + iw
    int ih, iw; // oh*stride - pad, ow*stride - pad; ih far negative for m >= M
};

__device__ __forceinline__ CocoConvM coco_conv_m(int m, const CocoConvGeom &g)
{
    CocoConvM p;
    bool ok = m < g.M;
    int mm = ok ? m : 0;
    int n = mm / g.OHW, q = mm - n * g.OHW, oh = q / g.OW, ow = q - oh * g.OW;
    p.base = (long)n * g.CHW;
    p.ih = ok ? oh * g.stride - g.pad : -0x40000000;
    p.iw = ow * g.stride - g.pad;
    p.off = ok ? p.ih * g.W + p.iw : 0;
    return p;
}

// A[m][kk]: the input element, or 0 in the padding and past the edges.
// Branch-free: an element outside reads x[n][0][0][0] and is replaced by 0.
template <typename U>
__device__ __forceinline__ U coco_conv_gather(const U *__restrict__ xn, const CocoConvM &m,
                                              const CocoConvTab &e, const CocoConvGeom &g)
{
    int ih = m.ih + e.r, iw = m.iw + e.s;
    bool ok = (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W;
    U v = __ldg(xn + (unsigned)(ok ? m.off + e.delta : 0)); // unsigned: one wide multiply-add
    return ok ? v : U(0);
}

// Where y[n][0][oh][ow] is, for output row m < M.
__device__ __forceinline__ long coco_conv_ybase(int m, const CocoConvGeom &g)
{
    int n = m / g.OHW;
    return (long)n * g.KOHW + (m - n * g.OHW);
}

__device__ __forceinline__ void coco_conv_put(__half *y, long i, float v)
{
    y[i] = __float2half_rn(v);
}
__device__ __forceinline__ void coco_conv_put(__nv_bfloat16 *y, long i, float v)
{
    y[i] = __float2bfloat16_rn(v);
}

// acc + a * b: fused, or rounded after the product as the CPU does
template <bool Fused> __device__ __forceinline__ float coco_conv_mad(float acc, float a, float b)
{
    return Fused ? __fmaf_rn(a, b, acc) : __fadd_rn(acc, __fmul_rn(a, b));
}
template <bool Fused>
__device__ __forceinline__ double coco_conv_mad(double acc, double a, double b)
{
    return Fused ? __fma_rn(a, b, acc) : __dadd_rn(acc, __dmul_rn(a, b));
}

// N consecutive elements of shared memory, 16 bytes at a time
__device__ __forceinline__ void coco_conv_lds16(float *d, const float *s)
{
    float4 v = *reinterpret_cast<const float4 *>(s);
    d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
}
__device__ __forceinline__ void coco_conv_lds16(double *d, const double *s)
{
    double2 v = *reinterpret_cast<const double2 *>(s);
    d[0] = v.x, d[1] = v.y;
}
template <typename T, int N> __device__ __forceinline__ void coco_conv_lds(T (&d)[N], const T *s)
{
    constexpr int V = 16 / sizeof(T);
    static_assert(N % V == 0, "whole 16-byte vectors");
#pragma unroll
    for (int i = 0; i < N; i += V)
        coco_conv_lds16(&d[i], s + i);
}

// ---- the main loop both kernels share ----
// Double buffering over the CRS tiles: thread tid < BK first writes its
// entry of the tables of tiles 0 and 1; then tile kt + 1 is loaded into
// registers (load) while tile kt, in shared buffer kt & 1, is multiplied
// (compute), and stored into the other buffer after (store). The table of
// tile kt + 2 goes where tile kt's was, read before the last barrier.
template <int BK, typename Load, typename Store, typename Compute>
__device__ __forceinline__ void coco_conv_tiles(int tid, CocoConvTab (*tab)[BK],
                                                const CocoConvGeom &g, Load load, Store store,
                                                Compute compute)
{
    const int tiles = (g.CRS + BK - 1) / BK;
    const CocoConvK kstep = coco_conv_k(BK, g);
    CocoConvK kp = coco_conv_k(tid < BK ? tid : 0, g);
    if (tid < BK) {
        coco_conv_tab_put(tab[0], tid, kp, kstep, g);
        coco_conv_tab_put(tab[1], tid, kp, kstep, g);
    }
    __syncthreads();
    if (tiles > 0) {
        load(0);
        store(0);
    }
    __syncthreads();
    for (int kt = 0; kt < tiles; kt++) {
        const int buf = kt & 1;
        if (kt + 1 < tiles)
            load(kt + 1);
        if (tid < BK)
            coco_conv_tab_put(tab[buf], tid, kp, kstep, g);
        compute(buf);
        if (kt + 1 < tiles)
            store(buf ^ 1);
        __syncthreads();
    }
}

// ---- FP32 and FP64: BM x BN outputs per block of 256 threads, TM x TN each ----
template <typename T, int BM, int BN, int BK, int TM, int TN, bool Fused>
__global__ void __launch_bounds__(256, 2)
    coco_conv_simt_kernel(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y,
                          CocoConvGeom g)
{
    constexpr int NT = 256;
    constexpr int AP = BM * BK / NT; // A elements a thread loads: one m, AP consecutive kk
    constexpr int BP = BN * BK / NT; // B elements a thread loads: one k, BP consecutive kk
    constexpr int BT = BK / BP;      // threads per row of w
    constexpr int PAD = 16 / sizeof(T);
    static_assert(NT % BM == 0 && BM % 32 == 0 && AP >= 1 && BP >= 1 && BK % BP == 0,
                  "loader shape");
    static_assert((BM / TM) * (BN / TN) == NT, "thread tile shape");
    __shared__ __align__(16) T As[2][BK][BM];
    __shared__ __align__(16) T Bs[2][BK][BN + PAD];
    __shared__ CocoConvTab tab[2][BK];

    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * BM, k0 = blockIdx.y * BN;

    // loader of A: row am, columns ak .. ak + AP - 1 of each tile
    const int am = tid % BM, ak = (tid / BM) * AP;
    const CocoConvM mp = coco_conv_m(m0 + am, g);
    const T *xn = x + mp.base;
    // loader of B: weight row bn, columns bk .. bk + BP - 1 of each tile
    const int bn = tid / BT, bk = (tid % BT) * BP;
    const bool bok = k0 + bn < g.K;
    const T *wrow = w + (long)(bok ? k0 + bn : 0) * g.CRS;

    T ra[AP], rb[BP];
    auto load = [&](int kt) {
        const CocoConvTab *e = tab[kt & 1] + ak;
#pragma unroll
        for (int i = 0; i < AP; i++)
            ra[i] = coco_conv_gather(xn, mp, e[i], g);
        int kb = kt * BK + bk;
#pragma unroll
        for (int i = 0; i < BP; i++)
            rb[i] = bok && kb + i < g.CRS ? __ldg(wrow + kb + i) : T(0);
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < AP; i++)
            As[buf][ak + i][am] = ra[i];
#pragma unroll
        for (int i = 0; i < BP; i++)
            Bs[buf][bk + i][bn] = rb[i];
    };

    const int tm = tid % (BM / TM), tn = tid / (BM / TM);
    T acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++)
            acc[i][j] = T(0);

    coco_conv_tiles<BK>(tid, tab, g, load, store, [&](int buf) {
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            T a[TM], b[TN];
            coco_conv_lds(a, &As[buf][kk][tm * TM]);
            coco_conv_lds(b, &Bs[buf][kk][tn * TN]);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = coco_conv_mad<Fused>(acc[i][j], a[i], b[j]);
        }
    });

#pragma unroll
    for (int i = 0; i < TM; i++) {
        int m = m0 + tm * TM + i;
        if (m >= g.M)
            continue;
        long yb = coco_conv_ybase(m, g);
#pragma unroll
        for (int j = 0; j < TN; j++) {
            int k = k0 + tn * TN + j;
            if (k < g.K)
                y[yb + (long)k * g.OHW] = acc[i][j];
        }
    }
}

// ---- FP16 and BF16 (type H): BM x BN outputs per block of WM x WN warps ----
// Elements travel as their 16 bits (unsigned short); only the tensor cores
// read them as H. Built for sm_80 and newer (BF16 WMMA): elsewhere the body
// is empty and coco_conv_igemm does not launch it.
template <typename H, int BM, int BN, int WM, int WN>
__global__ void __launch_bounds__(WM *WN * 32)
    coco_conv_wmma_kernel(const unsigned short *__restrict__ x,
                          const unsigned short *__restrict__ w, H *__restrict__ y, CocoConvGeom g)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    constexpr int NT = WM * WN * 32, BK = 32, LD = BK + 8; // rows padded by 16 bytes
    constexpr int WTM = BM / WM, WTN = BN / WN, FM = WTM / 16, FN = WTN / 16;
    constexpr int AP = BM * BK / NT, BP = BN * BK / NT, BT = BK / BP;
    constexpr int PIPE = 2 * (BM + BN) * LD * 2, SCRATCH = NT / 32 * WTM * 16 * 4;
    static_assert(NT % BM == 0 && BM % 32 == 0 && AP % 8 == 0 && BP % 8 == 0 && BK % BP == 0,
                  "loader shape");
    static_assert(FM >= 1 && FN >= 1 && WTM % 32 == 0, "warp tile shape");
    static_assert((PIPE > SCRATCH ? PIPE : SCRATCH) + 2 * BK * 16 <= 48 * 1024, "static smem");
    __shared__ __align__(128) unsigned char smem[PIPE > SCRATCH ? PIPE : SCRATCH];
    __shared__ CocoConvTab tab[2][BK];
    auto As = reinterpret_cast<unsigned short (*)[BM][LD]>(smem);
    auto Bs = reinterpret_cast<unsigned short (*)[BN][LD]>(smem + 2 * BM * LD * 2);

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.x * BM, k0 = blockIdx.y * BN;

    const int am = tid % BM, ak = (tid / BM) * AP;
    const CocoConvM mp = coco_conv_m(m0 + am, g);
    const unsigned short *xn = x + mp.base;
    const int bn = tid / BT, bk = (tid % BT) * BP;
    const bool bok = k0 + bn < g.K;
    const unsigned short *wrow = w + (long)(bok ? k0 + bn : 0) * g.CRS;

    uint4 ra[AP / 8], rb[BP / 8];
    auto load = [&](int kt) {
        const CocoConvTab *e = tab[kt & 1] + ak;
        unsigned pk[AP / 2];
#pragma unroll
        for (int i = 0; i < AP; i += 2) {
            unsigned lo = coco_conv_gather(xn, mp, e[i], g);
            unsigned hi = coco_conv_gather(xn, mp, e[i + 1], g);
            pk[i / 2] = lo | hi << 16;
        }
#pragma unroll
        for (int v = 0; v < AP / 8; v++)
            ra[v] = make_uint4(pk[4 * v], pk[4 * v + 1], pk[4 * v + 2], pk[4 * v + 3]);
        int kb = kt * BK + bk;
        if (g.vecw && bok && kb + BP <= g.CRS) {
#pragma unroll
            for (int v = 0; v < BP / 8; v++)
                rb[v] = __ldg(reinterpret_cast<const uint4 *>(wrow + kb) + v);
        } else {
            unsigned pw[BP / 2];
#pragma unroll
            for (int i = 0; i < BP; i += 2) {
                unsigned lo = bok && kb + i < g.CRS ? __ldg(wrow + kb + i) : 0;
                unsigned hi = bok && kb + i + 1 < g.CRS ? __ldg(wrow + kb + i + 1) : 0;
                pw[i / 2] = lo | hi << 16;
            }
#pragma unroll
            for (int v = 0; v < BP / 8; v++)
                rb[v] = make_uint4(pw[4 * v], pw[4 * v + 1], pw[4 * v + 2], pw[4 * v + 3]);
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int v = 0; v < AP / 8; v++)
            *reinterpret_cast<uint4 *>(&As[buf][am][ak + 8 * v]) = ra[v];
#pragma unroll
        for (int v = 0; v < BP / 8; v++)
            *reinterpret_cast<uint4 *>(&Bs[buf][bn][bk + 8 * v]) = rb[v];
    };

    const int wm = warp % WM, wn = warp / WM;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < FN; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);

    coco_conv_tiles<BK>(tid, tab, g, load, store, [&](int buf) {
#pragma unroll
        for (int ks = 0; ks < BK; ks += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> af[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::col_major> bf[FN];
#pragma unroll
            for (int i = 0; i < FM; i++)
                wmma::load_matrix_sync(af[i],
                                       reinterpret_cast<const H *>(&As[buf][wm * WTM + i * 16][ks]),
                                       LD);
#pragma unroll
            for (int j = 0; j < FN; j++)
                wmma::load_matrix_sync(bf[j],
                                       reinterpret_cast<const H *>(&Bs[buf][wn * WTN + j * 16][ks]),
                                       LD);
#pragma unroll
            for (int i = 0; i < FM; i++)
#pragma unroll
                for (int j = 0; j < FN; j++)
                    wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
        }
    });

    // Each warp writes its tile 16 output channels at a time through its own
    // scratch (column-major: consecutive m adjacent, as in y).
    float *scr = reinterpret_cast<float *>(smem) + warp * WTM * 16;
    long yb[WTM / 32];
    bool mok[WTM / 32];
#pragma unroll
    for (int q = 0; q < WTM / 32; q++) {
        int m = m0 + wm * WTM + lane + 32 * q;
        mok[q] = m < g.M;
        yb[q] = mok[q] ? coco_conv_ybase(m, g) : 0;
    }
#pragma unroll
    for (int j = 0; j < FN; j++) {
#pragma unroll
        for (int i = 0; i < FM; i++)
            wmma::store_matrix_sync(scr + i * 16, acc[i][j], WTM, wmma::mem_col_major);
        __syncwarp();
        for (int c = 0; c < 16; c++) {
            int k = k0 + wn * WTN + j * 16 + c;
            if (k >= g.K)
                break;
#pragma unroll
            for (int q = 0; q < WTM / 32; q++)
                if (mok[q])
                    coco_conv_put(y, yb[q] + (long)k * g.OHW, scr[c * WTM + lane + 32 * q]);
        }
        __syncwarp();
    }
#endif
}

// ---- choosing and launching ----
// The tile shapes of each type (BM x BN outputs a block), index v of
// coco_conv_igemm.
struct CocoConvVariant {
    const char *name;
    int bm, bn;
};

static inline int coco_conv_variants(int t, const CocoConvVariant **list)
{
    static const CocoConvVariant half[] = {{"wmma 64x128", 64, 128},
                                           {"wmma 64x64", 64, 64},
                                           {"wmma 128x128", 128, 128},
                                           {"wmma 128x64", 128, 64}};
    static const CocoConvVariant single[] = {
        {"simt 128x128", 128, 128}, {"simt 128x64", 128, 64}, {"simt 64x64", 64, 64}};
    static const CocoConvVariant dbl[] = {{"simt 64x64", 64, 64}, {"simt 64x32", 64, 32}};
    if (t == COCO_FP64) {
        *list = dbl;
        return 2;
    }
    if (t == COCO_FP32) {
        *list = single;
        return 3;
    }
    *list = half;
    return 4;
}

static inline const char *coco_conv_variant_name(int t, int v)
{
    const CocoConvVariant *l;
    return v >= 0 && v < coco_conv_variants(t, &l) ? l[v].name : "?";
}

template <typename H, int BM, int BN, int WM, int WN>
static inline void coco_conv_wmma(dim3 grid, cudaStream_t st, const void *x, const void *w,
                                  void *y, const CocoConvGeom &g)
{
    coco_conv_wmma_kernel<H, BM, BN, WM, WN><<<grid, WM * WN * 32, 0, st>>>(
        (const unsigned short *)x, (const unsigned short *)w, (H *)y, g);
}

template <typename H>
static inline void coco_conv_wmma_variant(int v, dim3 grid, cudaStream_t st, const void *x,
                                          const void *w, void *y, const CocoConvGeom &g)
{
    switch (v) {
    case 0: coco_conv_wmma<H, 64, 128, 2, 4>(grid, st, x, w, y, g); break;
    case 1: coco_conv_wmma<H, 64, 64, 2, 2>(grid, st, x, w, y, g); break;
    case 2: coco_conv_wmma<H, 128, 128, 2, 4>(grid, st, x, w, y, g); break;
    default: coco_conv_wmma<H, 128, 64, 4, 2>(grid, st, x, w, y, g); break;
    }
}

template <typename T, int BM, int BN, int BK, int TM, int TN>
static inline void coco_conv_simt(dim3 grid, cudaStream_t st, const void *x, const void *w,
                                  void *y, const CocoConvGeom &g)
{
    coco_conv_simt_kernel<T, BM, BN, BK, TM, TN, !COCO_CONV_EXACT>
        <<<grid, 256, 0, st>>>((const T *)x, (const T *)w, (T *)y, g);
}

// Whether the FP16/BF16 kernels were built with tensor cores (sm_80 or newer)
// for the GPU this process runs on.
static inline int coco_conv_have_wmma(void)
{
    static int have = -1;
    if (have < 0) {
        cudaFuncAttributes a;
        if (cudaFuncGetAttributes(&a, coco_conv_wmma_kernel<__half, 64, 64, 2, 2>) == cudaSuccess)
            have = a.ptxVersion >= 80 && a.binaryVersion >= 80;
        else
            have = 0, (void)cudaGetLastError();
    }
    return have;
}

static inline int coco_conv_sms(void)
{
    static int sms = 0;
    if (sms <= 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            sms = 132, (void)cudaGetLastError();
    }
    return sms;
}

// The tile shape for M rows and K output channels. FP16/BF16: 64 x 128 (two
// blocks per 128 x 128 tile fill the GPU better, and a block's 128 channels
// share each gathered input), 64 x 64 when K <= 64. FP32 and FP64: the
// first shape of the list giving at least half a block per multiprocessor.
static inline int coco_conv_auto(int t, long M, long K, const CocoConvVariant *list, int n)
{
    if (t == COCO_FP16 || t == COCO_BF16)
        return K > 64 ? 0 : 1;
    int v = 0;
    for (; v < n - 1; v++)
        if ((M + list[v].bm - 1) / list[v].bm * ((K + list[v].bn - 1) / list[v].bn) * 2 >=
            coco_conv_sms())
            break;
    return v;
}

// Enqueues y = Conv2D(x, w) on st with tile shape v (-1: coco_conv_auto's).
// Returns 0, launching nothing, where these kernels do not apply (indices
// beyond 32 bits; FP16/BF16 code built for a GPU older than sm_80): the
// caller uses the direct kernel. Sizes must be positive.
static inline int coco_conv_igemm(cudaStream_t st, const void *x, const void *w, void *y, int t,
                                  long N, long C, long H, long W, long K, long R, long S, long OH,
                                  long OW, int stride, int pad, int v)
{
    const long lim = 0x7fffff00L;
    if (C * H * W >= lim || K * C * R * S >= lim || N * OH * OW >= lim || K * OH * OW >= lim ||
        H >= 0x10000000L || W >= 0x10000000L || R >= 0x10000000L || S >= 0x10000000L ||
        (long)pad >= 0x10000000L || (long)stride >= 0x10000000L)
        return 0;
    if ((t == COCO_FP16 || t == COCO_BF16) && !coco_conv_have_wmma())
        return 0;
    CocoConvGeom g;
    g.N = (int)N, g.C = (int)C, g.H = (int)H, g.W = (int)W, g.K = (int)K, g.R = (int)R;
    g.S = (int)S, g.OH = (int)OH, g.OW = (int)OW, g.stride = stride, g.pad = pad;
    g.M = (int)(N * OH * OW);
    g.CRS = (int)(C * R * S);
    g.OHW = (int)(OH * OW);
    g.CHW = C * H * W;
    g.KOHW = K * OH * OW;
    g.vecw = ((uintptr_t)w % 16 == 0) && g.CRS % 8 == 0;
    const CocoConvVariant *list;
    int n = coco_conv_variants(t, &list);
    if (v < 0) // measured on an H100 (tests/gpu/conv_check.cu)
        v = coco_conv_auto(t, g.M, g.K, list, n);
    if (v >= n || (g.K + list[v].bn - 1) / list[v].bn > 65535)
        return 0;
    dim3 grid((unsigned)((g.M + list[v].bm - 1) / list[v].bm),
              (unsigned)((g.K + list[v].bn - 1) / list[v].bn));
    switch (t) {
    case COCO_FP16: coco_conv_wmma_variant<__half>(v, grid, st, x, w, y, g); break;
    case COCO_BF16: coco_conv_wmma_variant<__nv_bfloat16>(v, grid, st, x, w, y, g); break;
    case COCO_FP32:
        if (v == 0)
            coco_conv_simt<float, 128, 128, 8, 8, 8>(grid, st, x, w, y, g);
        else if (v == 1)
            coco_conv_simt<float, 128, 64, 8, 8, 4>(grid, st, x, w, y, g);
        else
            coco_conv_simt<float, 64, 64, 8, 4, 4>(grid, st, x, w, y, g);
        break;
    default:
        if (v == 0)
            coco_conv_simt<double, 64, 64, 8, 4, 4>(grid, st, x, w, y, g);
        else
            coco_conv_simt<double, 64, 32, 8, 4, 2>(grid, st, x, w, y, g);
        break;
    }
    return 1;
}

// ---- Conv2D: the direct kernel and the entry point ----
// The direct kernel: one thread per output, accumulated in order c, r, s as
// the CPU does (its FP32 and FP64 results are the CPU's bit for bit). Slow:
// coco_conv2d uses it only where the implicit GEMM above does not
// apply (indices beyond 32 bits, FP16/BF16 built for a GPU before sm_80).
static __global__ void coco_conv2d_kernel(const void *x, const void *w, void *y, int t, long N,
                                          long C, long H, long W, long K, long R, long S, long OH,
                                          long OW, int stride, int pad)
{
    long n = N * K * OH * OW;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n;
         e += (long)gridDim.x * blockDim.x) {
        long ow = e % OW, oh = (e / OW) % OH, k = (e / (OW * OH)) % K, img = e / (OW * OH * K);
        double dacc = 0;
        float facc = 0;
        for (long c = 0; c < C; c++)
            for (long r = 0; r < R; r++)
                for (long s = 0; s < S; s++) {
                    long ih = oh * stride - pad + r, iw = ow * stride - pad + s;
                    if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                        continue;
                    double a = coco_ld(x, ((img * C + c) * H + ih) * W + iw, t);
                    double b = coco_ld(w, ((k * C + c) * R + r) * S + s, t);
                    if (t == COCO_FP64)
                        dacc = __dadd_rn(dacc, __dmul_rn(a, b));
                    else
                        facc = __fadd_rn(facc, __fmul_rn((float)a, (float)b));
                }
        coco_st(y, e, t, coco_round(t == COCO_FP64 ? dacc : (double)facc, t));
    }
}

// Conv2D of x [N,C,H,W] by w [K,C,R,S] into y [N,K,OH,OW] on ctx's stream:
// an implicit GEMM (coco_conv.cuh), else the direct kernel.
static inline int coco_conv2d(coco_cuda_ctx *ctx, int line, const void *x, const void *w, void *y,
                              int t, long N, long C, long H, long W, long K, long R, long S,
                              long OH, long OW, int stride, int pad)
{
    cudaStream_t st = (cudaStream_t)ctx->stream;
    long n = N * K * OH * OW;
    if (n <= 0)
        return 0;
    if (!coco_conv_igemm(st, x, w, y, t, N, C, H, W, K, R, S, OH, OW, stride, pad, -1))
        coco_conv2d_kernel<<<coco_grid(n), 256, 0, st>>>(x, w, y, t, N, C, H, W, K, R, S, OH,
                                                         OW, stride, pad);
    COCO_LAUNCHED(ctx, "Conv2D", line);
    return 0;
}

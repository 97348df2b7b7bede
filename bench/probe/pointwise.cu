// bench/probe/pointwise.cu: where the model-parallel layer's pointwise kernel
// (dropout(x + b, 0.1) + r, FP16, as coconet generates it) spends its time:
// the generated form and variants, each timed alone on one GPU.
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Irt/kernels bench/probe/pointwise.cu -o probe -lcublasLt -lnccl
#include "coco_device.cuh"
#include "coco_vec.cuh"
#include "probe_util.cuh"

#include <algorithm>
#include <vector>


// 0: as generated (src/cuda/emit_value.c)
template <int V>
__global__ void k_gen(long n, CocoShape it, unsigned long long seed, const void *__restrict__ x6,
                      const void *__restrict__ x1, CocoShape h1, const void *__restrict__ x3,
                      void *__restrict__ y9, CocoShape h8)
{
    for (long i0 = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V; i0 < n;
         i0 += (long)gridDim.x * blockDim.x * V) {
        alignas(16) CocoRaw<COCO_FP16> l6[V], l3[V], s9[V];
        coco_ldv<V, COCO_FP16>(x6, i0, n, l6);
        coco_ldv<V, COCO_FP16>(x3, i0, n, l3);
        long c[COCO_MAXDIM];
        coco_coords(it, i0, c);
#pragma unroll
        for (int v = 0; v < V; v++) {
            if (v)
                coco_coords_next(it, c);
            float r7 = coco_roundf(__fadd_rn(coco_ldf(l6, v, COCO_FP16), coco_ldf(x1, coco_bidx(h1, it, c), COCO_FP16)), COCO_FP16);
            float r8 = coco_narrow(coco_dropout(r7, 0.10000000000000001, seed, 0, coco_gidx(h8, c)), COCO_FP16);
            float r9 = coco_roundf(__fadd_rn(r8, coco_ldf(l3, v, COCO_FP16)), COCO_FP16);
            coco_st(s9, v, COCO_FP16, r9);
        }
        coco_stv<V, COCO_FP16>(y9, i0, n, s9);
    }
}

// a 32-bit multiply-xorshift mix (bijective)
__device__ __forceinline__ uint32_t mix32(uint32_t z)
{
    z ^= z >> 16;
    z *= 0x7FEB352Du;
    z ^= z >> 15;
    z *= 0x846CA68Bu;
    z ^= z >> 16;
    return z;
}

// MODE bits: 1 the generator's key hoisted; 2 linear indices (no coordinates);
// 4 no dropout; 8 dropout's division in float (not the CPU's bits: cost only);
// 16 the kept test on the 24 bits as an integer, and x * (1 / (1 - p)) in
// FP64 (a multiplication, no division); 32 a 32-bit generator (one
// multiply-xorshift round of 32-bit words an element, the index's high word
// mixed into the key once a vector)
template <int V, int MODE>
__global__ void k_var(long n, long inner, unsigned long long seed, const void *__restrict__ x6,
                      const void *__restrict__ x1, const void *__restrict__ x3,
                      void *__restrict__ y9, CocoShape it, CocoShape h1, CocoShape h8)
{
    const uint32_t keep_from = (uint32_t)ceil(0.1 * 16777216.0);
    const double scale = 1.0 / (1.0 - 0.10000000000000001);
    const uint64_t key = coco_mix(coco_mix(seed * 0x9E3779B97F4A7C15ull + 0x6A09E667F3BCC909ull) ^
                                  (((1ull << 63) | 0ull) * 0xD1B54A32D192ED03ull));
    const uint32_t key32 = (uint32_t)key ^ (uint32_t)(key >> 32);
    for (long i0 = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V; i0 < n;
         i0 += (long)gridDim.x * blockDim.x * V) {
        alignas(16) CocoRaw<COCO_FP16> l6[V], l3[V], s9[V];
        coco_ldv<V, COCO_FP16>(x6, i0, n, l6);
        coco_ldv<V, COCO_FP16>(x3, i0, n, l3);
        long c[COCO_MAXDIM];
        long b0 = 0;
        if (MODE & 2)
            b0 = i0 % inner;
        else
            coco_coords(it, i0, c);
#pragma unroll
        for (int v = 0; v < V; v++) {
            long bi, gi;
            if (MODE & 2) {
                bi = b0 + v < inner ? b0 + v : b0 + v - inner;
                gi = i0 + v;
            } else {
                if (v)
                    coco_coords_next(it, c);
                bi = coco_bidx(h1, it, c);
                gi = coco_gidx(h8, c);
            }
            float r7 = coco_roundf(__fadd_rn(coco_ldf(l6, v, COCO_FP16), coco_ldf(x1, bi, COCO_FP16)), COCO_FP16);
            float r8;
            if (MODE & 4)
                r8 = r7;
            else if (MODE & 16) {
                uint32_t bits24;
                if (MODE & 32) {
                    uint32_t h = mix32(key32 ^ (uint32_t)(i0 >> 32)) ^ (uint32_t)(i0 + v);
                    bits24 = mix32(h) >> 8;
                } else {
                    bits24 = (uint32_t)(coco_mix(key ^ ((uint64_t)gi * 0x8CB92BA72F3D8DD7ull)) >> 40);
                }
                r8 = coco_narrow(bits24 >= keep_from ? __dmul_rn((double)r7, scale) : 0.0, COCO_FP16);
            } else {
                double u = (MODE & 1) ? (double)(coco_mix(key ^ ((uint64_t)gi * 0x8CB92BA72F3D8DD7ull)) >> 40) * (1.0 / 16777216.0)
                                      : coco_uniform(seed, (1ull << 63), (uint64_t)gi);
                if (MODE & 8)
                    r8 = u >= 0.1 ? __half2float(__float2half_rn(r7 / 0.9f)) : 0.0f;
                else
                    r8 = coco_narrow(u >= 0.1 ? __ddiv_rn((double)r7, 1.0 - 0.10000000000000001) : 0.0, COCO_FP16);
            }
            float r9 = coco_roundf(__fadd_rn(r8, coco_ldf(l3, v, COCO_FP16)), COCO_FP16);
            coco_st(s9, v, COCO_FP16, r9);
        }
        coco_stv<V, COCO_FP16>(y9, i0, n, s9);
    }
}

__global__ void k_copy(long n, const uint4 *a, const uint4 *b, uint4 *y)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n / 8; i += (long)gridDim.x * blockDim.x) {
        uint4 p = a[i], q = b[i];
        y[i] = make_uint4(p.x ^ q.x, p.y ^ q.y, p.z ^ q.z, p.w ^ q.w);
    }
}

int main()
{
    const long B = 8, S = 1024, H = 3072, n = B * S * H;
    const long d3[] = {B, S, H}, d1[] = {H};
    CocoShape it = probe_shape(3, d3), h1 = probe_shape(1, d1);
    void *x, *b, *r, *y, *y0;
    CK(cudaMalloc(&x, n * 2)); CK(cudaMalloc(&b, H * 2)); CK(cudaMalloc(&r, n * 2));
    CK(cudaMalloc(&y, n * 2)); CK(cudaMalloc(&y0, n * 2));
    CK(cudaMemset(x, 0x3c, n * 2)); CK(cudaMemset(b, 0x31, H * 2)); CK(cudaMemset(r, 0x2c, n * 2));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    auto time = [&](const char *what, auto launch) {
        for (int i = 0; i < 3; i++) launch();
        float best = 1e9, t;
        float all[20];
        for (int i = 0; i < 20; i++) {
            cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
            cudaEventElapsedTime(&t, e0, e1); all[i] = t; if (t < best) best = t;
        }
        std::sort(all, all + 20);
        double ms = all[10];
        printf("%-44s %8.4f ms %7.0f GB/s (3 x %ld x 2 bytes)%s\n", what, ms, 6.0 * n / ms / 1e6, n,
               cudaGetLastError() ? " ERROR" : "");
    };
    dim3 g8((unsigned)std::min<long>((n / 8 + 255) / 256, 132L * 16)), blk(256);
    time("generated (coords, key per element, FP64 div)", [&] { k_gen<8><<<g8, blk>>>(n, it, 1, x, b, h1, r, y0, it); });
    CK(cudaDeviceSynchronize());
    auto same = [&](const char *w) {
        std::vector<unsigned short> a(n), c(n);
        cudaMemcpy(a.data(), y0, n * 2, cudaMemcpyDeviceToHost); cudaMemcpy(c.data(), y, n * 2, cudaMemcpyDeviceToHost);
        long d = 0; for (long i = 0; i < n; i++) d += a[i] != c[i];
        printf("    %s: %ld elements differ from the generated kernel's\n", w, d);
    };
    time("1 key hoisted", [&] { k_var<8, 1><<<g8, blk>>>(n, H, 1, x, b, r, y, it, h1, it); }); same("1");
    time("2 linear indices", [&] { k_var<8, 2><<<g8, blk>>>(n, H, 1, x, b, r, y, it, h1, it); }); same("2");
    time("3 key hoisted + linear", [&] { k_var<8, 3><<<g8, blk>>>(n, H, 1, x, b, r, y, it, h1, it); }); same("3");
    time("4 no dropout, coords", [&] { k_var<8, 4><<<g8, blk>>>(n, H, 1, x, b, r, y, it, h1, it); });
    time("6 no dropout, linear", [&] { k_var<8, 6><<<g8, blk>>>(n, H, 1, x, b, r, y, it, h1, it); });
    time("11 hoisted + linear + float div (not exact)", [&] { k_var<8, 11><<<g8, blk>>>(n, H, 1, x, b, r, y, it, h1, it); });
    time("19 hoisted + linear + integer test + FP64 mul", [&] { k_var<8, 19><<<g8, blk>>>(n, H, 1, x, b, r, y, it, h1, it); }); same("19");
    time("51 the same, 32-bit generator", [&] { k_var<8, 51><<<g8, blk>>>(n, H, 1, x, b, r, y, it, h1, it); });
    dim3 gmax((unsigned)((n / 8 + 255) / 256));
    time("3 with a block per 2048 elements", [&] { k_var<8, 3><<<gmax, blk>>>(n, H, 1, x, b, r, y, it, h1, it); });
    time("copy-like: 2 loads, 1 store, 16 B", [&] { k_copy<<<g8, blk>>>(n, (const uint4 *)x, (const uint4 *)r, (uint4 *)y); });
    printf("SMs %d\n", sms);
    return 0;
}

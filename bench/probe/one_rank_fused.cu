// bench/probe/one_rank_fused.cu: why the layers' one-rank FusedAllReduce
// kernel runs slower than the elementwise kernel of the same chain
// (dropout(x + b, 0.1) + r, FP16; issue 20). Both kernels are coconet's own,
// cut from `coconet gen --all-schedules` of examples/self_attention.coco
// (paper's v1_f0 and its one-rank form v1_f0_one, MM_AR_C's v2_k0) into the
// included file; each is timed alone with the launch shapes below, beside
// variants of the fused kernel's loop, and every output is compared with
// the elementwise kernel's.
//   bench/probe/one_rank_fused.sh   (cuts the kernels, builds, runs)
#include "coco_device.cuh"
#include "coco_scatter.cuh"
#include "coco_send.cuh"

#include <algorithm>
#include <functional>
#include <vector>

#include "probe_util.cuh"

#include COCO_PROBE_KERNELS

// The fused kernel's loop at one rank, with its reads through __restrict__
// parameters (the read-only path, as the elementwise kernel's) and NSTEP
// steps' loads issued before the first step's arithmetic.
template <int V, int NSTEP>
__global__ void __launch_bounds__(512, 2)
    k_fused_restrict(long n, const void *__restrict__ x, const void *__restrict__ z3,
                     const void *__restrict__ x1, long lm1, long lg7, unsigned long long seed,
                     void *__restrict__ y)
{
    const long stride = (long)gridDim.x * blockDim.x * V;
    for (long s0 = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V; s0 < n; s0 += NSTEP * stride) {
        alignas(16) CocoRaw<COCO_FP16> lx[NSTEP][V], lr[NSTEP][V];
#pragma unroll
        for (int k = 0; k < NSTEP; k++)
            if (s0 + k * stride < n) {
                coco_ldv<V, COCO_FP16>(x, s0 + k * stride, n, lx[k]);
                coco_ldv<V, COCO_FP16>(z3, s0 + k * stride, n, lr[k]);
            }
#pragma unroll
        for (int k = 0; k < NSTEP; k++) {
            const long i0 = s0 + k * stride;
            if (i0 >= n)
                break;
            alignas(16) CocoRaw<COCO_FP16> lb[V], out[V];
            coco_ld_wrapped<V, COCO_FP16>(x1, coco_mod(i0, lm1), lm1, lb);
#pragma unroll
            for (int v = 0; v < V; v++) {
                float r6 = coco_roundf(__fadd_rn(coco_ldf(lx[k], v, COCO_FP16), coco_ldf(lb, v, COCO_FP16)), COCO_FP16);
                float r7 = coco_narrow(coco_dropout(r6, 0.10000000000000001, seed, 0, lg7 + i0 + v), COCO_FP16);
                float r9 = coco_roundf(__fadd_rn(r7, coco_ldf(lr[k], v, COCO_FP16)), COCO_FP16);
                coco_st(out, v, COCO_FP16, r9);
            }
            coco_stv<V, COCO_FP16>(y, i0, n, out);
        }
    }
}

int main()
{
    const long B = 8, S = 1024, H = 3072, n = B * S * H;
    const long dims[3] = {B, S, H};
    const CocoShape it = probe_shape(3, dims), hb = probe_shape(1, &H);
    const size_t bytes = n * 2;
    void *x, *r, *b, *y0, *y;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&r, bytes));
    CK(cudaMalloc(&b, H * 2));
    CK(cudaMalloc(&y0, bytes));
    CK(cudaMalloc(&y, bytes));
    std::vector<__half> h(n);
    for (long i = 0; i < n; i++)
        h[i] = __float2half((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
    CK(cudaMemcpy(x, h.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(r, h.data() + 7, bytes - 14, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, h.data() + 99, H * 2, cudaMemcpyHostToDevice));
    void *flush;
    const size_t flush_bytes = 256u << 20;
    CK(cudaMalloc(&flush, flush_bytes));
    const unsigned long long seed = 1234;
    const double must_move = 3.0 * bytes + H * 2; /* x, r read; y written; the bias */
    std::vector<unsigned short> ref(n), got(n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    auto time = [&](const char *name, std::function<void()> launch, bool check, double moved) {
        std::vector<float> all;
        for (int i = 0; i < 40; i++) {
            CK(cudaMemsetAsync(flush, i, flush_bytes)); /* the L2 emptied of x, r and y */
            float t;
            cudaEventRecord(e0);
            launch();
            cudaEventRecord(e1);
            CK(cudaEventSynchronize(e1));
            cudaEventElapsedTime(&t, e0, e1);
            all.push_back(t);
        }
        CK(cudaGetLastError());
        std::sort(all.begin(), all.end());
        const float med = all[all.size() / 2];
        int same = 1;
        if (check) {
            CK(cudaMemcpy(got.data(), y, bytes, cudaMemcpyDeviceToHost));
            same = memcmp(got.data(), ref.data(), bytes) == 0;
            CK(cudaMemset(y, 0, bytes));
        }
        printf("| %-62s | %8.4f | %6.0f | %s |\n", name, med, moved / (med * 1e-3) / 1e9,
               check ? (same ? "same bits" : "DIFFERENT") : "reference");
        return 0;
    };
    const CocoShape h7 = it;
    const long lm1 = H, lg7 = 0;
    const ncclDevComm dc = {};
    const CocoChunks ck = coco_chunks_all(n);
    auto fused = [&](dim3 grid, dim3 block) {
        v1_f0<8, 1, 0, 0, 0, 1><<<grid, block>>>(dc, (ncclWindow_t)0, n, n, ck, it, seed, 0,
                                                  (size_t)x, (size_t)y, 0, r, b, hb, h7, 1);
    };
    printf("| kernel, launch | ms (median of 40, L2 emptied) | GB/s (%.0f MB must move; the copy: its own) | output |\n",
           must_move / 1e6);
    printf("|---|---|---|---|\n");
    time("elementwise v2_k0<8,1>, coco_grid_vec x 256", [&] {
        v2_k0<8, 1><<<coco_grid_vec(n, 8), 256>>>(n, it, seed, x, it, b, hb, r, it, y, h7);
    }, false, must_move);
    CK(cudaMemcpy(ref.data(), y, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemset(y, 0, bytes));
    const long sms = 132;
    time("fused v1_f0<8,1>, 2 x SMs x 512 (today)", [&] { fused(dim3(2 * sms), dim3(512)); }, true, must_move);
    time("fused v1_f0<8,1>, 8 x SMs x 512", [&] { fused(dim3(8 * sms), dim3(512)); }, true, must_move);
    time("fused v1_f0<8,1>, n / 8 / 512 x 512 (a step a thread)",
         [&] { fused(dim3((unsigned)((n / 8 + 511) / 512)), dim3(512)); }, true, must_move);
    time("fused v1_f0<8,1>, coco_grid_vec x 256",
         [&] { fused(coco_grid_vec(n, 8), dim3(256)); }, true, must_move);
    time("one-rank form v1_f0_one<8,1>, coco_grid_vec x 256 (generated)", [&] {
        v1_f0_one<8, 1><<<coco_grid_vec(n, 8), 256>>>(dc, (ncclWindow_t)0, n, n, ck, it, seed, 0,
                                                      (size_t)x, (size_t)y, 0, r, b, hb, h7, 1);
    }, true, must_move);
    time("restrict loop, 2 x SMs x 512",
         [&] { k_fused_restrict<8, 1><<<2 * sms, 512>>>(n, x, r, b, lm1, lg7, seed, y); }, true, must_move);
    time("restrict loop, two steps' loads first, 2 x SMs x 512",
         [&] { k_fused_restrict<8, 2><<<2 * sms, 512>>>(n, x, r, b, lm1, lg7, seed, y); }, true, must_move);
    time("restrict loop, coco_grid_vec x 256",
         [&] { k_fused_restrict<8, 1><<<coco_grid_vec(n, 8), 256>>>(n, x, r, b, lm1, lg7, seed, y); }, true, must_move);
    time("copy x to y (cudaMemcpyAsync)",
         [&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); }, false, 2.0 * bytes);
    return 0;
}

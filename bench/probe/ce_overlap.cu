// bench/probe/ce_overlap.cu: can the copy engines carry the model-parallel
// layer's collective while the MatMul has every SM? One process drives P
// GPUs (peer access between each pair), each with the layer's per-rank
// MatMul C[M][N] = A[M][Kp] * B[Kp][N] (FP16, cuBLAS, FP32 sums), then
//   rs: part q of C (rows q*M/P ..) pushed to GPU q's slot of this GPU by
//       cudaMemcpyAsync (a copy engine, no SM), one stream a peer;
//   sum: GPU q sums its part over its own C and the P - 1 slots (a kernel);
//   ag: its sum pushed to every peer's output by the copy engines.
// Timed (the slowest GPU's events, median of ITERS): each alone, then
// chunk by chunk (the same rows of every part a chunk, as emit_overlap.c
// cuts them): chunk c's pushes wait for its MatMul, its sums for every
// peer's pushes (events across GPUs), its gathers for its sums, while
// chunk c + 1 is multiplied. The sums are checked against the CPU's.
// Usage: ce_overlap B KMUL [ITERS] (M = 1024 B, N = 3072, Kp = KMUL*3072/P).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_) {                                                                                  \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CB(x)                                                                                      \
    do {                                                                                           \
        cublasStatus_t s_ = (x);                                                                   \
        if (s_) {                                                                                  \
            printf("%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)s_);                             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { MAXP = 8 };

struct Gpu {
    __half *a, *b, *c, *slot, *out; // slot: [P][M/P][N], slot[g]: from GPU g
    cublasHandle_t h;
    cudaStream_t mm, sum, push[MAXP];
    cudaEvent_t t0, t1, mm_done[64], pushed[64][MAXP], summed[64], gathered[MAXP];
};

static int P;
static long M, N, Kp;
static Gpu G[MAXP];

// sum of part g, rows [r0, r1): out[part rows] = c + every other slot
__global__ void part_sum(__half *out, const __half *c, const __half *slot, long part_elems,
                         long lo, long hi, int p, int me)
{
    for (long i = lo + blockIdx.x * (long)blockDim.x + threadIdx.x; i < hi;
         i += (long)gridDim.x * blockDim.x) {
        float s = 0;
        for (int r = 0; r < p; r++)
            s += __half2float(r == me ? c[me * part_elems + i] : slot[r * part_elems + i]);
        out[me * part_elems + i] = __float2half(s);
    }
}

static void matmul_rows(int g, long r0, long r1, bool batched)
{
    const float one = 1, zero = 0;
    Gpu &x = G[g];
    long rows = r1 - r0;
    if (!batched) { // C^T[N][rows] = B^T[N][Kp] A^T[Kp][rows]
        CB(cublasGemmEx(x.h, CUBLAS_OP_N, CUBLAS_OP_N, N, rows, Kp, &one, x.b, CUDA_R_16F, N,
                        x.a + r0 * Kp, CUDA_R_16F, Kp, &zero, x.c + r0 * N, CUDA_R_16F, N,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    long mp = M / P; // rows [r0, r1) of every part
    CB(cublasGemmStridedBatchedEx(x.h, CUBLAS_OP_N, CUBLAS_OP_N, N, rows, Kp, &one, x.b, CUDA_R_16F,
                                  N, 0, x.a + r0 * Kp, CUDA_R_16F, Kp, mp * Kp, &zero, x.c + r0 * N,
                                  CUDA_R_16F, N, mp * N, P, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

// Rows [r0, r1) of src into dst by a copy engine, on stream s.
static void copy_rows(__half *dst, const __half *src, long r0, long r1, cudaStream_t s)
{
    CK(cudaMemcpyAsync(dst + r0 * N, src + r0 * N, (r1 - r0) * N * sizeof(__half),
                       cudaMemcpyDeviceToDevice, s));
}

// What one timed run does: mode bits 1 mm, 2 rs, 4 sum, 8 ag; chunks C.
static void enqueue(int mode, int C, int sum_blocks)
{
    long mp = M / P, part = mp * N;
    for (int g = 0; g < P; g++) {
        CK(cudaSetDevice(g));
        CK(cudaEventRecord(G[g].t0, G[g].mm));
        for (int q = 0; q < P; q++)
            CK(cudaStreamWaitEvent(G[g].push[q], G[g].t0, 0));
        CK(cudaStreamWaitEvent(G[g].sum, G[g].t0, 0));
    }
    for (int c = 0; c < C; c++) {
        long r0 = mp * c / C, r1 = mp * (c + 1) / C;
        for (int g = 0; g < P; g++) {
            CK(cudaSetDevice(g));
            Gpu &x = G[g];
            if (mode & 1)
                matmul_rows(g, r0, r1, true);
            CK(cudaEventRecord(x.mm_done[c], x.mm));
            for (int q = 0; q < P; q++) {
                if (q == g)
                    continue;
                CK(cudaStreamWaitEvent(x.push[q], x.mm_done[c], 0));
                if (mode & 2)
                    copy_rows(G[q].slot + g * part, x.c + q * part, r0, r1, x.push[q]);
                CK(cudaEventRecord(x.pushed[c][q], x.push[q]));
            }
        }
        for (int g = 0; g < P; g++) {
            CK(cudaSetDevice(g));
            Gpu &x = G[g];
            CK(cudaStreamWaitEvent(x.sum, x.mm_done[c], 0));
            for (int r = 0; r < P; r++)
                if (r != g)
                    CK(cudaStreamWaitEvent(x.sum, G[r].pushed[c][g], 0));
            if (mode & 4)
                part_sum<<<sum_blocks, 512, 0, x.sum>>>(x.out, x.c, x.slot, part, r0 * N, r1 * N, P, g);
            CK(cudaEventRecord(x.summed[c], x.sum));
            for (int q = 0; q < P; q++) {
                if (q == g)
                    continue;
                CK(cudaStreamWaitEvent(x.push[q], x.summed[c], 0));
                if (mode & 8)
                    copy_rows(G[q].out + g * part, x.out + g * part, r0, r1, x.push[q]);
            }
        }
    }
    for (int g = 0; g < P; g++) {
        CK(cudaSetDevice(g));
        for (int q = 0; q < P; q++) {
            CK(cudaEventRecord(G[g].gathered[q], G[g].push[q]));
            CK(cudaStreamWaitEvent(G[g].mm, G[g].gathered[q], 0));
        }
        CK(cudaStreamWaitEvent(G[g].mm, G[g].summed[C - 1], 0));
    }
    // every GPU's end waits for every peer's gathers into it
    for (int g = 0; g < P; g++) {
        CK(cudaSetDevice(g));
        for (int r = 0; r < P; r++)
            if (r != g)
                CK(cudaStreamWaitEvent(G[g].mm, G[r].gathered[g], 0));
        CK(cudaEventRecord(G[g].t1, G[g].mm));
    }
}

static double timed(int mode, int C, int iters, int sum_blocks)
{
    std::vector<double> t;
    for (int it = 0; it < iters + 3; it++) {
        for (int g = 0; g < P; g++) {
            CK(cudaSetDevice(g));
            CK(cudaDeviceSynchronize());
        }
        enqueue(mode, C, sum_blocks);
        double worst = 0;
        for (int g = 0; g < P; g++) {
            CK(cudaSetDevice(g));
            CK(cudaEventSynchronize(G[g].t1));
            float ms;
            CK(cudaEventElapsedTime(&ms, G[g].t0, G[g].t1));
            worst = std::max(worst, (double)ms);
        }
        if (it >= 3)
            t.push_back(worst);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

__global__ void fill(__half *p, long n, unsigned seed)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        p[i] = __float2half(((int)(h % 2001) - 1000) / 16000.0f);
    }
}

// every GPU's output against the sum of the P partial products, on
// `samples` elements computed on the CPU
static int check(void)
{
    long mp = M / P;
    std::vector<std::vector<__half>> A(P), B(P);
    for (int g = 0; g < P; g++) {
        A[g].resize(M * Kp);
        B[g].resize(Kp * N);
        CK(cudaSetDevice(g));
        CK(cudaMemcpy(A[g].data(), G[g].a, M * Kp * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(B[g].data(), G[g].b, Kp * N * 2, cudaMemcpyDeviceToHost));
    }
    int bad = 0;
    std::vector<__half> out(M * N);
    for (int g = 0; g < P; g++) {
        CK(cudaSetDevice(g));
        CK(cudaMemcpy(out.data(), G[g].out, M * N * 2, cudaMemcpyDeviceToHost));
        for (int s = 0; s < 64; s++) {
            long i = (long)(s * 7919L * mp + s * 131L) % M, j = (s * 104729L) % N;
            double want = 0;
            for (int r = 0; r < P; r++) {
                float part = 0; // cuBLAS sums in FP32, rounds to FP16
                double d = 0;
                for (long k = 0; k < Kp; k++)
                    d += (double)__half2float(A[r][i * Kp + k]) * __half2float(B[r][k * N + j]);
                part = __half2float(__float2half((float)d));
                want += part;
            }
            double got = __half2float(out[i * N + j]);
            if (fabs(got - want) > 2e-3 + 2e-3 * fabs(want))
                bad++;
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    long Bsz = argc > 1 ? atol(argv[1]) : 8, kmul = argc > 2 ? atol(argv[2]) : 4;
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    CK(cudaGetDeviceCount(&P));
    if (P < 2 || P > MAXP) {
        printf("ce_overlap: %d GPUs; needs 2 to %d\n", P, MAXP);
        return 1;
    }
    M = 1024 * Bsz, N = 3072, Kp = kmul * 3072 / P;
    for (int g = 0; g < P; g++) {
        CK(cudaSetDevice(g));
        for (int q = 0; q < P; q++)
            if (q != g)
                CK(cudaDeviceEnablePeerAccess(q, 0));
        Gpu &x = G[g];
        CK(cudaMalloc(&x.a, M * Kp * 2));
        CK(cudaMalloc(&x.b, Kp * N * 2));
        CK(cudaMalloc(&x.c, M * N * 2));
        CK(cudaMalloc(&x.slot, M * N * 2));
        CK(cudaMalloc(&x.out, M * N * 2));
        fill<<<1024, 256>>>(x.a, M * Kp, 17 + g);
        fill<<<1024, 256>>>(x.b, Kp * N, 91 + g);
        CB(cublasCreate(&x.h));
        CK(cudaStreamCreateWithFlags(&x.mm, cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&x.sum, cudaStreamNonBlocking));
        CB(cublasSetStream(x.h, x.mm));
        for (int q = 0; q < P; q++)
            CK(cudaStreamCreateWithFlags(&x.push[q], cudaStreamNonBlocking));
        CK(cudaEventCreate(&x.t0));
        CK(cudaEventCreate(&x.t1));
        for (int c = 0; c < 64; c++) {
            CK(cudaEventCreateWithFlags(&x.mm_done[c], cudaEventDisableTiming));
            CK(cudaEventCreateWithFlags(&x.summed[c], cudaEventDisableTiming));
            for (int q = 0; q < P; q++)
                CK(cudaEventCreateWithFlags(&x.pushed[c][q], cudaEventDisableTiming));
        }
        for (int q = 0; q < P; q++)
            CK(cudaEventCreateWithFlags(&x.gathered[q], cudaEventDisableTiming));
        CK(cudaDeviceSynchronize());
    }
    printf("P = %d, M = %ld, N = %ld, Kp = %ld (B = %ld, K = %ldH), FP16; median of %d, slowest GPU\n",
           P, M, N, Kp, Bsz, kmul, iters);
    double mm = timed(1, 1, iters, 264), rs = timed(2, 1, iters, 264), sum = timed(4, 1, iters, 264),
           ag = timed(8, 1, iters, 264), all = timed(15, 1, iters, 264);
    double part_bytes = (double)(M / P) * N * 2 * (P - 1);
    printf("%-34s %8.4f ms\n", "MatMul alone", mm);
    printf("%-34s %8.4f ms  %6.1f GB/s out of each GPU\n", "rs pushes alone (copy engines)", rs,
           part_bytes / rs / 1e6);
    printf("%-34s %8.4f ms\n", "sums alone", sum);
    printf("%-34s %8.4f ms  %6.1f GB/s out of each GPU\n", "ag pushes alone (copy engines)", ag,
           part_bytes / ag / 1e6);
    printf("%-34s %8.4f ms\n", "in order, one chunk", all);
    printf("%-34s %8.4f ms\n", "rs+sum+ag, no MatMul", timed(14, 1, iters, 264));
    int bad = check();
    printf("check (one chunk): %s (%d of %d samples off)\n", bad ? "WRONG" : "ok", bad, 64 * P);
    const int chunks[] = {2, 4, 8, 16};
    const int blocks[] = {132, 264, 528};
    for (int ci = 0; ci < 4; ci++) {
        double mmc = timed(1, chunks[ci], iters, 264);
        printf("chunks %2d: MatMul alone %8.4f ms", chunks[ci], mmc);
        for (int bi = 0; bi < 3; bi++) {
            for (int g = 0; g < P; g++) {
                CK(cudaSetDevice(g));
                CK(cudaMemset(G[g].out, 0, M * N * 2));
            }
            double t = timed(15, chunks[ci], iters, blocks[bi]);
            int b = check();
            printf(" | sum %d blocks: %8.4f ms (%.2f x MM)%s", blocks[bi], t, t / mm, b ? " WRONG" : "");
        }
        printf("\n");
    }
    return 0;
}

// conv_check.cu: checks and times the Conv2D kernels of rt/kernels/coco_conv.cuh
// (the implicit GEMM that coco_conv2d of coco_device.cuh launches) against a
// simple direct reference kernel. Not part of `make test`: it needs a GPU.
//
// Build and run from the repository root, after `make` (build/cuda.conf names
// the NCCL that coco_device.cuh's collective helpers need, as for generated
// code):
//
//   . build/cuda.conf && $NVCC -O3 -std=c++17 -arch=sm_90 -Iinclude -Irt/kernels \
//       -I"$NCCL_INCLUDE" -o build/conv_check tests/gpu/conv_check.cu -L"$NCCL_LIB" \
//       -Xlinker -rpath="$NCCL_LIB" $NCCL_LINK -lcublasLt && ./build/conv_check
//
// With -DCOCO_CONV_EXACT=1 (and another -o) it checks the exact build of the
// kernels: FP32 and FP64 results must then equal the reference bit for bit.
// Options: --no-time (checks only), --time-only, --reps N (timed runs,
// default 20), --small (checks of the shapes of at most 10^6 outputs only:
// for compute-sanitizer).
//
// For every shape (odd sizes, stride 2, padding, 1x1, 3x3, 5x5 and 7x7
// filters, C and K not multiples of 16 or of the tiles) and every type, each
// tile shape of coco_conv_igemm and the automatic choice (coco_conv2d itself)
// run on random data in [-1, 1) into a NaN-poisoned output, and every element
// is judged as the GPU check of coconet judges it (src/cpu/tolerance.c and the
// contraction slack of src/cuda/cuda_job.c, with P = 1) against the FP64 sum of
// the same inputs: |got - exact| <= max(4 |ref - exact|, 2 max|ref - exact|,
// 6 ulps of the value's scale, C*R*S * u * scale), u = 2^-24 (2^-53 for
// FP64), ref = the reference kernel (the CPU executor's arithmetic: products
// rounded to FP32, FP64 for FP64, added in order c, r, s). Then a ResNet-like
// layer (N=32, C=K=256, H=W=14, 3x3, pad 1) is timed with the direct
// kernel (coco_conv2d_kernel) and each tile shape: median of --reps runs (CUDA
// events) after 3 warm-up runs, in GFLOP/s counting 2*N*K*OH*OW*C*R*S.
// Exit status 0 when every check passed.
#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "coco_conv.cuh"

// A failed CUDA call (coco_check.cuh): FILE:LINE: CALL: WHY on `to`, exit status 2
static void ck_failed(FILE *to, const char *call, const char *file, int line, const char *why)
{
    fprintf(to, "%s:%d: %s: %s\n", file, line, call, why);
    exit(2);
}
#define CK(call) COCO_CHECK_CALL(CUDA, call, #call, ck_failed, stderr)

static const char *const tname[] = {"FP16", "BF16", "FP32", "FP64"};

struct Shape {
    long N, C, H, W, K, R, S;
    int stride, pad;
    int misalign; // weights one element past a 16-byte boundary
    long OH() const { return (H + 2 * pad - R) / stride + 1; }
    long OW() const { return (W + 2 * pad - S) / stride + 1; }
    long out() const { return N * K * OH() * OW(); }
    double flops() const { return 2.0 * out() * C * R * S; }
};

__global__ void fill_kernel(void *p, int t, long n, unsigned long long seed,
                            unsigned long long stream)
{
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n;
         e += (long)gridDim.x * blockDim.x)
        coco_st(p, e, t, 2 * coco_uniform(seed, stream, (uint64_t)e) - 1);
}

// The reference: one thread per output, the CPU executor's arithmetic (ref)
// and the FP64 sum of the same products (exact).
__global__ void ref_kernel(const void *x, const void *w, void *ref, double *exact, int t, Shape s,
                           long OH, long OW)
{
    long n = s.N * s.K * OH * OW;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n;
         e += (long)gridDim.x * blockDim.x) {
        long ow = e % OW, oh = e / OW % OH, k = e / (OW * OH) % s.K, img = e / (OW * OH * s.K);
        float facc = 0;
        double dacc = 0;
        for (long c = 0; c < s.C; c++)
            for (long r = 0; r < s.R; r++)
                for (long q = 0; q < s.S; q++) {
                    long ih = oh * s.stride - s.pad + r, iw = ow * s.stride - s.pad + q;
                    if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W)
                        continue;
                    double a = coco_ld(x, ((img * s.C + c) * s.H + ih) * s.W + iw, t);
                    double b = coco_ld(w, ((k * s.C + c) * s.R + r) * s.S + q, t);
                    facc = __fadd_rn(facc, __fmul_rn((float)a, (float)b));
                    dacc = __dadd_rn(dacc, __dmul_rn(a, b));
                }
        coco_st(ref, e, t, t == COCO_FP64 ? dacc : (double)facc);
        exact[e] = dacc;
    }
}

static double host_value(const void *p, long i, int t)
{
    switch (t) {
    case COCO_FP16: return (double)__half2float(((const __half *)p)[i]);
    case COCO_BF16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case COCO_FP32: return (double)((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

// type_ulp of src/cpu/tolerance.c
static double ulp(int t, double v)
{
    static const int bits[] = {11, 8, 24, 53}, emin[] = {-14, -126, -126, -1022};
    int e;
    frexp(fabs(v), &e);
    if (v == 0 || e - 1 < emin[t])
        e = emin[t] + 1;
    return ldexp(1.0, e - bits[t]);
}

struct Judged {
    long wrong, unwritten, bitwise;
    double maxdiff, maxerr; // |got - ref|, |got - exact| / scale
};

static Judged judge(const std::vector<char> &got, const std::vector<char> &ref,
                    const std::vector<double> &exact, int t, long n, long crs)
{
    double scale = 0, worst = 0;
    for (long i = 0; i < n; i++) {
        scale = fmax(scale, fabs(exact[i]));
        worst = fmax(worst, fabs(host_value(ref.data(), i, t) - exact[i]));
    }
    double u = t == COCO_FP64 ? ldexp(1, -53) : ldexp(1, -24);
    double floor_ = fmax(fmax(2 * worst, 6 * ulp(t, scale)), (double)crs * u * scale);
    size_t sz = coco_type_size(t);
    Judged j = {0, 0, 0, 0, 0};
    for (long i = 0; i < n; i++) {
        double g = host_value(got.data(), i, t), r = host_value(ref.data(), i, t);
        if (!memcmp(got.data() + i * sz, ref.data() + i * sz, sz))
            j.bitwise++;
        if (isnan(g)) {
            j.unwritten++;
            continue;
        }
        double d = fabs(g - exact[i]);
        if (d > fmax(4 * fabs(r - exact[i]), floor_))
            j.wrong++;
        j.maxdiff = fmax(j.maxdiff, fabs(g - r));
        j.maxerr = fmax(j.maxerr, scale > 0 ? d / scale : d);
    }
    return j;
}

struct Buffers {
    void *x, *w, *wbase, *y, *ref;
    double *exact;
};

static Buffers alloc_buffers(const Shape &s, int t, unsigned long long seed)
{
    size_t sz = coco_type_size(t);
    long nx = s.N * s.C * s.H * s.W, nw = s.K * s.C * s.R * s.S, ny = s.out();
    Buffers b;
    CK(cudaMalloc(&b.x, nx * sz + 16));
    CK(cudaMalloc(&b.wbase, (nw + 8) * sz));
    b.w = (char *)b.wbase + (s.misalign ? sz : 0);
    CK(cudaMalloc(&b.y, ny * sz + 16));
    CK(cudaMalloc(&b.ref, ny * sz + 16));
    CK(cudaMalloc(&b.exact, ny * sizeof(double) + 16));
    fill_kernel<<<1024, 256>>>(b.x, t, nx, seed, 1);
    fill_kernel<<<1024, 256>>>(b.w, t, nw, seed, 2);
    CK(cudaGetLastError());
    return b;
}

static void free_buffers(Buffers &b)
{
    cudaFree(b.x);
    cudaFree(b.wbase);
    cudaFree(b.y);
    cudaFree(b.ref);
    cudaFree(b.exact);
}

static int nvariants(int t)
{
    const CocoConvVariant *list;
    return coco_conv_variants(t, &list);
}

static char errbuf[1024];

static coco_cuda_ctx make_ctx(void)
{
    coco_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.stream = NULL; // the default stream
    ctx.err = errbuf;
    ctx.errlen = sizeof errbuf;
    return ctx;
}

// Variant v of coco_conv_igemm, or -1: coco_conv2d (the automatic choice,
// through the function generated code calls). Returns 0 when not launched.
static int run_variant(const Shape &s, int t, const Buffers &b, int v)
{
    if (v < 0) {
        coco_cuda_ctx ctx = make_ctx();
        if (coco_conv2d(&ctx, 0, b.x, b.w, b.y, t, s.N, s.C, s.H, s.W, s.K, s.R, s.S, s.OH(),
                        s.OW(), s.stride, s.pad)) {
            fprintf(stderr, "coco_conv2d: %s\n", errbuf);
            exit(2);
        }
        return 1;
    }
    int launched = coco_conv_igemm(NULL, b.x, b.w, b.y, t, s.N, s.C, s.H, s.W, s.K, s.R, s.S,
                                   s.OH(), s.OW(), s.stride, s.pad, v);
    CK(cudaGetLastError());
    return launched;
}

static int check_shape(const Shape &s, int t, unsigned long long seed)
{
    long ny = s.out();
    size_t sz = coco_type_size(t);
    Buffers b = alloc_buffers(s, t, seed);
    ref_kernel<<<coco_grid(ny), 256>>>(b.x, b.w, b.ref, b.exact, t, s, s.OH(), s.OW());
    CK(cudaGetLastError());
    std::vector<char> ref(ny * sz), got(ny * sz);
    std::vector<double> exact(ny);
    CK(cudaMemcpy(ref.data(), b.ref, ny * sz, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(exact.data(), b.exact, ny * sizeof(double), cudaMemcpyDeviceToHost));
    int bad = 0;
    printf("N=%ld C=%ld H=%ld W=%ld K=%ld %ldx%ld stride %d pad %d%s %s:", s.N, s.C, s.H, s.W,
           s.K, s.R, s.S, s.stride, s.pad, s.misalign ? " (w misaligned)" : "", tname[t]);
    for (int v = -1; v < nvariants(t); v++) {
        CK(cudaMemset(b.y, 0xff, ny * sz)); // NaN in every type
        if (!run_variant(s, t, b, v)) {
            printf(" [%s: not launched]", coco_conv_variant_name(t, v));
            bad |= t != COCO_FP16 && t != COCO_BF16; // FP16/BF16: only without sm_80 code
            continue;
        }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got.data(), b.y, ny * sz, cudaMemcpyDeviceToHost));
        Judged j = judge(got, ref, exact, t, ny, s.C * s.R * s.S);
        int exact_needed = COCO_CONV_EXACT && (t == COCO_FP32 || t == COCO_FP64);
        int fail = j.wrong || j.unwritten || (exact_needed && j.bitwise != ny);
        bad |= fail;
        printf(" [%s: %s, bitwise %ld/%ld, max|got-ref| %.3g, max err/scale %.3g",
               v < 0 ? "auto" : coco_conv_variant_name(t, v), fail ? "FAIL" : "ok", j.bitwise, ny,
               j.maxdiff, j.maxerr);
        if (j.wrong || j.unwritten)
            printf(", %ld outside tolerance, %ld unwritten", j.wrong, j.unwritten);
        printf("]");
    }
    printf("\n");
    free_buffers(b);
    return bad;
}

template <typename F> static double median_ms(F launch, int reps)
{
    cudaEvent_t a, z;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&z));
    for (int i = 0; i < 3; i++)
        launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int i = 0; i < reps; i++) {
        float t = 0;
        CK(cudaEventRecord(a));
        launch();
        CK(cudaEventRecord(z));
        CK(cudaEventSynchronize(z));
        CK(cudaEventElapsedTime(&t, a, z));
        ms.push_back(t);
    }
    CK(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(z);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

static void time_layer(const Shape &s, int reps)
{
    printf("\nTiming N=%ld C=%ld H=%ld W=%ld K=%ld %ldx%ld stride %d pad %d (%.2f GFLOP), median "
           "of %d runs:\n",
           s.N, s.C, s.H, s.W, s.K, s.R, s.S, s.stride, s.pad, s.flops() * 1e-9, reps);
    printf("%-5s %-18s %10s %10s %8s\n", "type", "kernel", "ms", "GFLOP/s", "speedup");
    for (int t = 0; t < 4; t++) {
        Buffers b = alloc_buffers(s, t, 99);
        long n = s.out();
        double direct = median_ms(
            [&] {
                coco_conv2d_kernel<<<coco_grid(n), 256>>>(b.x, b.w, b.y, t, s.N, s.C, s.H, s.W,
                                                          s.K, s.R, s.S, s.OH(), s.OW(),
                                                          s.stride, s.pad);
            },
            reps < 5 ? reps : 5);
        printf("%-5s %-18s %10.3f %10.1f %8s\n", tname[t], "direct (old)", direct,
               s.flops() / direct * 1e-6, "1.0");
        for (int v = -1; v < nvariants(t); v++) {
            double ms = median_ms([&] { run_variant(s, t, b, v); }, reps);
            printf("%-5s %-18s %10.3f %10.1f %8.1f\n", tname[t],
                   v < 0 ? "auto (coco_conv2d)" : coco_conv_variant_name(t, v), ms,
                   s.flops() / ms * 1e-6, direct / ms);
        }
        free_buffers(b);
    }
}

int main(int argc, char **argv)
{
    int timing = 1, checks = 1, reps = 20, small = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-time"))
            timing = 0;
        else if (!strcmp(argv[i], "--time-only"))
            checks = 0;
        else if (!strcmp(argv[i], "--small"))
            small = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 1;
        else {
            fprintf(stderr, "usage: %s [--no-time | --time-only] [--reps N] [--small]\n", argv[0]);
            return 2;
        }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, sm_%d%d, %d SMs; kernels built %s\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount,
           COCO_CONV_EXACT ? "exact (COCO_CONV_EXACT=1: FP32/FP64 must be bitwise)"
                           : "with fused multiply-adds");
    static const Shape shapes[] = {
        // N, C, H, W, K, R, S, stride, pad, misalign
        {1, 3, 7, 9, 5, 3, 3, 1, 1, 0},
        {2, 17, 13, 11, 33, 3, 3, 2, 1, 0},
        {3, 5, 8, 8, 7, 1, 1, 1, 0, 0},
        {2, 3, 23, 19, 9, 7, 7, 2, 3, 0},
        {4, 64, 14, 14, 64, 3, 3, 1, 1, 0},
        {4, 64, 14, 14, 64, 3, 3, 1, 1, 1},
        {1, 31, 9, 9, 130, 3, 3, 1, 0, 0},
        {5, 48, 12, 10, 200, 1, 1, 2, 0, 0},
        {8, 6, 6, 6, 4, 3, 3, 1, 1, 0},     // examples/conv2d.coco on 4 ranks
        {2, 7, 5, 5, 3, 5, 5, 1, 2, 0},
        {3, 130, 7, 7, 257, 3, 3, 1, 1, 0},
        {16, 3, 32, 32, 16, 7, 7, 2, 3, 0}, // a stem
        {2, 256, 1, 1, 10, 1, 1, 1, 0, 0},  // 1x1 image
        {1, 8, 4, 4, 16, 1, 1, 1, 0, 0},    // CRS = 8
        {2, 33, 9, 7, 19, 3, 2, 3, 2, 0},   // 3x2 filter, stride 3
        {32, 256, 14, 14, 256, 3, 3, 1, 1, 0},
    };
    int bad = 0;
    unsigned long long seed = 12345;
    for (const Shape &s : shapes)
        for (int t = 0; t < 4 && checks; t++, seed++)
            if (!small || s.out() <= 1000000)
                bad |= check_shape(s, t, seed);
    if (checks)
        printf("%s\n", bad ? "conv_check: FAILED" : "conv_check: every check passed");
    if (timing)
        time_layer(Shape{32, 256, 14, 14, 256, 3, 3, 1, 1, 0}, reps);
    return bad ? 1 : 0;
}

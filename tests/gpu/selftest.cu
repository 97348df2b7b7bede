// selftest.cu: CUDA code for tests/gpu/selftest.coco, written by hand
// against the ABI of include/coconet_cuda.h, so that the runtime
// (rt/cuda_child.c) and the launcher can be checked on GPUs without the code
// generator. Two entry points: "program" (NCCL AllReduce, then the Update in
// one kernel) and "rsag" (ReduceScatter into the workspace, AllGather, the
// same kernel). Arithmetic as the CPU executor does it: lr * avg rounded to
// FP32, then p - that rounded to FP32 (no fused multiply-add).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

#include "coco_check.cuh"
#include "coconet_cuda.h"

extern "C" {
int coco_nccl_version = NCCL_VERSION_CODE;
extern const char *const coco_schedule_names[]; // const alone would make it local
const char *const coco_schedule_names[] = {"program", "rsag", NULL};
}

// the library calls' checks (coco_check.cuh): the message names the call,
// this file and line, and the library's words
#define NCCL(call) COCO_CHECK_RET(NCCL, call, #call, coco_check_failed, ctx)
#define CUDA(call) COCO_CHECK_RET(CUDA, call, #call, coco_check_failed, ctx)

// selftest.coco:11  Var p_ = Update(p, p - lr * avg);  (p_ is also output 1)
__global__ void update(float *p, const __half *avg, float lr, float *out, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __fsub_rn(p[i], __fmul_rn(lr, __half2float(avg[i])));
        p[i] = v;
        out[i] = v;
    }
}

static int launch_update(coco_cuda_ctx *ctx, const coco_cuda_args *a, long n)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    update<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((float *)a->input[1],
                                                         (const __half *)a->output[0],
                                                         (float)a->scalar[2],
                                                         (float *)a->output[1], n);
    CUDA(cudaGetLastError());
    return 0;
}

extern "C" size_t coco_workspace__program(const coco_cuda_ctx *ctx, const long *size)
{
    return 0;
}

// selftest.coco:10  Var avg = AllReduce("+", g);
extern "C" int coco_run__program(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    long n = a->size[0];
    NCCL(ncclAllReduce(a->input[0], a->output[0], (size_t)n, ncclHalf, ncclSum,
                       (ncclComm_t)ctx->world, (cudaStream_t)ctx->stream));
    return launch_update(ctx, a, n);
}

extern "C" size_t coco_workspace__rsag(const coco_cuda_ctx *ctx, const long *size)
{
    return ((size_t)size[0] / (size_t)ctx->nranks * sizeof(__half) + 255) / 256 * 256;
}

// rsag: Var rs = ReduceScatter("+", g, 0); Var ag = AllGather(rs);
extern "C" int coco_run__rsag(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    long n = a->size[0], part = n / ctx->nranks;
    if (part * ctx->nranks != n)
        return coco_check_failed(ctx, "split", __FILE__, __LINE__,
                                 "N is not divisible by the ranks");
    NCCL(ncclReduceScatter(a->input[0], ctx->workspace, (size_t)part, ncclHalf, ncclSum,
                           (ncclComm_t)ctx->world, (cudaStream_t)ctx->stream));
    NCCL(ncclAllGather(ctx->workspace, a->output[0], (size_t)part, ncclHalf,
                       (ncclComm_t)ctx->world, (cudaStream_t)ctx->stream));
    return launch_update(ctx, a, n);
}

// faults.cu: CUDA code for tests/gpu/selftest.coco that misbehaves on
// purpose, to show that the runtime's own checks catch it on GPUs
// (tests/gpu/run.sh, part selftest; the run must fail):
//   program  right values, but one FP16 element written just past the end of
//            output avg: the row must be GUARD ("the guard after it is
//            damaged, first at byte 0 past its end");
//   rsag     right values in the checked run, a changed element of p_ in
//            every later run: the repeat run differs, the row must be REPEAT.
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

// the library calls' checks (coco_check.cuh): call, this file and line, and
// the library's words
#define NCCL(call) COCO_CHECK_RET(NCCL, call, #call, coco_check_failed, ctx)
#define CUDA(call) COCO_CHECK_RET(CUDA, call, #call, coco_check_failed, ctx)

// selftest.coco:11  Var p_ = Update(p, p - lr * avg);  then, when `past`,
// avg[n] (one past its end) is written; when `nudge`, p_[0] is changed.
__global__ void update(float *p, __half *avg, float lr, float *out, long n, int past, int nudge)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __fsub_rn(p[i], __fmul_rn(lr, __half2float(avg[i])));
        if (nudge && i == 0)
            v = __fadd_rn(v, 1.0f);
        p[i] = v;
        out[i] = v;
    }
    if (past && i == n)
        avg[n] = __float2half(0.0f);
}

static int launch(coco_cuda_ctx *ctx, const coco_cuda_args *a, long n, int past, int nudge)
{
    update<<<(unsigned)((n + 256) / 256), 256, 0, (cudaStream_t)ctx->stream>>>(
        (float *)a->input[1], (__half *)a->output[0], (float)a->scalar[2],
        (float *)a->output[1], n, past, nudge);
    CUDA(cudaGetLastError());
    return 0;
}

extern "C" size_t coco_workspace__program(const coco_cuda_ctx *ctx, const long *size)
{
    return 0;
}

extern "C" int coco_run__program(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    long n = a->size[0];
    NCCL(ncclAllReduce(a->input[0], a->output[0], (size_t)n, ncclHalf, ncclSum,
                       (ncclComm_t)ctx->world, (cudaStream_t)ctx->stream));
    return launch(ctx, a, n, 1, 0);
}

extern "C" size_t coco_workspace__rsag(const coco_cuda_ctx *ctx, const long *size)
{
    return 0;
}

extern "C" int coco_run__rsag(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    static int calls; // the checked run is the first
    long n = a->size[0];
    NCCL(ncclAllReduce(a->input[0], a->output[0], (size_t)n, ncclHalf, ncclSum,
                       (ncclComm_t)ctx->world, (cudaStream_t)ctx->stream));
    return launch(ctx, a, n, 0, calls++ > 0);
}

// group.cu: CUDA code for tests/gpu/group.coco, written by hand against
// include/coconet_cuda.h: an AllReduce on the GROUP communicator that the
// runtime makes with ncclCommSplit, then t = s * 0.5 (exact in FP32).
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

#include "coco_check.cuh"
#include "coconet_cuda.h"

extern "C" {
int coco_nccl_version = NCCL_VERSION_CODE;
extern const char *const coco_schedule_names[]; // const alone would make it local
const char *const coco_schedule_names[] = {"program", NULL};
}

// group.coco:10  Var t = s * 0.5;
__global__ void half_of(const float *s, float *t, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        t[i] = s[i] * 0.5f;
}

extern "C" size_t coco_workspace__program(const coco_cuda_ctx *ctx, const long *size)
{
    return ((size_t)size[0] * sizeof(float) + 255) / 256 * 256;
}

// group.coco:9  Var s = AllReduce("+", x);  (within each GROUP)
extern "C" int coco_run__program(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    long n = a->size[0];
    cudaStream_t st = (cudaStream_t)ctx->stream;
    if (!ctx->group) {
        snprintf(ctx->err, ctx->errlen, "rank %d: group.cu: no GROUP communicator", ctx->rank);
        return 1;
    }
    COCO_CHECK_RET(NCCL,
                   ncclAllReduce(a->input[0], ctx->workspace, (size_t)n, ncclFloat, ncclSum,
                                 (ncclComm_t)ctx->group, st),
                   "ncclAllReduce", coco_check_failed, ctx);
    half_of<<<(unsigned)((n + 255) / 256), 256, 0, st>>>((const float *)ctx->workspace,
                                                          (float *)a->output[0], n);
    COCO_CHECK_RET(CUDA, cudaGetLastError(), "kernel launch", coco_check_failed, ctx);
    return 0;
}

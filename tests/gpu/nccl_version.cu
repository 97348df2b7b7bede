// nccl_version.cu: CUDA code for tests/gpu/selftest.coco that records
// another NCCL version than the headers it is built with, as an object built
// against another NCCL would (tests/gpu/run.sh, part faults): the runtime
// must refuse to load it, naming both versions, before any rank joins NCCL.
// Its entry points are never to be reached: each fails if it is.
#include <nccl.h>
#include <stdio.h>

#include "coconet_cuda.h"

// 2.19.3, or 2.19.4 should the headers be 2.19.3 themselves
#define OTHER_NCCL (NCCL_VERSION_CODE == 21903 ? 21904 : 21903)

extern "C" {
int coco_nccl_version = OTHER_NCCL;
extern const char *const coco_schedule_names[]; // const alone would make it local
const char *const coco_schedule_names[] = {"program", "rsag", NULL};
}

static int refused_not(coco_cuda_ctx *ctx, const char *name)
{
    snprintf(ctx->err, ctx->errlen, "rank %d: %s: this object records NCCL %d, not the %d of "
             "its headers, and should have been refused", ctx->rank, name, OTHER_NCCL,
             NCCL_VERSION_CODE);
    return 1;
}

extern "C" size_t coco_workspace__program(const coco_cuda_ctx *ctx, const long *size)
{
    return 0;
}

extern "C" int coco_run__program(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    return refused_not(ctx, "program");
}

extern "C" size_t coco_workspace__rsag(const coco_cuda_ctx *ctx, const long *size)
{
    return 0;
}

extern "C" int coco_run__rsag(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    return refused_not(ctx, "rsag");
}

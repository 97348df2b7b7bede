// sanitize_control.cu: CUDA code for tests/gpu/selftest.coco (its program
// alone: run with --schedule program) with one defect that only
// compute-sanitizer sees, chosen by COCO_SANITIZE_CONTROL, so that
// tests/gpu/run.sh (part sanitize) shows that the tool reaches the kernels of
// a rank's process: a clean report from a tool that saw nothing would prove
// nothing. The values are right (as in selftest.cu); the defects:
//   memcheck   one float written just past the end of a 1 KiB buffer of its
//              own (cudaMalloc: the runtime's guard bytes are not involved)
//   racecheck  two warps write the same shared-memory words, no barrier between
//   synccheck  a warp barrier (__syncwarp) whose mask leaves out the lane that
//              calls it (lane 31 of warp 0; the PTX ISA calls that undefined).
//              A block barrier skipped by a whole warp, the first control of
//              this kind, is legal since sm_70 (exited warps count as
//              arrived) and synccheck rightly said nothing on an H100
// Unset, it is clean.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coco_check.cuh"
#include "coconet_cuda.h"

extern "C" {
int coco_nccl_version = NCCL_VERSION_CODE;
extern const char *const coco_schedule_names[]; // const alone would make it local
const char *const coco_schedule_names[] = {"program", NULL};
}

// the CUDA calls' check (coco_check.cuh): call, this file and line, and CUDA's words
#define CUDA(call) COCO_CHECK_RET(CUDA, call, #call, coco_check_failed, ctx)

enum { NONE, MEMCHECK, RACECHECK, SYNCCHECK };

// selftest.coco:11  Var p_ = Update(p, p - lr * avg);  after avg = AllReduce
// of g over one rank (avg = g); plus the chosen defect, in block 0.
__global__ void update(float *p, const __half *g, __half *avg, float lr, float *out, long n,
                       int defect, float *own)
{
    __shared__ volatile float word[32]; // volatile: the racing stores stay
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        avg[i] = g[i];
        float v = __fsub_rn(p[i], __fmul_rn(lr, __half2float(g[i])));
        p[i] = v;
        out[i] = v;
    }
    if (blockIdx.x != 0)
        return;
    if (defect == MEMCHECK && threadIdx.x == 0)
        own[256] = 1.0f; // one past the end of 256 floats
    if (defect == RACECHECK && threadIdx.x < 64)
        word[threadIdx.x % 32] = (float)threadIdx.x; // warps 0 and 1, same words
    if (defect == SYNCCHECK && threadIdx.x < 32)
        __syncwarp(0x7fffffffu); // lanes 0..30 meet; lane 31 is not in its own mask
}

extern "C" size_t coco_workspace__program(const coco_cuda_ctx *ctx, const long *size)
{
    return 0;
}

extern "C" int coco_run__program(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    const char *c = getenv("COCO_SANITIZE_CONTROL");
    int defect = !c ? NONE : !strcmp(c, "memcheck") ? MEMCHECK : !strcmp(c, "racecheck") ? RACECHECK
                 : !strcmp(c, "synccheck") ? SYNCCHECK : NONE;
    long n = a->size[0];
    if (ctx->nranks != 1)
        return coco_check_failed(ctx, "ranks", __FILE__, __LINE__, "this control runs on one rank");
    static float *own; // kept for the process's life: freeing it would not sync
    if (!own)
        CUDA(cudaMalloc(&own, 256 * sizeof(float)));
    // the block count keeps 64 threads of block 0 in the kernel whatever n is
    unsigned blocks = (unsigned)((n + 255) / 256);
    update<<<blocks ? blocks : 1, 256, 0, (cudaStream_t)ctx->stream>>>(
        (float *)a->input[1], (const __half *)a->input[0], (__half *)a->output[0],
        (float)a->scalar[2], (float *)a->output[1], n, defect, own);
    CUDA(cudaGetLastError());
    return 0;
}

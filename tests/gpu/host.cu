// host.cu: "generated code" for tests/gpu/host.coco that runs on the CPU, for
// the launcher's test on machines without a GPU: the stand-in runtime
// (fake_rt.c) hands it host memory. It follows the ABI of
// include/coconet_cuda.h and the CPU executor's arithmetic (FP32, one
// rounding per operation), so its results match the reference bit for bit.
#include <stddef.h>

#include "coconet_cuda.h"

extern "C" {
int coco_nccl_version = 0; // the stand-in runtime does not check it
extern const char *const coco_schedule_names[];
const char *const coco_schedule_names[] = {"program", "fused", NULL};
// the arguments a variant's peer-memory kernels would reach in the other
// ranks' windows (coconet_cuda.h): the test's own choice for "fused" (x and
// the output), none listed for "program" (an object without the lists)
extern const int coco_window_inputs__fused[], coco_window_outputs__fused[];
const int coco_window_inputs__fused[] = {0, -1};
const int coco_window_outputs__fused[] = {0, -1};
}

// --breakdown: a mark after each step, as the generated code makes them
static void mark(coco_cuda_ctx *ctx, const char *op, int line)
{
    if (ctx->mark)
        ctx->mark(ctx->marks, COCO_MARK_KERNEL, op, line, "kernel");
}

// host.coco:9  Var y = x * a + 1;
static void compute_y(const coco_cuda_args *a)
{
    long n = a->size[0];
    const float *x = (const float *)a->input[0];
    float *y = (float *)a->output[0];
    float av = (float)a->scalar[2];
    for (long i = 0; i < n; i++) {
        volatile float xa = x[i] * av; // no contraction into a fused multiply-add
        y[i] = xa + 1.0f;
    }
}

// host.coco:10  Var s_ = Update(s, s + y);
static void update_s(const coco_cuda_args *a)
{
    long n = a->size[0];
    float *s = (float *)a->input[1];
    const float *y = (const float *)a->output[0];
    for (long i = 0; i < n; i++)
        s[i] = s[i] + y[i];
}

extern "C" size_t coco_workspace__program(const coco_cuda_ctx *ctx, const long *size)
{
    return 0;
}

// the program: a kernel a statement
extern "C" int coco_run__program(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    compute_y(a);
    mark(ctx, "computation", 9);
    update_s(a);
    mark(ctx, "computation", 10);
    return 0;
}

extern "C" size_t coco_workspace__fused(const coco_cuda_ctx *ctx, const long *size)
{
    return 0;
}

// the schedule fused: one kernel
extern "C" int coco_run__fused(coco_cuda_ctx *ctx, const coco_cuda_args *a)
{
    compute_y(a);
    update_s(a);
    mark(ctx, "computation", 9);
    return 0;
}

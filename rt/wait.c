/* wait.c: a rank's errors and bounded waits (build/libcoconet_cuda.so).
 *
 * An error writes rt->err, naming the rank and, for a failed CUDA, NCCL or
 * cuBLASLt call, the call, the file and the line (rt_internal.h's CUDA_OK,
 * NCCL_OK, LT_OK). Every wait on the GPU polls the stream and NCCL's
 * asynchronous error state against a deadline (rt->timeout_s): a failed or
 * stuck peer gives an error here, never a hang. Used by every other file of
 * the runtime. */
#include "rt_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* ---- errors ---- */

int rt_fail(CocoRt *rt, const char *call, const char *file, int line, const char *why)
{
    snprintf(rt->err, rt->errlen, "rank %d: %s failed at %s:%d: %s", rt->rank, call, file, line,
             why);
    return -1;
}

int rt_error(CocoRt *rt, const char *fmt, ...)
{
    int n = snprintf(rt->err, rt->errlen, "rank %d: ", rt->rank);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < rt->errlen)
        vsnprintf(rt->err + n, rt->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

const char *nccl_why(ncclResult_t r, char *buf, size_t len)
{
    const char *last = ncclGetLastError(NULL);
    snprintf(buf, len, "%s%s%s", ncclGetErrorString(r), last && *last ? ": " : "",
             last ? last : "");
    return buf;
}

double rt_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* ---- bounded waits ---- */

static int comm_error(CocoRt *rt, ncclComm_t comm, const char *name)
{
    ncclResult_t async = ncclSuccess;
    if (!comm)
        return 0;
    NCCL_OK(rt, ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
        char why[512];
        return rt_error(rt, "NCCL reports an error on %s: %s", name,
                        nccl_why(async, why, sizeof why));
    }
    return 0;
}

/* Waits until `event` (or, when NULL, `stream`) has completed, polling the
 * communicators' error state; fails after the time limit. */
int wait_gpu(CocoRt *rt, cudaStream_t stream, cudaEvent_t event, const char *what)
{
    double deadline = rt_now_s() + rt->timeout_s;
    long us = 10;
    for (;;) {
        cudaError_t q = event ? cudaEventQuery(event) : cudaStreamQuery(stream);
        if (q == cudaSuccess)
            return 0;
        if (q != cudaErrorNotReady)
            return rt_error(rt, "%s: %s", what, cudaGetErrorString(q));
        if (comm_error(rt, rt->world, "WORLD") || comm_error(rt, rt->world_window, "WORLD") ||
            comm_error(rt, rt->group, "GROUP"))
            return -1;
        if (rt_now_s() > deadline)
            return rt_error(rt, "%s: no completion after %.0f s (a peer failed or hangs; "
                            "--timeout sets the limit)", what, rt->timeout_s);
        pause_us(us);
        us = us < 1000 ? us * 2 : 1000;
    }
}

int wait_streams(CocoRt *rt, const char *what)
{
    if (wait_gpu(rt, rt->stream, NULL, what))
        return -1;
    return wait_gpu(rt, rt->side, NULL, what);
}

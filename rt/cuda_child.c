/* cuda_child.c: the GPU side of one rank (build/libcoconet_cuda.so).
 *
 * Loaded with dlopen by a rank's process after the fork (or under MPI), never
 * by a process that forks afterwards. It picks the GPU, joins the NCCL
 * communicators (WORLD; GROUP by ncclCommSplit with color rank / group size),
 * makes the streams and the cuBLASLt handle with a 32 MiB workspace, loads
 * the generated shared object (refusing one built against another NCCL
 * version than the library loaded here), and runs program variants through
 * the ABI of include/coconet_cuda.h: inputs copied in, one checked run whose
 * outputs and new values are copied back, then timed runs (CUDA events;
 * inputs restored from pristine device copies outside the timed region;
 * ranks lined up by a one-element AllReduce before each run), then one more
 * run whose results must equal the checked run's bit for bit. Around every
 * buffer of the slab lie guard bytes (a known pattern written before the
 * checked run, verified after it and at the end): a write just outside a
 * buffer is reported (CocoRtFault), as is a repeat run that differs.
 *
 * Every CUDA, NCCL and cuBLASLt call goes through a check that names the
 * rank, the call, the file and the line. Every wait on the GPU polls the
 * stream and NCCL's asynchronous error state against a deadline: a failed or
 * stuck peer gives an error here, never a hang; the caller then closes with
 * abort = 1 (ncclCommAbort). Interface: include/coconet_rt.h.
 *
 * This file: errors, bounded waits, opening and closing (device,
 * communicators, handles, the generated code) and the API table; the
 * buffers of a variant are in slab.c, running it in run.c, the events of
 * --breakdown in breakdown.c, the machine's limits in limits.c. */
#define _GNU_SOURCE /* dladdr */
#include "rt_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static double now_s(void)
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
    double deadline = now_s() + rt->timeout_s;
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
        if (now_s() > deadline)
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

/* ---- opening: device, communicators, handles, the generated code ---- */

/* Device `index` modulo the visible ones (a session's: the caller's device) */
int rt_select_device(CocoRt *rt, int index)
{
    int n = 0;
    CUDA_OK(rt, cudaGetDeviceCount(&n));
    if (n < 1)
        return rt_error(rt, "no CUDA device is visible");
    rt->device = index % n;
    CUDA_OK(rt, cudaSetDevice(rt->device));
    struct cudaDeviceProp prop;
    CUDA_OK(rt, cudaGetDeviceProperties(&prop, rt->device));
    snprintf(rt->gpu, sizeof rt->gpu, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
    return 0;
}

/* The file of the libnccl this process's NCCL calls bind to */
const char *rt_nccl_library_path(char *buf, size_t len)
{
    Dl_info info;
    if (dladdr((void *)ncclGetVersion, &info) && info.dli_fname)
        snprintf(buf, len, "%s", info.dli_fname);
    else
        snprintf(buf, len, "libnccl.so.2");
    return buf;
}

static int open_device(CocoRt *rt, const CocoRtConfig *cfg)
{
    return rt_select_device(rt, cfg->local_rank);
}

/* Loads a generated shared object into *so, refusing one built against
 * another NCCL version than the library this process loaded. */
int rt_load_so(CocoRt *rt, const char *path, void **so)
{
    *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*so)
        return rt_error(rt, "cannot load the generated code: %s", dlerror());
    const int *built = (const int *)dlsym(*so, "coco_nccl_version");
    if (!built)
        return rt_error(rt, "%s exports no coco_nccl_version: not generated by coconet", path);
    rt->nccl_built = *built;
    NCCL_OK(rt, ncclGetVersion(&rt->nccl_loaded));
    if (rt->nccl_built != rt->nccl_loaded) {
        char lib[1024];
        return rt_error(rt, "NCCL version mismatch: the generated code was built with NCCL "
                        "%d.%d.%d headers but this process loaded NCCL %d.%d.%d (%s); the NCCL "
                        "device API has no ABI promise across versions: build with the headers "
                        "of the library that runs (NCCL_HOME, see the README), or make that "
                        "library the one loaded (LD_LIBRARY_PATH)",
                        rt->nccl_built / 10000, rt->nccl_built / 100 % 100, rt->nccl_built % 100,
                        rt->nccl_loaded / 10000, rt->nccl_loaded / 100 % 100,
                        rt->nccl_loaded % 100, rt_nccl_library_path(lib, sizeof lib));
    }
    return 0;
}

static int load_generated(CocoRt *rt, const char *path)
{
    return rt_load_so(rt, path, &rt->so);
}

/* rt->group: this rank's GROUP of group_size ranks split from WORLD (none
 * when group_size is 0); the launcher's ranks and a session's */
int rt_split_group(CocoRt *rt, int nranks, int rank, int group_size)
{
    if (group_size <= 0)
        return 0;
    if (nranks % group_size)
        return rt_error(rt, "GROUP size %d does not divide the %d ranks", group_size, nranks);
    NCCL_OK(rt, ncclCommSplit(rt->world, rank / group_size, rank, &rt->group, NULL));
    return 0;
}

static int open_comms(CocoRt *rt, const CocoRtConfig *cfg)
{
    ncclUniqueId id;
    memcpy(&id, cfg->nccl_id, sizeof id);
    NCCL_OK(rt, ncclCommInitRank(&rt->world, cfg->nranks, id, cfg->rank));
    coco_test_die(rt->rank, "init", NULL); /* the fault tests' hook (coconet_rt.h) */
    return rt_split_group(rt, cfg->nranks, cfg->rank, cfg->group_size);
}

/* A whole-number knob in [lo, hi] and a multiple of step, fallback when
 * unset, or an error naming it */
static int env_number(CocoRt *rt, const char *name, long fallback, long lo, long hi, long step,
                      long *out)
{
    const char *v = getenv(name);
    *out = fallback;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if ((errno || *end || x < lo || x > hi || x % step) && step > 1)
        return rt_error(rt, "%s=%s: expected a whole number from %ld to %ld, a multiple of %ld",
                        name, v, lo, hi, step);
    if (errno || *end || x < lo || x > hi)
        return rt_error(rt, "%s=%s: expected a whole number from %ld to %ld", name, v, lo, hi);
    *out = x;
    return 0;
}

/* A knob that is 0 (unset) or 1, or an error naming it */
static int env_flag(CocoRt *rt, const char *name, int *out)
{
    const char *v = getenv(name);
    if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
        return rt_error(rt, "%s=%s: expected 0 or 1", name, v);
    *out = v && !strcmp(v, "1");
    return 0;
}

/* The fused-collective knobs: COCONET_FUSED=auto|oneshot|twoshot|push|nccl,
 * COCONET_FUSED_BLOCKS, COCONET_FUSED_THREADS, COCONET_FUSED_ONESHOT_BYTES,
 * COCONET_FUSED_PUSH_BYTES, COCONET_FUSED_PUSH_ROUND,
 * COCONET_FUSED_VEC=1 (one element a step instead of 16-byte vectors),
 * COCONET_FUSED_PEERS=1 (one peer's loads in flight at a time, not all);
 * COCONET_NO_ALIAS=1 (every output in a buffer of its own);
 * COCONET_TIME_HOST_START=1 (a timed run's start event recorded after the
 * host waited for the ranks' line-up, the way runs were timed before they
 * started behind it on the GPU: run.c's timed_run); COCONET_COLD_L2=1 (the
 * L2 emptied before each timed run: run.c's clear_l2); the overlapped
 * MatMul's COCONET_OVERLAP_CHUNKS, COCONET_OVERLAP_SMS and
 * COCONET_OVERLAP_TAIL=1 (src/cuda/emit_overlap.c); COCONET_SCATTER_BUCKET
 * (the elements of a scattered tensor's bucket, rt/kernels/coco_scatter.cuh);
 * and
 * COCONET_NCCL_WINDOW_BYTES (NCCL calls over WORLD on smaller values use the
 * window's communicator: coco_world). */
int rt_read_knobs(CocoRt *rt)
{
    static const char *const algo[] = {"auto", "oneshot", "twoshot", "nccl", "push"};
    const char *v = getenv("COCONET_FUSED");
    rt->fused_algo = -1;
    for (int k = 0; k < 5; k++)
        if (!v || !*v || !strcmp(v, algo[k]))
            rt->fused_algo = v && *v ? k : 0;
    if (rt->fused_algo < 0)
        return rt_error(rt, "COCONET_FUSED=%s: expected auto, oneshot, twoshot, push or nccl", v);
    long blocks, threads;
    if (env_number(rt, "COCONET_FUSED_BLOCKS", 0, 0, LSA_BLOCKS, 1, &blocks) ||
        env_number(rt, "COCONET_FUSED_THREADS", 0, 0, 512, 32, &threads) ||
        env_number(rt, "COCONET_FUSED_ONESHOT_BYTES", ONESHOT_BYTES, 0, LONG_MAX, 1,
                   &rt->fused_oneshot_bytes) ||
        env_number(rt, "COCONET_FUSED_PUSH_BYTES", PUSH_BYTES, 0, LONG_MAX, 1,
                   &rt->fused_push_bytes) ||
        env_number(rt, "COCONET_FUSED_PUSH_ROUND", -1, 0, 1L << 30, 1,
                   &rt->fused_push_round) ||
        env_number(rt, "COCONET_NCCL_WINDOW_BYTES", WINDOW_BYTES, 0, LONG_MAX, 1,
                   &rt->nccl_window_bytes) ||
        env_number(rt, "COCONET_OVERLAP_CHUNKS", 0, 0, 64, 1, &rt->overlap_chunks) ||
        env_number(rt, "COCONET_OVERLAP_SMS", 0, 0, 1024, 1, &rt->overlap_sms) ||
        env_number(rt, "COCONET_SCATTER_BUCKET", 0, 0, 1L << 24, 64, &rt->scatter_bucket))
        return -1;
    rt->fused_blocks = (int)blocks; /* 0: the runtime's choice */
    rt->fused_threads = (int)threads;
    return env_flag(rt, "COCONET_FUSED_VEC", &rt->fused_vec) ||
           env_flag(rt, "COCONET_FUSED_PEERS", &rt->fused_peers) ||
           env_flag(rt, "COCONET_ONE_RANK_FUSED", &rt->one_rank_fused) ||
           env_flag(rt, "COCONET_OVERLAP_TAIL", &rt->overlap_tail) ||
           env_flag(rt, "COCONET_NO_ALIAS", &rt->no_alias) ||
           env_flag(rt, "COCONET_TIME_HOST_START", &rt->host_start) ||
           env_flag(rt, "COCONET_COLD_L2", &rt->cold_l2);
}

/* The device communicator of the one-kernel fused collectives, made by the
 * generated code (NCCL's device API is C++), when every rank of WORLD can
 * load and store every other's memory. It and the slab's window belong to
 * a twin of WORLD (world_window): NCCL runs its symmetric kernels on
 * buffers of a window, which are slower than its ring and tree kernels for
 * large values (bench/results/2026-11-22-h200x2-probe.md), so the
 * generated code sends those through WORLD itself (coco_world). One rank
 * needs none of them: its fused kernels run over its own memory, with no
 * barrier (coco_lsa_usable, rt/kernels/coco_lsa.cuh). */
static int open_lsa(CocoRt *rt)
{
    coco_lsa_open_fn open = (coco_lsa_open_fn)(size_t)dlsym(rt->so, "coco_lsa_open");
    if (!open || rt->fused_algo == 3 || rt->nranks == 1)
        return 0;
    NCCL_OK(rt, ncclCommSplit(rt->world, 0, rt->rank, &rt->world_window, NULL));
    char why[512] = "";
    if (open(rt->world_window, LSA_BLOCKS, &rt->lsa, why, sizeof why))
        return rt_error(rt, "the device communicator of the fused collectives: %s", why);
    if (!rt->lsa) { /* several hosts: no window, no twin */
        NCCL_OK(rt, ncclCommDestroy(rt->world_window));
        rt->world_window = NULL;
    }
    return 0;
}

static void close_lsa(CocoRt *rt)
{
    coco_lsa_close_fn close = (coco_lsa_close_fn)(size_t)dlsym(rt->so, "coco_lsa_close");
    if (rt->lsa && close)
        close(rt->world_window, rt->lsa);
    rt->lsa = NULL;
}

static int open_handles(CocoRt *rt)
{
    CUDA_OK(rt, cudaStreamCreateWithFlags(&rt->stream, cudaStreamNonBlocking));
    CUDA_OK(rt, cudaStreamCreateWithFlags(&rt->side, cudaStreamNonBlocking));
    LT_OK(rt, cublasLtCreate(&rt->lt));
    CUDA_OK(rt, cudaMalloc(&rt->lt_workspace, LT_WORKSPACE));
    CUDA_OK(rt, cudaMalloc((void **)&rt->barrier, sizeof(float)));
    CUDA_OK(rt, cudaMemset(rt->barrier, 0, sizeof(float)));
    CUDA_OK(rt, cudaMallocHost((void **)&rt->stage, STAGE));
    return 0;
}

/* With COCONET_TRACE set: the seconds a step of opening or closing took
 * since *since, on stderr; *since moves to now; rc passes through */
static int traced(const CocoRt *rt, const char *step, int rc, double *since)
{
    double now = now_s();
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: rank %d: runtime: %s %.3f s\n", rt->rank, step,
                now - *since);
    *since = now;
    return rc;
}

/* One communicator, if open, destroyed (or aborted) and its time traced */
static void close_comm(const CocoRt *rt, ncclComm_t comm, int abort, const char *what, double *t)
{
    if (!comm)
        return;
    abort ? ncclCommAbort(comm) : ncclCommDestroy(comm);
    traced(rt, what, 0, t);
}

static void rt_close(CocoRt *rt, int abort)
{
    if (!rt)
        return;
    double t = now_s();
    if (!abort) {
        held_free(rt); /* its window before the communicators */
        close_lsa(rt);
        traced(rt, "close: the slab, its window and the device communicator", 0, &t);
    }
    /* each traced: at the end of a tune the three took 1.0 s together
     * (bench/results/2026-11-27-h200x4-b.md), the ranks' last cost */
    close_comm(rt, rt->group, abort, "close: the GROUP communicator", &t);
    close_comm(rt, rt->world_window, abort, "close: the windows' communicator", &t);
    close_comm(rt, rt->world, abort, "close: the WORLD communicator", &t);
    if (!abort) { /* after a failure the device may be unusable: leave it to exit */
        if (rt->lt)
            cublasLtDestroy(rt->lt);
        cudaFree(rt->lt_workspace);
        cudaFree(rt->barrier);
        cudaFree(rt->l2_buffer);
        cudaFreeHost(rt->stage);
        if (rt->stream)
            cudaStreamDestroy(rt->stream);
        if (rt->side)
            cudaStreamDestroy(rt->side);
    }
    if (rt->so)
        dlclose(rt->so);
    traced(rt, "close: the handles and the generated code", 0, &t);
    free(rt);
}

/* Pinned host memory for the rank's result buffers (CocoRtApi.host_alloc);
 * a failed allocation leaves no error behind for a later check to find */
static void *rt_host_alloc(CocoRt *rt, size_t bytes)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void rt_host_free(CocoRt *rt, void *p)
{
    if (p)
        cudaFreeHost(p);
}

static CocoRt *rt_open(const CocoRtConfig *cfg, char *err, size_t errlen)
{
    CocoRt *rt = calloc(1, sizeof *rt);
    if (!rt) {
        snprintf(err, errlen, "rank %d: out of memory", cfg->rank);
        return NULL;
    }
    rt->rank = cfg->rank;
    rt->nranks = cfg->nranks;
    rt->group_size = cfg->group_size > 0 ? cfg->group_size : cfg->nranks;
    rt->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 300;
    rt->err = err;
    rt->errlen = errlen;
    /* the version check comes before NCCL init, so a mismatch fails fast */
    double t = now_s();
    if (traced(rt, "open: the knobs and the device", rt_read_knobs(rt) || open_device(rt, cfg),
               &t) ||
        traced(rt, "open: the generated code loaded", load_generated(rt, cfg->so_path), &t) ||
        traced(rt, "open: the communicators", open_comms(rt, cfg), &t) ||
        traced(rt, "open: the device communicator", open_lsa(rt), &t) ||
        traced(rt, "open: streams, cuBLASLt, workspace", open_handles(rt), &t)) {
        rt_close(rt, 1);
        return NULL;
    }
    return rt;
}

/* ncclGetUniqueId on rank 0 (the launcher's and a session's, rt/session.c) */
int rt_unique_id(unsigned char id[COCO_RT_ID_BYTES], char *err, size_t errlen)
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        char why[512];
        snprintf(err, errlen, "rank 0: ncclGetUniqueId failed: %s", nccl_why(r, why, sizeof why));
        return -1;
    }
    memcpy(id, &u, COCO_RT_ID_BYTES);
    return 0;
}

static void rt_describe(CocoRt *rt, char *buf, size_t len)
{
    snprintf(buf, len, "%s, NCCL %d.%d.%d, fused collectives: %s", rt->gpu,
             rt->nccl_loaded / 10000, rt->nccl_loaded / 100 % 100, rt->nccl_loaded % 100,
             rt->lsa ? "one kernel over the peers' memory"
             : rt->nranks == 1 && rt->fused_algo != 3 && dlsym(rt->so, "coco_lsa_open")
                 ? "one kernel over local memory (one rank)"
                 : "NCCL calls");
}

const CocoRtApi *coco_rt_api(void);

const CocoRtApi *coco_rt_api(void)
{
    static const CocoRtApi api = {COCO_RT_ABI,       rt_unique_id,  rt_open,
                                  rt_run,            rt_close,      rt_describe,
                                  rt_machine_key,    rt_measure_limits, rt_host_alloc,
                                  rt_host_free};
    return &api;
}

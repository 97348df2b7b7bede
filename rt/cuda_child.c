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
 * buffer of the arena lie guard bytes (a known pattern written before the
 * checked run, verified after it and at the end): a write just outside a
 * buffer is reported (CocoRtFault), as is a repeat run that differs.
 *
 * Every CUDA, NCCL and cuBLASLt call goes through a check that names the
 * rank, the call, the file and the line. Every wait on the GPU polls the
 * stream and NCCL's asynchronous error state against a deadline: a failed or
 * stuck peer gives an error here, never a hang; the caller then closes with
 * abort = 1 (ncclCommAbort). Interface: rt/cuda_child.h. */
#define _GNU_SOURCE /* dladdr */
#include "cuda_child.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coconet_cuda.h"

enum { LT_WORKSPACE = 32 << 20, MAXARGS = 1024, MAXTIMED = 100000 };
enum { LSA_BLOCKS = 264,              /* LSA barriers: 2 blocks per SM of an H200 */
       ONESHOT_BYTES = 256 << 10,     /* fused collectives: one-shot up to this input */
       ALIGN = 4096,                  /* of every buffer in the arena */
       GUARD = 256,                   /* guard bytes before and after each buffer */
       STAGE = 32 << 20 };            /* pinned host bytes for the repeat comparison */

struct CocoRt {
    int rank, nranks, group_size, device;
    double timeout_s;
    ncclComm_t world, group;
    cudaStream_t stream, side;
    cublasLtHandle_t lt;
    void *lt_workspace;
    float *barrier;      /* one float on the device, for lining ranks up */
    unsigned char *stage; /* STAGE pinned bytes: results of the repeat run, in chunks */
    void *so;            /* the generated shared object */
    void *lsa;           /* the generated code's ncclDevComm over WORLD, or NULL */
    int fused_algo, fused_blocks, fused_threads; /* COCONET_FUSED_* (coconet_cuda.h) */
    long fused_oneshot_bytes;
    int no_alias;        /* COCONET_NO_ALIAS=1: outputs never share an input's buffer */
    int nccl_built, nccl_loaded;
    char gpu[320];
    char *err;           /* where the current call's message goes */
    size_t errlen;
};

/* ---- errors ---- */

static int rt_fail(CocoRt *rt, const char *call, const char *file, int line, const char *why)
{
    snprintf(rt->err, rt->errlen, "rank %d: %s failed at %s:%d: %s", rt->rank, call, file, line,
             why);
    return -1;
}

static int rt_error(CocoRt *rt, const char *fmt, ...)
{
    int n = snprintf(rt->err, rt->errlen, "rank %d: ", rt->rank);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < rt->errlen)
        vsnprintf(rt->err + n, rt->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *nccl_why(ncclResult_t r, char *buf, size_t len)
{
    const char *last = ncclGetLastError(NULL);
    snprintf(buf, len, "%s%s%s", ncclGetErrorString(r), last && *last ? ": " : "",
             last ? last : "");
    return buf;
}

#define CUDA_OK(rt, call)                                                                      \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            return rt_fail(rt, #call, __FILE__, __LINE__, cudaGetErrorString(e_));             \
    } while (0)
#define NCCL_OK(rt, call)                                                                      \
    do {                                                                                       \
        ncclResult_t e_ = (call);                                                              \
        char why_[512];                                                                        \
        if (e_ != ncclSuccess)                                                                 \
            return rt_fail(rt, #call, __FILE__, __LINE__, nccl_why(e_, why_, sizeof why_));    \
    } while (0)
#define LT_OK(rt, call)                                                                        \
    do {                                                                                       \
        cublasStatus_t e_ = (call);                                                            \
        if (e_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return rt_fail(rt, #call, __FILE__, __LINE__, cublasLtGetStatusString(e_));        \
    } while (0)

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
static int wait_gpu(CocoRt *rt, cudaStream_t stream, cudaEvent_t event, const char *what)
{
    double deadline = now_s() + rt->timeout_s;
    long us = 10;
    for (;;) {
        cudaError_t q = event ? cudaEventQuery(event) : cudaStreamQuery(stream);
        if (q == cudaSuccess)
            return 0;
        if (q != cudaErrorNotReady)
            return rt_error(rt, "%s: %s", what, cudaGetErrorString(q));
        if (comm_error(rt, rt->world, "WORLD") || comm_error(rt, rt->group, "GROUP"))
            return -1;
        if (now_s() > deadline)
            return rt_error(rt, "%s: no completion after %.0f s (a peer failed or hangs; "
                            "--timeout sets the limit)", what, rt->timeout_s);
        pause_us(us);
        us = us < 1000 ? us * 2 : 1000;
    }
}

static int wait_streams(CocoRt *rt, const char *what)
{
    if (wait_gpu(rt, rt->stream, NULL, what))
        return -1;
    return wait_gpu(rt, rt->side, NULL, what);
}

/* ---- opening: device, communicators, handles, the generated code ---- */

static int open_device(CocoRt *rt, const CocoRtConfig *cfg)
{
    int n = 0;
    CUDA_OK(rt, cudaGetDeviceCount(&n));
    if (n < 1)
        return rt_error(rt, "no CUDA device is visible");
    rt->device = cfg->local_rank % n;
    CUDA_OK(rt, cudaSetDevice(rt->device));
    struct cudaDeviceProp prop;
    CUDA_OK(rt, cudaGetDeviceProperties(&prop, rt->device));
    snprintf(rt->gpu, sizeof rt->gpu, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
    return 0;
}

static const char *nccl_library_path(char *buf, size_t len)
{
    Dl_info info;
    if (dladdr((void *)ncclGetVersion, &info) && info.dli_fname)
        snprintf(buf, len, "%s", info.dli_fname);
    else
        snprintf(buf, len, "libnccl.so.2");
    return buf;
}

static int load_generated(CocoRt *rt, const char *path)
{
    rt->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!rt->so)
        return rt_error(rt, "cannot load the generated code: %s", dlerror());
    const int *built = (const int *)dlsym(rt->so, "coco_nccl_version");
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
                        rt->nccl_loaded % 100, nccl_library_path(lib, sizeof lib));
    }
    return 0;
}

static int open_comms(CocoRt *rt, const CocoRtConfig *cfg)
{
    ncclUniqueId id;
    memcpy(&id, cfg->nccl_id, sizeof id);
    NCCL_OK(rt, ncclCommInitRank(&rt->world, cfg->nranks, id, cfg->rank));
    if (cfg->group_size > 0) {
        if (cfg->nranks % cfg->group_size)
            return rt_error(rt, "GROUP size %d does not divide the %d ranks", cfg->group_size,
                            cfg->nranks);
        NCCL_OK(rt, ncclCommSplit(rt->world, cfg->rank / cfg->group_size, cfg->rank,
                                  &rt->group, NULL));
    }
    return 0;
}

static long env_long(const char *name, long fallback)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : fallback;
}

/* The fused-collective knobs: COCONET_FUSED=auto|oneshot|twoshot|nccl,
 * COCONET_FUSED_BLOCKS, COCONET_FUSED_THREADS, COCONET_FUSED_ONESHOT_BYTES;
 * and COCONET_NO_ALIAS=1 (every output in a buffer of its own). */
static int read_knobs(CocoRt *rt)
{
    static const char *const algo[] = {"auto", "oneshot", "twoshot", "nccl"};
    const char *v = getenv("COCONET_FUSED");
    rt->fused_algo = -1;
    for (int k = 0; k < 4; k++)
        if (!v || !*v || !strcmp(v, algo[k]))
            rt->fused_algo = v && *v ? k : 0;
    if (rt->fused_algo < 0)
        return rt_error(rt, "COCONET_FUSED=%s: expected auto, oneshot, twoshot or nccl", v);
    rt->fused_blocks = (int)env_long("COCONET_FUSED_BLOCKS", 0);
    rt->fused_threads = (int)env_long("COCONET_FUSED_THREADS", 0);
    rt->fused_oneshot_bytes = env_long("COCONET_FUSED_ONESHOT_BYTES", ONESHOT_BYTES);
    rt->no_alias = (int)env_long("COCONET_NO_ALIAS", 0);
    return 0;
}

/* The device communicator of the one-kernel fused collectives, made by the
 * generated code (NCCL's device API is C++), when every rank of WORLD can
 * load and store every other's memory. */
static int open_lsa(CocoRt *rt)
{
    coco_lsa_open_fn open = (coco_lsa_open_fn)(size_t)dlsym(rt->so, "coco_lsa_open");
    if (!open || rt->fused_algo == 3)
        return 0;
    char why[512] = "";
    if (open(rt->world, LSA_BLOCKS, &rt->lsa, why, sizeof why))
        return rt_error(rt, "the device communicator of the fused collectives: %s", why);
    return 0;
}

static void close_lsa(CocoRt *rt)
{
    coco_lsa_close_fn close = (coco_lsa_close_fn)(size_t)dlsym(rt->so, "coco_lsa_close");
    if (rt->lsa && close)
        close(rt->world, rt->lsa);
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

static void rt_close(CocoRt *rt, int abort)
{
    if (!rt)
        return;
    if (!abort)
        close_lsa(rt);
    if (rt->group)
        abort ? ncclCommAbort(rt->group) : ncclCommDestroy(rt->group);
    if (rt->world)
        abort ? ncclCommAbort(rt->world) : ncclCommDestroy(rt->world);
    if (!abort) { /* after a failure the device may be unusable: leave it to exit */
        if (rt->lt)
            cublasLtDestroy(rt->lt);
        cudaFree(rt->lt_workspace);
        cudaFree(rt->barrier);
        cudaFreeHost(rt->stage);
        if (rt->stream)
            cudaStreamDestroy(rt->stream);
        if (rt->side)
            cudaStreamDestroy(rt->side);
    }
    if (rt->so)
        dlclose(rt->so);
    free(rt);
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
    if (read_knobs(rt) || open_device(rt, cfg) || load_generated(rt, cfg->so_path) ||
        open_comms(rt, cfg) || open_lsa(rt) || open_handles(rt)) {
        rt_close(rt, 1);
        return NULL;
    }
    return rt;
}

static int rt_unique_id(unsigned char id[COCO_RT_ID_BYTES], char *err, size_t errlen)
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
             rt->lsa ? "one kernel over the peers' memory" : "NCCL calls");
}

/* ---- one variant ---- */

/* A buffer of the arena, with GUARD bytes before and after it that nothing
 * may write: an input's working copy, an output (not an input's buffer) or
 * the workspace. */
typedef struct {
    char *at;
    size_t bytes;       /* this rank's own size */
    int output, input;  /* whose it is: as in CocoRtFault */
} Guarded;

/* Device buffers of one variant, all in one arena (a symmetric NCCL window
 * when the ranks reach each other's memory): after a lead of ALIGN bytes,
 * the working copy of each input, each output and the workspace, each
 * ALIGN-aligned and followed by at least GUARD bytes, at the same offsets
 * on every rank. Pristine copies of the inputs are apart. All freed by
 * free_buffers. */
typedef struct {
    int nin, nout;
    void *in[MAXARGS], *pristine[MAXARGS], *out[MAXARGS];
    int aliased[MAXARGS]; /* out[i] is an input's buffer (coco_output_alias) */
    int alias_of[MAXARGS]; /* that input, or -1 */
    void **member[MAXARGS]; /* a scattered input's member buffers (host array), else NULL */
    void *workspace;
    void *arena;
    size_t arena_bytes;
    ncclWindow_t window;
    ncclComm_t window_comm;
    cudaEvent_t start, stop;
    Guarded *guarded;   /* one per input (or member of a scattered one), output, workspace */
    int nguarded;
    unsigned char *guard_want, *guard_got; /* 2 * GUARD bytes per guarded buffer */
} Buffers;

static int device_alloc(CocoRt *rt, void **p, size_t bytes)
{
    CUDA_OK(rt, cudaMalloc(p, bytes ? bytes : 256)); /* never NULL, even when empty */
    return 0;
}

static void free_buffers(Buffers *b)
{
    for (int i = 0; i < b->nin; i++) {
        cudaFree(b->pristine[i]);
        free(b->member[i]);
    }
    if (b->window)
        ncclCommWindowDeregister(b->window_comm, b->window);
    if (b->window_comm)
        ncclMemFree(b->arena);
    else
        cudaFree(b->arena);
    if (b->start)
        cudaEventDestroy(b->start);
    if (b->stop)
        cudaEventDestroy(b->stop);
    free(b->guarded);
    free(b->guard_want);
    free(b->guard_got);
}

static size_t aligned(size_t bytes)
{
    return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

/* A buffer's place in the arena: itself and the guard after it. */
static size_t slot(size_t bytes)
{
    return aligned(bytes + GUARD);
}

/* Every rank lays the arena out with the largest size any rank needs for
 * each buffer, so that offsets agree. */
static int agree_sizes(CocoRt *rt, unsigned long long *size, int n)
{
    unsigned long long *d = NULL;
    CUDA_OK(rt, cudaMalloc((void **)&d, (size_t)n * sizeof *d));
    CUDA_OK(rt, cudaMemcpy(d, size, (size_t)n * sizeof *d, cudaMemcpyHostToDevice));
    NCCL_OK(rt, ncclAllReduce(d, d, (size_t)n, ncclUint64, ncclMax, rt->world, rt->stream));
    if (wait_gpu(rt, rt->stream, NULL, "agreeing on buffer sizes"))
        return -1;
    CUDA_OK(rt, cudaMemcpy(size, d, (size_t)n * sizeof *d, cudaMemcpyDeviceToHost));
    CUDA_OK(rt, cudaFree(d));
    return 0;
}

static int scattered(const CocoRtVariant *v, int i)
{
    return v->nmembers && v->nmembers[i] > 0;
}

/* Which outputs are given an input's buffer (coco_output_alias): those need
 * no place of their own in the arena. */
static void find_aliases(CocoRt *rt, const CocoRtVariant *v, Buffers *b)
{
    const int *alias = (const int *)dlsym(rt->so, "coco_output_alias");
    for (int i = 0; i < v->noutputs; i++) {
        int j = alias ? alias[i] : -1;
        b->aliased[i] = j >= 0 && j < v->ninputs && v->input[j] && !rt->no_alias &&
                        !scattered(v, j) && v->input_bytes[j] == v->output_bytes[i];
        b->alias_of[i] = b->aliased[i] ? j : -1;
    }
}

static void guard(Buffers *b, void *at, size_t bytes, int output, int input)
{
    b->guarded[b->nguarded++] = (Guarded){(char *)at, bytes, output, input};
}

/* The arena bytes of input i: a scattered tensor's members each in its
 * guarded slot, with ALIGN bytes between them (no kernel can take them for one buffer). */
static size_t input_span(const CocoRtVariant *v, int i)
{
    if (!v->input[i])
        return 0;
    if (!scattered(v, i))
        return slot(v->input_bytes[i]);
    size_t n = 0;
    for (int m = 0; m < v->nmembers[i]; m++)
        n += slot(v->member_bytes[i][m]) + ALIGN;
    return n;
}

/* The members of scattered input i, laid out from `at`. */
static int place_members(CocoRt *rt, const CocoRtVariant *v, int i, char *at, Buffers *b)
{
    b->member[i] = calloc((size_t)v->nmembers[i], sizeof(void *));
    if (!b->member[i])
        return rt_error(rt, "out of host memory");
    for (int m = 0; m < v->nmembers[i]; m++) {
        b->member[i][m] = at;
        guard(b, at, v->member_bytes[i][m], -1, i);
        at += slot(v->member_bytes[i][m]) + ALIGN;
    }
    return 0;
}

/* The arena: a lead, inputs, outputs, then `workspace` bytes. */
static int make_arena(CocoRt *rt, const CocoRtVariant *v, size_t workspace, Buffers *b)
{
    int n = v->ninputs + v->noutputs + 1;
    unsigned long long size[2 * MAXARGS + 1];
    find_aliases(rt, v, b);
    for (int i = 0; i < v->ninputs; i++)
        size[i] = input_span(v, i);
    for (int i = 0; i < v->noutputs; i++)
        size[v->ninputs + i] = b->aliased[i] ? 0 : slot(v->output_bytes[i]);
    size[n - 1] = workspace ? slot(workspace) : 0;
    if (agree_sizes(rt, size, n))
        return -1;
    b->arena_bytes = ALIGN; /* the lead: the guard before the first buffer */
    for (int k = 0; k < n; k++)
        b->arena_bytes += size[k];
    if (rt->lsa) {
        NCCL_OK(rt, ncclMemAlloc(&b->arena, b->arena_bytes));
        b->window_comm = rt->world;
        NCCL_OK(rt, ncclCommWindowRegister(rt->world, b->arena, b->arena_bytes, &b->window,
                                           NCCL_WIN_COLL_SYMMETRIC));
    } else if (device_alloc(rt, &b->arena, b->arena_bytes)) {
        return -1;
    }
    size_t nguard = (size_t)v->noutputs + 1;
    for (int i = 0; i < v->ninputs; i++)
        nguard += scattered(v, i) ? (size_t)v->nmembers[i] : 1;
    b->guarded = calloc(nguard, sizeof *b->guarded);
    if (!b->guarded)
        return rt_error(rt, "out of host memory");
    char *at = (char *)b->arena + ALIGN;
    for (int i = 0; i < v->ninputs; i++, at += size[i - 1]) {
        b->in[i] = v->input[i] ? at : NULL;
        if (v->input[i] && scattered(v, i) && place_members(rt, v, i, at, b))
            return -1;
        if (v->input[i] && !scattered(v, i))
            guard(b, at, v->input_bytes[i], -1, i);
    }
    for (int i = 0; i < v->noutputs; i++, at += size[v->ninputs + i - 1]) {
        b->out[i] = b->aliased[i] ? b->in[b->alias_of[i]] : at;
        if (!b->aliased[i])
            guard(b, at, v->output_bytes[i], i, -1);
    }
    b->workspace = workspace ? at : NULL;
    if (workspace)
        guard(b, at, workspace, -1, -1);
    return 0;
}

/* ---- guard bytes ---- */

/* The pattern at each byte of the arena's guards: it changes from byte to
 * byte, so that no plain fill (zeros, NaNs, a repeated value) matches it. */
static unsigned char guard_byte(const Buffers *b, const char *p)
{
    return (unsigned char)(0xa5 ^ ((size_t)(p - (const char *)b->arena) & 0xff));
}

/* The guard before (side 0) or after (side 1) guarded buffer k. */
static char *guard_at(const Buffers *b, int k, int side)
{
    const Guarded *g = &b->guarded[k];
    return side ? g->at + g->bytes : g->at - GUARD;
}

/* Writes the pattern into every guard (before the checked run). */
static int fill_guards(CocoRt *rt, Buffers *b)
{
    size_t n = (size_t)b->nguarded * 2 * GUARD;
    b->guard_want = malloc(n ? n : 1);
    b->guard_got = malloc(n ? n : 1);
    if (!b->guard_want || !b->guard_got)
        return rt_error(rt, "out of memory");
    for (int k = 0; k < b->nguarded; k++)
        for (int side = 0; side < 2; side++) {
            unsigned char *want = b->guard_want + (2 * k + side) * GUARD;
            char *at = guard_at(b, k, side);
            for (int i = 0; i < GUARD; i++)
                want[i] = guard_byte(b, at + i);
            CUDA_OK(rt, cudaMemcpyAsync(at, want, GUARD, cudaMemcpyHostToDevice, rt->stream));
        }
    return wait_gpu(rt, rt->stream, NULL, "writing the guard bytes");
}

/* Reads every guard back; the first damaged one goes to *f. */
static int check_guards(CocoRt *rt, Buffers *b, int late, CocoRtFault *f)
{
    for (int k = 0; k < b->nguarded; k++)
        for (int side = 0; side < 2; side++)
            CUDA_OK(rt, cudaMemcpyAsync(b->guard_got + (2 * k + side) * GUARD,
                                        guard_at(b, k, side), GUARD, cudaMemcpyDeviceToHost,
                                        rt->stream));
    if (wait_gpu(rt, rt->stream, NULL, "reading the guard bytes back"))
        return -1;
    for (int k = 0; k < b->nguarded; k++)
        for (int side = 0; side < 2; side++) {
            size_t o = (size_t)(2 * k + side) * GUARD;
            int i = 0;
            while (i < GUARD && b->guard_got[o + i] == b->guard_want[o + i])
                i++;
            if (i == GUARD)
                continue;
            const Guarded *g = &b->guarded[k];
            *f = (CocoRtFault){COCO_RT_FAULT_GUARD, g->output, g->input, side, late,
                               side ? (long long)(g->bytes + (size_t)i) : (long long)i - GUARD,
                               (long long)g->bytes, b->guard_got[o + i], b->guard_want[o + i]};
            return 0;
        }
    return 0;
}

/* ---- the repeat run's comparison ---- */

/* Device bytes `dev` against the host copy of the checked run, in chunks
 * through the pinned stage; the first difference goes to *f. */
static int compare_back(CocoRt *rt, const void *dev, const void *host, size_t bytes, int output,
                        int input, CocoRtFault *f)
{
    for (size_t done = 0; done < bytes && f->kind == COCO_RT_FAULT_NONE;) {
        size_t n = bytes - done < STAGE ? bytes - done : STAGE;
        CUDA_OK(rt, cudaMemcpyAsync(rt->stage, (const char *)dev + done, n,
                                    cudaMemcpyDeviceToHost, rt->stream));
        if (wait_gpu(rt, rt->stream, NULL, "copying the repeat run's results back"))
            return -1;
        const unsigned char *first = (const unsigned char *)host + done;
        if (memcmp(rt->stage, first, n)) {
            size_t i = 0;
            while (rt->stage[i] == first[i])
                i++;
            *f = (CocoRtFault){COCO_RT_FAULT_REPEAT, output, input, 0, 0, (long long)(done + i),
                               (long long)bytes, rt->stage[i], first[i]};
        }
        done += n;
    }
    return 0;
}

/* Input i's new value (member by member when scattered) against the
 * checked run's. */
static int compare_updated(CocoRt *rt, const CocoRtVariant *v, Buffers *b, int i, CocoRtFault *f)
{
    if (!scattered(v, i))
        return compare_back(rt, b->in[i], v->updated[i], v->input_bytes[i], -1, i, f);
    size_t off = 0;
    for (int m = 0; m < v->nmembers[i]; m++) {
        if (compare_back(rt, b->member[i][m], (const char *)v->updated[i] + off,
                         v->member_bytes[i][m], -1, i, f))
            return -1;
        off += v->member_bytes[i][m];
    }
    return 0;
}

/* Every output and new value of the repeat run against the checked run's
 * (an output in an input's buffer is compared once, as that new value). */
static int compare_repeat(CocoRt *rt, const CocoRtVariant *v, Buffers *b, CocoRtFault *f)
{
    for (int i = 0; i < v->noutputs; i++)
        if (!b->aliased[i] &&
            compare_back(rt, b->out[i], v->output[i], v->output_bytes[i], i, -1, f))
            return -1;
    for (int i = 0; i < v->ninputs; i++)
        if (v->updated && v->updated[i] && b->in[i] && compare_updated(rt, v, b, i, f))
            return -1;
    for (int i = 0; i < v->noutputs; i++) /* aliased, but not given back as a new value */
        if (b->aliased[i] && !(v->updated && v->updated[b->alias_of[i]]) &&
            compare_back(rt, b->out[i], v->output[i], v->output_bytes[i], i, -1, f))
            return -1;
    return 0;
}

/* Inputs: a pristine copy from the host, and the working copy the program
 * reads (and writes, for an Updated tensor). Outputs start as all-ones bytes
 * (NaN in every float type), so an output never written shows. */
static int make_buffers(CocoRt *rt, const CocoRtVariant *v, size_t workspace, Buffers *b)
{
    if (make_arena(rt, v, workspace, b))
        return -1;
    for (int i = 0; i < v->ninputs; i++, b->nin++) {
        if (!v->input[i])
            continue; /* a Scalar */
        if (device_alloc(rt, &b->pristine[i], v->input_bytes[i]))
            return -1;
        CUDA_OK(rt, cudaMemcpy(b->pristine[i], v->input[i], v->input_bytes[i],
                               cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < v->noutputs; i++, b->nout++)
        if (!b->aliased[i]) /* else the buffer of an input (coco_output_alias) */
            CUDA_OK(rt, cudaMemset(b->out[i], 0xff, v->output_bytes[i]));
    CUDA_OK(rt, cudaEventCreate(&b->start));
    CUDA_OK(rt, cudaEventCreate(&b->stop));
    return fill_guards(rt, b);
}

/* Copies input i between its working buffer (or members) and `flat` (the
 * pristine device copy, or the host buffer of its new value). */
static int copy_input(CocoRt *rt, const CocoRtVariant *v, Buffers *b, int i, void *flat,
                      int to_input, enum cudaMemcpyKind kind)
{
    int nm = scattered(v, i) ? v->nmembers[i] : 1;
    size_t off = 0;
    for (int m = 0; m < nm; m++) {
        void *buf = scattered(v, i) ? b->member[i][m] : b->in[i];
        size_t bytes = scattered(v, i) ? v->member_bytes[i][m] : v->input_bytes[i];
        char *f = (char *)flat + off;
        CUDA_OK(rt, cudaMemcpyAsync(to_input ? buf : f, to_input ? f : buf, bytes, kind,
                                    rt->stream));
        off += bytes;
    }
    return 0;
}

static int restore_inputs(CocoRt *rt, const CocoRtVariant *v, Buffers *b)
{
    for (int i = 0; i < v->ninputs; i++)
        if (b->in[i] && copy_input(rt, v, b, i, b->pristine[i], 1, cudaMemcpyDeviceToDevice))
            return -1;
    return 0;
}

typedef struct {
    coco_cuda_run_fn run;
    coco_cuda_workspace_fn workspace;
    coco_cuda_ctx ctx;
    coco_cuda_args args;
    char msg[2048];
} Entry;

static int find_entry(CocoRt *rt, const char *name, Entry *e)
{
    char sym[256];
    snprintf(sym, sizeof sym, "coco_run__%s", name);
    e->run = (coco_cuda_run_fn)(size_t)dlsym(rt->so, sym);
    snprintf(sym, sizeof sym, "coco_workspace__%s", name);
    e->workspace = (coco_cuda_workspace_fn)(size_t)dlsym(rt->so, sym);
    if (!e->run || !e->workspace)
        return rt_error(rt, "the generated code has no entry point %s for '%s'",
                        e->run ? sym : "coco_run__NAME", name);
    return 0;
}

static void setup_ctx(CocoRt *rt, coco_cuda_ctx *c, char *msg, size_t len)
{
    c->rank = rt->rank;
    c->nranks = rt->nranks;
    c->group_size = rt->group_size;
    c->world = rt->world;
    c->group = rt->group;
    c->stream = rt->stream;
    c->side_stream = rt->side;
    c->lt = rt->lt;
    c->lt_workspace = rt->lt_workspace;
    c->lt_workspace_bytes = LT_WORKSPACE;
    c->err = msg;
    c->errlen = len;
    c->lsa_blocks = LSA_BLOCKS;
    c->fused_algo = rt->fused_algo;
    c->fused_blocks = rt->fused_blocks;
    c->fused_threads = rt->fused_threads;
    c->fused_oneshot_bytes = (size_t)rt->fused_oneshot_bytes;
}

static int setup_entry(CocoRt *rt, const CocoRtVariant *v, Buffers *b, Entry *e)
{
    coco_cuda_ctx *c = &e->ctx;
    setup_ctx(rt, c, e->msg, sizeof e->msg);
    size_t workspace = e->workspace(c, v->size);
    if (make_buffers(rt, v, workspace, b))
        return -1;
    c->workspace = b->workspace;
    c->workspace_bytes = workspace;
    if (b->window) {
        c->lsa_comm = rt->lsa;
        c->lsa_window = b->window;
        c->lsa_base = b->arena;
        c->lsa_bytes = b->arena_bytes;
    }
    e->args.input = b->in;
    e->args.scalar = v->scalar;
    e->args.output = b->out;
    e->args.size = v->size;
    e->args.seed = v->seed;
    e->args.members = (void *const *const *)b->member;
    return 0;
}

static int call_entry(CocoRt *rt, const CocoRtVariant *v, Entry *e)
{
    e->msg[0] = 0;
    if (e->run(&e->ctx, &e->args))
        return rt_error(rt, "%s: %s", v->name, e->msg[0] ? e->msg : "failed (no message)");
    return 0;
}

static int copy_back(CocoRt *rt, const CocoRtVariant *v, Buffers *b)
{
    for (int i = 0; i < v->noutputs; i++)
        CUDA_OK(rt, cudaMemcpyAsync(v->output[i], b->out[i], v->output_bytes[i],
                                    cudaMemcpyDeviceToHost, rt->stream));
    for (int i = 0; i < v->ninputs; i++)
        if (v->updated && v->updated[i] && b->in[i] &&
            copy_input(rt, v, b, i, v->updated[i], 0, cudaMemcpyDeviceToHost))
            return -1;
    return wait_gpu(rt, rt->stream, NULL, "copying the results back");
}

/* Restore the inputs, line the ranks up, then one run between two events. */
static int timed_run(CocoRt *rt, const CocoRtVariant *v, Buffers *b, Entry *e, float *ms)
{
    if (restore_inputs(rt, v, b))
        return -1;
    NCCL_OK(rt, ncclAllReduce(rt->barrier, rt->barrier, 1, ncclFloat, ncclSum, rt->world,
                              rt->stream));
    if (wait_gpu(rt, rt->stream, NULL, "lining the ranks up before a timed run"))
        return -1;
    CUDA_OK(rt, cudaEventRecord(b->start, rt->stream));
    if (call_entry(rt, v, e))
        return -1;
    CUDA_OK(rt, cudaEventRecord(b->stop, rt->stream));
    if (wait_gpu(rt, rt->stream, b->stop, v->name) || wait_streams(rt, v->name))
        return -1;
    CUDA_OK(rt, cudaEventElapsedTime(ms, b->start, b->stop));
    return 0;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int time_variant(CocoRt *rt, const CocoRtVariant *v, Buffers *b, Entry *e,
                        CocoRtTiming *t)
{
    int n = v->iters < MAXTIMED ? v->iters : MAXTIMED;
    float *ms = calloc((size_t)(n > 0 ? n : 1), sizeof *ms);
    if (!ms)
        return rt_error(rt, "out of memory");
    int rc = 0;
    for (int i = 0; i < v->warmup + n && !rc; i++) {
        float dt = 0;
        rc = timed_run(rt, v, b, e, &dt);
        if (i >= v->warmup)
            ms[i - v->warmup] = dt;
    }
    if (!rc && n > 0) {
        qsort(ms, (size_t)n, sizeof *ms, cmp_float);
        t->min_ms = ms[0];
        t->max_ms = ms[n - 1];
        t->median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    }
    free(ms);
    return rc;
}

/* With COCONET_TRACE set: the seconds of each step of a variant's run since
 * *since, on stderr; *since moves to now. */
static void trace_step(const CocoRt *rt, const CocoRtVariant *v, const char *step,
                       struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: rank %d: %s: %s %.2f s\n", rt->rank, v->name, step,
                (double)(now.tv_sec - since->tv_sec) + (double)(now.tv_nsec - since->tv_nsec) * 1e-9);
    *since = now;
}

static int run_variant(CocoRt *rt, const CocoRtVariant *v, CocoRtTiming *t, Buffers *b)
{
    Entry e;
    memset(&e, 0, sizeof e);
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    if (v->ninputs > MAXARGS || v->noutputs > MAXARGS)
        return rt_error(rt, "%s: more than %d inputs or outputs", v->name, MAXARGS);
    if (find_entry(rt, v->name, &e) || setup_entry(rt, v, b, &e))
        return -1;
    trace_step(rt, v, "buffers and inputs on the GPU", &at);
    t->workspace_bytes = e.ctx.workspace_bytes;
    if (restore_inputs(rt, v, b) || call_entry(rt, v, &e) || wait_streams(rt, v->name) ||
        copy_back(rt, v, b) || check_guards(rt, b, 0, &t->fault))
        return -1;
    trace_step(rt, v, "checked run and copy back", &at);
    /* timed and repeated even after a fault: every rank makes the same
     * collective calls; the first fault found is the one reported */
    float ms;
    if (time_variant(rt, v, b, &e, t) || timed_run(rt, v, b, &e, &ms))
        return -1;
    trace_step(rt, v, "timed runs and the repeat run", &at);
    if (t->fault.kind == COCO_RT_FAULT_NONE && check_guards(rt, b, 1, &t->fault))
        return -1;
    int rc = t->fault.kind == COCO_RT_FAULT_NONE ? compare_repeat(rt, v, b, &t->fault) : 0;
    trace_step(rt, v, "guards and the repeat run compared", &at);
    return rc;
}

static int rt_run(CocoRt *rt, const CocoRtVariant *v, CocoRtTiming *t, char *err, size_t errlen)
{
    Buffers b;
    memset(&b, 0, sizeof b);
    memset(t, 0, sizeof *t);
    rt->err = err;
    rt->errlen = errlen;
    int rc = run_variant(rt, v, t, &b);
    if (!rc) /* after a failure the buffers may still be in use: leave them to exit */
        free_buffers(&b);
    return rc;
}

const CocoRtApi *coco_rt_api(void);

const CocoRtApi *coco_rt_api(void)
{
    static const CocoRtApi api = {COCO_RT_ABI, rt_unique_id, rt_open, rt_run, rt_close,
                                  rt_describe};
    return &api;
}

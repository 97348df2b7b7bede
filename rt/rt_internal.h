/* rt_internal.h: what the files of the GPU runtime (build/libcoconet_cuda.so)
 * share: the rank's state (CocoRt), one variant's device buffers (Buffers),
 * the checks that name the failing call, and the functions one file gives
 * another. Not an interface: include/coconet_rt.h is. */
#ifndef COCONET_RT_INTERNAL_H
#define COCONET_RT_INTERNAL_H

#include "coconet_rt.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stddef.h>

#include "coconet_cuda.h"
#include "kernels/coco_check.cuh"

/* shared between the runtime's files, not exported from the library */
#define RT_INTERNAL __attribute__((visibility("hidden")))

enum { LT_WORKSPACE = 32 << 20, MAXARGS = 1024, MAXTIMED = 100000 };
enum { LSA_BLOCKS = 264,              /* LSA barriers: 2 blocks per SM of an H200 */
       ONESHOT_BYTES = 256 << 10,     /* fused collectives: one-shot up to this input */
       PUSH_BYTES = 4 << 20,          /* fused collectives: push from this input */
       WINDOW_BYTES = 0,              /* NCCL calls on smaller values: on the window's comm */
       ALIGN = 4096,                  /* of every buffer in the slab */
       GUARD = 256,                   /* guard bytes before and after each buffer */
       STAGE = 32 << 20 };            /* pinned host bytes for the repeat comparison */

/* Device memory held from one variant to the next (held.c): the slab (a
 * window registered with window_comm, or NULL) and the inputs' pristine
 * copies, each with the id of its host bytes (CocoRtVariant.input_id; 0:
 * none, never taken again). */
typedef struct {
    void *slab;
    size_t slab_bytes;
    ncclWindow_t window;
    ncclComm_t window_comm;
    int npristine;
    void *pristine[MAXARGS];
    size_t pristine_bytes[MAXARGS];
    unsigned long long pristine_id[MAXARGS];
} Held;

struct CocoRt {
    int rank, nranks, group_size, device;
    double timeout_s;
    ncclComm_t world, group;
    ncclComm_t world_window; /* WORLD's twin, the slab's window registered with it, or NULL */
    long nccl_window_bytes; /* COCONET_NCCL_WINDOW_BYTES (coco_world) */
    cudaStream_t stream, side;
    cublasLtHandle_t lt;
    void *lt_workspace;
    float *barrier;      /* one float on the device, for lining ranks up */
    unsigned char *stage; /* STAGE pinned bytes: results of the repeat run, in chunks */
    void *so;            /* the generated shared object */
    void *lsa;           /* the generated code's ncclDevComm over world_window, or NULL */
    int fused_algo, fused_blocks, fused_threads; /* COCONET_FUSED_* (coconet_cuda.h) */
    int fused_vec, fused_peers;
    int one_rank_fused;  /* COCONET_ONE_RANK_FUSED (coconet_cuda.h) */
    long overlap_chunks, overlap_sms; /* COCONET_OVERLAP_CHUNKS, COCONET_OVERLAP_SMS */
    int overlap_tail;    /* COCONET_OVERLAP_TAIL (coconet_cuda.h) */
    long scatter_bucket; /* COCONET_SCATTER_BUCKET (coconet_cuda.h) */
    long fused_oneshot_bytes, fused_push_bytes, fused_push_round;
    int no_alias;        /* COCONET_NO_ALIAS=1: outputs never share an input's buffer */
    int host_start;      /* COCONET_TIME_HOST_START=1: a timed run starts after the host's wait */
    int cold_l2;         /* COCONET_COLD_L2=1: the L2 emptied before each timed run */
    void *l2_buffer;     /* zeros, read to empty it (run.c's clear_l2), made at its first use */
    coco_l2_clear_fn l2_clear; /* the generated code's reader of it, found then */
    size_t l2_buffer_bytes;
    int nccl_built, nccl_loaded;
    char gpu[320];
    char *err;           /* where the current call's message goes */
    size_t errlen;
    Held held;           /* the launcher's buffers, from variant to variant */
};

/* A buffer of the slab, with GUARD bytes before and after it that nothing
 * may write: an input's working copy, an output (not an input's buffer) or
 * the workspace. */
typedef struct {
    char *at;
    size_t bytes;       /* this rank's own size */
    int output, input;  /* whose it is: as in CocoRtFault */
} Guarded;

/* Device buffers of one variant, all in one slab (a symmetric NCCL window
 * when the ranks reach each other's memory): after a lead of ALIGN bytes,
 * the working copy of each input, each output and the workspace, each
 * ALIGN-aligned and followed by at least GUARD bytes, at the same offsets
 * on every rank. Pristine copies of the inputs are apart. The slab and the
 * pristine copies are the rank's held memory (held.c); free_buffers frees
 * the rest. */
typedef struct {
    int nin, nout;
    void *in[MAXARGS], *pristine[MAXARGS], *out[MAXARGS];
    int aliased[MAXARGS]; /* out[i] is an input's buffer (coco_output_alias) */
    int alias_of[MAXARGS]; /* that input, or -1 */
    void **member[MAXARGS]; /* a scattered input's member buffers (host array), else NULL */
    void *workspace;
    void *slab;
    size_t slab_bytes;  /* the held slab's: the layout may take less */
    ncclWindow_t window;
    cudaEvent_t start, stop;
    Guarded *guarded;   /* one per input (or member of a scattered one), output, workspace */
    int nguarded;
    unsigned char *guard_want, *guard_got; /* 2 * GUARD bytes per guarded buffer */
} Buffers;

/* ---- errors (wait.c): each returns -1 after writing rt->err ---- */
RT_INTERNAL int rt_fail(CocoRt *rt, const char *call, const char *file, int line,
                        const char *why);
RT_INTERNAL int rt_error(CocoRt *rt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
RT_INTERNAL const char *nccl_why(ncclResult_t r, char *buf, size_t len);
/* ncclGetUniqueId's bytes, on the rank that makes them (the launcher's ranks, a session) */
RT_INTERNAL int rt_unique_id(unsigned char id[COCO_RT_ID_BYTES], char *err, size_t errlen);

/* Checks of library calls (kernels/coco_check.cuh): on failure, return
 * rt_fail's -1 with the call, file, line and the library's words; NCCL's
 * words with its last error (nccl_why) */
#define COCO_CHECK_NCCL_LAST_T ncclResult_t
#define COCO_CHECK_NCCL_LAST_OK ncclSuccess
#define COCO_CHECK_NCCL_LAST_WHY(e, buf, len) nccl_why(e, buf, len)
#define CUDA_OK(rt, call) COCO_CHECK_RET(CUDA, call, #call, rt_fail, rt)
#define NCCL_OK(rt, call) COCO_CHECK_RET(NCCL_LAST, call, #call, rt_fail, rt)
#define LT_OK(rt, call) COCO_CHECK_RET(LT, call, #call, rt_fail, rt)

/* ---- bounded waits (wait.c) ---- */
/* until `event` (or, when NULL, `stream`) has completed, polling NCCL's
 * error state; fails after the time limit */
RT_INTERNAL int wait_gpu(CocoRt *rt, cudaStream_t stream, cudaEvent_t event, const char *what);
RT_INTERNAL int wait_streams(CocoRt *rt, const char *what); /* both streams */
RT_INTERNAL double rt_now_s(void); /* a monotonic clock, in seconds */

/* ---- opening, shared with sessions (cuda_child.c) ---- */
RT_INTERNAL int rt_select_device(CocoRt *rt, int index); /* index modulo the visible ones */
/* a generated object, its NCCL version checked against the library loaded */
RT_INTERNAL int rt_load_so(CocoRt *rt, const char *path, void **so);
RT_INTERNAL const char *rt_nccl_library_path(char *buf, size_t len);
RT_INTERNAL int rt_read_knobs(CocoRt *rt); /* COCONET_FUSED*, ... (cuda_child.c) */
/* this rank's GROUP split from WORLD, none for group_size 0 (cuda_child.c) */
RT_INTERNAL int rt_split_group(CocoRt *rt, int nranks, int rank, int group_size);
/* a variant's context from the runtime's state and knobs (run.c) */
RT_INTERNAL void rt_setup_ctx(CocoRt *rt, coco_cuda_ctx *c, char *msg, size_t len);
/* A variant's entry points in a generated object (include/coconet_cuda.h) */
typedef struct {
    coco_cuda_run_fn run;
    coco_cuda_workspace_fn workspace;
    /* the arguments its one-kernel collectives reach in the peers' windows
     * (-1 ends), or both NULL in an object without them (then every
     * argument counts) */
    const int *window_in, *window_out;
} RtEntry;
/* variant `name`'s entry points in the object `so`; -1 with a message
 * naming the missing symbol when it has no run or workspace entry (run.c) */
RT_INTERNAL int rt_find_entry(CocoRt *rt, void *so, const char *name, RtEntry *e);

/* ---- memory held from variant to variant (held.c) ---- */
/* b's slab of at least `bytes`: the held one (ranks lined up, zeroed) or a
 * new one in its place; collective (every rank decides alike) */
RT_INTERNAL int held_slab(CocoRt *rt, size_t bytes, Buffers *b);
/* b's pristine copies of v's inputs: held ones of the same id, else uploaded */
RT_INTERNAL int held_pristine(CocoRt *rt, const CocoRtVariant *v, Buffers *b);
RT_INTERNAL size_t held_bytes(const CocoRt *rt); /* device bytes held */
RT_INTERNAL void held_drop_inputs(CocoRt *rt); /* the pristine copies freed */
RT_INTERNAL void held_free(CocoRt *rt);

/* ---- one variant's buffers (slab.c) ---- */
/* the slab, the inputs' pristine copies, outputs poisoned, guards written */
RT_INTERNAL int make_buffers(CocoRt *rt, const CocoRtVariant *v, size_t workspace, Buffers *b);
RT_INTERNAL void free_buffers(Buffers *b);
/* input i between its working buffer (or members) and `flat` */
RT_INTERNAL int copy_input(CocoRt *rt, const CocoRtVariant *v, Buffers *b, int i, void *flat,
                           int to_input, enum cudaMemcpyKind kind);
RT_INTERNAL int restore_inputs(CocoRt *rt, const CocoRtVariant *v, Buffers *b);
/* the first damaged guard into *f (late: found at the end, not after the
 * checked run) */
RT_INTERNAL int check_guards(CocoRt *rt, Buffers *b, int late, CocoRtFault *f);
/* the repeat run's results against the checked run's (on the host) */
RT_INTERNAL int compare_repeat(CocoRt *rt, const CocoRtVariant *v, Buffers *b, CocoRtFault *f);

/* ---- running a variant (run.c) ---- */
RT_INTERNAL int rt_run(CocoRt *rt, const CocoRtVariant *v, CocoRtTiming *t, char *err,
                       size_t errlen);

/* ---- --breakdown: events after each launch and library call (breakdown.c) ---- */
typedef struct {
    CocoRt *rt;
    cudaEvent_t *event;  /* events made so far, reused run after run */
    CocoRtStep *step;    /* per mark of this run: what it follows */
    int cap, n;          /* events made; marks of this run */
    int depth;           /* inside an NCCL group */
    CocoRtStep group;    /* the group's calls, marked at its ncclGroupEnd */
    char why[256];       /* the first failure (an event not made or recorded), or "" */
} Marks;
/* the generated code's ctx->mark (include/coconet_cuda.h) */
RT_INTERNAL void rt_mark(void *marks, int kind, const char *op, int line, const char *call);
RT_INTERNAL void marks_begin(Marks *m, CocoRt *rt); /* before each run */
RT_INTERNAL void marks_free(Marks *m);

/* ---- the machine's limits (limits.c): CocoRtApi.machine and .limits ---- */
RT_INTERNAL int rt_machine_key(int local_rank, char *key, size_t keylen, char *err,
                               size_t errlen);
RT_INTERNAL int rt_measure_limits(int local_rank, CocoRtLimits *l, char *err, size_t errlen);

#endif

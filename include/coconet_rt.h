/* coconet_rt.h: the interface between the launcher (src/cuda/cuda_launch.c,
 * src/cuda/cuda_rank.c: plain C, no CUDA) and the GPU runtime of one rank
 * (rt/cuda_child.c, slab.c and run.c, built into build/libcoconet_cuda.so
 * and loaded with dlopen by each rank's process, never by the parent that
 * forks them).
 *
 * The runtime exports one symbol, coco_rt_api: a table of functions whose
 * `abi` must equal COCO_RT_ABI. Host data cross this interface as bytes in
 * each tensor's element type (FP16/BF16 as 16-bit patterns). Nothing here
 * prints: errors come back as "rank R: CALL failed at FILE:LINE: why". */
#ifndef COCO_CUDA_CHILD_H
#define COCO_CUDA_CHILD_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COCO_RT_ABI 6
#define COCO_RT_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct CocoRt CocoRt;

/* One rank's place in the run. */
typedef struct {
    int rank, nranks;
    int local_rank;       /* picks the GPU: local_rank % visible devices */
    int group_size;       /* ranks per GROUP; 0 when the program has no GROUP */
    const unsigned char *nccl_id; /* COCO_RT_ID_BYTES from coco_rt_api.unique_id */
    const char *so_path;  /* the generated shared object */
    double timeout_s;     /* the longest any wait on the GPU may take */
} CocoRtConfig;

/* One program variant (the program, or the program under one schedule). */
typedef struct {
    const char *name;     /* entry points coco_run__<name>, coco_workspace__<name> */
    int ninputs;
    const void *const *input; /* host bytes of each Tensor input; NULL for a Scalar */
    const size_t *input_bytes;
    const double *scalar;     /* value of each input that is a Scalar */
    void *const *updated;     /* per input: host buffer for its new value, or NULL */
    int noutputs;
    void *const *output;      /* host buffer of each output */
    const size_t *output_bytes;
    const long *size;         /* the program's sizes */
    unsigned long long seed;  /* the run's seed (Dropout) */
    int iters, warmup;        /* timed runs after warm-up runs (iters 0: no timing) */
    /* per input: a scattered tensor's number of members and each one's bytes
     * (their concatenation is input[i]); 0 and NULL for one buffer */
    const int *nmembers;
    const size_t *const *member_bytes;
    /* --breakdown: after the timed runs, this many more runs with a CUDA
     * event after each kernel launch and library call (0: none); each
     * step's median time goes into steps[0 .. max_steps) */
    int breakdown_runs;
    struct CocoRtStep *steps;
    int max_steps;
    /* this variant's own knobs, for its runs alone (coconet tune times
     * several knob sets of a variant in one launch of the ranks); each
     * COCO_RT_KNOB_UNSET: the runtime's, from its environment at open
     * (doc/gpu.md, "Fused-collective knobs") */
    int fused_algo;       /* coco_cuda_ctx.fused_algo: COCO_FUSED_* (as COCONET_FUSED,
                             include/coconet_cuda.h) */
    int overlap_chunks;   /* coco_cuda_ctx.overlap_chunks: 0 to 64 (as
                             COCONET_OVERLAP_CHUNKS) */
    /* per input (or NULL): an id of its host bytes, equal for two variants'
     * inputs only when their bytes are equal, so that the runtime keeps the
     * device copy it made for one for the next; 0: no id, uploaded anew */
    const unsigned long long *input_id;
    /* 1: the variant timed alone: its warm-up and timed runs, then its guard
     * bytes checked; no checked run, nothing copied back into output or
     * updated, no repeat run (coconet tune's confirmation rounds, of
     * candidates that passed their checks at the same sizes before) */
    int time_only;
} CocoRtVariant;
#define COCO_RT_KNOB_UNSET (-1)

/* One step of a breakdown: the work one kernel launch or library call (an
 * NCCL group: the calls between ncclGroupStart and ncclGroupEnd) enqueued,
 * timed from the event before it to the event after it. */
enum { COCO_RT_NAME = 48 };
typedef struct CocoRtStep {
    int kind;               /* COCO_MARK_* (include/coconet_cuda.h) */
    int line;               /* the program line */
    int calls;              /* library calls it stands for (an NCCL group: several) */
    char op[COCO_RT_NAME];  /* the operation: "MatMul", "AllReduce", "computation" */
    char call[COCO_RT_NAME]; /* "kernel", "ncclAllReduce", "cublasLtMatmul", ... */
    double median_ms;       /* over the breakdown runs */
} CocoRtStep;

/* What the runtime's own checks of a variant found (kind NONE: nothing).
 * GUARD: a guard region just before or after a buffer was written (filled
 * with a known pattern before the checked run, verified after it and again
 * after the timed runs and the repeat run). REPEAT: the repeat run (inputs
 * restored, after the timed runs) gave other bits than the checked run. */
enum { COCO_RT_FAULT_NONE, COCO_RT_FAULT_GUARD, COCO_RT_FAULT_REPEAT };
typedef struct {
    int kind;
    int output, input;    /* the buffer: an output's or an input's index, or
                             both -1 for the workspace */
    int after;            /* GUARD: the guard after the buffer (1) or before it (0) */
    int late;             /* GUARD: found only after the timed and repeat runs */
    long long offset;     /* GUARD: the first damaged byte from the buffer's start
                             (negative: before it); REPEAT: the first differing byte */
    long long bytes;      /* the buffer's size */
    unsigned found, expected; /* that byte, and what it should be */
} CocoRtFault;

typedef struct {
    double median_ms, min_ms, max_ms; /* over the timed runs, CUDA events */
    size_t workspace_bytes;
    CocoRtFault fault;
    int nsteps;           /* breakdown steps (at most max_steps are given) */
    int steps_differ;     /* breakdown runs whose calls differed from the first's (left out) */
} CocoRtTiming;

/* What one GPU of this machine can do, measured (rt/limits.c): the
 * bandwidth of a large device-to-device copy (bytes read plus bytes
 * written, per second), of a copy to the next GPU (cudaMemcpyPeer; 0 with
 * one GPU), and an FP16 GEMM's rate (cuBLASLt, FP32 accumulation). */
typedef struct {
    double copy_gbs, peer_gbs, gemm_tflops;
} CocoRtLimits;

typedef struct CocoRtApi {
    int abi;              /* COCO_RT_ABI */
    /* ncclGetUniqueId, on the rank that makes it (0); no device is touched */
    int (*unique_id)(unsigned char id[COCO_RT_ID_BYTES], char *err, size_t errlen);
    /* device, NCCL communicators (WORLD, and GROUP by ncclCommSplit), streams,
     * cuBLASLt, the generated object (its NCCL version checked) */
    CocoRt *(*open)(const CocoRtConfig *cfg, char *err, size_t errlen);
    /* Runs v once and copies its outputs and new values back, then times it
     * (inputs restored before each run), then runs it once more and compares
     * its results with the first run's bit for bit; guard bytes around every
     * buffer are checked after the first run and at the end (t->fault). 0,
     * or -1 with a message: the communicators must then be aborted (close
     * with abort = 1). */
    int (*run)(CocoRt *rt, const CocoRtVariant *v, CocoRtTiming *t, char *err, size_t errlen);
    void (*close)(CocoRt *rt, int abort);
    /* the GPU's name and the NCCL library's version, for the report */
    void (*describe)(CocoRt *rt, char *buf, size_t len);
    /* Without opening anything (before open): the GPU local_rank picks, as
     * the key of its cached limits: its name, UUID and PCI id, the driver's
     * and the CUDA runtime's versions, and the number of GPUs. 0, or -1
     * with a message. */
    int (*machine)(int local_rank, char *key, size_t keylen, char *err, size_t errlen);
    /* Measures that GPU's limits (with 2 GiB of its memory), and
     * the peer copy to the next GPU when there are two or more. 0, or -1
     * with a message. */
    int (*limits)(int local_rank, CocoRtLimits *l, char *err, size_t errlen);
    /* Host memory that the runtime's copies fill at the link's full speed
     * (pinned: cudaHostAlloc), for the rank's result buffers, which it keeps
     * from one variant to the next: copies into pageable memory are much
     * slower (doc/design.md, The CUDA backend). NULL when none can be had
     * (the rank then takes malloc's). Between open and close; host_free
     * takes what host_alloc gave. */
    void *(*host_alloc)(CocoRt *rt, size_t bytes);
    void (*host_free)(CocoRt *rt, void *p);
} CocoRtApi;

typedef const CocoRtApi *(*coco_rt_api_fn)(void);

/* ---- a test hook: a rank that dies (doc/gpu.md, "Test hooks") ----
 * COCONET_TEST_DIE=RANK:POINT[:VARIANT] makes rank RANK's process kill
 * itself with SIGKILL at POINT, for the fault tests (tests/gpu/run.sh, part
 * faults); unset, nothing happens. The points, in the order a rank meets them:
 *   start   its work begins, before any communicator (cuda_rank.c)
 *   init    WORLD's NCCL communicator joined, before the others (cuda_child.c)
 *   upload  a variant's buffers made and inputs on the GPU, before its
 *           checked run (run.c)
 *   timed   a variant's second timed run: the ranks lined up, then a second
 *           later, before its launch, so that the peers are inside its first
 *           collective (a fused kernel's barrier, an NCCL kernel) (run.c)
 *   exit    after its last report line (DONE) (cuda_rank.c)
 * VARIANT ("program" or a schedule's name) goes with upload and timed: that
 * variant's, else the first variant's. The launcher refuses a value that
 * does not parse, names no rank of the run or no variant of it. The rank
 * says on stderr when it dies (the time of day, in seconds), so that a test
 * can tell how long its peers took to end. */
#define COCO_TEST_DIE_POINTS "start, init, upload, timed or exit"

/* 0 when v is RANK:POINT[:VARIANT] with a known point: *rank, *point and
 * *variant (NULL when none is named, else a pointer into v) set */
static inline int coco_test_die_parse(const char *v, int *rank, const char **point,
                                      const char **variant)
{
    static const char *const known[] = {"start", "init", "upload", "timed", "exit"};
    char *end;
    long r = strtol(v, &end, 10);
    if (end == v || *end != ':' || r < 0 || r > INT_MAX)
        return -1;
    const char *p = end + 1, *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        if (strlen(known[k]) == len && !strncmp(p, known[k], len)) {
            int named = colon && colon[1];
            if (colon && (!named || (strcmp(known[k], "upload") && strcmp(known[k], "timed"))))
                return -1; /* a variant only after upload and timed, and not empty */
            *rank = (int)r;
            *point = known[k];
            *variant = named ? colon + 1 : NULL;
            return 0;
        }
    return -1;
}

/* Rank `rank` at `point` (of variant `variant`, NULL for start, init and
 * exit): dies here when COCONET_TEST_DIE says so (without a variant named,
 * the first time the rank gets there, in its first variant). */
static inline void coco_test_die(int rank, const char *point, const char *variant)
{
    const char *v = getenv("COCONET_TEST_DIE"), *p, *want;
    int r;
    if (!v || !*v || coco_test_die_parse(v, &r, &p, &want) || r != rank || strcmp(p, point))
        return;
    if (want && (!variant || strcmp(want, variant)))
        return;
    if (!strcmp(point, "timed"))
        sleep(1);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(stderr, "coconet: test hook: rank %d kills itself at %s%s%s (at %lld.%03ld s)\n", rank,
            point, variant ? " in " : "", variant ? variant : "", (long long)now.tv_sec,
            now.tv_nsec / 1000000);
    fflush(stderr);
    kill(getpid(), SIGKILL);
}

#endif

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

#include <stddef.h>

#define COCO_RT_ABI 2
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
} CocoRtVariant;

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
} CocoRtTiming;

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
} CocoRtApi;

typedef const CocoRtApi *(*coco_rt_api_fn)(void);

#endif

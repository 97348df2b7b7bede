/* coconet_session.h: calling generated code on the caller's own device
 * memory and stream (rt/session.c, exported from build/libcoconet_cuda.so).
 *
 * The launcher (coconet_rt.h) copies host inputs into buffers it makes and
 * times the program; a session instead serves a process that already owns
 * its data on the GPU (a PyTorch training script: python/coconet/torch):
 *
 *   coco_session_unique_id   on rank 0; the caller sends the bytes to every
 *                            rank (torch.distributed.broadcast);
 *   coco_session_open        on every rank: the device, the NCCL communicators
 *                            (WORLD, or the caller's communicator adopted as
 *                            WORLD; GROUP by ncclCommSplit, WORLD's twin
 *                            holding the window), a side stream, cuBLASLt and
 *                            its workspace, and the arena: one block of device
 *                            memory (a symmetric NCCL window when there are
 *                            peers) from which buffers are handed out;
 *   coco_session_load        a generated shared object (its NCCL version
 *                            checked against the library this process loaded);
 *                            the first one with fused collectives makes the
 *                            device communicator over the window;
 *   coco_session_alloc       a buffer of the arena;
 *   coco_session_call        one variant enqueued on the caller's stream, with
 *                            no host synchronisation (after the first call
 *                            with given sizes, which makes its workspace);
 *   coco_session_close.
 *
 * Collective calls: open, load and alloc (and a call's first one with new
 * sizes, which allocates its workspace in the arena) must be made by every
 * rank in the same order: arena buffers then lie at the same offsets on
 * every rank, which the one-kernel fused collectives need (they address a
 * peer's copy of a buffer at its offset in the window). alloc checks it
 * (ranks whose next offsets differ get an error), and gives every rank the
 * largest size any rank asks (uneven slices keep the offsets aligned).
 *
 * Buffers outside the arena are used where they lie, never copied: the
 * generated code checks at each call whether every buffer of a fused
 * collective lies in the window (coco_lsa_usable) and otherwise takes its
 * NCCL path (ReduceScatter + kernel + AllGather). A copy into the window
 * would cost two more passes over the data and a twin of each tensor in
 * the arena on every call, while the NCCL path reads them in place; the
 * call reports how many of the buffers the peers reach (the generated
 * coco_window_inputs__S and coco_window_outputs__S) it was given outside
 * the arena, so the caller can say so, and only then is the variant's
 * workspace sized for the NCCL path's buffers too. Operands read only on
 * their own rank (a MatMul's) may lie anywhere. Every rank must be given
 * buffers alike (all in the arena, or not), or the ranks take different
 * paths and hang.
 *
 * Errors come back as "rank R: ..." in err, as in the launcher. */
#ifndef COCONET_SESSION_H
#define COCONET_SESSION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COCO_SESSION_ABI 3
#define COCO_SESSION_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct coco_session coco_session;

typedef struct {
    int rank, nranks;
    int device;                   /* the CUDA device this process uses */
    int group_size;               /* ranks of each GROUP made at open; 0: none yet (a
                                     call with another group_size makes its own) */
    const unsigned char *nccl_id; /* COCO_SESSION_ID_BYTES from rank 0's unique_id */
    size_t arena_bytes;           /* the arena's size (0: 1 GiB) */
    double timeout_s;             /* the longest host wait in open, load, alloc (0: 300) */
    void *world;                  /* NULL: WORLD is opened from nccl_id. Else an
                                     ncclComm_t of the caller's over the same nranks
                                     ranks, with this process as `rank`, on `device`,
                                     made by the NCCL library this process's NCCL calls
                                     bind to (coco_session_nccl; PyTorch's
                                     ProcessGroupNCCL's): the session adopts it as WORLD
                                     (its NCCL paths run on it; GROUP and the window's
                                     twin are split from it), ignores nccl_id, and never
                                     destroys or aborts it: its owner does */
} coco_session_config;

/* One call of a variant: arguments as coco_cuda_args (include/coconet_cuda.h). */
typedef struct {
    int module;                   /* from coco_session_load */
    const char *variant;          /* "program" or a schedule's name */
    void *const *input;           /* device data of each input (NULL for a Scalar) */
    const double *scalar;         /* each Scalar input's value (else unused) */
    void *const *output;          /* device buffer of each output (NULL: see coconet_cuda.h) */
    void *const *const *members;  /* per input: a scattered tensor's members, else NULL */
    int ninputs, noutputs;        /* for the window check */
    const size_t *input_bytes;    /* each input's bytes (a scattered one: unused) */
    const size_t *output_bytes;
    const int *nmembers;          /* per input: members of a scattered tensor, else 0 */
    const size_t *const *member_bytes;
    const long *size;             /* the program's sizes */
    int nsize;
    unsigned long long seed;      /* Dropout's masks */
    void *stream;                 /* cudaStream_t the work is enqueued on */
    int fused_algo;               /* -1: the session's (COCONET_FUSED); else 0..4 */
    int overlap_chunks;           /* -1: the session's (COCONET_OVERLAP_CHUNKS) */
    int group_size;               /* the program's GROUP size (coco_program_group_size), 0:
                                     none; the first call with a new one makes its
                                     communicator (ncclCommSplit: collective) */
    int outside;                  /* out: buffers the peers reach given outside the arena */
} coco_session_call_args;

int coco_session_abi(void);       /* COCO_SESSION_ABI */
/* The NCCL version (NCCL_VERSION_CODE) this process's NCCL calls bind to,
 * the runtime's and the generated code's alike (the first libnccl.so.2 the
 * dynamic linker loaded: an LD_PRELOAD one, else PyTorch's), and its file in
 * path; -1 with a message in path when none can be called. Generated code
 * must be built with that version's headers. */
int coco_session_nccl(char *path, size_t len);
int coco_session_unique_id(unsigned char id[COCO_SESSION_ID_BYTES], char *err, size_t errlen);
coco_session *coco_session_open(const coco_session_config *cfg, char *err, size_t errlen);
/* the module's index (0, 1, ...), or -1 */
int coco_session_load(coco_session *s, const char *so_path, char *err, size_t errlen);
/* coco_output_alias of a module's output i (coconet_cuda.h): an input's
 * index, -1, or -2 past the last output */
int coco_session_output_alias(coco_session *s, int module, int output);
/* a buffer of at least `bytes` (the largest any rank asks, rounded up to
 * 512), zeroed when the arena was made; NULL with a message (arena full,
 * or ranks out of step) */
void *coco_session_alloc(coco_session *s, size_t bytes, char *err, size_t errlen);
/* the arena's base, size and bytes handed out so far */
void coco_session_arena(const coco_session *s, void **base, size_t *bytes, size_t *used);
int coco_session_call(coco_session *s, coco_session_call_args *a, char *err, size_t errlen);
/* Waits for `stream` (NULL: the session's own work), polling NCCL's error
 * state, up to the session's time limit: 0, or -1 with a message. */
int coco_session_wait(coco_session *s, void *stream, char *err, size_t errlen);
/* the GPU, NCCL's version, whose communicator WORLD is (the caller's or the
 * session's own), and how the fused collectives run */
void coco_session_describe(const coco_session *s, char *buf, size_t len);
/* abort: ncclCommAbort instead of destroying (after an error) */
void coco_session_close(coco_session *s, int abort);

#ifdef __cplusplus
}
#endif
#endif

/* cuda.h: the CUDA backend's host side: the build of generated code (gen/)
 * and running it on GPUs with one process per rank. It may include every
 * layer below it; no file below src/cuda/ includes it. */
#ifndef COCO_CUDA_H
#define COCO_CUDA_H

#include "api.h"
#include "gen/gen.h"

#include <sys/types.h> /* pid_t */

/* ---- cuda_build.c (toolchain, build cache) and nvcc.c (the nvcc commands,
 * running a tool with a time limit); no CUDA ---- */
enum { CUDA_PATH_MAX = 1024 };
#define FNV_INIT 14695981039346656037ULL
#define FNV_PRIME 1099511628211ULL
uint64_t fnv1a(uint64_t h, const void *data, size_t n);
void pathf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
typedef struct {
    char nvcc[CUDA_PATH_MAX], cuda_lib[CUDA_PATH_MAX];
    char nccl_include[CUDA_PATH_MAX], nccl_lib[CUDA_PATH_MAX], nccl_link[CUDA_PATH_MAX];
    char arch[CUDA_PATH_MAX];     /* nvcc -arch: "native" unless COCONET_CUDA_ARCH */
} CudaToolchain;
typedef struct {
    int argc;
    char *argv[64];
    char buf[16384];
    size_t used;
} Argv;
typedef struct {
    CudaToolchain tool;
    char home[CUDA_PATH_MAX];     /* coco_home(): include/, rt/kernels/ */
    char cache[CUDA_PATH_MAX];
    double timeout_s;             /* for nvcc */
    FILE *progress;               /* where a build says it begins (flushed), or NULL */
    void (*on_build)(const char *so, void *arg); /* says it instead of progress, if set */
    void *on_build_arg;
    uint64_t key;                 /* results of cuda_build: */
    char so[CUDA_PATH_MAX + 64];
    int cached;
    double seconds;
} CudaBuild;
void cuda_runtime_path(const char *home, char *buf, size_t len);
int cuda_cache_dir(char *buf, size_t len);            /* -1: no HOME */
void cuda_toolchain_defaults(CudaToolchain *t);       /* from CUDA_HOME, NCCL_HOME */
void cuda_toolchain_read(CudaToolchain *t, const char *conf); /* build/cuda.conf */
int nccl_header_version(const char *include_dir);     /* NCCL_VERSION_CODE, or -1 */
void argv_add(Argv *a, const char *fmt, ...);
void cuda_nvcc_argv(const CudaToolchain *t, const char *home, const char *src, const char *out,
                    Argv *a);
uint64_t cuda_cache_key(const char *src, size_t n, const Argv *cmd, const char *nvcc_version,
                        int nccl_version, const char *gpu, const char *home);
double cuda_now_s(void); /* seconds of CLOCK_MONOTONIC */
/* Starts argv in its own process group, its output to log_path, else to the
 * write end of pipe_fds (both ends closed in the child), else where ours
 * goes: the pid (0 never: the child execs), or -1 */
pid_t cuda_spawn(char *const argv[], const char *log_path, const int pipe_fds[2]);
/* argv[0] with a time limit, output to log_path or into out; its exit
 * status, 128 + signal, -1 (not started) or -2 (timed out, killed) */
int run_capture(char *const argv[], const char *log_path, char *out, size_t len, double timeout_s);
int cuda_build(CudaBuild *b, const char *src, size_t n, char *err, size_t errlen);
/* The nvcc command compiling src to the object obj (-c), and the one
 * linking objects into the shared object out */
void cuda_nvcc_compile_argv(const CudaToolchain *t, const char *home, const char *src,
                            const char *obj, Argv *a);
void cuda_nvcc_link_argv(const CudaToolchain *t, char *const *objs, int n, const char *out,
                         Argv *a);

/* ---- build_parts.c: a source's variants compiled apart, in parallel ---- */
/* An nvcc slot of the machine (as many as cores; a lock file under cache,
 * held while the fd is open): the fd, or -1 when none came within
 * timeout_s or there are no lock files (then no limit) */
int cuda_nvcc_slot(const char *cache, double timeout_s);
/* Builds src (emit_cuda's, with its part markers) into the shared object
 * so_tmp as `jobs` objects compiled at once and linked, their logs in
 * log_base.N; 1 when src is not worth splitting (fewer than two variants,
 * jobs < 2: the caller compiles it whole), 0 when built, -1 with err on a
 * failure. */
int cuda_build_parts(const CudaBuild *b, const char *src, size_t n, const char *so_tmp,
                     const char *log_base, int jobs, char *err, size_t errlen);
/* The GPU models of this machine without CUDA (nvidia-smi, else the driver's
 * /proc files), or "no GPU seen": a part of the build's cache key. */
void cuda_gpu_model(char *buf, size_t len);
/* a file's text, or cuda_compile of the variants (user error -> NULL, err) */
char *cuda_source(Program **v, int nv, const char *path, size_t *n, char *err, size_t errlen);

/* ---- cuda_job.c, cuda_report.c, cuda_rank.c, cuda_launch.c, cuda_mpi.c:
 * running on GPUs, one process per rank ---- */
/* One value a variant's GPU run is checked on: an output, or the new value
 * of an Updated tensor (found in that input's buffer). */
typedef struct {
    const char *name;
    int node;          /* in the variant */
    int output;        /* its position among the outputs, or -1 */
    int input;         /* the Execute input holding it, or -1 */
    Exec *ref;         /* the CPU values it is compared with: node rnode
                          (NULL when the job is unchecked: only its hash) */
    int rnode;
    int xnode;         /* the same value in the FP64 evaluation */
    Tolerance tol;
    int replicated;    /* every rank of a group must hold the same bits */
} CudaCheck;
typedef struct {
    Program *prog;     /* the program, or a scheduled clone */
    const char *name;  /* "program", or the schedule's name; in the tuner's
                          launches with its knobs, "paper/twoshot" */
    const char *entry; /* its entry points' name (coco_run__ENTRY): "program"
                          or the schedule's */
    const char *note;  /* the schedule's name in the paper's notation */
    Exec *own;         /* its own CPU run, or NULL when checked against the program's */
    CudaCheck *check;
    int ncheck;
    /* its own knobs for the runtime (CocoRtVariant, include/coconet_rt.h);
       -1 (COCO_RT_KNOB_UNSET): the ranks' environment's */
    int fused_algo, overlap_chunks;
} CudaVariant;
typedef struct {
    Program *base;     /* the program: variant 0 */
    Exec *data;        /* its CPU run, holding every variant's input data
                          (unchecked: the inputs alone, the program not run) */
    Program *exact;
    Exec *x64;         /* the FP64 evaluation of the program (unchecked: NULL) */
    int unchecked;     /* --reference none: no CPU reference, no value compared */
    int time_only;     /* a round of variants timed alone (CocoRtVariant.time_only):
                          no value compared, copied back or hashed; set with
                          unchecked (cuda_ranks_run's "TIME" rounds) */
    CudaVariant *v;
    int nv;
    char so[CUDA_PATH_MAX + 64];     /* the generated code, built */
    char runtime[CUDA_PATH_MAX + 64];
    int iters, warmup;
    int breakdown_runs; /* --breakdown: runs with an event after each call (0: none) */
    int remeasure;      /* --remeasure: the machine's limits measured again */
    double timeout_s;
    double cpu_ms;     /* the CPU reference's time (unchecked: drawing the inputs) */
    uint64_t seed;
} CudaJob;
/* cuda_job.c: the CPU references and the checks, before any fork */
/* Whether this host can hold the job's CPU side (the reference, or with
 * --reference none the inputs), as cuda_job_prepare checks again: 0, or -1
 * with a located message. Asked before the build, so that a run too large
 * is refused at once. */
int cuda_job_fits(Program **variants, int nv, const coco_cuda_options *o, char *err,
                  size_t errlen);
int cuda_job_prepare(CudaJob *job, Program **variants, int nv, const coco_cuda_options *o,
                     char *err, size_t errlen);
/* A view's variants timed alone (1: time_only, and so unchecked) or not:
 * the launcher's "TIME" round and the rank's reading of it */
void cuda_job_time_alone(CudaJob *view, int alone);
void cuda_job_free(CudaJob *job);
/* What the ranks said, gathered: rows[v * nranks + rank]. */
typedef struct {
    int seen;
    long differing, elements, outside;
    double max_abs, max_rel, median_ms, min_ms, max_ms;
    char worst[MAXNAME];
    uint64_t hash[64]; /* of each checked value's bytes (the first 64 checks) */
    int fault;         /* the runtime's own checks: COCO_RT_FAULT_* (include/coconet_rt.h) */
    char fault_msg[512];
} RankRow;
/* One step of a variant's breakdown (a kernel or a library call), over the
 * ranks that reported it. */
typedef struct {
    int v, index, line, kind, calls;
    int ranks;         /* how many reported it */
    int mixed;         /* ranks named another operation at this index */
    double ms;         /* the slowest rank's median */
    char op[48], call[48];
} ReportStep;
/* The machine's limits (cuda_limits.c), as rank 0 found them. */
typedef struct {
    int known;
    char how[24];      /* "measured", "cached", "measured-uncached" */
    double copy_gbs, peer_gbs, gemm_tflops;
    char key[512];     /* the GPU, driver and CUDA; or why they are unknown */
} ReportLimits;
typedef struct {
    int nranks, nv;
    RankRow *rows;
    ReportStep *step;  /* --breakdown, in the order they arrive */
    int nstep, capstep;
    int *steps_differ; /* per variant: breakdown runs left out, over all ranks */
    ReportLimits limits;
    char gpu[512];
    char **error;      /* per rank: why it failed, or NULL */
    int first_failure; /* the rank that failed first, or -1 */
    int *done;         /* per rank: said DONE */
    int *at;           /* per rank: the step it said it began (REPORT_AT_*, or a variant) */
} Report;
/* the lines ranks send: "GPU text", "LIMITS ...", "AT step", "ROW v ...", "FAULT v
 * GUARD|REPEAT text", "STEPS v n differ", "STEP v i ...", "ERR text", "DONE"; a step
 * (of AT) is a variant's index, or one of: */
enum { REPORT_AT_OPEN = -1, REPORT_AT_CLOSE = -2 };
typedef void (*EmitFn)(void *ctx, const char *line);
/* cuda_report.c */
void report_init(Report *r, int nranks, int nv);
void report_free(Report *r);
void report_line(Report *r, int rank, const char *line);
void report_error(Report *r, int rank, const char *msg); /* the first one counts */
/* where rank was by its last AT line, e.g. "in variant 'fused'" */
void report_where(const CudaJob *job, const Report *r, int rank, char *buf, size_t len);
int report_print(const CudaJob *job, const Report *r, FILE *out); /* 0: all passed */
/* variant vi's verdict (bitwise, rounding, unchecked: passed, report_passed;
 * WRONG, REPLICAS, GUARD, REPEAT, FAILED) and its figures over the ranks in
 * *all (median_ms: the slowest rank's) */
const char *report_verdict(const CudaJob *job, const Report *r, int vi, RankRow *all);
int report_passed(const char *verdict);
void rank_row_line(char *buf, size_t len, int v, const RankRow *row, int nhash);
/* cuda_rank.c: in a rank's process, load the runtime, run every variant, check it */
typedef struct CocoRtApi CocoRtApi;
const CocoRtApi *cuda_load_runtime(const char *path, char *err, size_t errlen);
/* Where a rank runs: its rank, its GPU on this host, and how many ranks'
 * processes share the executor's threads (forked together: all of them;
 * under MPI: 1, each process has its own). */
typedef struct {
    int rank, local_rank, sharing;
} CudaRankPlace;
int cuda_rank_work(const CudaJob *job, const CocoRtApi *api, const CudaRankPlace *at,
                   const unsigned char *nccl_id, EmitFn emit, void *ctx);
/* The same, opened once, serving the rounds read from fd `commands` (the
 * launcher's "RUN n i algo chunks name ...", then "EXIT"): "END" after each */
int cuda_rank_serve(const CudaJob *job, const CocoRtApi *api, const CudaRankPlace *at,
                    const unsigned char *nccl_id, int commands, EmitFn emit, void *ctx);
void cuda_watchdog(int rank, double seconds, const char *what); /* 0 s: off */
void cuda_emit_error(EmitFn emit, void *ctx, int rank, const char *msg); /* ERR line */
int cuda_unique_id(const CocoRtApi *api, unsigned char *id, char *err, size_t errlen);
/* cuda_limits.c: rank 0's GPU's limits, cached or measured: a LIMITS line */
void cuda_limits_line(const CudaJob *job, const CocoRtApi *api, int local_rank, char *line,
                      size_t len);
/* cuda_launch.c: one forked process per rank, watched by the parent */
int cuda_launch(const CudaJob *job, Report *rep);
/* Ranks kept from one round to the next (the tuner's slots): forked over
 * `job` (every variant a round may ask for; it must outlive them), they
 * open at once while the caller goes on. A round runs view's variants, each
 * job->v[index[k]] with its own knobs and name (no spaces), and fills rep
 * as cuda_launch does: 0, or -1 when a rank failed or the ranks were not
 * running (then they are stopped: cuda_ranks_alive says 0, and the caller
 * starts new ones). Leave tells them to close and exit and returns (the job
 * may go); stop (after leave, or alone) waits for their exit and frees r. */
typedef struct CudaRanks CudaRanks;
CudaRanks *cuda_ranks_start(const CudaJob *job);
int cuda_ranks_alive(const CudaRanks *r);
int cuda_ranks_run(CudaRanks *r, const CudaJob *view, const int *index, Report *rep);
void cuda_ranks_leave(CudaRanks *r);
void cuda_ranks_stop(CudaRanks *r);
/* cuda_run.c: coco_run_cuda's parts.
 * The home, cache and toolchain of a build (cuda_build fills the rest); -1 with a message */
int cuda_build_setup(CudaBuild *b, double timeout_s, char *err, size_t errlen);
/* The variants a run builds: the program, then each schedule of p (its
 * written ones, and the enumerated ones when enumerate_schedules ran)
 * applied, or only the one named `only` (NULL: all); NULL with a message
 * (a schedule refused, one named 'program', or none named `only`). */
Program **cuda_variants(Program *p, const char *only, int *nv, char *err, size_t errlen);
/* Every variant: the program, its written schedules and its enumerated ones
 * (enumerate_schedules, unless p has them already), as `coconet tune` builds
 * them and `run --schedule tuned` (build_all) finds them: one source at
 * every size, so one object in the build cache. NULL with a message. */
Program **cuda_all_variants(Program *p, int *nv, char *err, size_t errlen);
int cuda_gpu_count(void);  /* GPUs the driver shows (no CUDA call), -1: unknown */
/* api_cuda.c: the shared object of the program and schedule `name` (or
 * "program"), built or found in the cache: o->so and o->variant filled;
 * with `all`, of every variant (cuda_all_variants: the tuner's object) */
int cuda_build_variant(coco_program *p, const char *name, int all, const coco_cuda_build *o,
                       char *err, size_t errlen);
/* cuda_mpi.c: one MPI process per rank (without COCO_HAVE_MPI: never active) */
int cuda_mpi_init(int *nranks);       /* 1: this process is a rank of an MPI job */
int cuda_mpi_active(void);
int cuda_mpi_rank(void);
int cuda_mpi_local_rank(void);
int cuda_mpi_local_size(void);        /* processes on this host */
int cuda_mpi_all_ok(int ok);          /* 1 when ok on every rank (collective) */
int cuda_mpi_run(const CudaJob *job, FILE *out); /* this rank's work; rank 0 prints */
void cuda_mpi_finish(void);


#endif

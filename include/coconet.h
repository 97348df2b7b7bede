/* coconet.h: the public C API of coconet.
 *
 * Load a .coco program (parse, bind sizes, infer and check layouts), print
 * it, and run it on the CPU reference executor with simulated ranks. The
 * `coconet` command is built on this API alone.
 *
 * Errors: functions that can fail for user reasons take an error buffer and
 * fill it with a message naming file, line and column; they return NULL or
 * a non-zero value. */
#ifndef COCONET_H
#define COCONET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COCONET_VERSION "0.1.0"

typedef struct Program coco_program;
typedef struct coco_run coco_run;

/* How to load a program: sizes and scalars bound with "-D NAME=VALUE" (a
 * size's VALUE: decimal digits or 2^k, from 1 to 10^13; a scalar's: a
 * number as the file writes one), the number of ranks, and the size of
 * GROUP (0: as the file declares it). */
typedef struct {
    const char *const *defines; /* "NAME=VALUE" strings */
    int ndefines;
    int nranks;                 /* >= 1 */
    long group_size;            /* 0: from the file */
} coco_config;

/* Parse, bind and check. NULL with a message in err on a user error. */
coco_program *coco_load_file(const char *path, const coco_config *cfg, char *err, size_t errlen);
coco_program *coco_load_string(const char *name, const char *text, const coco_config *cfg,
                               char *err, size_t errlen);
/* coco_load_file, saying in *status whose fault a failure is: */
enum {
    COCO_LOAD_OK,
    COCO_LOAD_BAD_PROGRAM, /* the file's: it cannot be read, or its text, types,
                              layouts or sizes are wrong */
    COCO_LOAD_BAD_CONFIG   /* the configuration's (a command line's): a -D binding
                              (its form, a value its size or scalar cannot take, a
                              name the program does not have, one given twice),
                              the ranks or the group size */
};
coco_program *coco_load_file_status(const char *path, const coco_config *cfg, int *status,
                                    char *err, size_t errlen);
void coco_program_free(coco_program *p);

/* Schedules: those written in the file (or added from a schedule file),
 * and applying one, which gives a new program (free it too). */
int coco_add_schedules(coco_program *p, const char *path, char *err, size_t errlen);
int coco_num_schedules(const coco_program *p);
const char *coco_schedule_name(const coco_program *p, int i);
coco_program *coco_schedule(coco_program *p, const char *name, char *err, size_t errlen);
/* The index of the schedule named `name`, or -1 with a message in err
 * that lists the schedules there are. */
int coco_find_schedule(const coco_program *p, const char *name, char *err, size_t errlen);
/* Adds every distinct valid schedule reachable from the program; returns
 * how many. Their text and their names in the paper's notation: */
int coco_enumerate_schedules(coco_program *p);
void coco_print_schedule(const coco_program *p, int i, FILE *out);
const char *coco_schedule_note(const coco_program *p, int i); /* NULL if written by hand */

/* CUDA source (include/coconet_cuda.h ABI) for the program and the named
 * schedules, one entry point each; 0 on success. */
int coco_gen_cuda(coco_program *p, const char *const *schedules, int n, FILE *out, char *err,
                  size_t errlen);

/* What a program (or a scheduled program) must move and compute on one
 * rank, counted from its graph (the rules: src/front/roofline.c): bytes read
 * (each Tensor input once) and written (each output and Updated tensor
 * once), bytes sent to other ranks by its collectives and Sends (NCCL's
 * minimal traffic), and floating-point operations. rank -1: each figure's
 * largest over the ranks. 0, or -1 for a rank out of range. */
typedef struct {
    double read_bytes, write_bytes, link_bytes, flops;
} coco_roofline;
int coco_program_roofline(const coco_program *p, int rank, coco_roofline *r);

/* The directory holding coconet's include/ and rt/kernels/ (COCONET_HOME,
 * else the executable's directory), or NULL. */
const char *coco_home(void);

/* Write the checked program back as .coco text, each value's inferred
 * type, shape and layout in a comment. */
void coco_print(coco_program *p, FILE *out);

/* Program facts. */
const char *coco_program_name(const coco_program *p);
int coco_num_ranks(const coco_program *p);
int coco_num_inputs(const coco_program *p);
const char *coco_input_name(const coco_program *p, int i);
int coco_num_outputs(const coco_program *p);
const char *coco_output_name(const coco_program *p, int i);
/* Execute input i: a Scalar (1) or not (0); a scattered tensor's members:
 * their number (0: not scattered; -1: no input i) and, up to max of them,
 * each one's element count */
int coco_input_is_scalar(const coco_program *p, int i);
/* Execute input i a Scalar declared with a value (a constant: the generated
 * code holds it): 1 and *value its value rounded to its type, else 0 */
int coco_input_constant(const coco_program *p, int i, double *value);
int coco_input_members(const coco_program *p, int i, long *count, int max);
/* The ranks of each GROUP when the program uses GROUP (its communicator
 * over them is coco_cuda_ctx.group), else 0 */
int coco_program_group_size(const coco_program *p);
/* The program's sizes, in the order generated code takes them
 * (coco_cuda_args.size): how many, each one's name and bound value */
int coco_num_sizes(const coco_program *p);
const char *coco_size_name(const coco_program *p, int i);
long coco_size_value(const coco_program *p, int i);

/* A tensor as one rank holds it. Data are doubles holding values exactly
 * representable in the tensor's element type. */
typedef struct {
    const char *name;
    const char *type;   /* "FP16", ... */
    const char *layout; /* "Replicated", "Sliced(0)", "Local" */
    int ndim;
    long global_shape[8];
    long local_shape[8];
    long count;         /* elements this rank holds */
    double *data;       /* writable for inputs before coco_run_execute */
    int group_ranks;    /* ranks of the value's group (WORLD: every rank); groups
                           are consecutive ranks: group g is ranks g*G .. g*G+G-1 */
} coco_tensor;

/* Running on the CPU reference executor: create (inputs are filled with
 * seeded data), optionally overwrite inputs, execute, read values.
 * Memory: coco_run_fits compares the most the run will hold at once (every
 * simulated rank's values live together, as the executor frees them) with
 * what this process may still use: the least of the memory available, the
 * cgroup's limit less its usage, and RLIMIT_AS / RLIMIT_DATA less what is
 * mapped. 0 when it fits, else -1 with "FILE:LINE:COL: error: the run needs
 * ... at its peak ..." naming the figure, the values live then and the
 * limit. coco_run_create checks it first; an allocation that still fails
 * makes create or execute return NULL / -1 with an "out of memory" message
 * (the run is then unusable, but can be freed). */
int coco_run_fits(coco_program *p, char *err, size_t errlen); /* 0: memory suffices */
/* The same for what `coconet run` does: the program's run, then each of
 * the named schedules' runs beside the values kept from it and from the
 * FP64 evaluation (as if needed from the first schedule on), and that
 * evaluation beside the program's and a schedule's kept values. */
int coco_run_all_fits(coco_program *p, const char *const *schedules, int n, char *err,
                      size_t errlen);
/* A cap on the memory runs may use, below the machine's limits (0: none);
 * for the whole process, read by the checks above. */
void coco_set_memory_cap(double bytes);
coco_run *coco_run_create(coco_program *p, uint64_t seed, int nthreads, char *err,
                          size_t errlen);                               /* NULL: see err */
coco_run *coco_run_new(coco_program *p, uint64_t seed, int nthreads); /* NULL: too large */
/* A named value as one rank holds it, without data (t->data NULL): its
 * type, layout and shapes. 0, or -1: no such value or rank. */
int coco_describe(coco_program *p, const char *name, int rank, coco_tensor *t);
int coco_run_tensor(coco_run *r, const char *name, int rank, coco_tensor *t); /* 0 ok */
/* Writes count values into input `name` on one rank (count: the elements
 * that rank holds), each rounded to the tensor's element type (to nearest,
 * ties to even). 0, or -1 with a message: not an input, no such rank, or
 * another count. */
int coco_run_write(coco_run *r, const char *name, int rank, const double *data, long count,
                   char *err, size_t errlen);
int coco_run_execute(coco_run *r, char *err, size_t errlen);                  /* 0 ok */
/* After coco_run_execute: input `name` as the run leaves it on one rank, its
 * new value when an Update changes it (else the value it was given), with
 * the new value's layout and shape (a schedule may leave it Sliced: asSlice).
 * 0, or -1: not an input, no such rank, or the run has not executed. */
int coco_run_updated(coco_run *r, const char *name, int rank, coco_tensor *t);
void coco_run_free(coco_run *r);

/* Summary of an output over all ranks: the logical tensor (gathered when
 * Sliced, rank 0's when Replicated, all ranks concatenated when Local). */
typedef struct {
    double sum, norm;
    uint64_t hash;      /* FNV-1a over the element bit patterns */
    long count;
    int replicas_agree; /* Replicated values identical on all ranks */
} coco_summary;
int coco_run_summary(coco_run *r, const char *name, coco_summary *s);

/* Compares the outputs (by position) and the new values of Updated tensors
 * of two runs of the same program under different schedules. With `exact`,
 * a run of coco_program_exact(ref's program) on the same seed, an element
 * whose bits differ is still right when its distance to the exact value is
 * at most the largest of: 4 |ref - exact| (the program's own error there),
 * 2 x the program's worst error over the whole value, and 4 + 2P ulps of its
 * type at the value's scale (its largest exact magnitude), P the ranks; or,
 * failing those, 4 x the spread of the exact program run again rounding
 * every operation upward and downward (made once, kept in `exact`; NaN is
 * right where that rounding decides NaN). A schedule that regroups a sum may
 * round differently, but no worse than the program itself does. */
typedef struct {
    int compared;       /* values compared */
    long elements;
    long differing;     /* elements whose bits differ */
    long outside;       /* differing elements beyond the tolerance (with exact) */
    double max_abs;     /* largest |a - b| */
    double max_rel;     /* largest |a - b| / max(|a|, tiny) */
    char worst[64];     /* name of the value with the largest difference */
} coco_comparison;
int coco_run_compare(coco_run *ref, coco_run *other, coco_run *exact, coco_comparison *c);
/* The program with every value computed in FP64 from the same input data. */
coco_program *coco_program_exact(coco_program *p);

/* The CPU reference of a CUDA run (coco_cuda_options.reference). */
enum {
    COCO_REFERENCE_EACH,    /* each schedule's own CPU run (the default) */
    COCO_REFERENCE_PROGRAM, /* the program's CPU run, for every schedule (less CPU
                               time and memory) */
    COCO_REFERENCE_NONE     /* none: the inputs are drawn, nothing is computed on
                               the CPU and no value is checked against it; only
                               times, the runtime's guard bytes and repeat run,
                               and the ranks' agreement on Replicated values */
};

/* Running on GPUs (the CUDA backend), one process per rank and GPU.
 * coco_run_cuda generates the CUDA code of the program and the chosen
 * schedules, builds it with nvcc (cached), computes the CPU reference, then
 * forks one process per rank (or, after coco_cuda_mpi_init, runs as this MPI
 * rank), runs and times every variant on its GPU, checks outputs and new
 * values of Updated tensors against the CPU reference, and prints a table to
 * out. Returns 0 when every variant passed on every rank, 1 otherwise (a
 * message in err when nothing could be run). With COCO_REFERENCE_NONE the
 * rows say "unchecked" and 0 means only that every rank ran and timed every
 * variant with the GPU-side checks passing. */
typedef struct {
    uint64_t seed;
    int threads;            /* CPU threads of the reference executor */
    int iters;              /* timed runs after 3 warm-up runs (0: no timing) */
    double timeout_s;       /* longest wait for a GPU, a rank or nvcc (0: 300 s) */
    const char *schedule;   /* NULL: the program and each of its schedules;
                               else the program and this schedule */
    const char *cuda_source;/* NULL: generate the code; else build this .cu file */
    int reference;          /* COCO_REFERENCE_*: what the runs are checked against */
    int build_only;         /* 1: build (or find in the cache) the code, run nothing */
    int breakdown;          /* 1: after the timed runs, as many runs again (at least
                               one) timing each kernel and library call: a second
                               table, per variant (doc/gpu.md) */
    int remeasure;          /* 1: measure the machine's limits again, not from the
                               cache (so does COCONET_REMEASURE=1) */
    int build_all;          /* 1: build the code of the program and every schedule,
                               the enumerated ones too (the object `coconet tune`
                               builds, found in the cache), and run the program and
                               `schedule` alone (--schedule tuned) */
} coco_cuda_options;
int coco_run_cuda(coco_program *p, const coco_cuda_options *o, FILE *out, char *err,
                  size_t errlen);
/* The shared object of the program and one schedule, built with nvcc as
 * coco_run_cuda builds it (the same source, toolchain and cache; nothing
 * is run): schedule NULL or "program" for the program alone, "tuned" for
 * the tuning record's choice (coco_tuned), in the object of every variant
 * that `coconet tune` built and `run --schedule tuned` finds, else a
 * schedule's name (the object of the program and that schedule). Its
 * path goes to so; the variant's entry-point name ("program" or the
 * schedule's) to variant; the knob setting the tuned choice needs
 * ("COCONET_FUSED=push", or "") to knobs, and a note when the sizes were
 * not tuned themselves to note. cuda_source: build this .cu file instead
 * of generating one (NULL: generate). A build says so when it begins (it
 * takes minutes): on_build(so, on_build_arg) is called, or with on_build
 * NULL a line goes to stderr. 0, or -1 with a message. */
typedef struct {
    const char *schedule;
    const char *cuda_source;
    double timeout_s;        /* for nvcc (0: 600 s) */
    const char *nccl_home;   /* build against the NCCL under this prefix (include/,
                                lib/): the one the calling process loaded; NULL:
                                the runtime's (build/cuda.conf) */
    char *so, *variant, *knobs, *note; /* outputs, of the lengths below */
    size_t solen, variantlen, knobslen, notelen;
    void (*on_build)(const char *so, void *arg); /* nvcc is about to build `so` */
    void *on_build_arg;
} coco_cuda_build;
int coco_build_cuda(coco_program *p, coco_cuda_build *b, char *err, size_t errlen);
/* 1 when the CUDA runtime is built and nranks GPUs are visible (checked
 * without touching CUDA: the driver's /proc files); 0 when it is not built
 * or too few GPUs are shown; -1 when built but the GPUs cannot be counted
 * so. The reason in why when not 1. */
int coco_cuda_usable(int nranks, char *why, size_t len);
/* Under an MPI launcher (mpirun) in a build with MPI: initialises MPI and
 * returns 1 with the job's size in *nranks (coco_run_cuda then runs this
 * process's rank, and finalises MPI); 0 when not under MPI. */
int coco_cuda_mpi_init(int *nranks);

/* The autotuner (`coconet tune`, doc/cli.md): checks every variant (the
 * program, its schedules and its enumerated ones, each under the knob sets
 * that apply to it) against the CPU reference, times them on the GPUs at
 * each size point (pruned by a cost model unless exhaustive), prints a table
 * per point and keeps the fastest in a tuning record under the build cache.
 * With COCONET_TUNE_FAKE=FILE, times are replayed from FILE (for tests). */
typedef struct {
    const char *const *defines; /* "NAME=VALUE", as coco_config */
    int ndefines;
    int nranks;
    long group_size;
    const char *sched_file;     /* schedules added from a file, or NULL */
    const char *const *sizes;   /* "NAME=v1,v2,..." each (values: integers or 2^k);
                                   the points: every combination; none: the -D sizes */
    int nsizes;
    const char *check_size;     /* "NAME=v,..." where variants are checked when a point
                                   is too large to check in place; NULL: the file's sizes */
    double prune;               /* prune at this factor (0: 1.5) */
    int exhaustive;             /* time every candidate */
    int plan;                   /* print the candidates and predictions, time nothing */
    int iters;                  /* timed runs of each variant (0: 20) */
    double timeout_s;
    int threads;
    uint64_t seed;
    const char *log;            /* append each launch's report to this file */
    double launch_s;            /* what another launch of the ranks costs, seconds: the
                                   first round of a point times every candidate when those
                                   beyond the model's reach cost less than that (0: none
                                   weighed, pruning as `prune` says; the ranks stay up from
                                   one round to the next) */
    int confirm;                /* rounds that time the candidates within 5 % (or 0.002 ms)
                                   of a point's best again, each keeping the median of its
                                   times (0: none; coconet tune's default: COCO_TUNE_CONFIRM) */
} coco_tune_options;
#define COCO_TUNE_CONFIRM 2     /* coco_tune_options.confirm of `coconet tune` */
/* 0 done, 1 failed (message in err), 2 bad options or a bad -D (message in err) */
int coco_tune(const char *file, const coco_tune_options *o, FILE *out, char *err,
              size_t errlen);
/* Prints the record of the program (as loaded by o) on this machine. 0, or
 * 1 with a message: no record (2: bad options, a bad -D) */
int coco_tune_show(const char *file, const coco_tune_options *o, FILE *out, char *err,
                   size_t errlen);
/* The tuned choice for p at its sizes: the schedule's name ("program": none),
 * the knob setting its ranks need ("COCONET_FUSED=push", or "") and, when
 * the sizes were not tuned themselves, a note naming the nearest that were.
 * Enumerates p's schedules when the choice is an enumerated one. 0, or -1
 * with a message (no record: it says to run coconet tune). */
int coco_tuned(coco_program *p, char *schedule, size_t slen, char *knobs, size_t klen,
               char *note, size_t nlen, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

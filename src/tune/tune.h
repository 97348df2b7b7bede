/* tune.h: the autotuner, `coconet tune` (doc/cli.md, "tune"): every variant
 * of a program (the program, its written and its enumerated schedules)
 * crossed with the knob sets that apply to it, checked against the CPU
 * reference, ordered by a cost model, timed on the GPUs (pruning those the
 * model says are far slower than the best measured), and the fastest kept
 * per size in a tuning record that `run` and `gen --schedule tuned` read.
 * The layer above cuda: it may include every layer below it. */
#ifndef COCO_TUNE_H
#define COCO_TUNE_H

#include "cuda/cuda.h"

/* ---- knobs.c: the runtime's knob sets, and which apply ---- */
/* A knob set is one setting of a variant's knobs, which the runtime takes
 * with the variant (CocoRtVariant, include/coconet_rt.h): an algorithm of
 * its fused collectives (COCONET_FUSED's) or a chunk count of its
 * overlaps (COCONET_OVERLAP_CHUNKS'); the other at its default. v below: a
 * variant as the CUDA backend runs it (lower_collectives applied, when it
 * lowers anything). */
enum {
    KNOB_DEFAULT, KNOB_ONESHOT, KNOB_TWOSHOT, KNOB_PUSH, KNOB_NCCL, KNOB_CHUNKS1, KNOB_CHUNKS4,
    NKNOB
};
const char *knob_name(int k);             /* "default", "oneshot", ... */
const char *knob_env(int k);              /* "COCONET_FUSED=oneshot", or "" */
int knob_parse(const char *name);         /* the knob set named, or -1 */
int knob_chunks(int k);                   /* the overlap's chunks under k (1: none) */
int knob_sets(const Program *v, int *sets); /* those that apply to v (sets[NKNOB]); how many */
/* The runtime's values under k: coco_cuda_ctx.fused_algo and overlap_chunks */
void knob_values(int k, int *fused_algo, int *overlap_chunks);
/* Clears COCONET_FUSED and COCONET_OVERLAP_CHUNKS from this process's
 * environment, which the ranks inherit: the knob sets say everything */
void knob_clear_env(void);
/* Does overlap o of v run in chunks that COCONET_OVERLAP_CHUNKS counts: a
 * MatMul with a FusedAllReduce (src/gen/emit_overlap.c), or with an
 * AllGather or ReduceScatter by its blocks (knob_block_overlap)? */
int knob_chunked_overlap(const Program *v, int o);
/* Does overlap o of v hold a MatMul run by the blocks of an AllGather or
 * ReduceScatter (overlap_block_pair, src/gen/emit_overlap_blocks.c)? */
int knob_block_overlap(const Program *v, int o);

/* ---- cost.c: the cost model ---- */
typedef struct {
    double copy_gbs;    /* device copy, bytes read + written per second / 1e9 */
    double peer_gbs;    /* to a peer, one direction (0: one GPU) */
    double gemm_tflops; /* FP16 GEMM */
    int known;          /* measured (the runtime's limits), else defaults */
} TuneLimits;
void tune_limits_default(TuneLimits *l);
/* What variant v does on one rank under knob set k, by the rules at the top
 * of cost.c: bytes through memory, over the links, GEMM FLOPs, kernel
 * launches (library calls included), and collective steps (NCCL calls and
 * the fused kernels' barriers). */
typedef struct {
    double mem_bytes, link_bytes, gemm_flops;
    int launches, nccl_calls, barriers;
} TuneCost;
void tune_cost(const Program *v, int k, int rank, TuneCost *c);
double tune_cost_ms(const TuneCost *c, int nranks, const TuneLimits *l); /* one rank's time */
double tune_predict_ms(const Program *v, int k, const TuneLimits *l);  /* the slowest rank's */

/* ---- the timer: what runs variants (timer_cuda.c on GPUs, timer_fake.c
 * replaying a file of recorded times, for the tests) ---- */
typedef enum { MEASURE_CHECK, MEASURE_TIME, MEASURE_BOTH } MeasureMode;
typedef struct {
    char verdict[16]; /* bitwise, rounding, unchecked (passed); WRONG, FAILED, ... */
    int passed;
    double ms;        /* the slowest rank's median; < 0: not timed */
    char why[256];    /* for a variant that failed: the first rank error, if any */
    int not_run;      /* a rank failed in an earlier variant of the launch: never
                         ran, to be launched again */
} Measured;
typedef struct TuneTimer TuneTimer;
enum { SLOT_CHECK, SLOT_POINT, NSLOT }; /* the check point's variants, a size point's */
struct TuneTimer {
    char gpu[512];      /* the machine (part of the record's key) */
    int nccl;           /* NCCL_VERSION_CODE the code is built against */
    TuneLimits limits;  /* the runtime's, once a timed launch has reported them */
    int launches;       /* launches made */
    int cold_l2;        /* the ranks empty the L2 before each timed run (COCONET_COLD_L2) */
    /* where the time went (tune's summary): generating and building the code
     * (nvcc builds made: `built`, the others found in the cache), the CPU
     * reference and the inputs, and the launches of each slot (the check
     * point's: checking; a size point's: timing, and checking in place) */
    double build_s, prepare_s, launch_s[NSLOT];
    int built, slot_launches[NSLOT];
    /* In `slot`, the variants of one size point (v[0]: the program), built
     * and prepared for `mode` (CHECK, BOTH: against the CPU reference of the
     * program); a slot's earlier point is closed first */
    int (*open)(TuneTimer *t, int slot, Program **v, int n, MeasureMode mode, char *err,
                size_t errlen);
    /* One launch: variant which[i] of the slot's point under knob set knob[i],
     * for i in [0, n) (a variant may come under several knob sets). retime:
     * each passed its checks at this point before (search_confirm's rounds):
     * timed alone, nothing checked again but its guard bytes; a pass keeps
     * no verdict of its own (out[i].verdict empty) */
    int (*measure)(TuneTimer *t, int slot, const int *which, const int *knob, int n,
                   int retime, Measured *out, char *err, size_t errlen);
    void (*close)(TuneTimer *t, int slot);
    void (*free)(TuneTimer *t);
};
typedef struct {
    int nranks, iters, threads;
    double timeout_s;
    uint64_t seed;
    FILE *log;          /* each launch's report, or NULL */
} TimerConfig;
TuneTimer *timer_cuda_new(const TimerConfig *c, char *err, size_t errlen);
TuneTimer *timer_fake_new(const char *path, char *err, size_t errlen);
/* The machine a fake timer's file describes (gpu and nccl lines); -1 with a message */
int timer_fake_machine(const char *path, char *gpu, size_t len, int *nccl, char *err,
                       size_t errlen);

/* ---- search.c: the timing of one size point, with pruning ---- */
enum { CAND_TODO, CAND_TIMED, CAND_PRUNED, CAND_FAILED };
typedef struct {
    int variant, knob;
    double pred_ms;  /* the cost model's */
    double ms;       /* measured, when TIMED */
    double lo_ms, hi_ms; /* search_confirm: the least and the most of its times
                            (0: timed once) */
    int state;
    int must;        /* always timed (the program's fastest predicted) */
    char verdict[16], why[256];
} Cand;
typedef struct {
    Cand *c;
    int n;
    double factor;   /* prune what the model says is more than this slower */
    int exhaustive;  /* time everything */
    int launches, timed;
    /* what a launch costs against the candidates it would spare (search_costs;
     * launch_s 0: not weighed) */
    double launch_s, cand_s;
    int runs;
    /* search_confirm: the candidates it timed again (0: none), its rounds
     * made, the times each then had, the margin of the best it took */
    int confirmed, confirm_rounds, confirm_times;
    int confirming; /* inside search_confirm: its launches retime candidates */
    double confirm_margin, confirm_floor_ms;
} Search;
/* Makes the candidates of variants v[0..nv) (v[0]: the program; each as
 * the backend runs it), each knob set that applies, with the model's
 * predictions. */
void search_init(Search *s, Program **v, int nv, const TuneLimits *l, double factor,
                 int exhaustive);
/* Weighs a second launch against timing every candidate in the first: a
 * launch costs launch_s seconds (the ranks' start), a candidate cand_s
 * (its buffers and checks) and `runs` runs of its predicted time. */
void search_costs(Search *s, double launch_s, double cand_s, int runs);
void search_free(Search *s);
void search_repredict(Search *s, Program **v, const TuneLimits *l); /* limits changed */
/* How one launch is measured: candidates which[0..n) of s, each under its knob set */
typedef int (*LaunchFn)(void *ctx, Search *s, const int *which, int n, char *err,
                        size_t errlen);
/* Times the candidates launch by launch (search.c says which go in each),
 * pruning after each; the progress callback after each launch. 0, or -1
 * with err. */
int search_run(Search *s, LaunchFn launch, void *ctx,
               void (*progress)(void *ctx, const Search *s), char *err, size_t errlen);
int search_best(const Search *s);   /* the fastest timed candidate that passed, or -1 */
int search_program(const Search *s); /* the program's fastest timed candidate, or -1 */
/* What the search with pruning (factor) would have picked from the times
 * an exhaustive one measured: its pick, and its launches and timed count */
int search_replay(const Search *done, double factor, int *launches, int *timed);
/* After search_run: the timed candidates within the rule's margin of the
 * best (a time at most (1 + margin) x the best's, or at most floor_ms
 * above it: at microseconds a step, a timer's jitter of a microsecond or
 * two is more than any fraction), at most `most`, the fastest first, none
 * when fewer than two, are timed `rounds` more times (at most
 * CONFIRM_MAX_ROUNDS), each round taking them from another one first; each
 * keeps the median of its times, and one failing in a round is FAILED. 0,
 * or -1 with the launch's message. */
enum { CONFIRM_MAX_ROUNDS = 10 };
/* The confirmed candidates whose times overlap the best's (each one's
 * least at most the other's most: their order is within the timer's
 * spread), the fastest first, into which (room for s->n); how many */
int search_ties(const Search *s, int *which);
typedef struct {
    int rounds;
    double margin, floor_ms;
    int most;
} ConfirmRule;
int search_confirm(Search *s, LaunchFn launch, void *ctx, const ConfirmRule *rule, char *err,
                   size_t errlen);

/* ---- table.c: what tune prints ---- */
const char *vname(const Program *v); /* "program", or the schedule's name */
/* the table of a point, best first; v: the variants, as timed */
void table_point(FILE *out, Program **v, const Search *s, const char *sizes);
/* an exhaustive search's: what pruning at factor would pick */
void table_replay(FILE *out, Program **v, const Search *s, double factor);
/* --plan: the candidates and the model's figures */
void table_plan(FILE *out, Program **v, Program **lv, const Search *s, const char *sizes,
                const char *checked);

/* ---- progress.c: the progress bar on stderr ---- */
typedef struct {
    int total, done, enabled;
    double start_s;
} Progress;
void progress_start(Progress *p, int total, int enabled);
void progress_show(Progress *p, int done, const char *what);
void progress_end(Progress *p);
/* "[#####.....] 12/40 candidates, 3.2 s, about 7 s left" into buf */
void progress_text(char *buf, size_t len, int done, int total, double elapsed_s);
double tune_now_s(void);

/* ---- record.c: the tuning record ---- */
enum { RECORD_TEXT = 4096 };
typedef struct {
    char sizes[512];     /* every size of the program: "N=1048576,B=8" */
    char tuned[256];     /* the names tuned (given --sizes): "N" */
    char schedule[MAXNAME + 8];
    int knob;
    double ms, program_ms;
} RecordEntry;
typedef struct {
    char key[RECORD_TEXT]; /* the key's lines */
    char path[CUDA_PATH_MAX + 64];
    RecordEntry *e;
    int n, cap;
} Record;
/* The key's lines: the program's text (and its schedule files'), P, the group
 * size, the GPU model, the NCCL version, coconet's version; and the file it
 * is kept in (CACHE/tune-HASH.txt). -1 with a message: no cache directory. */
int record_key(Program *p, const char *gpu, int nccl, Record *r, char *err, size_t errlen);
/* Reads the record of r->key from r->path: 0; 1 no record; 2 a record of
 * another key (never served); -1 unreadable (err) */
int record_read(Record *r, char *err, size_t errlen);
int record_write(const Record *r, char *err, size_t errlen);
void record_put(Record *r, const RecordEntry *e); /* replaces the entry of the same sizes */
void record_free(Record *r);
void record_sizes(Program *p, char *buf, size_t len); /* "N=1048576,B=8" */
/* The entry for p's sizes: every size not tuned equal, the tuned ones the
 * nearest (log scale); NULL with why when none; *exact 0 when only near */
const RecordEntry *record_nearest(const Record *r, Program *p, int *exact, char *why,
                                  size_t len);
void record_print(const Record *r, FILE *out);

/* ---- lookup.c: the machine, and the record for run and gen ---- */
/* This machine's GPU model and NCCL version (COCONET_TUNE_FAKE: the fake
 * timer file's); -1 with a message */
int tune_machine(char *gpu, size_t len, int *nccl, char *err, size_t errlen);

#endif

/* test_tune.c: unit tests of the autotuner's parts (src/tune/): the knob
 * sets each variant of Adam gets at P = 4 and P = 1 (and which knobs the
 * tuner clears from its ranks' environment), the cost model's
 * counts for Adam at N = 2^20 against hand counts (and its prediction
 * against the formula), what each knob set gives the runtime, the search's
 * launches (every knob set of a variant in one) and pruning over an
 * in-memory table of times, the tuning record's key (a changed text, P, group size, GPU or
 * NCCL version gives another key; a file of another key is never served),
 * its nearest-size rule, and the progress bar's text.
 * Run from the repository root; exits non-zero when any check fails. */
#define _DEFAULT_SOURCE /* mkdtemp, setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tune/tune.h"

#include "unit_check.h"

static Program *load_adam(int nranks, const char *n)
{
    char err[4096], def[64];
    snprintf(def, sizeof def, "N=%s", n);
    const char *defs[] = {def};
    coco_config cfg = {defs, 1, nranks, 0};
    Program *p = coco_load_file("examples/adam.coco", &cfg, err, sizeof err);
    if (!p)
        printf("  load: %s\n", err);
    check(p != NULL, "examples/adam.coco loads");
    return p;
}

static Program *variant(Program *p, const char *name)
{
    char err[4096];
    Program *v = coco_schedule(p, name, err, sizeof err);
    if (!v)
        printf("  %s: %s\n", name, err);
    return v;
}

/* "twoshot,push,nccl": the knob sets of v */
static void sets_text(const Program *v, char *buf, size_t len)
{
    int sets[NKNOB], n = knob_sets(v, sets);
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? "," : "", knob_name(sets[i]));
}

/* variant `name` of p as the CUDA backend runs it (lower_collectives) */
static Program *as_run(Program *p, const char *name)
{
    Program *v = strcmp(name, "program") ? variant(p, name) : p;
    Program *l = v ? lower_collectives(v) : NULL;
    if (l && v != p)
        program_free(v);
    return l ? l : v;
}

static void expect_sets(Program *p, const char *name, const char *want)
{
    Program *v = as_run(p, name);
    char got[128], msg[256];
    if (v)
        sets_text(v, got, sizeof got);
    snprintf(msg, sizeof msg, "knob sets of %s at P = %d: %s, want %s", name, p->nranks,
             v ? got : "(no variant)", want);
    check(v && !strcmp(got, want), msg);
    if (v && v != p)
        program_free(v);
}

/* The overlaps by a collective's blocks (src/gen/emit_overlap_blocks.c):
 * chunks1 and chunks4 at P > 1, alone (no fused collective) or beside the
 * algorithms; none on one rank; none for a MatMul after a FusedAllReduce */
static void test_block_sets(void)
{
    char err[1024];
    coco_config cfg = {NULL, 0, 4, 0};
    Program *q = coco_load_file("tests/gpu/overlap_blocks.coco", &cfg, err, sizeof err);
    check(q != NULL, "tests/gpu/overlap_blocks.coco loads");
    if (!q)
        return;
    enumerate_schedules(q);
    expect_sets(q, "program", "default");
    expect_sets(q, "ol_rs", "default,chunks1,chunks4");
    expect_sets(q, "ol_ag", "default,chunks1,chunks4");
    expect_sets(q, "ol_both", "default,chunks1,chunks4");
    expect_sets(q, "MM_ol_fuse_RS_C_AG_MM", "twoshot,push,nccl");
    expect_sets(q, "ol_MM_fuse_RS_C_AG_MM", "twoshot,push,nccl,chunks1,chunks4");
    program_free(q);
    cfg.nranks = 1;
    q = coco_load_file("tests/gpu/overlap_blocks.coco", &cfg, err, sizeof err);
    if (q) {
        expect_sets(q, "ol_both", "default");
        program_free(q);
    }
}

static void test_knobs(void)
{
    Program *p = load_adam(4, "1008");
    if (!p)
        return;
    enumerate_schedules(p);
    /* its FP16 AllReduce is a FusedAllReduce on the backend, with nothing else */
    expect_sets(p, "program", "oneshot,twoshot,push,nccl");
    expect_sets(p, "AR_Opt", "oneshot,twoshot,push,nccl");
    /* paper: its fusion reads p, m and v, as large as g: no one-shot */
    expect_sets(p, "paper", "twoshot,push,nccl");
    expect_sets(p, "fuse_RS_AG_Opt", "oneshot,twoshot,push,nccl");
    program_free(p);
    /* what each set gives the runtime for a variant (coco_cuda_ctx.fused_algo:
     * 0 auto, 1 one-shot, 2 two-shot, 3 NCCL, 4 push; overlap_chunks 0: the
     * default): one knob changed, the other at its default */
    static const int want[NKNOB][2] = {{0, 0}, {1, 0}, {2, 0}, {4, 0}, {3, 0}, {0, 1}, {0, 4}};
    for (int k = 0; k < NKNOB; k++) {
        int algo = -9, chunks = -9;
        knob_values(k, &algo, &chunks);
        char msg[128];
        snprintf(msg, sizeof msg, "knob set %s: fused_algo %d, overlap_chunks %d", knob_name(k),
                 algo, chunks);
        check(algo == want[k][0] && chunks == want[k][1], msg);
    }
    /* a program with no collective: default only */
    const char *plain = "Size N = 64;\nTensor x(FP32, [N], Replicated, WORLD);\n"
                        "Var y = x * 2;\nExecute f({x}, {y});\n";
    char err[1024];
    coco_config cfg = {NULL, 0, 4, 0};
    Program *q = coco_load_string("plain.coco", plain, &cfg, err, sizeof err);
    if (q) {
        char got[64];
        sets_text(q, got, sizeof got);
        check(!strcmp(got, "default"), "no collective: default only");
        program_free(q);
    }
    /* self-attention's paper overlaps its MatMul with a FusedAllReduce: chunks */
    cfg.nranks = 4;
    q = coco_load_file("examples/self_attention.coco", &cfg, err, sizeof err);
    if (q) {
        expect_sets(q, "paper", "twoshot,push,nccl,chunks1,chunks4");
        program_free(q);
    }
    test_block_sets();
    p = load_adam(1, "1008");
    if (!p)
        return;
    enumerate_schedules(p);
    /* one rank: the elementwise form (default) or the fused kernel's
     * instance, where a fusion computes; a bare fused AllReduce is a copy */
    expect_sets(p, "paper", "default,twoshot");
    expect_sets(p, "fuse_RS_Opt_AG", "default,twoshot");
    expect_sets(p, "fuse_RS_AG_Opt", "default");
    expect_sets(p, "program", "default");
    program_free(p);
    /* scattered operands: no elementwise form, default only */
    cfg.nranks = 1;
    q = coco_load_file("examples/adam_scattered.coco", &cfg, err, sizeof err);
    check(q != NULL, "examples/adam_scattered.coco loads on one rank");
    if (q) {
        enumerate_schedules(q);
        expect_sets(q, "paper", "default");
        program_free(q);
    }
}

/* The tuner's ranks start from the runtime's defaults: every knob a set may
 * change is cleared from their environment */
static void test_knob_clear_env(void)
{
    setenv("COCONET_FUSED", "push", 1);
    setenv("COCONET_OVERLAP_CHUNKS", "2", 1);
    setenv("COCONET_ONE_RANK_FUSED", "1", 1);
    knob_clear_env();
    check(!getenv("COCONET_FUSED") && !getenv("COCONET_OVERLAP_CHUNKS") &&
              !getenv("COCONET_ONE_RANK_FUSED"),
          "knob_clear_env: COCONET_FUSED, COCONET_OVERLAP_CHUNKS and COCONET_ONE_RANK_FUSED unset");
}

static void expect_cost(Program *v, int k, double mem, double link, int launches, int nccl,
                        int barriers, const char *what)
{
    TuneCost c;
    char msg[512];
    tune_cost(v, k, 0, &c);
    snprintf(msg, sizeof msg, "%s: mem %.17g link %.17g launches %d nccl %d barriers %d; want "
             "%.17g %.17g %d %d %d", what, c.mem_bytes, c.link_bytes, c.launches, c.nccl_calls,
             c.barriers, mem, link, launches, nccl, barriers);
    check(c.mem_bytes == mem && c.link_bytes == link && c.launches == launches &&
          c.nccl_calls == nccl && c.barriers == barriers && c.gemm_flops == 0, msg);
}

/* Adam at N = 2^20, P = 4, on rank 0 (bytes in units of N):
 * paper, one FusedAllReduce: reads g 2 (FP16, Local), m and v 1 each (kept
 *   sliced), p 1 (only its slice is read: Slice(p)); writes p 4 (the
 *   AllGather, p's new value), m and v 1 each: 11. Sends RS of g 3/4 x 2 and
 *   AG of p 3/4 x 4: 4.5. One kernel, two barriers. Under nccl: the RS's
 *   slice (FP16, 1/4 x 2) written and read back, +1: 12; three calls, two NCCL.
 * fuse_RS_AG_Opt under oneshot: each rank loads g whole from 3 peers: 6.
 * The program, 14 kernels: the AllReduce reads and writes g (4), then each
 *   elementwise step reads its operands and writes its value (scalars take the
 *   tensor's type: (1-beta1)*avg is FP16): m_ 4+8+4+10 ... 106 in all: 110;
 *   sends the AllReduce's 2 x 3/4 x 2 = 3: one NCCL call as written; as the
 *   backend runs it (a FusedAllReduce: ReduceScatter and AllGather, the same
 *   bytes) one kernel with two barriers. */
static void test_cost(void)
{
    double N = 1 << 20;
    Program *p = load_adam(4, "1048576");
    if (!p)
        return;
    enumerate_schedules(p);
    Program *paper = variant(p, "paper"), *ar = variant(p, "fuse_RS_AG_Opt");
    if (paper) {
        expect_cost(paper, KNOB_TWOSHOT, 11 * N, 4.5 * N, 1, 0, 2, "paper twoshot");
        expect_cost(paper, KNOB_NCCL, 12 * N, 4.5 * N, 3, 2, 0, "paper nccl");
        TuneLimits l = {3000, 350, 800, 1};
        double want = fmax(11 * N / 3000e9, 4.5 * N / 350e9) * 1e3 + (4 + 2 * 3) * 1e-3;
        double got = tune_predict_ms(paper, KNOB_TWOSHOT, &l);
        char msg[128];
        snprintf(msg, sizeof msg, "paper's prediction %.9g ms, want %.9g", got, want);
        check(fabs(got - want) < 1e-12, msg);
    }
    if (ar) {
        TuneCost c;
        tune_cost(ar, KNOB_ONESHOT, 0, &c);
        check(c.link_bytes == 6 * N && c.barriers == 1, "one-shot sends g to 3 peers, 1 barrier");
    }
    expect_cost(p, KNOB_DEFAULT, 110 * N, 3 * N, 14, 1, 0, "the program as written");
    Program *l = lower_collectives(p); /* its FP16 AllReduce: one FusedAllReduce */
    if (l)
        expect_cost(l, KNOB_TWOSHOT, 110 * N, 3 * N, 14, 0, 2, "the program as run");
    check(l != NULL, "the program's FP16 AllReduce lowers");
    program_free(l);
    program_free(paper);
    program_free(ar);
    program_free(p);
}

/* The overlapped MatMul's chunks as the runtime chooses them: default is
 * costed as chunks4 where coco_overlap_default_chunks chunks (the MLP at
 * P = 4, B=8 S=1024 H=3072: 2048 FLOP/B, 39 GFLOP a chunk) and as chunks1
 * where it does not (the same at P = 2: 6144 FLOP/B; at P = 2, B=8 S=512
 * H=1024: 2048 FLOP/B but 4.3 GFLOP a chunk, under the rule's 16) */
static void test_cost_chunks(void)
{
    static const struct {
        int nranks;
        const char *S, *H;
        int chunked;
    } cases[] = {{4, "S=1024", "H=3072", 1},
                 {2, "S=1024", "H=3072", 0},
                 {2, "S=512", "H=1024", 0}};
    TuneLimits l = {3000, 350, 800, 1};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char err[4096], msg[256];
        const char *defs[] = {"B=8", cases[c].S, cases[c].H};
        coco_config cfg = {defs, 3, cases[c].nranks, 0};
        Program *p = coco_load_file("examples/mlp.coco", &cfg, err, sizeof err);
        snprintf(msg, sizeof msg, "examples/mlp.coco loads at B=8 %s %s", cases[c].S, cases[c].H);
        check(p != NULL, msg);
        if (p)
            enumerate_schedules(p);
        Program *v = p ? as_run(p, "ol_MM_fuse_RS_C_AG") : NULL;
        check(v != NULL, "mlp's ol_MM_fuse_RS_C_AG, as run");
        if (v) {
            double dflt = tune_predict_ms(v, KNOB_DEFAULT, &l);
            double one = tune_predict_ms(v, KNOB_CHUNKS1, &l);
            double four = tune_predict_ms(v, KNOB_CHUNKS4, &l);
            snprintf(msg, sizeof msg, "mlp ol(MM,fuse(RS-C-AG)) at P = %d, %s %s: default "
                     "%.6f ms, chunks1 %.6f, chunks4 %.6f", cases[c].nranks, cases[c].S,
                     cases[c].H, dflt, one, four);
            check(four != one && dflt == (cases[c].chunked ? four : one), msg);
            program_free(v);
        }
        program_free(p);
    }
}

/* The cost of the overlaps by a collective's blocks: P chunks by default
 * (one a block), 4 P under chunks4, in order under chunks1: three
 * predictions at P = 4, each chunk's latencies counted; on one rank in
 * order by default (the MatMul alone), in 4 chunks under chunks4 as the
 * runtime runs it (a set the tuner does not offer there) */
static void test_cost_blocks(void)
{
    TuneLimits l = {3000, 350, 800, 1};
    for (int nranks = 4; nranks >= 1; nranks -= 3) {
        char err[4096], msg[256];
        coco_config cfg = {NULL, 0, nranks, 0};
        Program *p = coco_load_file("tests/gpu/overlap_blocks.coco", &cfg, err, sizeof err);
        Program *v = p ? as_run(p, "ol_both") : NULL;
        check(v != NULL, "overlap_blocks' ol_both, as run");
        if (v) {
            double dflt = tune_predict_ms(v, KNOB_DEFAULT, &l);
            double one = tune_predict_ms(v, KNOB_CHUNKS1, &l);
            double four = tune_predict_ms(v, KNOB_CHUNKS4, &l);
            snprintf(msg, sizeof msg, "overlap_blocks ol_both at P = %d: default %.6f ms, "
                     "chunks1 %.6f, chunks4 %.6f", nranks, dflt, one, four);
            check(nranks > 1 ? one < dflt && dflt < four : one == dflt && dflt < four, msg);
            program_free(v);
        }
        program_free(p);
    }
}

/* ---- the search over a table in memory ---- */

typedef struct {
    const double *ms; /* per candidate */
    int launches;
    int first[64];    /* candidates of the first launch: 1 */
    int knobs_of_paper; /* knob sets of variant 1 (paper) in the first launch */
} Table;

static int table_launch(void *ctx, Search *s, const int *which, int n, char *err,
                        size_t errlen)
{
    Table *t = ctx;
    for (int i = 0; i < n; i++) {
        s->c[which[i]].state = CAND_TIMED;
        s->c[which[i]].ms = t->ms[which[i]];
        if (!t->launches) {
            t->first[which[i]] = 1;
            t->knobs_of_paper += s->c[which[i]].variant == 1;
        }
    }
    t->launches++;
    return 0;
}

static int find_cand(const Search *s, int variant, int knob)
{
    for (int i = 0; i < s->n; i++)
        if (s->c[i].variant == variant && s->c[i].knob == knob)
            return i;
    return -1;
}

/* adam at 2^20 on 4 ranks, its paper and fuse_RS_AG_Opt schedules into v;
 * 0, or -1 (a check said why) */
static int three_variants(Program *v[3])
{
    Program *p = load_adam(4, "1048576");
    if (!p)
        return -1;
    enumerate_schedules(p);
    v[0] = p;
    v[1] = variant(p, "paper");
    v[2] = variant(p, "fuse_RS_AG_Opt");
    return v[1] && v[2] ? 0 : -1;
}

static void free_variants3(Program *v[3])
{
    program_free(v[1]);
    program_free(v[2]);
    program_free(v[0]);
}

static void test_search(void)
{
    Program *v[3];
    if (three_variants(v))
        return;
    TuneLimits l = {3000, 350, 800, 1};
    Search s;
    search_init(&s, v, 3, &l, 2.0, 0);
    /* candidates: program; paper twoshot, push, nccl; fuse oneshot, twoshot, push, nccl */
    check(s.n == 8, "8 candidates");
    /* measured: the model's prediction times 2, but fuse_RS_AG_Opt through
     * NCCL (predicted 0.0581 ms, 2.47 x paper's 0.0235, the fastest) at 0.9 x
     * paper's time: the true best, outside factor^2 of the fastest prediction
     * at 1.5 (not in the first launch, then pruned), inside it at 2 */
    double ms[8];
    for (int i = 0; i < s.n; i++)
        ms[i] = 2 * s.c[i].pred_ms;
    int nccl = find_cand(&s, 2, KNOB_NCCL), paper = find_cand(&s, 1, KNOB_TWOSHOT);
    check(nccl >= 0 && paper >= 0 && s.c[nccl].pred_ms > 2.25 * s.c[paper].pred_ms &&
          s.c[nccl].pred_ms < 4 * s.c[paper].pred_ms, "the model puts it at 2.25 to 4 x paper's");
    if (nccl < 0 || paper < 0)
        return;
    ms[nccl] = 0.9 * 2 * s.c[paper].pred_ms;
    Table t = {ms, 0, {0}, 0};
    char err[256];
    check(search_run(&s, table_launch, &t, NULL, err, sizeof err) == 0, "the search runs");
    check(search_best(&s) == nccl, "at 2 the search finds it");
    check(t.launches == 1 && s.launches == 1 && s.timed == 8,
          "at 2 every candidate is within reach: one launch");
    check(t.knobs_of_paper == 3, "one launch times paper under its 3 knob sets");
    int launches, timed;
    int pick = search_replay(&s, 1.5, &launches, &timed);
    check(pick != nccl && pick >= 0 && timed == 7 && launches == 1,
          "at 1.5 the replay leaves it out of the first launch, then prunes it");
    pick = search_replay(&s, 2.0, &launches, &timed);
    check(pick == nccl, "the replay at 2 picks what the search picked");
    search_free(&s);
    /* 1.5 with the model right about everything but one candidate, 3 x
     * faster than predicted: the calibration keeps the far candidates, timed
     * in a second launch */
    search_init(&s, v, 3, &l, 1.5, 0);
    memset(&t, 0, sizeof t);
    for (int i = 0; i < s.n; i++)
        ms[i] = s.c[i].pred_ms;
    int program = find_cand(&s, 0, KNOB_DEFAULT); /* its AllReduce not lowered here */
    check(program >= 0 && s.c[program].must, "the program's fastest predicted is a must");
    ms[program] = s.c[program].pred_ms / 3;
    t.ms = ms;
    search_run(&s, table_launch, &t, NULL, err, sizeof err);
    check(t.first[program], "the must is in the first launch");
    check(s.launches == 2 && !t.first[nccl] && s.c[nccl].state == CAND_TIMED,
          "a second launch times what the calibrated model keeps");
    search_free(&s);
    search_init(&s, v, 3, &l, 1.5, 1);
    memset(&t, 0, sizeof t);
    t.ms = ms;
    search_run(&s, table_launch, &t, NULL, err, sizeof err);
    check(s.timed == 8 && s.launches == 1, "--exhaustive times all 8 in one launch");
    search_free(&s);
    /* a launch weighed (search_costs): the candidate left out at 1.5 costs
     * less than a launch of 1 s, so the first launch takes it; against a
     * launch cheaper than it, it is left out and pruned as before */
    search_init(&s, v, 3, &l, 1.5, 0);
    search_costs(&s, 1.0, 0.03, 25);
    memset(&t, 0, sizeof t);
    ms[program] = s.c[program].pred_ms; /* the model right, but for nccl: the best */
    ms[nccl] = 0.9 * s.c[paper].pred_ms;
    t.ms = ms;
    search_run(&s, table_launch, &t, NULL, err, sizeof err);
    check(s.launches == 1 && s.timed == 8 && t.first[nccl] && search_best(&s) == nccl,
          "a launch of 1 s against 0.03 s and 25 runs: all 8 in the first, the best found");
    search_free(&s);
    search_init(&s, v, 3, &l, 1.5, 0);
    search_costs(&s, 0.01, 0.03, 25);
    memset(&t, 0, sizeof t);
    t.ms = ms;
    search_run(&s, table_launch, &t, NULL, err, sizeof err);
    check(!t.first[nccl] && s.timed == 7 && search_best(&s) != nccl,
          "a launch of 0.01 s: the far candidate left out, then pruned");
    search_free(&s);
    free_variants3(v);
}

/* ---- confirming the best: candidates timed again, the median kept ---- */

typedef struct {
    double seq[8][4]; /* per candidate, its times in order (0: the first's again) */
    int taken[8];
    int fail_at[8];   /* > 0: fails its check the fail_at-th time it runs */
    int rounds, firsts[4], confirming[4];
} Seq;

static int seq_launch(void *ctx, Search *s, const int *which, int n, char *err, size_t errlen)
{
    Seq *q = ctx;
    if (q->rounds < 4) {
        q->firsts[q->rounds] = which[0];
        q->confirming[q->rounds] = s->confirming;
    }
    q->rounds++;
    for (int i = 0; i < n; i++) {
        int c = which[i], k = q->taken[c] < 3 ? q->taken[c] : 3;
        q->taken[c]++;
        s->c[c].state = q->fail_at[c] == q->taken[c] ? CAND_FAILED : CAND_TIMED;
        s->c[c].ms = q->seq[c][k] > 0 ? q->seq[c][k] : q->seq[c][0];
    }
    return 0;
}

/* Every candidate at 1.0 ms, every time, until a test says otherwise */
static void seq_reset(Seq *q)
{
    memset(q, 0, sizeof *q);
    for (int i = 0; i < 8; i++)
        q->seq[i][0] = 1.0;
}

static void test_confirm(void)
{
    Program *v[3];
    if (three_variants(v))
        return;
    TuneLimits l = {3000, 350, 800, 1};
    char err[256];
    Search s;
    Seq q;
    ConfirmRule rule = {2, 0.05, 0, 6}, none = {0, 0.05, 0, 6}, one = {1, 0.05, 0, 1};
    /* candidate 1 measured 0.040, then 0.044, then 0.060; candidate 2 0.041
     * every time (within 5 % of 0.040); the rest far slower */
    seq_reset(&q);
    q.seq[1][0] = 0.040;
    q.seq[1][1] = 0.044;
    q.seq[1][2] = 0.060;
    q.seq[2][0] = 0.041;
    search_init(&s, v, 3, &l, 1.5, 1);
    search_run(&s, seq_launch, &q, NULL, err, sizeof err);
    check(search_best(&s) == 1, "one round: the outlier's time wins");
    check(search_confirm(&s, seq_launch, &q, &rule, err, sizeof err) == 0,
          "confirming runs");
    check(search_best(&s) == 2 && s.c[1].ms == 0.044 && s.c[2].ms == 0.041,
          "confirmed: each keeps its median (0.040, 0.044, 0.060 -> 0.044): the other wins");
    check(s.confirmed == 2 && s.confirm_rounds == 2 && s.confirm_times == 3 && q.taken[1] == 3 &&
          q.taken[0] == 1, "two more rounds of the two within 5 %, the others left");
    check(q.firsts[1] != q.firsts[2], "each round starts from another candidate");
    check(!q.confirming[0] && q.confirming[1] && q.confirming[2] && !s.confirming,
          "the confirming rounds' launches say so (their candidates timed alone), the first not");
    int tie[8];
    check(s.c[1].lo_ms == 0.040 && s.c[1].hi_ms == 0.060 && s.c[2].lo_ms == 0.041 &&
              s.c[2].hi_ms == 0.041 && s.c[0].hi_ms == 0,
          "confirmed: each one's least and most time kept; the others none");
    check(search_ties(&s, tie) == 1 && tie[0] == 1,
          "the best (0.041 every time) lies within the other's times (0.040 to 0.060): a tie");
    search_free(&s);
    /* a candidate failing in a confirming round is never picked */
    seq_reset(&q);
    q.seq[1][0] = 0.040;
    q.seq[2][0] = 0.041;
    q.fail_at[1] = 2;
    search_init(&s, v, 3, &l, 1.5, 1);
    search_run(&s, seq_launch, &q, NULL, err, sizeof err);
    search_confirm(&s, seq_launch, &q, &rule, err, sizeof err);
    check(s.c[1].state == CAND_FAILED && search_best(&s) == 2 && q.taken[1] == 2,
          "failed in the first confirming round: out, and not run again");
    search_free(&s);
    /* one candidate within the margin, or no rounds: nothing timed again */
    seq_reset(&q);
    q.seq[1][0] = 0.040;
    search_init(&s, v, 3, &l, 1.5, 1);
    search_run(&s, seq_launch, &q, NULL, err, sizeof err);
    int before = q.rounds;
    search_confirm(&s, seq_launch, &q, &rule, err, sizeof err);
    check(q.rounds == before && s.confirmed == 0, "one within 5 %: no round");
    q.seq[2][0] = 0.041;
    search_free(&s);
    search_init(&s, v, 3, &l, 1.5, 1);
    search_run(&s, seq_launch, &q, NULL, err, sizeof err);
    before = q.rounds;
    search_confirm(&s, seq_launch, &q, &none, err, sizeof err);
    check(q.rounds == before && s.confirmed == 0, "no rounds asked: none");
    search_confirm(&s, seq_launch, &q, &one, err, sizeof err);
    check(q.rounds == before && s.confirmed == 0, "at most one confirmed: none");
    search_free(&s);
    /* microseconds: 0.0158 is 13 % above 0.0140, but within a floor of
     * 0.002 ms; 0.0200 is not */
    seq_reset(&q);
    q.seq[0][0] = 0.0200;
    q.seq[1][0] = 0.0140;
    q.seq[2][0] = 0.0158;
    ConfirmRule floored = {2, 0.05, 0.002, 6};
    search_init(&s, v, 3, &l, 1.5, 1);
    search_run(&s, seq_launch, &q, NULL, err, sizeof err);
    search_confirm(&s, seq_launch, &q, &rule, err, sizeof err);
    check(s.confirmed == 0, "no floor: 13 % above is not confirmed");
    search_confirm(&s, seq_launch, &q, &floored, err, sizeof err);
    int none_tied[8];
    check(search_ties(&s, none_tied) == 0, "none confirmed (each timed once): no tie");
    check(s.confirmed == 2 && q.taken[2] == 3 && q.taken[0] == 1 && s.confirm_floor_ms == 0.002,
          "a floor of 0.002 ms: 0.0158 against 0.0140 confirmed, 0.0200 not");
    search_free(&s);
    free_variants3(v);
}

/* ---- the record ---- */

static void key_of(int nranks, const char *gpu, int nccl, const char *text, Record *r)
{
    char err[1024];
    coco_config cfg = {NULL, 0, nranks, 0};
    Program *p = coco_load_string("t.coco", text, &cfg, err, sizeof err);
    check(p && !record_key(p, gpu, nccl, r, err, sizeof err), "the key is made");
    program_free(p);
}

static const char *prog = "Size N = 64;\nTensor g(FP32, [N], Local, WORLD, RANK);\n"
                          "Var s = AllReduce(\"+\", g);\nExecute f({g}, {s});\n";

static void test_record(void)
{
    char cache[] = "/tmp/coconet-test-tune.XXXXXX";
    if (!mkdtemp(cache)) {
        check(0, "a temporary cache");
        return;
    }
    setenv("COCONET_CACHE", cache, 1);
    Record a, b;
    key_of(4, "GPU A", 22803, prog, &a);
    key_of(4, "GPU A", 22803, prog, &b);
    check(!strcmp(a.path, b.path), "the same program and machine: the same record");
    record_free(&b);
    const char *other[] = {"GPU B", "GPU A", "GPU A", "GPU A"};
    int nccl[] = {22803, 22900, 22803, 22803}, ranks[] = {4, 4, 2, 4};
    const char *texts[] = {prog, prog, prog,
                           "Size N = 64;\nTensor g(FP32, [N], Local, WORLD, RANK);\n"
                           "Var s = AllReduce(\"max\", g);\nExecute f({g}, {s});\n"};
    const char *what[] = {"another GPU", "another NCCL", "another P", "another text"};
    for (int i = 0; i < 4; i++) {
        key_of(ranks[i], other[i], nccl[i], texts[i], &b);
        char msg[128];
        snprintf(msg, sizeof msg, "%s: another key and file", what[i]);
        check(strcmp(a.key, b.key) && strcmp(a.path, b.path), msg);
        record_free(&b);
    }
    /* written, read back; nearest sizes */
    char err[1024];
    RecordEntry e = {"N=1024", "N", "fused", KNOB_PUSH, 0.5, 1.0};
    record_put(&a, &e);
    RecordEntry e2 = {"N=1048576", "N", "program", KNOB_DEFAULT, 2.0, 2.0};
    record_put(&a, &e2);
    check(record_write(&a, err, sizeof err) == 0, "the record is written");
    key_of(4, "GPU A", 22803, prog, &b);
    check(record_read(&b, err, sizeof err) == 0 && b.n == 2, "and read back, 2 entries");
    const char *defs[] = {"N=4096"};
    coco_config cfg = {defs, 1, 4, 0};
    Program *p = coco_load_string("t.coco", prog, &cfg, err, sizeof err);
    int exact;
    char why[512];
    const RecordEntry *got = p ? record_nearest(&b, p, &exact, why, sizeof why) : NULL;
    check(got && !strcmp(got->schedule, "fused") && !exact, "N=4096: the nearest, N=1024");
    program_free(p);
    /* a file holding another key (a collision, an edit) is never served */
    FILE *f = fopen(b.path, "r+");
    if (f) {
        fseek(f, 0, SEEK_END);
        fputs("key extra line\n", f);
        fclose(f);
    }
    record_free(&b);
    key_of(4, "GPU A", 22803, prog, &b);
    check(record_read(&b, err, sizeof err) == 2 && b.n == 0, "another key's file: not served");
    record_free(&b);
    record_free(&a);
    unlink(b.path);
    rmdir(cache);
    unsetenv("COCONET_CACHE");
}

static void test_progress(void)
{
    char buf[256];
    progress_text(buf, sizeof buf, 10, 40, 3.0);
    check(!strcmp(buf, "[#####...............] 10/40 candidates, 3.0 s, about 9 s left"), buf);
    progress_text(buf, sizeof buf, 40, 40, 12.25);
    check(!strcmp(buf, "[####################] 40/40 candidates, 12.2 s"), buf);
}

int main(void)
{
    test_knobs();
    test_knob_clear_env();
    group_end("knob sets");
    test_cost();
    test_cost_chunks();
    test_cost_blocks();
    group_end("cost model");
    test_search();
    group_end("search");
    test_confirm();
    group_end("confirming the best");
    test_record();
    group_end("record");
    test_progress();
    group_end("progress");
    return total_fail != 0;
}

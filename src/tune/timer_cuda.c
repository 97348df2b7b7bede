/* timer_cuda.c: the tuner's timer on GPUs, through the CUDA backend's own
 * parts (src/cuda): the variants of a size point are generated into one
 * source and built once (cuda_build: cached, so every size point, every
 * later tune of the same program and `run --schedule tuned` find it:
 * cuda_all_variants), their job prepared once (cuda_job_prepare: the CPU
 * reference of the program when checking, else the inputs alone), and its
 * ranks started (cuda_ranks_start: a launch) as the slot opens, so that they
 * open their communicators while the other slot runs; they stay up for
 * every round of the slot. A round (measure) runs a view of the job holding
 * the candidates asked for: each a variant with its knob set's values as its
 * own knobs (CudaVariant.fused_algo, overlap_chunks), named with them
 * ("paper/twoshot") in the round's report; a variant may come several
 * times. After a round in which a rank failed the ranks are started again
 * (another launch). A closed slot's ranks are told to exit and close their
 * communicators while the tuner goes on; they are waited for before the
 * slot's next ranks start, or at the end, beside the other slot's. The
 * environment's COCONET_FUSED and COCONET_OVERLAP_CHUNKS are cleared
 * (knob_clear_env): the runtime's defaults are the `default` set; its
 * COCONET_COLD_L2 is set to 1 unless given: every timed run starts with the
 * L2 emptied of its inputs (rt/run.c's clear_l2), so that a candidate's time
 * does not depend on where they landed in it.
 * No CUDA call is made in this process. The verdicts and times are the
 * run's (report_verdict): the slowest rank's median of --iters timed runs
 * after 3 warm-up runs. Two points may be open at once (slots): the check
 * point's and a size's. When a rank fails, the candidates after the one it
 * failed in never ran: they are said not run (the search runs them in its
 * next round); a signal that stopped the ranks (Ctrl-C) stops the tuning. */
#include "tune/tune.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    TuneTimer t;
    TimerConfig cfg;
    CudaBuild build;
    CudaJob job[NSLOT];
    CudaRanks *ranks[NSLOT]; /* the slot's ranks, kept from one launch to the next */
    CudaRanks *leaving[NSLOT]; /* its last ones, told to exit, reaped later */
    int open[NSLOT];
    MeasureMode mode[NSLOT];
    int rounds; /* measured lists of candidates, for the log */
} CudaTimer;

/* The slot's ranks told to exit: they close their communicators while this
 * process goes on; reaped (waited for) before the slot's next ranks start or
 * at the end */
static void cuda_close(TuneTimer *t, int slot)
{
    CudaTimer *c = (CudaTimer *)t;
    if (c->ranks[slot]) {
        cuda_ranks_stop(c->leaving[slot]); /* older ones still there: rare */
        cuda_ranks_leave(c->ranks[slot]);
        c->leaving[slot] = c->ranks[slot];
        c->ranks[slot] = NULL;
    }
    if (c->open[slot])
        cuda_job_free(&c->job[slot]);
    c->open[slot] = 0;
}

/* The slot's ranks, started (a launch) unless they run */
static CudaRanks *slot_ranks(CudaTimer *c, int slot)
{
    if (cuda_ranks_alive(c->ranks[slot]))
        return c->ranks[slot];
    cuda_ranks_stop(c->ranks[slot]);
    cuda_ranks_stop(c->leaving[slot]); /* the slot's last ones gone first */
    c->leaving[slot] = NULL;
    c->ranks[slot] = cuda_ranks_start(&c->job[slot]);
    c->t.launches++;
    c->t.slot_launches[slot]++;
    return c->ranks[slot];
}

static int cuda_open(TuneTimer *t, int slot, Program **v, int n, MeasureMode mode, char *err,
                     size_t errlen)
{
    CudaTimer *c = (CudaTimer *)t;
    cuda_close(t, slot);
    double t0 = tune_now_s();
    size_t len;
    char *src = cuda_source(v, n, NULL, &len, err, errlen);
    if (!src)
        return -1;
    char e[8192] = "";
    c->build.progress = stderr;
    int rc = cuda_build(&c->build, src, len, e, sizeof e);
    free(src);
    t->build_s += tune_now_s() - t0;
    if (rc) {
        snprintf(err, errlen, "coconet: %s\n", e);
        return -1;
    }
    t->built += !c->build.cached;
    t0 = tune_now_s();
    coco_cuda_options o;
    memset(&o, 0, sizeof o);
    o.seed = c->cfg.seed;
    o.threads = c->cfg.threads;
    o.iters = mode == MEASURE_CHECK ? 0 : c->cfg.iters;
    o.timeout_s = c->cfg.timeout_s;
    o.reference = mode == MEASURE_TIME ? COCO_REFERENCE_NONE : COCO_REFERENCE_PROGRAM;
    CudaJob *job = &c->job[slot];
    rc = cuda_job_prepare(job, v, n, &o, err, errlen);
    t->prepare_s += tune_now_s() - t0;
    if (rc)
        return -1;
    snprintf(job->so, sizeof job->so, "%s", c->build.so);
    cuda_runtime_path(c->build.home, job->runtime, sizeof job->runtime);
    c->open[slot] = 1;
    c->mode[slot] = mode;
    t0 = tune_now_s();
    slot_ranks(c, slot); /* they open while the other slot runs or the search plans */
    t->launch_s[slot] += tune_now_s() - t0;
    return 0;
}

/* The first error a rank reported, for the variants it left unreported */
static void rank_error(const Report *rep, char *buf, size_t len)
{
    buf[0] = 0;
    for (int r = 0; r < rep->nranks && !buf[0]; r++)
        if (rep->error[r])
            snprintf(buf, len, "%s", rep->error[r]);
}

/* The view of a slot's job that one launch runs: candidate i is variant
 * which[i] under knob set knob[i], named "NAME/KNOBS" (labels: their text) */
static void make_view(const CudaJob *job, const int *which, const int *knob, int n,
                      CudaJob *view, char (*labels)[MAXNAME + 16])
{
    *view = *job; /* checks and data shared */
    view->v = xcalloc((size_t)n, sizeof *view->v);
    for (int i = 0; i < n; i++) {
        CudaVariant *v = &view->v[i];
        *v = job->v[which[i]];
        knob_values(knob[i], &v->fused_algo, &v->overlap_chunks);
        snprintf(labels[i], sizeof labels[i], "%s/%s", v->entry, knob_name(knob[i]));
        v->name = labels[i];
    }
    view->nv = n;
}

static void log_launch(CudaTimer *c, const CudaJob *view, const Report *rep, int slot)
{
    if (!c->cfg.log)
        return;
    fprintf(c->cfg.log, "\n== round %d, launch %d (%s): %d candidate%s, each with its own "
            "knobs%s\n", ++c->rounds, c->t.launches,
            slot == SLOT_CHECK ? "checks at the check point" : "a size point", view->nv,
            view->nv == 1 ? "" : "s", view->time_only ? ", timed alone (confirmation)" : "");
    report_print(view, rep, c->cfg.log);
}

static int cuda_measure(TuneTimer *t, int slot, const int *which, const int *knob, int n,
                        int retime, Measured *out, char *err, size_t errlen)
{
    CudaTimer *c = (CudaTimer *)t;
    ASSERT(c->open[slot]);
    CudaJob view;
    char (*labels)[MAXNAME + 16] = xcalloc((size_t)n, sizeof *labels);
    make_view(&c->job[slot], which, knob, n, &view, labels);
    cuda_job_time_alone(&view, retime); /* "TIME": no checked run, copy back, hashes, repeat */
    double t0 = tune_now_s();
    Report rep;
    report_init(&rep, view.base->nranks, n);
    cuda_ranks_run(slot_ranks(c, slot), &view, which, &rep);
    t->launch_s[slot] += tune_now_s() - t0;
    log_launch(c, &view, &rep, slot);
    char why[256];
    rank_error(&rep, why, sizeof why);
    /* the variant the first failing rank was in: those after it never ran */
    int culprit = rep.first_failure >= 0 ? rep.at[rep.first_failure] : -1;
    for (int i = 0; i < n; i++) {
        RankRow all;
        const char *verdict = report_verdict(&view, &rep, i, &all);
        memset(&out[i], 0, sizeof out[i]);
        snprintf(out[i].verdict, sizeof out[i].verdict, "%s", verdict);
        out[i].passed = report_passed(verdict);
        if (retime && out[i].passed)
            out[i].verdict[0] = 0; /* "unchecked" here: its checked verdict stands */
        out[i].ms = out[i].passed && c->mode[slot] != MEASURE_CHECK ? all.median_ms : -1;
        out[i].not_run = !out[i].passed && culprit >= 0 && i > culprit;
        if (!out[i].passed)
            snprintf(out[i].why, sizeof out[i].why, "%s", why);
    }
    int stopped = strstr(why, "coconet received signal") != NULL;
    if (rep.limits.known) {
        t->limits.copy_gbs = rep.limits.copy_gbs;
        t->limits.peer_gbs = rep.limits.peer_gbs;
        t->limits.gemm_tflops = rep.limits.gemm_tflops;
        t->limits.known = 1;
    }
    report_free(&rep);
    free(view.v);
    free(labels);
    if (stopped)
        snprintf(err, errlen, "coconet tune: stopped by a signal (the ranks were stopped)\n");
    return stopped ? -1 : 0;
}

static void cuda_free(TuneTimer *t)
{
    CudaTimer *c = (CudaTimer *)t;
    for (int slot = 0; slot < NSLOT; slot++)
        cuda_close(t, slot); /* every slot's ranks told first: they close at once */
    for (int slot = 0; slot < NSLOT; slot++)
        cuda_ranks_stop(c->leaving[slot]);
    free(t);
}

TuneTimer *timer_cuda_new(const TimerConfig *cfg, char *err, size_t errlen)
{
    char why[1024];
    if (coco_cuda_usable(cfg->nranks, why, sizeof why) != 1) {
        snprintf(err, errlen, "coconet tune: cannot time on GPUs: %s (tune measures every "
                 "variant on %d GPU%s; `coconet run --backend cpu` checks schedules without "
                 "them)\n", why, cfg->nranks, cfg->nranks == 1 ? "" : "s");
        return NULL;
    }
    CudaTimer *c = xcalloc(1, sizeof *c);
    c->cfg = *cfg;
    knob_clear_env(); /* the ranks' defaults: the `default` knob set */
    const char *cold = getenv("COCONET_COLD_L2");
    if (!cold || !*cold)
        setenv("COCONET_COLD_L2", cold = "1", 1);
    c->t.cold_l2 = !strcmp(cold, "1");
    char e[2048];
    if (cuda_build_setup(&c->build, cfg->timeout_s, e, sizeof e)) {
        snprintf(err, errlen, "%s", e);
        free(c);
        return NULL;
    }
    cuda_gpu_model(c->t.gpu, sizeof c->t.gpu);
    c->t.nccl = nccl_header_version(c->build.tool.nccl_include);
    tune_limits_default(&c->t.limits);
    c->t.open = cuda_open;
    c->t.measure = cuda_measure;
    c->t.close = cuda_close;
    c->t.free = cuda_free;
    return &c->t;
}

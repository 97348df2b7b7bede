/* run.c: running one variant on one rank: its entry points found in the
 * generated code, the context (the runtime's knobs, or the variant's own)
 * and arguments set up, one checked run whose
 * results are copied back, timed runs (CUDA events, inputs restored, the
 * L2 emptied with COCONET_COLD_L2=1, and ranks lined up before each), then
 * a repeat run compared with the checked one, and the guard bytes checked
 * (slab.c); or, for a variant timed alone (time_only), the timed runs and
 * the guard bytes only. */
#include "rt_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    RtEntry sym;
    coco_cuda_ctx ctx;
    coco_cuda_args args;
    char msg[2048];
    int timed; /* timed runs so far (the fault tests' hook, coconet_rt.h) */
} Entry;

/* The symbol prefix + name in sym; its address in so, or NULL */
static void *entry_symbol(void *so, const char *prefix, const char *name, char *sym, size_t len)
{
    snprintf(sym, len, "%s%s", prefix, name);
    return dlsym(so, sym);
}

int rt_find_entry(CocoRt *rt, void *so, const char *name, RtEntry *e)
{
    char sym[256];
    memset(e, 0, sizeof *e);
    e->run = (coco_cuda_run_fn)(size_t)entry_symbol(so, COCO_RUN_PREFIX, name, sym, sizeof sym);
    if (e->run)
        e->workspace = (coco_cuda_workspace_fn)(size_t)entry_symbol(so, COCO_WORKSPACE_PREFIX,
                                                                   name, sym, sizeof sym);
    if (!e->run || !e->workspace)
        return rt_error(rt, "the generated code has no entry point for '%s' (%s)", name, sym);
    e->window_in = entry_symbol(so, COCO_WINDOW_INPUTS_PREFIX, name, sym, sizeof sym);
    e->window_out = entry_symbol(so, COCO_WINDOW_OUTPUTS_PREFIX, name, sym, sizeof sym);
    if (!e->window_in || !e->window_out)
        e->window_in = e->window_out = NULL;
    return 0;
}

/* A variant's context from the runtime's state and knobs (also a session's
 * call, rt/session.c, which then sets its own stream, knobs and window) */
void rt_setup_ctx(CocoRt *rt, coco_cuda_ctx *c, char *msg, size_t len)
{
    c->rank = rt->rank;
    c->nranks = rt->nranks;
    c->group_size = rt->group_size;
    c->world = rt->world;
    c->world_window = NULL; /* with the window (setup_entry) */
    c->nccl_window_bytes = (size_t)rt->nccl_window_bytes;
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
    c->fused_push_bytes = (size_t)rt->fused_push_bytes;
    c->fused_push_round = rt->fused_push_round;
    c->lsa_comm = rt->lsa; /* the workspace's dry run asks coco_lsa_pushes */
    c->fused_vec = rt->fused_vec;
    c->fused_peers = rt->fused_peers;
    c->one_rank_fused = rt->one_rank_fused;
    c->overlap_chunks = (int)rt->overlap_chunks;
    c->overlap_sms = (int)rt->overlap_sms;
    c->overlap_tail = rt->overlap_tail;
    c->scatter_bucket = rt->scatter_bucket;
}

/* The variant's own knobs over the runtime's (c is this variant's context
 * alone: the runtime's stay as they are for the next variant) */
static int variant_knobs(CocoRt *rt, const CocoRtVariant *v, coco_cuda_ctx *c)
{
    if (v->fused_algo < COCO_RT_KNOB_UNSET || v->fused_algo >= COCO_FUSED_COUNT ||
        v->overlap_chunks < COCO_RT_KNOB_UNSET || v->overlap_chunks > 64)
        return rt_error(rt, "%s: knobs fused_algo %d, overlap_chunks %d: expected -1 to %d and "
                        "-1 to 64", v->name, v->fused_algo, v->overlap_chunks,
                        COCO_FUSED_COUNT - 1);
    if (v->fused_algo != COCO_RT_KNOB_UNSET)
        c->fused_algo = v->fused_algo;
    if (v->overlap_chunks != COCO_RT_KNOB_UNSET)
        c->overlap_chunks = v->overlap_chunks;
    return 0;
}

static int setup_entry(CocoRt *rt, const CocoRtVariant *v, Buffers *b, Entry *e)
{
    coco_cuda_ctx *c = &e->ctx;
    rt_setup_ctx(rt, c, e->msg, sizeof e->msg);
    if (variant_knobs(rt, v, c))
        return -1;
    size_t workspace = e->sym.workspace(c, v->size);
    if (make_buffers(rt, v, workspace, b))
        return -1;
    c->workspace = b->workspace;
    c->workspace_bytes = workspace;
    if (b->window) {
        c->lsa_comm = rt->lsa;
        c->world_window = rt->world_window;
        c->lsa_window = b->window;
        c->lsa_base = b->slab;
        c->lsa_bytes = b->slab_bytes;
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
    if (e->sym.run(&e->ctx, &e->args))
        return rt_error(rt, "%s: %s", v->name, e->msg[0] ? e->msg : "failed (no message)");
    return 0;
}

static int copy_back(CocoRt *rt, const CocoRtVariant *v, Buffers *b)
{
    for (int i = 0; i < v->noutputs; i++) {
        if (!b->out[i]) { /* a scattered input's new value, in its members */
            if (copy_input(rt, v, b, b->alias_of[i], v->output[i], 0, cudaMemcpyDeviceToHost))
                return -1;
            continue;
        }
        CUDA_OK(rt, cudaMemcpyAsync(v->output[i], b->out[i], v->output_bytes[i],
                                    cudaMemcpyDeviceToHost, rt->stream));
    }
    for (int i = 0; i < v->ninputs; i++)
        if (v->updated && v->updated[i] && b->in[i] &&
            copy_input(rt, v, b, i, v->updated[i], 0, cudaMemcpyDeviceToHost))
            return -1;
    return wait_gpu(rt, rt->stream, NULL, "copying the results back");
}

/* COCONET_COLD_L2=1: the L2 emptied before a timed run, by the generated
 * code's coco_l2_clear over a zeroed buffer twice its size (both found or
 * made at the first call, kept in rt). The run then finds its inputs in
 * memory, not in the L2 where the restore left them, as a step of a longer
 * program would; its time no longer depends on where in the L2 they landed
 * (which measured a spread from process to process: doc/cli.md, coconet
 * tune). `coconet tune` sets it. */
static int clear_l2(CocoRt *rt)
{
    if (!rt->l2_buffer) {
        rt->l2_clear = (coco_l2_clear_fn)(size_t)dlsym(rt->so, "coco_l2_clear");
        if (!rt->l2_clear)
            return rt_error(rt, "COCONET_COLD_L2=1: the generated code has no coco_l2_clear");
        int l2 = 0;
        CUDA_OK(rt, cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, rt->device));
        size_t bytes = 2 * (size_t)(l2 > 0 ? l2 : 1 << 20);
        cudaError_t e = cudaMalloc(&rt->l2_buffer, bytes);
        if (e != cudaSuccess) {
            rt->l2_buffer = NULL;
            cudaGetLastError(); /* not sticky: the device goes on */
            return rt_error(rt, "COCONET_COLD_L2=1: no room on the GPU for the %zu MB that "
                            "empty its L2 before each timed run (%s); COCONET_COLD_L2=0 "
                            "times with the inputs left in the L2",
                            bytes >> 20, cudaGetErrorString(e));
        }
        CUDA_OK(rt, cudaMemsetAsync(rt->l2_buffer, 0, bytes, rt->stream));
        rt->l2_buffer_bytes = bytes;
    }
    if (rt->l2_clear(rt->l2_buffer, rt->l2_buffer_bytes, rt->stream))
        return rt_error(rt, "COCONET_COLD_L2=1: the kernel emptying the L2 did not start: %s",
                        cudaGetErrorString(cudaGetLastError()));
    return 0;
}

/* Restore the inputs, line the ranks up, then one run between two events.
 * The start event follows the line-up (a one-element AllReduce) in the
 * stream, and the host queues the run behind it without waiting: every
 * rank's run starts on its GPU when the line-up ends there, at nearly the
 * same moment on every rank, its launch already queued. So neither one
 * rank's host arriving late nor the launch's latency is timed.
 * COCONET_TIME_HOST_START=1 (rt->host_start): the host waits for the
 * line-up before it records the start, so both are timed. */
static int timed_run(CocoRt *rt, const CocoRtVariant *v, Buffers *b, Entry *e, float *ms)
{
    if (restore_inputs(rt, v, b) || (rt->cold_l2 && clear_l2(rt)))
        return -1;
    NCCL_OK(rt, ncclAllReduce(rt->barrier, rt->barrier, 1, ncclFloat, ncclSum, rt->world,
                              rt->stream));
    if (rt->host_start && wait_gpu(rt, rt->stream, NULL, "lining the ranks up before a timed run"))
        return -1;
    if (++e->timed == 2)
        coco_test_die(rt->rank, "timed", v->name);
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

/* One breakdown run's step times into ms[i * runs + k] (step i after the
 * run's start event, or after step i-1's event); 0, 1 when its steps are
 * not those of the first run (template, n of them), -1 on an error. */
static int step_times(CocoRt *rt, Buffers *b, Marks *m, const CocoRtStep *template, int n,
                      int runs, int k, float *ms)
{
    if (m->n != n)
        return 1;
    for (int i = 0; i < n; i++)
        if (m->step[i].line != template[i].line || strcmp(m->step[i].call, template[i].call) ||
            strcmp(m->step[i].op, template[i].op))
            return 1;
    for (int i = 0; i < n; i++)
        CUDA_OK(rt, cudaEventElapsedTime(&ms[i * runs + k], i ? m->event[i - 1] : b->start,
                                         m->event[i]));
    return 0;
}

static double median_of(float *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_float);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* --breakdown: v->breakdown_runs more runs (after the timed ones, which
 * run without marks), each with an event after every launch and library
 * call; each step's median time into v->steps. */
static int breakdown(CocoRt *rt, const CocoRtVariant *v, Buffers *b, Entry *e, CocoRtTiming *t)
{
    int runs = v->breakdown_runs, n = -1, rc = 0, used = 0;
    if (runs <= 0)
        return 0;
    Marks m;
    memset(&m, 0, sizeof m);
    CocoRtStep *template = NULL;
    float *ms = NULL;
    e->ctx.mark = rt_mark;
    e->ctx.marks = &m;
    for (int k = 0; k < runs && !rc; k++) {
        float total;
        marks_begin(&m, rt);
        rc = timed_run(rt, v, b, e, &total);
        if (!rc && m.why[0])
            rc = rt_error(rt, "%s: breakdown: %s", v->name, m.why);
        if (rc)
            break;
        if (n < 0) {
            n = m.n;
            template = malloc((size_t)(n + 1) * sizeof *template);
            ms = calloc((size_t)(n + 1) * (size_t)runs, sizeof *ms);
            if (!template || !ms) {
                rc = rt_error(rt, "out of memory");
                break;
            }
            memcpy(template, m.step, (size_t)n * sizeof *template);
        }
        int differ = step_times(rt, b, &m, template, n, runs, used, ms);
        if (differ < 0)
            rc = -1;
        else if (differ)
            t->steps_differ++; /* left out */
        else
            used++;
    }
    e->ctx.mark = NULL;
    e->ctx.marks = NULL;
    for (int i = 0; !rc && i < n && used > 0; i++)
        if (i < v->max_steps) {
            v->steps[i] = template[i];
            v->steps[i].median_ms = median_of(ms + (size_t)i * runs, used);
        }
    if (!rc)
        t->nsteps = used > 0 ? n : 0;
    marks_free(&m);
    free(template);
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
    if (rt_find_entry(rt, rt->so, v->name, &e.sym) || setup_entry(rt, v, b, &e))
        return -1;
    trace_step(rt, v, "buffers and inputs on the GPU", &at);
    coco_test_die(rt->rank, "upload", v->name);
    t->workspace_bytes = e.ctx.workspace_bytes;
    if (v->time_only) { /* checked before: timed alone */
        if (time_variant(rt, v, b, &e, t))
            return -1;
        trace_step(rt, v, "timed runs alone", &at);
        return check_guards(rt, b, 1, &t->fault);
    }
    if (restore_inputs(rt, v, b) || call_entry(rt, v, &e) || wait_streams(rt, v->name) ||
        copy_back(rt, v, b) || check_guards(rt, b, 0, &t->fault))
        return -1;
    trace_step(rt, v, "checked run and copy back", &at);
    /* timed and repeated even after a fault: every rank makes the same
     * collective calls; the first fault found is the one reported */
    float ms;
    if (time_variant(rt, v, b, &e, t) || breakdown(rt, v, b, &e, t) ||
        timed_run(rt, v, b, &e, &ms))
        return -1;
    trace_step(rt, v, "timed runs and the repeat run", &at);
    if (t->fault.kind == COCO_RT_FAULT_NONE && check_guards(rt, b, 1, &t->fault))
        return -1;
    int rc = t->fault.kind == COCO_RT_FAULT_NONE ? compare_repeat(rt, v, b, &t->fault) : 0;
    trace_step(rt, v, "guards and the repeat run compared", &at);
    return rc;
}

int rt_run(CocoRt *rt, const CocoRtVariant *v, CocoRtTiming *t, char *err, size_t errlen)
{
    Buffers b;
    memset(&b, 0, sizeof b);
    memset(t, 0, sizeof *t);
    rt->err = err;
    rt->errlen = errlen;
    int rc = run_variant(rt, v, t, &b);
    if (!rc) /* after a failure the buffers may still be in use: leave them to exit */
        free_buffers(&b);
    if (!rc && t->fault.kind != COCO_RT_FAULT_NONE)
        held_drop_inputs(rt); /* its kernels wrote where they should not (held.c) */
    return rc;
}

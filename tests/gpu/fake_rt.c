/* fake_rt.c: a stand-in for the CUDA runtime (build/fake/libfake_rt.so),
 * with the interface of include/coconet_rt.h but no CUDA: it loads the
 * "generated" object and calls its entry points on host memory. Only for
 * host-only objects such as tests/gpu/host.cu: it lets the launcher's tests
 * (tests/unit/test_cuda_launch.c) run the whole path (build, cache, fork,
 * NCCL id exchange, reports, table, failures) on machines without a GPU.
 *
 * Like the real runtime it runs each variant twice and compares the second
 * run's results with the first's bit for bit, and keeps guard bytes after
 * each input and output (a pattern written before the first run and read
 * after each), reporting what it finds as a CocoRtFault.
 *
 * Its machine limits are fixed, obviously fake figures (1000 GB/s copy,
 * 100 GB/s peer, 10 TFLOP/s GEMM) for a "stand-in GPU" key; each
 * measurement appends a line to the file FAKE_RT_MEASURED names, if set,
 * so that a test sees whether the launcher measured or read its cache.
 * With breakdown runs it passes the entry point a mark function and gives
 * the i-th mark of rank r a fake time of (i + 1) * (r + 1) microseconds.
 *
 * FAKE_RT_MODE makes rank FAKE_RT_RANK (default 1) misbehave:
 *   wrong  changes one output element      crash  dies of SIGSEGV in run
 *   hang   never returns from run          error  returns an error from run
 *   abi    reports another ABI version     guard  writes 3 bytes past output 0
 *   repeat changes an element of output 0 in the second run only
 *
 * Each variant's own knobs (CocoRtVariant.fused_algo, overlap_chunks) reach
 * the entry point's context as the real runtime's do; with FAKE_RT_KNOBS
 * set, each run appends "pid PID rank R NAME fused F chunks C" to the file
 * it names (-1: the variant's knob unset), and " alone" for a variant timed
 * alone, so that a test sees them per variant, and which process ran them;
 * and a line for each result buffer the rank takes from host_alloc.
 * A variant timed alone (time_only) runs once, its guards checked, nothing
 * copied back and no repeat run, as the real runtime's.
 *
 * It honours the fault tests' hook COCONET_TEST_DIE (include/coconet_rt.h)
 * where its steps stand for the real runtime's: init when it opens, upload
 * as a variant begins, timed before a variant's second run.
 *
 * It also has the session API (include/coconet_session.h) on host memory:
 * the arena is malloc'd, a call runs the entry point at once, on no stream,
 * and no rank talks to another (host-only objects have no collectives), so
 * that the Python package's session layer is tested without a GPU
 * (tests/python/test_session.py). */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coconet_rt.h"
#include "coconet_cuda.h"
#include "coconet_session.h"

struct CocoRt {
    int rank, nranks, group_size;
    void *so;
};

static int misbehaves(int rank, const char *mode)
{
    const char *m = getenv("FAKE_RT_MODE"), *r = getenv("FAKE_RT_RANK");
    return m && !strcmp(m, mode) && rank == (r ? atoi(r) : 1);
}

static int unique_id(unsigned char id[COCO_RT_ID_BYTES], char *err, size_t errlen)
{
    for (int i = 0; i < COCO_RT_ID_BYTES; i++)
        id[i] = (unsigned char)(i * 7 + 3);
    return 0;
}

static CocoRt *rt_open(const CocoRtConfig *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < COCO_RT_ID_BYTES; i++)
        if (cfg->nccl_id[i] != (unsigned char)(i * 7 + 3)) {
            snprintf(err, errlen, "rank %d: the NCCL id did not arrive intact", cfg->rank);
            return NULL;
        }
    coco_test_die(cfg->rank, "init", NULL);
    CocoRt *rt = calloc(1, sizeof *rt);
    rt->rank = cfg->rank;
    rt->nranks = cfg->nranks;
    rt->group_size = cfg->group_size > 0 ? cfg->group_size : cfg->nranks;
    rt->so = dlopen(cfg->so_path, RTLD_NOW | RTLD_LOCAL);
    if (!rt->so) {
        snprintf(err, errlen, "rank %d: cannot load the generated code: %s", cfg->rank,
                 dlerror());
        free(rt);
        return NULL;
    }
    return rt;
}

enum { GUARD = 64 };

static unsigned char pattern(size_t i)
{
    return (unsigned char)(0xa5 ^ (i & 0xff));
}

/* A host buffer of `bytes` followed by GUARD bytes of the pattern. */
static void *guarded(size_t bytes)
{
    unsigned char *p = malloc(bytes + GUARD);
    for (size_t i = 0; i < GUARD; i++)
        p[bytes + i] = pattern(i);
    return p;
}

/* The first damaged guard byte after p into *f; 1 when there is one. */
static int guard_damaged(const void *p, size_t bytes, int output, int input, CocoRtFault *f)
{
    const unsigned char *g = (const unsigned char *)p + bytes;
    for (size_t i = 0; i < GUARD; i++)
        if (g[i] != pattern(i)) {
            *f = (CocoRtFault){COCO_RT_FAULT_GUARD, output, input, 1, 0,
                               (long long)(bytes + i), (long long)bytes, g[i], pattern(i)};
            return 1;
        }
    return 0;
}

/* The marks of one breakdown run: what each follows. */
typedef struct {
    CocoRtStep step[64];
    int n;
} FakeMarks;

static void fake_mark(void *marks, int kind, const char *op, int line, const char *call)
{
    FakeMarks *m = marks;
    if (m->n == (int)(sizeof m->step / sizeof *m->step))
        return;
    CocoRtStep *s = &m->step[m->n++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->line = line;
    s->calls = 1;
    snprintf(s->op, sizeof s->op, "%s", op);
    snprintf(s->call, sizeof s->call, "%.*s", (int)strcspn(call, "( "), call);
}

/* One run of `run` on fresh copies of the inputs, into out[]; the new
 * values left in in[]; with marks, a breakdown run. */
static int run_once(CocoRt *rt, coco_cuda_run_fn run, const CocoRtVariant *v, void **in,
                    void **out, FakeMarks *marks, char *msg, size_t len)
{
    for (int i = 0; i < v->ninputs; i++)
        if (v->input[i])
            memcpy(in[i], v->input[i], v->input_bytes[i]);
    coco_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.rank = rt->rank;
    ctx.nranks = rt->nranks;
    ctx.group_size = rt->group_size;
    ctx.err = msg;
    ctx.errlen = len;
    ctx.fused_algo = v->fused_algo == COCO_RT_KNOB_UNSET ? 0 : v->fused_algo;
    ctx.overlap_chunks = v->overlap_chunks == COCO_RT_KNOB_UNSET ? 0 : v->overlap_chunks;
    if (marks) {
        marks->n = 0;
        ctx.mark = fake_mark;
        ctx.marks = marks;
    }
    coco_cuda_args args = {in, v->scalar, out, v->size, v->seed, NULL}; /* no scattered inputs */
    int rc = run(&ctx, &args);
    if (!rc && misbehaves(rt->rank, "wrong") && v->noutputs && v->output_bytes[0])
        ((unsigned char *)out[0])[0] ^= 0x40; /* in every run: wrong, but repeatably */
    return rc;
}

static int check_guards(const CocoRtVariant *v, void **in, void **out, CocoRtFault *f)
{
    for (int i = 0; i < v->noutputs; i++)
        if (guard_damaged(out[i], v->output_bytes[i], i, -1, f))
            return 1;
    for (int i = 0; i < v->ninputs; i++)
        if (in[i] && guard_damaged(in[i], v->input_bytes[i], -1, i, f))
            return 1;
    return 0;
}

static void compare(const void *got, const void *first, size_t bytes, int output, int input,
                    CocoRtFault *f)
{
    const unsigned char *a = got, *b = first;
    for (size_t i = 0; i < bytes && f->kind == COCO_RT_FAULT_NONE; i++)
        if (a[i] != b[i])
            *f = (CocoRtFault){COCO_RT_FAULT_REPEAT, output, input, 0, 0, (long long)i,
                               (long long)bytes, a[i], b[i]};
}

/* The second run: guards, then its results against the first's. */
static int repeat(CocoRt *rt, coco_cuda_run_fn run, const CocoRtVariant *v, void **in,
                  void **out, CocoRtTiming *t, char *msg, size_t len)
{
    coco_test_die(rt->rank, "timed", v->name);
    if (run_once(rt, run, v, in, out, NULL, msg, len))
        return -1;
    if (misbehaves(rt->rank, "repeat") && v->noutputs && v->output_bytes[0])
        ((unsigned char *)out[0])[v->output_bytes[0] - 1] ^= 0x01;
    if (check_guards(v, in, out, &t->fault))
        return 0;
    for (int i = 0; i < v->noutputs; i++)
        compare(out[i], v->output[i], v->output_bytes[i], i, -1, &t->fault);
    for (int i = 0; i < v->ninputs; i++)
        if (v->updated && v->updated[i])
            compare(in[i], v->updated[i], v->input_bytes[i], -1, i, &t->fault);
    return 0;
}

/* v->breakdown_runs runs with marks; the steps of the first, with fake times */
static int breakdown(CocoRt *rt, coco_cuda_run_fn run, const CocoRtVariant *v, void **in,
                     void **out, CocoRtTiming *t, char *msg, size_t len)
{
    FakeMarks m;
    for (int k = 0; k < v->breakdown_runs; k++)
        if (run_once(rt, run, v, in, out, &m, msg, len))
            return -1;
    if (v->breakdown_runs <= 0)
        return 0;
    t->nsteps = m.n;
    for (int i = 0; i < m.n && i < v->max_steps; i++) {
        v->steps[i] = m.step[i];
        v->steps[i].median_ms = 0.001 * (i + 1) * (rt->rank + 1);
    }
    return 0;
}

/* A line "pid PID ..." appended to the file FAKE_RT_KNOBS names, if set */
static void knob_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void knob_log(const char *fmt, ...)
{
    const char *path = getenv("FAKE_RT_KNOBS");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    fprintf(f, "pid %ld ", (long)getpid());
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

/* FAKE_RT_KNOBS: the variant's own knobs, a line a run */
static void log_knobs(const CocoRt *rt, const CocoRtVariant *v)
{
    knob_log("rank %d %s fused %d chunks %d%s", rt->rank, v->name, v->fused_algo,
             v->overlap_chunks, v->time_only ? " alone" : "");
}

static int rt_run(CocoRt *rt, const CocoRtVariant *v, CocoRtTiming *t, char *err,
                  size_t errlen)
{
    char sym[256];
    snprintf(sym, sizeof sym, COCO_RUN_PREFIX "%s", v->name);
    coco_cuda_run_fn run = (coco_cuda_run_fn)(size_t)dlsym(rt->so, sym);
    if (!run) {
        snprintf(err, errlen, "rank %d: the generated code has no entry point for '%s' (%s)",
                 rt->rank, v->name, sym);
        return -1;
    }
    coco_test_die(rt->rank, "upload", v->name);
    log_knobs(rt, v);
    if (misbehaves(rt->rank, "crash"))
        raise(SIGSEGV);
    while (misbehaves(rt->rank, "hang"))
        sleep(1);
    if (misbehaves(rt->rank, "error")) {
        snprintf(err, errlen, "rank %d: fake failure in %s", rt->rank, v->name);
        return -1;
    }
    void *in[256] = {0}, *out[256] = {0};
    char msg[256] = "";
    for (int i = 0; i < v->ninputs; i++)
        in[i] = v->input[i] ? guarded(v->input_bytes[i]) : NULL;
    for (int i = 0; i < v->noutputs; i++)
        out[i] = guarded(v->output_bytes[i]);
    memset(t, 0, sizeof *t);
    t->median_ms = t->min_ms = t->max_ms = 0.001 * (rt->rank + 1);
    int rc = run_once(rt, run, v, in, out, NULL, msg, sizeof msg);
    if (!rc && misbehaves(rt->rank, "guard") && v->noutputs)
        ((unsigned char *)out[0])[v->output_bytes[0] + 3] ^= 0xff;
    if (!rc && v->time_only && check_guards(v, in, out, &t->fault))
        t->fault.late = 1; /* timed alone: the guards after its runs, nothing back */
    for (int i = 0; i < v->noutputs && !rc && !v->time_only; i++)
        memcpy(v->output[i], out[i], v->output_bytes[i]);
    for (int i = 0; i < v->ninputs && !rc && !v->time_only; i++)
        if (v->updated && v->updated[i])
            memcpy(v->updated[i], in[i], v->input_bytes[i]);
    if (!rc && !v->time_only && !check_guards(v, in, out, &t->fault))
        rc = breakdown(rt, run, v, in, out, t, msg, sizeof msg);
    if (!rc && t->fault.kind == COCO_RT_FAULT_NONE)
        rc = repeat(rt, run, v, in, out, t, msg, sizeof msg);
    for (int i = 0; i < v->ninputs; i++)
        free(in[i]);
    for (int i = 0; i < v->noutputs; i++)
        free(out[i]);
    if (rc)
        snprintf(err, errlen, "rank %d: %s", rt->rank, msg);
    return rc ? -1 : 0;
}

static void rt_close(CocoRt *rt, int abort)
{
    if (rt && rt->so)
        dlclose(rt->so);
    free(rt);
}

static void describe(CocoRt *rt, char *buf, size_t len)
{
    snprintf(buf, len, "a stand-in runtime without GPU");
}

static int machine(int local_rank, char *key, size_t keylen, char *err, size_t errlen)
{
    snprintf(key, keylen, "stand-in GPU (no CUDA) uuid 0 driver 0 cuda 0");
    return 0;
}

static int limits(int local_rank, CocoRtLimits *l, char *err, size_t errlen)
{
    const char *log = getenv("FAKE_RT_MEASURED");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "measured by local rank %d\n", local_rank);
        fclose(f);
    }
    *l = (CocoRtLimits){1000, 100, 10};
    return 0;
}

/* Host memory for the rank's result buffers: malloc's; with FAKE_RT_KNOBS
 * set, each allocation appends "pid PID host_alloc BYTES" to its file */
static void *host_alloc(CocoRt *rt, size_t bytes)
{
    knob_log("host_alloc %zu", bytes);
    return malloc(bytes ? bytes : 1);
}

static void host_free(CocoRt *rt, void *p)
{
    free(p);
}

const CocoRtApi *coco_rt_api(void);

const CocoRtApi *coco_rt_api(void)
{
    static CocoRtApi api = {COCO_RT_ABI, unique_id, rt_open, rt_run,    rt_close,
                            describe,    machine,   limits,  host_alloc, host_free};
    const char *m = getenv("FAKE_RT_MODE");
    if (m && !strcmp(m, "abi"))
        api.abi = COCO_RT_ABI + 100;
    return &api;
}

/* ---- the session API on host memory ---- */

enum { FAKE_MODULES = 16 };

struct coco_session {
    int rank, nranks, group_size;
    void *world;            /* the caller's communicator adopted as WORLD, or NULL */
    char *arena;
    size_t arena_bytes, used;
    void *so[FAKE_MODULES];
    int nmodules;
    char msg[1024];
};

int coco_session_abi(void)
{
    return COCO_SESSION_ABI;
}

/* the stand-in's NCCL: COCONET_FAKE_NCCL ("VERSION_CODE PATH"), else 2.28.3 */
int coco_session_nccl(char *path, size_t len)
{
    const char *env = getenv("COCONET_FAKE_NCCL");
    int version = 22803, at = 0;
    if (env && sscanf(env, "%d %n", &version, &at) == 1 && env[at]) {
        snprintf(path, len, "%s", env + at);
        return version;
    }
    snprintf(path, len, "libfake_nccl.so.2");
    return version;
}

int coco_session_unique_id(unsigned char id[COCO_SESSION_ID_BYTES], char *err, size_t errlen)
{
    return unique_id(id, err, errlen);
}

coco_session *coco_session_open(const coco_session_config *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < COCO_SESSION_ID_BYTES && !cfg->world; i++) /* adopted: unused */
        if (cfg->nccl_id[i] != (unsigned char)(i * 7 + 3)) {
            snprintf(err, errlen, "rank %d: the NCCL id did not arrive intact", cfg->rank);
            return NULL;
        }
    if (cfg->nranks < 1 || cfg->rank < 0 || cfg->rank >= cfg->nranks) {
        snprintf(err, errlen, "rank %d of %d ranks: not a rank of the run", cfg->rank,
                 cfg->nranks);
        return NULL;
    }
    coco_session *s = calloc(1, sizeof *s);
    s->rank = cfg->rank;
    s->nranks = cfg->nranks;
    s->group_size = cfg->group_size > 0 ? cfg->group_size : cfg->nranks;
    s->world = cfg->world;
    s->arena_bytes = cfg->arena_bytes ? (cfg->arena_bytes + 511) / 512 * 512 : 1 << 20;
    s->arena = calloc(1, s->arena_bytes);
    return s;
}

int coco_session_load(coco_session *s, const char *so_path, char *err, size_t errlen)
{
    void *so = s->nmodules < FAKE_MODULES ? dlopen(so_path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!so) {
        snprintf(err, errlen, "rank %d: cannot load the generated code: %s", s->rank,
                 s->nmodules < FAKE_MODULES ? dlerror() : "too many modules");
        return -1;
    }
    s->so[s->nmodules] = so;
    return s->nmodules++;
}

int coco_session_output_alias(coco_session *s, int module, int output)
{
    if (module < 0 || module >= s->nmodules)
        return -2;
    const int *alias = (const int *)dlsym(s->so[module], "coco_output_alias");
    return alias ? alias[output] : -1;
}

void *coco_session_alloc(coco_session *s, size_t bytes, char *err, size_t errlen)
{
    size_t want = ((bytes ? bytes : 1) + 511) / 512 * 512;
    if (want > s->arena_bytes - s->used) {
        snprintf(err, errlen, "rank %d: the arena is full: %zu of its %zu bytes are handed out "
                 "and %zu more are asked", s->rank, s->used, s->arena_bytes, want);
        return NULL;
    }
    void *p = s->arena + s->used;
    s->used += want;
    return p;
}

void coco_session_arena(const coco_session *s, void **base, size_t *bytes, size_t *used)
{
    *base = s->arena;
    *bytes = s->arena_bytes;
    *used = s->used;
}

int coco_session_call(coco_session *s, coco_session_call_args *a, char *err, size_t errlen)
{
    char sym[256];
    snprintf(sym, sizeof sym, COCO_RUN_PREFIX "%s", a->variant);
    coco_cuda_run_fn run = a->module >= 0 && a->module < s->nmodules
                               ? (coco_cuda_run_fn)(size_t)dlsym(s->so[a->module], sym)
                               : NULL;
    if (!run) {
        snprintf(err, errlen, "rank %d: the generated code has no entry point for '%s' (%s)",
                 s->rank, a->variant, sym);
        return -1;
    }
    a->outside = 0;
    for (int i = 0; i < a->ninputs; i++) {
        const char *p = a->input[i];
        a->outside += p && (p < s->arena || p >= s->arena + s->arena_bytes);
    }
    for (int i = 0; i < a->noutputs; i++) {
        const char *p = a->output[i];
        a->outside += p && (p < s->arena || p >= s->arena + s->arena_bytes);
    }
    coco_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.rank = s->rank;
    ctx.nranks = s->nranks;
    ctx.group_size = a->group_size > 0 ? a->group_size : s->group_size;
    ctx.stream = a->stream;
    ctx.err = s->msg;
    ctx.errlen = sizeof s->msg;
    ctx.fused_algo = a->fused_algo;
    s->msg[0] = 0;
    coco_cuda_args args = {a->input, a->scalar, a->output, a->size, a->seed, a->members};
    if (run(&ctx, &args)) {
        snprintf(err, errlen, "rank %d: %s: %s", s->rank, a->variant, s->msg);
        return -1;
    }
    return 0;
}

int coco_session_wait(coco_session *s, void *stream, char *err, size_t errlen)
{
    return 0;
}

void coco_session_describe(const coco_session *s, char *buf, size_t len)
{
    snprintf(buf, len, "rank %d of %d, a stand-in runtime without GPU, WORLD: %s, arena %zu "
             "bytes (host memory)", s->rank, s->nranks,
             s->world ? "the caller's communicator" : "the session's own communicator",
             s->arena_bytes);
}

void coco_session_close(coco_session *s, int abort)
{
    if (!s)
        return;
    for (int i = 0; i < s->nmodules; i++)
        dlclose(s->so[i]);
    free(s->arena);
    free(s);
}

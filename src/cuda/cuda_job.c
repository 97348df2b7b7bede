/* cuda_job.c: what the CUDA backend checks GPU runs against, computed in
 * the parent before any rank process exists (and before any CUDA call):
 * the program's CPU run (whose inputs are every variant's input data), the
 * FP64 evaluation of the program (program_exact, reading the same input
 * buffers: program_exact keeps each input's data type), each variant's own CPU
 * run unless every variant is checked against the program's, and for every
 * checked value (outputs, new values of Updated tensors) its tolerance.
 *
 * Tolerance: within_tolerance (tolerance.c), the rule of the schedule
 * comparison, with the reference being the CPU run of the same variant (or
 * of the program). GPU libraries sum MatMul and Conv2D products in another
 * order than the CPU executor (tiles, split-K, fused multiply-adds), so a
 * value computed from a contraction of K products accumulated in FP32 may
 * also be off by K * 2^-24 times its scale: the worst-case error of a
 * regrouped FP32 sum of K terms, taking the value's scale for the sum of
 * their magnitudes (2^-53 for FP64 accumulation). It matters for FP32 and
 * FP64 results only; for FP16 and BF16 results it is below an ulp.
 *
 * Unchecked (--reference none, for sizes whose reference the host cannot
 * hold): the inputs are drawn as for a checked run (the same seeded data),
 * and nothing else is computed: no CPU run, no FP64 evaluation, no
 * tolerance. The checks keep where each value is found and whether it is
 * Replicated; the ranks only hash them (cuda_rank.c). */
#define _DEFAULT_SOURCE /* sysconf(_SC_PHYS_PAGES) */
#include "cuda/cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static Exec *cpu_run(Program *p, uint64_t seed, int threads)
{
    Exec *e = exec_new(p, seed, threads);
    exec_fill_inputs(e);
    exec_run(e);
    return e;
}

/* The FP64 evaluation's inputs are the data run's: the same ids (a clone)
 * drawn in the same types, so their buffers are lent instead of drawn again
 * (inputs are never written nor freed by a run), and taken back before the
 * evaluation is freed (lend 0). */
static void lend_inputs(Exec *x64, Exec *data, int lend)
{
    Program *p = x64->prog;
    ASSERT(p->nnode == data->prog->nnode && p->nranks == data->prog->nranks);
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (n->dead || (n->op != O_INPUT && n->op != O_SCALAR))
            continue;
        for (int r = 0; r < p->nranks; r++) {
            size_t k = (size_t)i * (size_t)p->nranks + (size_t)r;
            x64->val[k] = lend ? data->val[k] : NULL;
            x64->count[k] = lend ? data->count[k] : 0;
        }
    }
}

static Exec *exact_run(CudaJob *job, int threads)
{
    Exec *e = exec_new(job->exact, job->seed, threads);
    lend_inputs(e, job->data, 1);
    exec_run(e);
    return e;
}

/* ---- the contraction slack ---- */

/* Products a rank accumulates for one element of MatMul or Conv2D node n. */
static long contraction(Program *p, const Node *n)
{
    long most = 0, shape[MAXDIM];
    for (int rank = 0; rank < p->nranks; rank++) {
        const Node *a = node_of(p, n->in[n->op == O_MATMUL ? 0 : 1]);
        local_shape(p, a, rank, shape, NULL);
        long k = n->op == O_MATMUL ? shape[a->ndim - 1] : shape[1] * shape[2] * shape[3];
        if (k > most)
            most = k;
    }
    return most;
}

/* The largest K * unit roundoff over the contractions value id depends on. */
static double contraction_error(Program *p, int id, char *seen)
{
    if (seen[id])
        return 0;
    seen[id] = 1;
    Node *n = node_of(p, id);
    double worst = 0;
    if (n->op == O_MATMUL || n->op == O_CONV2D)
        worst = (double)contraction(p, n) * ldexp(1, n->type == T_FP64 ? -53 : -24);
    for (int k = 0; k < n->nin; k++)
        worst = fmax(worst, contraction_error(p, n->in[k], seen));
    return worst;
}

static double contraction_slack(Program *p, int id, double scale)
{
    char *seen = xcalloc((size_t)p->nnode, 1);
    double u = contraction_error(p, id, seen);
    free(seen);
    return u * scale;
}

/* ---- checks ---- */

/* worst and scale of (ref, rnode), computed once per distinct pair */
typedef struct {
    Exec *ref;
    int rnode;
    double worst, scale;
} Known;
typedef struct {
    Known *k;
    int n, cap;
} KnownErrors;

static void reference_error(CudaJob *job, KnownErrors *ke, CudaCheck *c)
{
    for (int i = 0; i < ke->n; i++)
        if (ke->k[i].ref == c->ref && ke->k[i].rnode == c->rnode) {
            c->tol.worst = ke->k[i].worst;
            c->tol.scale = ke->k[i].scale;
            return;
        }
    c->tol.worst = value_error(c->ref, c->rnode, job->x64, c->xnode, &c->tol.scale);
    ke->k = xgrow(ke->k, ke->n, &ke->cap, 16, sizeof *ke->k);
    ke->k[ke->n++] = (Known){c->ref, c->rnode, c->tol.worst, c->tol.scale};
}

/* node: the variant's value; base: the program's */
static void add_check(CudaJob *job, CudaVariant *v, KnownErrors *ke, const char *name, int node,
                      int base, int output, int input)
{
    CudaCheck *c = &v->check[v->ncheck++];
    c->name = name;
    c->node = node;
    c->output = output;
    c->input = input;
    c->replicated = node_of(v->prog, node)->layout.kind == L_REPLICATED;
    c->xnode = base;
    if (job->unchecked)
        return; /* no reference: the ranks hash the value, nothing more */
    c->ref = v->own ? v->own : job->data;
    c->rnode = v->own ? node : base;
    c->tol.nranks = v->prog->nranks;
    reference_error(job, ke, c);
    c->tol.slack = contraction_slack(v->prog, node, c->tol.scale);
}

static void make_checks(CudaJob *job, CudaVariant *v, KnownErrors *ke)
{
    Program *p = v->prog, *b = job->base;
    v->check = xcalloc((size_t)(p->nexec_out + p->nexec_in + 1), sizeof *v->check);
    for (int i = 0; i < p->nexec_out; i++)
        add_check(job, v, ke, node_of(p, p->exec_out[i])->name, p->exec_out[i], b->exec_out[i],
                  i, -1);
    for (int i = 0; i < p->nexec_in; i++) {
        Node *t = node_of(p, p->exec_in[i]);
        if (t->op != O_INPUT || t->updated_by < 0)
            continue;
        int bt = program_input(b, t->name);
        ASSERT(bt >= 0 && b->node[bt].updated_by >= 0);
        add_check(job, v, ke, t->name, t->updated_by, b->node[bt].updated_by, -1, i);
    }
}

/* ---- the host memory of an unchecked job ---- */

static double gib(double bytes)
{
    return bytes / (double)(1 << 30);
}

/* Bytes of node n on all ranks, each element as `size` bytes. */
static double all_ranks(Program *p, const Node *n, size_t size)
{
    double b = 0;
    for (int r = 0; r < p->nranks; r++)
        b += (double)local_count(p, n, r) * (double)size;
    return b;
}

/* The host copies the ranks of variant p hold while it runs (cuda_rank.c):
 * its inputs in their types, the new values of Updated ones, its outputs. */
static double copies_bytes(Program *p)
{
    double b = 0;
    for (int i = 0; i < p->nexec_in; i++) {
        const Node *n = node_of(p, p->exec_in[i]);
        if (n->op == O_INPUT)
            b += all_ranks(p, n, type_size(n->type)) * (n->updated_by >= 0 ? 2 : 1);
    }
    for (int i = 0; i < p->nexec_out; i++) {
        const Node *n = node_of(p, p->exec_out[i]);
        b += all_ranks(p, n, type_size(n->type));
    }
    return b;
}

/* coco_run_fits for a job with no reference: the inputs drawn in this
 * process (doubles on every rank) and the largest variant's host copies
 * must fit in the host's memory; the program is never run here. */
static int unchecked_fits(Program **variants, int nv, char *err, size_t errlen)
{
    Program *p = variants[0];
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 1e18;
    double inputs = 0, copies = 0;
    for (int i = 0; i < p->nnode; i++)
        if (!p->node[i].dead && p->node[i].op == O_INPUT)
            inputs += all_ranks(p, &p->node[i], sizeof(double));
    for (int k = 0; k < nv; k++)
        copies = fmax(copies, copies_bytes(variants[k]));
    if (inputs + copies <= mem)
        return 0;
    snprintf(err, errlen, "%s: error: --reference none: the inputs drawn on %d ranks need %.3g "
             "GiB and the ranks' host copies of them and of the outputs %.3g GiB: too large for "
             "this machine's %.3g GiB\n", p->file, p->nranks, gib(inputs), gib(copies),
             gib(mem));
    return -1;
}

int cuda_job_fits(Program **variants, int nv, const coco_cuda_options *o, char *err,
                  size_t errlen)
{
    return o->reference == COCO_REFERENCE_NONE ? unchecked_fits(variants, nv, err, errlen)
                                               : coco_run_fits(variants[0], err, errlen);
}

/* ---- the job ---- */

/* With COCONET_TRACE set: how long a step of the preparation took, since
 * `since` (now_ms), on stderr. */
static void trace_ms(const char *what, double since)
{
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: %s %.2f s\n", what, (now_ms() - since) * 1e-3);
}

/* The data every variant's inputs are taken from: the program's CPU run,
 * and its FP64 evaluation; unchecked, the inputs alone. */
static int make_reference(CudaJob *job, Program **variants, int nv, const coco_cuda_options *o,
                          char *err, size_t errlen)
{
    Program *base = variants[0];
    if (job->unchecked ? unchecked_fits(variants, nv, err, errlen)
                       : coco_run_fits(base, err, errlen))
        return -1;
    double t0 = now_ms();
    if (job->unchecked) {
        job->data = exec_new(base, o->seed, o->threads);
        exec_fill_inputs(job->data);
        job->cpu_ms = now_ms() - t0;
        return 0;
    }
    job->data = cpu_run(base, o->seed, o->threads);
    job->cpu_ms = now_ms() - t0;
    trace_ms("the CPU reference", t0);
    job->exact = program_exact(base);
    job->x64 = exact_run(job, o->threads);
    trace_ms("the FP64 evaluation", t0 + job->cpu_ms);
    return 0;
}

int cuda_job_prepare(CudaJob *job, Program **variants, int nv, const coco_cuda_options *o,
                     char *err, size_t errlen)
{
    Program *base = variants[0];
    memset(job, 0, sizeof *job);
    job->base = base;
    job->seed = o->seed;
    job->iters = o->iters > 0 ? o->iters : 0;
    job->warmup = o->iters > 0 ? 3 : 0;
    /* --breakdown: as many runs as the timed ones, at least 1, at most 1000 */
    job->breakdown_runs = !o->breakdown ? 0 : job->iters > 1000 ? 1000
                          : job->iters > 0 ? job->iters : 1;
    job->remeasure = o->remeasure;
    job->timeout_s = o->timeout_s > 0 ? o->timeout_s : 300;
    job->unchecked = o->reference == COCO_REFERENCE_NONE;
    if (make_reference(job, variants, nv, o, err, errlen)) {
        memset(job, 0, sizeof *job);
        return -1;
    }
    job->nv = nv;
    job->v = xcalloc((size_t)nv, sizeof *job->v);
    KnownErrors ke = {NULL, 0, 0};
    double t0 = now_ms();
    for (int i = 0; i < nv; i++) {
        CudaVariant *v = &job->v[i];
        v->prog = variants[i];
        v->name = variants[i]->applied ? variants[i]->applied : "program";
        v->entry = v->name;
        v->fused_algo = v->overlap_chunks = -1; /* the environment's knobs */
        v->note = schedule_find(base, v->name) ? schedule_find(base, v->name)->note : NULL;
        if (o->reference == COCO_REFERENCE_EACH)
            v->own = i == 0 ? job->data : cpu_run(variants[i], o->seed, o->threads);
        make_checks(job, v, &ke);
    }
    free(ke.k);
    trace_ms("the schedules' CPU runs and the checks' tolerances", t0);
    return 0;
}

void cuda_job_time_alone(CudaJob *view, int alone)
{
    view->time_only = alone;
    view->unchecked |= alone;
}

void cuda_job_free(CudaJob *job)
{
    for (int i = 0; i < job->nv; i++) {
        if (job->v[i].own && job->v[i].own != job->data)
            exec_free(job->v[i].own);
        free(job->v[i].check);
    }
    free(job->v);
    if (job->x64)
        lend_inputs(job->x64, job->data, 0);
    exec_free(job->x64);
    program_free(job->exact);
    exec_free(job->data);
    memset(job, 0, sizeof *job);
}

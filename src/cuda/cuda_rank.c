/* cuda_rank.c: what one rank's process does on the CUDA backend (a child
 * forked by cuda_launch.c, or one process of an MPI job): load the GPU
 * runtime (build/libcoconet_cuda.so, through include/coconet_rt.h), join the
 * NCCL communicators, and for every variant give the runtime this rank's
 * inputs in their element types, run and time it, and check each output and
 * each Updated tensor's new value against the CPU reference that the parent
 * computed before the fork (the job is inherited, nothing is recomputed).
 * An unchecked job (--reference none) has no reference: each value is only
 * hashed, for the parent's comparison of Replicated values across ranks.
 *
 * What it finds goes out as text lines through an EmitFn ("GPU ...",
 * "LIMITS ..." (rank 0, before it opens the communicators: cuda_limits.c),
 * "ROW ...", "STEP ...", "ERR ...", "DONE"; see report_line in cuda_report.c). No CUDA
 * header here: the runtime is reached only through its function table.
 *
 * A rank runs its job's variants once (cuda_rank_work), or serves rounds
 * (cuda_rank_serve, the tuner's ranks kept from one round to the next:
 * cuda_ranks_start): it opens once, then runs each "RUN ..." line's list of
 * the job's variants with their own knobs, says "END" after each, and
 * closes at "EXIT" or when the launcher's pipe ends. */
#define _DEFAULT_SOURCE
#include "cuda/cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coconet_rt.h"

/* ---- the watchdog: a last resort when a blocking call never returns ---- */

static char watch_msg[512];

static void watchdog_fired(int sig)
{
    (void)sig;
    ssize_t n = write(2, watch_msg, strlen(watch_msg));
    (void)n;
    _exit(1);
}

void cuda_watchdog(int rank, double seconds, const char *what)
{
    if (seconds <= 0) {
        alarm(0);
        return;
    }
    snprintf(watch_msg, sizeof watch_msg, "coconet: rank %d: %s did not finish in %.0f s: "
             "giving up\n", rank, what, seconds);
    signal(SIGALRM, watchdog_fired);
    alarm((unsigned)ceil(seconds));
}

/* ---- the runtime ---- */

const CocoRtApi *cuda_load_runtime(const char *path, char *err, size_t errlen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load the CUDA runtime: %s (it is built by `make` on a "
                 "machine with nvcc; COCONET_CUDA_RUNTIME names another)", dlerror());
        return NULL;
    }
    coco_rt_api_fn fn = (coco_rt_api_fn)(size_t)dlsym(h, "coco_rt_api");
    const CocoRtApi *api = fn ? fn() : NULL;
    if (!api || api->abi != COCO_RT_ABI) {
        snprintf(err, errlen, "%s is not a coconet CUDA runtime of this version (ABI %d, "
                 "expected %d): rebuild it with make", path, api ? api->abi : -1, COCO_RT_ABI);
        return NULL;
    }
    return api;
}

int cuda_unique_id(const CocoRtApi *api, unsigned char *id, char *err, size_t errlen)
{
    return api->unique_id(id, err, errlen);
}

/* ---- element types (the executor's fast conversions, exec_fast.c) ---- */

typedef struct {
    Type t;
    const double *x;
    void *out;
} Conversion;

static void convert_range(void *ctx, long lo, long hi)
{
    const Conversion *c = ctx;
    for (long i = lo; i < hi; i++) {
        switch (c->t) {
        case T_FP16:
        case T_BF16: ((uint16_t *)c->out)[i] = exec_bits16(c->t, c->x[i]); break;
        case T_FP32: ((float *)c->out)[i] = (float)c->x[i]; break;
        case T_FP64: ((double *)c->out)[i] = c->x[i]; break;
        default: BUG("bad type");
        }
    }
}

/* n values into type t, on threads of this rank (one thread is slow for
 * large inputs) */
static void to_type(Type t, const double *x, long n, void *out, int threads)
{
    Conversion c = {t, x, out};
    parallel_ranges(n >= 1L << 20 ? threads : 1, n, convert_range, &c);
}

static double from_type(Type t, const void *p, long i)
{
    switch (t) {
    case T_FP16:
    case T_BF16: return exec_value16(t, ((const uint16_t *)p)[i]);
    case T_FP32: return ((const float *)p)[i];
    case T_FP64: return ((const double *)p)[i];
    default: BUG("bad type");
    }
}

/* type_bits, with the fast FP16/BF16 encoding */
static uint64_t bits_of(Type t, double x)
{
    if (t == T_FP16 || t == T_BF16)
        return exec_bits16(t, x);
    return type_bits(t, x);
}

/* ---- values in a variant's local layout ---- */

/* Rank's local elements of node vn (of variant program vp) taken from
 * node id of the run e, which may lay the value out differently (asSlice
 * stores a Replicated tensor Sliced): a pointer into e when the layouts
 * agree or when vn is a slice along dimension 0 of a value e holds whole
 * on the rank (its elements are then one run of e's), else a copy
 * (*owned set) gathered by logical index. */
static double *local_values(Exec *e, int id, Program *vp, const Node *vn, int rank, int *owned)
{
    Node *n = node_of(e->prog, id);
    long count = local_count(vp, vn, rank);
    *owned = 0;
    if (same_place(n, vn) && e->prog->nranks == vp->nranks) {
        long have;
        double *d = exec_data(e, id, rank, &have);
        ASSERT(d && have == count);
        return d;
    }
    GlobalIter it;
    global_iter_start(&it, vp, vn, rank);
    if (n->layout.kind != L_SLICED && vn->layout.kind == L_SLICED && vn->layout.dim == 0 &&
        e->prog->nranks == vp->nranks) {
        long have;
        double *d = exec_data(e, id, rank, &have);
        if (d && it.gidx + count <= have)
            return d + it.gidx;
    }
    double *out = xmalloc((size_t)(count > 0 ? count : 1) * sizeof *out);
    for (long i = 0; i < count; i++, global_iter_next(&it))
        out[i] = exec_value_at(e, n, rank, it.gidx);
    *owned = 1;
    return out;
}

/* ---- host buffers of one variant on one rank ---- */

typedef struct {
    int nin, nout;
    void **input, **updated, **output;
    int *shared;            /* per input: input[i] is the rank's shared copy (InputCache) */
    unsigned long long *input_id; /* per input: its id for the runtime (input_id), or 0 */
    size_t *input_bytes, *output_bytes;
    double *scalar;
    long *size;
    int *nmembers;          /* per input: members of a scattered tensor, else 0 */
    size_t **member_bytes;  /* and their sizes in bytes */
} Host;

/* Host buffers the GPU's results are copied into, kept from one variant to
 * the next: pages a copy writes for the first time fault in one by one,
 * which took most of a variant's time at large sizes (doc/design.md, The
 * CUDA backend). The
 * runtime copies every byte of each result, so nothing of the variant
 * before can remain. A request takes the smallest free buffer that fits;
 * when none fits, the largest free one is let go first, so the pool holds
 * no more buffers than one variant uses at once. The buffers are the
 * runtime's pinned memory where it gives some (CocoRtApi.host_alloc: the
 * copies into them run at the link's speed), else malloc's. */
typedef struct {
    void *p;
    size_t bytes;
    int busy, pinned;
} Kept;

static struct {
    Kept *k;
    int n;
    const CocoRtApi *api; /* the runtime of the pinned buffers, while open */
    CocoRt *rt;
} result_pool;

static void kept_free(Kept *k)
{
    if (k->pinned)
        result_pool.api->host_free(result_pool.rt, k->p);
    else
        free(k->p);
    k->p = NULL;
}

static void *result_buffer(size_t bytes)
{
    Kept *fit = NULL, *spare = NULL;
    for (int i = 0; i < result_pool.n; i++) {
        Kept *k = &result_pool.k[i];
        if (k->busy || !k->p)
            continue;
        if (k->bytes >= bytes && (!fit || k->bytes < fit->bytes))
            fit = k;
        if (!spare || k->bytes > spare->bytes)
            spare = k;
    }
    if (!fit) {
        if (spare) {
            kept_free(spare);
            fit = spare;
        } else {
            Kept *grown = xcalloc((size_t)result_pool.n + 1, sizeof *grown);
            if (result_pool.n)
                memcpy(grown, result_pool.k, (size_t)result_pool.n * sizeof *grown);
            free(result_pool.k);
            result_pool.k = grown;
            fit = &result_pool.k[result_pool.n++];
        }
        fit->bytes = bytes ? bytes : 1;
        fit->p = result_pool.api ? result_pool.api->host_alloc(result_pool.rt, fit->bytes) : NULL;
        fit->pinned = fit->p != NULL;
        if (!fit->p)
            fit->p = xmalloc(fit->bytes);
    }
    fit->busy = 1;
    return fit->p;
}

static void result_release(void *p)
{
    for (int i = 0; p && i < result_pool.n; i++)
        if (result_pool.k[i].p == p)
            result_pool.k[i].busy = 0;
}

/* Every buffer let go (before the runtime closes), and the runtime forgotten */
static void result_pool_free(void)
{
    for (int i = 0; i < result_pool.n; i++)
        kept_free(&result_pool.k[i]);
    free(result_pool.k);
    memset(&result_pool, 0, sizeof result_pool);
}

/* The runtime the pool's buffers come from, once it is open */
static void result_pool_open(const CocoRtApi *api, CocoRt *rt)
{
    result_pool.api = api;
    result_pool.rt = rt;
}

static void host_free(Host *h)
{
    for (int i = 0; i < h->nin; i++) {
        if (!h->shared[i])
            free(h->input[i]);
        result_release(h->updated[i]);
        free(h->member_bytes[i]);
    }
    free(h->shared);
    free(h->input_id);
    free(h->nmembers);
    free(h->member_bytes);
    for (int i = 0; i < h->nout; i++)
        result_release(h->output[i]);
    free(h->input);
    free(h->updated);
    free(h->output);
    free(h->input_bytes);
    free(h->output_bytes);
    free(h->scalar);
    free(h->size);
}

static size_t local_bytes(Program *p, const Node *n, int rank)
{
    return (size_t)local_count(p, n, rank) * type_size(n->type);
}

/* The rank's inputs in their element types, laid out as the program lays
 * them out, made once and shared by every variant that lays them out the
 * same way (the runtime only reads them): converting large inputs again
 * for each variant is slow. Indexed by
 * the program's node id; freed by input_cache_free. */
typedef struct {
    void **buf;
    int n;
} InputCache;

static InputCache input_cache;
static unsigned input_generation; /* of the cache's content: one per job */

/* The id of base input b's shared bytes (CocoRtVariant.input_id): the
 * same for every variant of a job, another for the next job's */
static unsigned long long input_id(int b)
{
    return (unsigned long long)input_generation << 32 | (unsigned)(b + 1);
}

static void input_cache_free(void)
{
    input_generation++;
    for (int i = 0; i < input_cache.n; i++)
        free(input_cache.buf[i]);
    free(input_cache.buf);
    memset(&input_cache, 0, sizeof input_cache);
}

/* The ranks whose processes share the executor's threads (cuda_rank_work). */
static int sharing_ranks = 1;

/* Threads of this rank's conversions and checks: the executor's, shared by
 * the ranks of this host that were forked together. */
static int check_threads(const CudaJob *job)
{
    int t = job->data->nthreads / sharing_ranks;
    return t > 1 ? t : 1;
}

/* Input node n (of variant vp) as base program input b, in n's type and
 * layout on this rank: shared from the cache when n is laid out as b is. */
static void *input_bytes_of(const CudaJob *job, Program *vp, const Node *n, int b, int rank,
                            size_t bytes, int *shared)
{
    const Node *bn = node_of(job->base, b);
    *shared = same_place(bn, n) && bn->type == n->type && job->base->nranks == vp->nranks;
    if (*shared && !input_cache.buf) {
        input_cache.n = job->base->nnode;
        input_cache.buf = xcalloc((size_t)input_cache.n, sizeof *input_cache.buf);
    }
    if (*shared && input_cache.buf[b])
        return input_cache.buf[b];
    int owned;
    double *x = local_values(job->data, b, vp, n, rank, &owned);
    void *out = xmalloc(bytes ? bytes : 1);
    to_type(n->type, x, local_count(vp, n, rank), out, check_threads(job));
    if (owned)
        free(x);
    if (*shared)
        input_cache.buf[b] = out;
    return out;
}

static void host_input(const CudaJob *job, Program *vp, int i, int rank, Host *h)
{
    Node *n = node_of(vp, vp->exec_in[i]);
    int b = program_input(job->base, n->name);
    ASSERT(b >= 0);
    if (n->op == O_SCALAR) {
        h->scalar[i] = exec_data(job->data, b, rank, NULL)[0];
        return;
    }
    h->input_bytes[i] = local_bytes(vp, n, rank);
    h->input[i] = input_bytes_of(job, vp, n, b, rank, h->input_bytes[i], &h->shared[i]);
    h->input_id[i] = h->shared[i] ? input_id(b) : 0;
    if (n->updated_by >= 0)
        h->updated[i] = result_buffer(h->input_bytes[i]);
    h->nmembers[i] = n->nmember;
    if (n->nmember) {
        h->member_bytes[i] = xcalloc((size_t)n->nmember, sizeof(size_t));
        for (int m = 0; m < n->nmember; m++)
            h->member_bytes[i][m] = (size_t)n->member[m].n * type_size(n->type);
    }
}

static void host_make(const CudaJob *job, Program *vp, int rank, Host *h)
{
    h->nin = vp->nexec_in;
    h->nout = vp->nexec_out;
    h->input = xcalloc((size_t)h->nin + 1, sizeof *h->input);
    h->shared = xcalloc((size_t)h->nin + 1, sizeof *h->shared);
    h->input_id = xcalloc((size_t)h->nin + 1, sizeof *h->input_id);
    h->updated = xcalloc((size_t)h->nin + 1, sizeof *h->updated);
    h->input_bytes = xcalloc((size_t)h->nin + 1, sizeof *h->input_bytes);
    h->scalar = xcalloc((size_t)h->nin + 1, sizeof *h->scalar);
    h->nmembers = xcalloc((size_t)h->nin + 1, sizeof *h->nmembers);
    h->member_bytes = xcalloc((size_t)h->nin + 1, sizeof *h->member_bytes);
    h->output = xcalloc((size_t)h->nout + 1, sizeof *h->output);
    h->output_bytes = xcalloc((size_t)h->nout + 1, sizeof *h->output_bytes);
    h->size = xcalloc((size_t)vp->nsize + 1, sizeof *h->size);
    for (int i = 0; i < vp->nsize; i++)
        h->size[i] = vp->size[i].value;
    for (int i = 0; i < h->nin; i++)
        host_input(job, vp, i, rank, h);
    for (int i = 0; i < h->nout; i++) {
        h->output_bytes[i] = local_bytes(vp, node_of(vp, vp->exec_out[i]), rank);
        h->output[i] = result_buffer(h->output_bytes[i]);
    }
}

/* ---- checking ---- */

/* One chunk of a value's check: its elements' differences from the
 * reference, judged by the tolerance (no reference: its hash alone). */
typedef struct {
    long differing, outside;
    double max_abs, max_rel;
    uint64_t hash; /* chunk_hash of the chunk's bytes */
} CheckStats;

typedef struct {
    Type type;
    const void *gpu;
    const double *ref, *exact;
    const Tolerance *tol;
    long count, chunk;
    CheckStats *stats; /* one per chunk */
} CheckJob;

/* A value's elements checked by the rank's threads in chunks of this many
 * (a million-element value in 16 chunks: one thread each; the chunks'
 * hashes make the value's, alike on every rank) */
enum { CHECK_CHUNK = 1 << 16 };

/* A hash of a chunk's bytes, 8 a step (FNV-1a's step over 64-bit words,
 * the high half folded back in, then the tail byte by byte): several times
 * faster than FNV-1a byte by byte over values of gigabytes, and only ever
 * compared with another rank's hash of its own chunk. */
static uint64_t chunk_hash(const void *data, size_t n)
{
    const unsigned char *b = data;
    uint64_t h = FNV_INIT;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, sizeof w);
        h = (h ^ w) * FNV_PRIME;
        h ^= h >> 32;
    }
    return fnv1a(h, b + i, n - i);
}

static void check_chunks(void *ctx, long lo, long hi)
{
    CheckJob *j = ctx;
    for (long c = lo; c < hi; c++) {
        CheckStats s = {0, 0, 0, 0, 0};
        long end = (c + 1) * j->chunk < j->count ? (c + 1) * j->chunk : j->count;
        size_t size = type_size(j->type);
        s.hash = chunk_hash((const char *)j->gpu + (size_t)(c * j->chunk) * size,
                            (size_t)(end - c * j->chunk) * size);
        for (long i = c * j->chunk; j->ref && i < end; i++) {
            double got = from_type(j->type, j->gpu, i), want = j->ref[i];
            int same = bits_of(j->type, got) == bits_of(j->type, want);
            double diff = fabs(got - want);
            if (!same && (isnan(got) || isnan(want)))
                diff = INFINITY;
            s.differing += !same;
            if (!same && !within_tolerance(j->type, want, got, j->exact[i], j->tol))
                s.outside++;
            if (diff > s.max_abs)
                s.max_abs = diff;
            double rel = diff / fmax(fabs(want), 1e-30);
            if (!same && rel > s.max_rel)
                s.max_rel = rel;
        }
        j->stats[c] = s;
    }
}

static void check_value(const CudaJob *job, const CudaVariant *v, const CudaCheck *c, int rank,
                        const void *gpu, size_t bytes, RankRow *row, uint64_t *hash)
{
    Program *vp = v->prog;
    Node *n = node_of(vp, c->node);
    long count = local_count(vp, n, rank);
    ASSERT((size_t)count * type_size(n->type) == bytes);
    int own_ref = 0, own_x = 0;
    double *ref = NULL, *exact = NULL;
    if (c->ref) {
        ref = local_values(c->ref, c->rnode, vp, n, rank, &own_ref);
        exact = local_values(job->x64, c->xnode, vp, n, rank, &own_x);
    }
    double before = row->max_abs;
    long nchunk = (count + CHECK_CHUNK - 1) / CHECK_CHUNK;
    CheckJob j = {n->type, gpu, ref, exact, &c->tol, count, CHECK_CHUNK,
                  xcalloc((size_t)nchunk + 1, sizeof(CheckStats))};
    parallel_ranges(check_threads(job), nchunk, check_chunks, &j);
    *hash = FNV_INIT; /* of the chunks' hashes: the same bytes give the same on every rank */
    for (long k = 0; k < nchunk; k++) {
        *hash = fnv1a(*hash, &j.stats[k].hash, sizeof j.stats[k].hash);
        row->differing += j.stats[k].differing;
        row->outside += j.stats[k].outside;
        row->max_abs = fmax(row->max_abs, j.stats[k].max_abs);
        row->max_rel = fmax(row->max_rel, j.stats[k].max_rel);
    }
    free(j.stats);
    row->elements += count;
    if (c->ref && (row->max_abs > before || !row->worst[0]))
        snprintf(row->worst, sizeof row->worst, "%s", c->name);
    if (own_ref)
        free(ref);
    if (own_x)
        free(exact);
}

static void check_variant(const CudaJob *job, const CudaVariant *v, int rank, const Host *h,
                          RankRow *row)
{
    for (int k = 0; k < v->ncheck; k++) {
        const CudaCheck *c = &v->check[k];
        const void *gpu = c->output >= 0 ? h->output[c->output] : h->updated[c->input];
        size_t bytes = c->output >= 0 ? h->output_bytes[c->output] : h->input_bytes[c->input];
        uint64_t hash;
        check_value(job, v, c, rank, gpu, bytes, row, &hash);
        if (k < (int)(sizeof row->hash / sizeof *row->hash))
            row->hash[k] = hash;
    }
}

/* ---- the runtime's own checks: guard bytes, the repeat run ---- */

static void buffer_name(const CudaVariant *v, const CocoRtFault *f, char *buf, size_t len)
{
    Program *vp = v->prog;
    if (f->output >= 0 && f->output < vp->nexec_out)
        snprintf(buf, len, "output '%s'", node_of(vp, vp->exec_out[f->output])->name);
    else if (f->input >= 0 && f->input < vp->nexec_in)
        snprintf(buf, len, "%sinput '%s'",
                 node_of(vp, vp->exec_in[f->input])->updated_by >= 0 ? "updated " : "",
                 node_of(vp, vp->exec_in[f->input])->name);
    else
        snprintf(buf, len, "the workspace");
}

static long long element_size(const CudaVariant *v, const CocoRtFault *f)
{
    Program *vp = v->prog;
    if (f->output >= 0 && f->output < vp->nexec_out)
        return (long long)type_size(node_of(vp, vp->exec_out[f->output])->type);
    if (f->input >= 0 && f->input < vp->nexec_in)
        return (long long)type_size(node_of(vp, vp->exec_in[f->input])->type);
    return 1;
}

/* What a fault means, in words (the row's reason, printed under the table). */
static void cuda_fault_text(const CudaVariant *v, const CocoRtFault *f, char *buf, size_t len)
{
    char name[MAXNAME + 32];
    buffer_name(v, f, name, sizeof name);
    if (f->kind == COCO_RT_FAULT_GUARD) {
        long long past = f->offset - f->bytes;
        char where[96];
        if (f->after)
            snprintf(where, sizeof where, "byte %lld past its end", past);
        else
            snprintf(where, sizeof where, "byte %lld before its start", -f->offset);
        snprintf(buf, len, "%s (%lld bytes) was written outside: the guard %s it is damaged, "
                 "first at %s (offset %lld): 0x%02x where 0x%02x was written; found %s", name,
                 f->bytes, f->after ? "after" : "before", where, f->offset, f->found & 0xff,
                 f->expected & 0xff, f->late ? "after the timed runs and the repeat run"
                                             : "after the checked run");
    } else {
        snprintf(buf, len, "%s: a repeat run on the same inputs gave other bits than the "
                 "checked run, first at byte %lld (element %lld): 0x%02x, not 0x%02x", name,
                 f->offset, f->offset / element_size(v, f), f->found & 0xff,
                 f->expected & 0xff);
    }
}

static void emit_fault(const CudaVariant *v, const CocoRtFault *f, int vi, EmitFn emit,
                       void *ctx)
{
    char msg[600], line[700];
    cuda_fault_text(v, f, msg, sizeof msg);
    snprintf(line, sizeof line, "FAULT %d %s %s", vi,
             f->kind == COCO_RT_FAULT_GUARD ? "GUARD" : "REPEAT", msg);
    emit(ctx, line);
}

/* ---- one rank's work ---- */

void cuda_emit_error(EmitFn emit, void *ctx, int rank, const char *msg)
{
    char line[4200];
    if (strncmp(msg, "rank ", 5))
        snprintf(line, sizeof line, "ERR rank %d: %s", rank, msg);
    else
        snprintf(line, sizeof line, "ERR %s", msg);
    for (char *s = line; *s; s++)
        if (*s == '\n')
            *s = ' '; /* one line */
    emit(ctx, line);
}

/* Seconds on a monotonic clock. */
static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --breakdown: "STEPS v n differ", then a "STEP v i line kind calls ms call op" line
 * per step given */
enum { MAX_STEPS = 4096 };

static void emit_steps(int vi, const CocoRtTiming *t, const CocoRtStep *steps, EmitFn emit,
                       void *ctx)
{
    char line[512];
    snprintf(line, sizeof line, "STEPS %d %d %d", vi, t->nsteps, t->steps_differ);
    emit(ctx, line);
    for (int i = 0; i < t->nsteps && i < MAX_STEPS; i++) {
        const CocoRtStep *s = &steps[i];
        snprintf(line, sizeof line, "STEP %d %d %d %d %d %.17g %s %s", vi, i, s->line, s->kind,
                 s->calls, s->median_ms, s->call[0] ? s->call : "-", s->op[0] ? s->op : "-");
        for (char *c = line; *c; c++)
            if (*c == '\n')
                *c = ' ';
        emit(ctx, line);
    }
}

/* The runtime's description of variant v on this rank (h: its host buffers) */
static CocoRtVariant rt_variant(const CudaJob *job, const CudaVariant *v, const Host *h,
                                CocoRtStep *steps)
{
    return (CocoRtVariant){.name = v->entry,
                           .ninputs = h->nin,
                           .input = (const void *const *)h->input,
                           .input_bytes = h->input_bytes,
                           .scalar = h->scalar,
                           .updated = h->updated,
                           .noutputs = h->nout,
                           .output = h->output,
                           .output_bytes = h->output_bytes,
                           .size = h->size,
                           .seed = job->seed,
                           .iters = job->iters,
                           .warmup = job->warmup,
                           .nmembers = h->nmembers,
                           .member_bytes = (const size_t *const *)h->member_bytes,
                           .breakdown_runs = job->breakdown_runs,
                           .steps = steps,
                           .max_steps = steps ? MAX_STEPS : 0,
                           .fused_algo = v->fused_algo,
                           .overlap_chunks = v->overlap_chunks,
                           .input_id = h->input_id,
                           .time_only = job->time_only};
}

static int run_one(const CudaJob *job, const CocoRtApi *api, CocoRt *rt, int vi, int rank,
                   EmitFn emit, void *ctx)
{
    const CudaVariant *v = &job->v[vi];
    Host h;
    memset(&h, 0, sizeof h);
    double t0 = seconds_now();
    host_make(job, v->prog, rank, &h);
    double t1 = seconds_now();
    CocoRtStep *steps = job->breakdown_runs ? xcalloc(MAX_STEPS, sizeof *steps) : NULL;
    CocoRtVariant rv = rt_variant(job, v, &h, steps);
    CocoRtTiming t;
    char err[4096];
    if (api->run(rt, &rv, &t, err, sizeof err)) {
        cuda_emit_error(emit, ctx, rank, err);
        host_free(&h);
        free(steps);
        return -1;
    }
    double t2 = seconds_now();
    RankRow row;
    memset(&row, 0, sizeof row);
    if (!job->time_only) /* timed alone: no values back */
        check_variant(job, v, rank, &h, &row);
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: rank %d: %s: host inputs %.2f s, runtime %.2f s, "
                        "checks %.2f s\n", rank, v->name, t1 - t0, t2 - t1, seconds_now() - t2);
    row.median_ms = t.median_ms;
    row.min_ms = t.min_ms;
    row.max_ms = t.max_ms;
    char line[8192];
    rank_row_line(line, sizeof line, vi, &row, v->ncheck);
    emit(ctx, line);
    if (t.fault.kind != COCO_RT_FAULT_NONE)
        emit_fault(v, &t.fault, vi, emit, ctx);
    if (steps)
        emit_steps(vi, &t, steps, emit, ctx);
    free(steps);
    host_free(&h);
    return 0;
}

/* Opens the rank's runtime (rank 0 first says the machine's limits, when
 * the job times) and says "GPU ..."; NULL after an ERR line */
static CocoRt *rank_open(const CudaJob *job, const CocoRtApi *api, const CudaRankPlace *at,
                         const unsigned char *nccl_id, EmitFn emit, void *ctx)
{
    int nranks = job->base->nranks, rank = at->rank, local_rank = at->local_rank;
    sharing_ranks = at->sharing > 1 ? at->sharing : 1;
    CocoRtConfig cfg = {.rank = rank,
                        .nranks = nranks,
                        .local_rank = local_rank,
                        .group_size = job->base->uses_group ? (int)job->base->group_size : 0,
                        .nccl_id = nccl_id,
                        .so_path = job->so,
                        .timeout_s = job->timeout_s};
    char err[4096], line[2048];
    coco_test_die(rank, "start", NULL); /* the fault tests' hook (coconet_rt.h) */
    input_cache_free(); /* of another job run by this process, if any */
    result_pool_free();
    if (rank == 0 && job->iters > 0) { /* before the communicators: no rank runs yet */
        cuda_watchdog(rank, job->timeout_s + 60, "measuring the machine's limits");
        double t = seconds_now();
        cuda_limits_line(job, api, local_rank, line, sizeof line);
        emit(ctx, line);
        if (getenv("COCONET_TRACE"))
            fprintf(stderr, "coconet trace: rank 0: launch: the machine's limits %.3f s\n",
                    seconds_now() - t);
    }
    cuda_watchdog(rank, job->timeout_s + 10, "joining the NCCL communicators");
    double t0 = seconds_now();
    CocoRt *rt = api->open(&cfg, err, sizeof err);
    if (!rt) {
        cuda_emit_error(emit, ctx, rank, err);
        return NULL;
    }
    result_pool_open(api, rt);
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: rank %d: launch: opening %.3f s\n", rank,
                seconds_now() - t0);
    snprintf(line, sizeof line, "GPU ");
    api->describe(rt, line + 4, sizeof line - 4);
    emit(ctx, line);
    return rt;
}

/* Runs job's variants in order ("AT vi" before each); after a failure the
 * runtime is aborted: -1 */
static int rank_run_all(const CudaJob *job, const CocoRtApi *api, CocoRt *rt, int rank,
                        EmitFn emit, void *ctx)
{
    char line[64];
    double t0 = seconds_now();
    for (int vi = 0; vi < job->nv; vi++) {
        snprintf(line, sizeof line, "AT %d", vi); /* where this rank is, should it stop */
        emit(ctx, line);
        /* each wait inside has its own limit; this one covers the CPU side */
        cuda_watchdog(rank, job->timeout_s * 2 + 10, job->v[vi].name);
        if (run_one(job, api, rt, vi, rank, emit, ctx)) {
            input_cache_free();
            result_pool_free();
            cuda_watchdog(rank, 60, "aborting the communicators");
            api->close(rt, 1);
            return -1;
        }
    }
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: rank %d: launch: %d variants %.3f s\n", rank, job->nv,
                seconds_now() - t0);
    return 0;
}

/* Closes the runtime and says "DONE" */
static void rank_close(const CudaJob *job, const CocoRtApi *api, CocoRt *rt, int rank,
                       EmitFn emit, void *ctx)
{
    char line[64];
    input_cache_free();
    result_pool_free();
    double t0 = seconds_now();
    snprintf(line, sizeof line, "AT %d", REPORT_AT_CLOSE);
    emit(ctx, line);
    cuda_watchdog(rank, job->timeout_s + 10, "closing the communicators");
    api->close(rt, 0);
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: rank %d: launch: closing %.3f s\n", rank,
                seconds_now() - t0);
    cuda_watchdog(rank, 0, NULL);
    emit(ctx, "DONE");
    coco_test_die(rank, "exit", NULL);
}

int cuda_rank_work(const CudaJob *job, const CocoRtApi *api, const CudaRankPlace *at,
                   const unsigned char *nccl_id, EmitFn emit, void *ctx)
{
    CocoRt *rt = rank_open(job, api, at, nccl_id, emit, ctx);
    if (!rt || rank_run_all(job, api, rt, at->rank, emit, ctx))
        return 1;
    rank_close(job, api, rt, at->rank, emit, ctx);
    return 0;
}

/* ---- serving rounds (cuda_ranks_start's ranks) ---- */

/* One line from fd without its newline (malloc'd), or NULL at end of file */
static char *read_command(int fd)
{
    int n = 0, cap = 0;
    char *buf = xgrow(NULL, 0, &cap, 256, 1);
    for (;;) {
        char c;
        ssize_t got = read(fd, &c, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            free(buf);
            return NULL;
        }
        if (c == '\n')
            break;
        buf = xgrow(buf, n + 1, &cap, 256, 1); /* room for c and the end */
        buf[n++] = c;
    }
    buf[n] = 0;
    return buf;
}

/* "RUN n i algo chunks name ..." (cuda_ranks_run) into a view of job: its
 * variants i, each with its own knobs and name (kept in names); "TIME n ...":
 * the same, timed alone (time_only: nothing checked); -1 when malformed */
static int parse_round(const CudaJob *job, char *cmd, CudaJob *view, char **names)
{
    char *save = NULL, *tok = strtok_r(cmd, " ", &save);
    tok = strtok_r(NULL, " ", &save);
    int n = tok ? atoi(tok) : -1;
    if (n < 1 || n > 1 << 20)
        return -1;
    *view = *job;
    cuda_job_time_alone(view, cmd[0] == 'T');
    view->v = xcalloc((size_t)n, sizeof *view->v);
    view->nv = n;
    for (int k = 0; k < n; k++) {
        char *fields[4];
        for (int f = 0; f < 4; f++)
            fields[f] = strtok_r(NULL, " ", &save);
        int i = fields[3] ? atoi(fields[0]) : -1;
        if (i < 0 || i >= job->nv) {
            free(view->v);
            return -1;
        }
        CudaVariant *v = &view->v[k];
        *v = job->v[i];
        v->fused_algo = atoi(fields[1]);
        v->overlap_chunks = atoi(fields[2]);
        v->name = fields[3]; /* inside cmd, which lives as long as the round */
    }
    *names = cmd;
    return 0;
}

int cuda_rank_serve(const CudaJob *job, const CocoRtApi *api, const CudaRankPlace *at,
                    const unsigned char *nccl_id, int commands, EmitFn emit, void *ctx)
{
    int rank = at->rank;
    CocoRt *rt = rank_open(job, api, at, nccl_id, emit, ctx);
    if (!rt)
        return 1;
    for (;;) {
        cuda_watchdog(rank, 0, NULL); /* waiting for the launcher, who has its own limits */
        char *cmd = read_command(commands);
        if (!cmd || !strcmp(cmd, "EXIT")) { /* the launcher gone or done: close */
            free(cmd);
            break;
        }
        CudaJob view;
        char *names = NULL;
        if ((strncmp(cmd, "RUN ", 4) && strncmp(cmd, "TIME ", 5)) ||
            parse_round(job, cmd, &view, &names)) {
            cuda_emit_error(emit, ctx, rank, "a malformed round from the launcher");
            free(cmd);
            api->close(rt, 1);
            return 1;
        }
        int rc = rank_run_all(&view, api, rt, rank, emit, ctx);
        free(view.v);
        free(names);
        if (rc)
            return 1;
        emit(ctx, "END");
    }
    rank_close(job, api, rt, rank, emit, ctx);
    return 0;
}

/* buffers.c: the values of the CPU reference executor: one buffer of doubles
 * per (node, rank), made, lent and freed here, and read by logical index;
 * the scratch memory of an evaluation; the bytes held (e->held, what
 * exec_footprint predicts). An allocation that fails ends the run through
 * e->on_oom (exec_run and exec_fill_inputs set it). */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

Exec *exec_new(Program *p, uint64_t seed, int nthreads)
{
    Exec *e = xcalloc(1, sizeof *e);
    size_t slots = (size_t)p->nnode * (size_t)p->nranks;
    e->prog = p;
    e->seed = seed;
    e->nthreads = nthreads > 0 ? nthreads : 1;
    e->val = xcalloc(slots ? slots : 1, sizeof *e->val);
    e->count = xcalloc(slots ? slots : 1, sizeof *e->count);
    e->rank_held = xcalloc(p->nranks > 0 ? (size_t)p->nranks : 1, sizeof *e->rank_held);
    return e;
}

static double slot_bytes(long count)
{
    return (double)(count > 0 ? count : 1) * sizeof(double);
}

static void account(Exec *e, int rank, double bytes)
{
    e->held += bytes;
    e->rank_held[rank] += bytes;
    if (e->held > e->held_peak)
        e->held_peak = e->held;
    if (e->rank_held[rank] > e->rank_peak)
        e->rank_peak = e->rank_held[rank];
}

/* Frees the value of (node, rank), if any. */
void exec_drop(Exec *e, int node, int rank)
{
    size_t k = (size_t)node * (size_t)e->prog->nranks + (size_t)rank;
    if (e->val[k])
        account(e, rank, -slot_bytes(e->count[k]));
    free(e->val[k]);
    e->val[k] = NULL;
    e->count[k] = 0;
}

void exec_release(Exec *e, int node)
{
    for (int r = 0; r < e->prog->nranks; r++)
        exec_drop(e, node, r);
}

void exec_free(Exec *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->prog->nnode; i++)
        exec_release(e, i);
    exec_scratch_free_all(e);
    free(e->val);
    free(e->count);
    free(e->rank_held);
    free(e);
}

/* A buffer already of count elements is kept (see lend_buffers). */
double *exec_alloc(Exec *e, int node, int rank, long count)
{
    ASSERT(node >= 0 && node < e->prog->nnode && rank >= 0 && rank < e->prog->nranks);
    ASSERT(count >= 0);
    size_t k = (size_t)node * (size_t)e->prog->nranks + (size_t)rank;
    if (e->val[k] && e->count[k] == count)
        return e->val[k];
    exec_drop(e, node, rank);
    double bytes = slot_bytes(count);
    double *v = bytes <= (double)SIZE_MAX ? malloc((size_t)bytes) : NULL;
    if (!v)
        exec_out_of_memory(e, node, rank, bytes);
    e->val[k] = v;
    e->count[k] = count;
    account(e, rank, bytes);
    return v;
}

_Noreturn void exec_out_of_memory(Exec *e, int node, int rank, double bytes)
{
    e->oom_node = node;
    e->oom_rank = rank;
    e->oom_bytes = bytes;
    e->failed = 1;
    if (e->on_oom)
        longjmp(*e->on_oom, 1);
    char msg[512];
    exec_oom_message(e, msg, sizeof msg);
    fprintf(stderr, "coconet: %s\n", msg);
    exit(1);
}

void exec_oom_message(const Exec *e, char *buf, size_t len)
{
    snprintf(buf, len, "out of memory: %.3g GiB for %s on rank %d could not be allocated, "
             "with %.3g GiB held by this run", e->oom_bytes / (1 << 30),
             value_desc(e->prog, e->oom_node), e->oom_rank, e->held / (1 << 30));
}

void *exec_scratch(Exec *e, int node, int rank, size_t bytes)
{
    int k = 0;
    while (k < EXEC_SCRATCH && e->scratch[k])
        k++;
    ASSERT(k < EXEC_SCRATCH);
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        exec_out_of_memory(e, node, rank, (double)bytes);
    e->scratch[k] = p;
    e->scratch_bytes[k] = bytes ? bytes : 1;
    e->scratch_rank[k] = rank;
    account(e, rank, (double)e->scratch_bytes[k]);
    return p;
}

void exec_scratch_free(Exec *e, void *p)
{
    for (int k = 0; k < EXEC_SCRATCH; k++)
        if (p && e->scratch[k] == p) {
            account(e, e->scratch_rank[k], -(double)e->scratch_bytes[k]);
            free(p);
            e->scratch[k] = NULL;
            return;
        }
    ASSERT(!p);
}

void exec_scratch_free_all(Exec *e)
{
    for (int k = 0; k < EXEC_SCRATCH; k++)
        exec_scratch_free(e, e->scratch[k]);
}

double *exec_data(Exec *e, int node, int rank, long *count)
{
    ASSERT(node >= 0 && node < e->prog->nnode && rank >= 0 && rank < e->prog->nranks);
    size_t k = (size_t)node * (size_t)e->prog->nranks + (size_t)rank;
    if (count)
        *count = e->count[k];
    return e->val[k];
}

/* The value of logical element gidx of node n as seen from rank: its own
 * copy, or for a Sliced value the copy of the rank of its group holding it. */
double exec_value_at(Exec *e, const Node *n, int rank, long gidx)
{
    const Program *p = e->prog;
    if (n->layout.kind != L_SLICED)
        return exec_data(e, n->id, rank, NULL)[gidx];
    long idx[MAXDIM], rest = gidx;
    for (int d = n->ndim - 1; d >= 0; d--) {
        idx[d] = rest % n->dim[d].n;
        rest /= n->dim[d].n;
    }
    int sd = n->layout.dim;
    long gsize = group_size_of(p, n->group), lo = 0, hi = 0, k;
    for (k = 0; k < gsize; k++) {
        slice_range(n->dim[sd].n, gsize, k, &lo, &hi);
        if (idx[sd] >= lo && idx[sd] < hi)
            break;
    }
    ASSERT(k < gsize);
    int holder = rank_of(p, n->group, group_index(p, n->group, rank), (int)k);
    long shape[MAXDIM], off[MAXDIM], li = 0;
    local_shape(p, n, holder, shape, off);
    for (int d = 0; d < n->ndim; d++)
        li = li * shape[d] + idx[d] - off[d];
    return exec_data(e, n->id, holder, NULL)[li];
}

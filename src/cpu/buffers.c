/* buffers.c: the values of the CPU reference executor: one buffer of doubles
 * per (node, rank), made, lent and freed here, and read by logical index. */
#include <stdlib.h>

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
    return e;
}

void exec_release(Exec *e, int node)
{
    for (int r = 0; r < e->prog->nranks; r++) {
        size_t k = (size_t)node * (size_t)e->prog->nranks + (size_t)r;
        free(e->val[k]);
        e->val[k] = NULL;
        e->count[k] = 0;
    }
}

void exec_free(Exec *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->prog->nnode; i++)
        exec_release(e, i);
    free(e->val);
    free(e->count);
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
    free(e->val[k]);
    e->val[k] = xmalloc((size_t)(count > 0 ? count : 1) * sizeof(double));
    e->count[k] = count;
    return e->val[k];
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

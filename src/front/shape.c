/* shape.c: which part of a value each simulated rank holds.
 *
 * Groups are runs of consecutive ranks: G_WORLD is one group of all
 * p->nranks ranks, G_GROUP groups have p->group_size ranks (which divides
 * nranks, as the checker ensures).  A Sliced(d) value is cut along d into
 * blocks of c = ceil(n/G) indices, one per rank of its group, in group-rank
 * order: block k is [min(n, k*c), min(n, (k+1)*c)), so the last blocks may
 * be shorter or empty (language.md, section 6, says why this form); the
 * other layouts hold the whole logical shape on every rank. */
#include "front/front.h"

long group_size_of(const Program *p, GroupKind g)
{
    if (g == G_WORLD)
        return p->nranks;
    ASSERT(g == G_GROUP && p->group_size > 0);
    return p->group_size;
}

int ngroups_of(const Program *p, GroupKind g)
{
    return (int)(p->nranks / group_size_of(p, g));
}

int group_index(const Program *p, GroupKind g, int rank)
{
    return (int)(rank / group_size_of(p, g));
}

int group_rank(const Program *p, GroupKind g, int rank)
{
    return (int)(rank % group_size_of(p, g));
}

int rank_of(const Program *p, GroupKind g, int group, int index)
{
    return (int)(group * group_size_of(p, g) + index);
}

void slice_range(long n, long parts, long idx, long *lo, long *hi)
{
    ASSERT(parts > 0 && idx >= 0 && idx < parts);
    long c = n / parts + (n % parts != 0);
    *lo = idx * c < n ? idx * c : n;
    *hi = *lo + c < n ? *lo + c : n;
}

void local_shape(const Program *p, const Node *n, int rank, long *shape, long *offset)
{
    for (int i = 0; i < n->ndim; i++) {
        shape[i] = n->dim[i].n;
        if (offset)
            offset[i] = 0;
    }
    if (n->layout.kind != L_SLICED)
        return;
    int d = n->layout.dim;
    ASSERT(d >= 0 && d < n->ndim);
    long lo, hi;
    slice_range(n->dim[d].n, group_size_of(p, n->group), group_rank(p, n->group, rank), &lo, &hi);
    shape[d] = hi - lo;
    if (offset)
        offset[d] = lo;
}

long local_count(const Program *p, const Node *n, int rank)
{
    long shape[MAXDIM], count = 1;
    local_shape(p, n, rank, shape, NULL);
    for (int i = 0; i < n->ndim; i++)
        count *= shape[i];
    return count;
}

void global_iter_start(GlobalIter *it, const Program *p, const Node *n, int rank)
{
    long offset[MAXDIM];
    local_shape(p, n, rank, it->shape, offset);
    it->ndim = n->ndim;
    it->gidx = 0;
    long stride = 1;
    for (int i = n->ndim - 1; i >= 0; i--) {
        it->stride[i] = stride;
        it->idx[i] = 0;
        it->gidx += offset[i] * stride;
        stride *= n->dim[i].n;
    }
}

/* Odometer step: bump the last coordinate, carrying into earlier ones. */
void global_iter_next(GlobalIter *it)
{
    for (int i = it->ndim - 1; i >= 0; i--) {
        it->idx[i]++;
        it->gidx += it->stride[i];
        if (it->idx[i] < it->shape[i])
            return;
        it->gidx -= it->shape[i] * it->stride[i];
        it->idx[i] = 0;
    }
}

/* Do a and b lie alike on every rank (same dims, layout and group)? */
int same_place(const Node *a, const Node *b)
{
    if (a->ndim != b->ndim || !layout_equal(a->layout, b->layout) || a->group != b->group)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dim[d].n != b->dim[d].n)
            return 0;
    return 1;
}

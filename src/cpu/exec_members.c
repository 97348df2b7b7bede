/* exec_members.c: Norm(x, Members) on the CPU reference executor. x is 1-D
 * and partitioned by a scattered tensor's members (Node.part); every
 * element of the result is the norm of its member: the sum of the squares
 * of the member's elements in double, starting from the first element's
 * square and adding the others in index order, its square root rounded
 * once to the type. Over a Sliced x each rank folds the part of every
 * member that its block holds (0 where it holds none), and the ranks'
 * folds are added in double in group-rank order before the square root:
 * the collective inside the operation (doc/language.md 8.6). */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu.h"

/* Member m of the partition holds flat indices [start[m], start[m + 1]). */
static long *member_starts(const Node *n)
{
    long *start = xmalloc((size_t)(n->npart + 1) * sizeof *start);
    start[0] = 0;
    for (int m = 0; m < n->npart; m++)
        start[m + 1] = start[m] + n->part[m].n;
    return start;
}

/* Adds rank's folds of the members its elements (flat [off, off + count))
 * belong to into sum[]. */
static void fold_rank(const double *x, long off, long count, const long *start, double *sum)
{
    int m = 0;
    while (count && start[m + 1] <= off)
        m++;
    for (long i = 0; i < count;) {
        long end = start[m + 1] - off < count ? start[m + 1] - off : count;
        double acc = x[i] * x[i];
        for (long j = i + 1; j < end; j++)
            acc += x[j] * x[j];
        sum[m] += acc;
        i = end;
        m++;
    }
}

/* Writes rank's elements: each the rounded root of its member's sum. */
static void spread(Exec *e, const Node *n, int rank, long off, long count, const long *start,
                   const double *sum)
{
    double *y = exec_alloc(e, n->id, rank, count);
    int m = 0;
    while (count && start[m + 1] <= off)
        m++;
    for (long i = 0; i < count; i++) {
        while (start[m + 1] <= off + i)
            m++;
        y[i] = exec_round(n->type, sqrt(sum[m]));
    }
}

/* The ranks that fold together: a Sliced x's group (g), else one rank. */
static void norm_over(Exec *e, const Node *n, const int *ranks, int nranks, const long *start,
                      double *sum)
{
    const Program *p = e->prog;
    const Node *x = &p->node[n->in[0]];
    for (int m = 0; m < n->npart; m++)
        sum[m] = 0;
    for (int k = 0; k < nranks; k++) {
        long shape[MAXDIM], off[MAXDIM], count;
        local_shape(p, x, ranks[k], shape, off);
        const double *xr = exec_data(e, x->id, ranks[k], &count);
        ASSERT(xr != NULL || count == 0);
        fold_rank(xr, off[0], count, start, sum);
    }
    for (int k = 0; k < nranks; k++) {
        long shape[MAXDIM], off[MAXDIM];
        local_shape(p, n, ranks[k], shape, off);
        spread(e, n, ranks[k], off[0], shape[0], start, sum);
    }
}

void eval_member_norm(Exec *e, const Node *n)
{
    const Program *p = e->prog;
    const Node *x = &p->node[n->in[0]];
    ASSERT(n->npart > 0 && n->ndim == 1);
    long *start = member_starts(n);
    double *sum = xmalloc((size_t)n->npart * sizeof *sum);
    int *ranks = xmalloc((size_t)p->nranks * sizeof *ranks);
    if (x->layout.kind == L_SLICED) {
        for (int g = 0; g < ngroups_of(p, n->group); g++) {
            int size = (int)group_size_of(p, n->group);
            for (int i = 0; i < size; i++)
                ranks[i] = rank_of(p, n->group, g, i);
            norm_over(e, n, ranks, size, start, sum);
        }
    } else {
        for (int r = 0; r < p->nranks; r++)
            norm_over(e, n, &r, 1, start, sum);
    }
    free(ranks);
    free(sum);
    free(start);
}

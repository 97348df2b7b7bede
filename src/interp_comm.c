/* interp_comm.c: collectives and point-to-point transfers across the
 * simulated ranks, evaluated for all ranks at once, group by group.
 *
 * Groups (of kind n->group) are runs of consecutive ranks (shape.c).
 * Reductions fold the ranks' data in double, in group-rank order starting
 * from group rank 0's value, and round once to the node's type.
 *   AllReduce      every rank gets the reduction of all ranks' data.
 *   ReduceScatter  the reduction of the full tensors; each rank keeps its
 *                  slice (the node is Sliced(n->axis)).
 *   AllGather      Sliced parts are assembled; every rank gets the whole.
 *   Reduce         group rank n->root gets the reduction, the others zeros.
 *   Broadcast      every rank gets group rank n->root's data.
 *   Send           rank (group j, index i) receives the data of rank
 *                  (group (j - n->shift) mod ngroups, index i). */
#include <stdlib.h>
#include <string.h>

#include "coco.h"

static long logical_count(const Node *n)
{
    long c = 1;
    for (int i = 0; i < n->ndim; i++)
        c *= n->dim[i].n;
    return c;
}

static const double *rank_input(Exec *e, const Node *n, int rank, long *count)
{
    const double *d = exec_data(e, n->in[0], rank, count);
    ASSERT(d != NULL);
    return d;
}

/* The node's value on `rank`: src rounded to the node's type. */
static void store_rounded(Exec *e, const Node *n, int rank, const double *src, long count)
{
    ASSERT(count == local_count(e->prog, n, rank));
    double *out = exec_alloc(e, n->id, rank, count);
    for (long i = 0; i < count; i++)
        out[i] = type_round(n->type, src[i]);
}

/* Folds the inputs of group g's ranks into a new buffer of *count doubles. */
static double *group_reduce(Exec *e, const Node *n, int g, long *count)
{
    const Program *p = e->prog;
    long gsize = group_size_of(p, n->group);
    const double *first = rank_input(e, n, rank_of(p, n->group, g, 0), count);
    double *acc = xmalloc((size_t)(*count > 0 ? *count : 1) * sizeof *acc);
    memcpy(acc, first, (size_t)*count * sizeof *acc);
    for (long i = 1; i < gsize; i++) {
        long c;
        const double *x = rank_input(e, n, rank_of(p, n->group, g, (int)i), &c);
        ASSERT(c == *count);
        for (long k = 0; k < c; k++)
            acc[k] = reduce_step(n->redop, acc[k], x[k]);
    }
    return acc;
}

static void allreduce(Exec *e, const Node *n, int g)
{
    long count;
    double *acc = group_reduce(e, n, g, &count);
    for (long i = 0; i < group_size_of(e->prog, n->group); i++)
        store_rounded(e, n, rank_of(e->prog, n->group, g, (int)i), acc, count);
    free(acc);
}

static void reduce_to_root(Exec *e, const Node *n, int g)
{
    long count;
    double *acc = group_reduce(e, n, g, &count);
    for (long i = 0; i < group_size_of(e->prog, n->group); i++) {
        int rank = rank_of(e->prog, n->group, g, (int)i);
        if (i == n->root)
            store_rounded(e, n, rank, acc, count);
        else
            memset(exec_alloc(e, n->id, rank, count), 0, (size_t)count * sizeof(double));
    }
    free(acc);
}

static void reducescatter(Exec *e, const Node *n, int g)
{
    const Program *p = e->prog;
    long count;
    double *acc = group_reduce(e, n, g, &count);
    ASSERT(count == logical_count(n));
    for (long i = 0; i < group_size_of(p, n->group); i++) {
        int rank = rank_of(p, n->group, g, (int)i);
        long c = local_count(p, n, rank);
        double *out = exec_alloc(e, n->id, rank, c);
        GlobalIter it;
        global_iter_start(&it, p, n, rank);
        for (long k = 0; k < c; k++, global_iter_next(&it))
            out[k] = type_round(n->type, acc[it.gidx]);
    }
    free(acc);
}

static void allgather(Exec *e, const Node *n, int g)
{
    const Program *p = e->prog;
    const Node *in = &p->node[n->in[0]];
    long gsize = group_size_of(p, n->group), total = logical_count(n);
    double *full = xcalloc((size_t)(total > 0 ? total : 1), sizeof *full);
    for (long i = 0; i < gsize; i++) {
        int rank = rank_of(p, n->group, g, (int)i);
        long c;
        const double *x = rank_input(e, n, rank, &c);
        ASSERT(c == local_count(p, in, rank));
        GlobalIter it;
        global_iter_start(&it, p, in, rank);
        for (long k = 0; k < c; k++, global_iter_next(&it))
            full[it.gidx] = x[k];
    }
    for (long i = 0; i < gsize; i++)
        store_rounded(e, n, rank_of(p, n->group, g, (int)i), full, total);
    free(full);
}

static void broadcast(Exec *e, const Node *n, int g)
{
    long count;
    ASSERT(n->root >= 0 && n->root < group_size_of(e->prog, n->group));
    const double *src = rank_input(e, n, rank_of(e->prog, n->group, g, n->root), &count);
    for (long i = 0; i < group_size_of(e->prog, n->group); i++)
        store_rounded(e, n, rank_of(e->prog, n->group, g, (int)i), src, count);
}

/* Send is not a per-group operation: every rank receives from another group. */
static void send_all(Exec *e, const Node *n)
{
    const Program *p = e->prog;
    int ng = ngroups_of(p, n->group);
    for (int rank = 0; rank < p->nranks; rank++) {
        int j = group_index(p, n->group, rank), i = group_rank(p, n->group, rank);
        int from = ((j - n->shift) % ng + ng) % ng;
        long count;
        const double *src = rank_input(e, n, rank_of(p, n->group, from, i), &count);
        store_rounded(e, n, rank, src, count);
    }
}

void eval_comm(Exec *e, const Node *n)
{
    if (n->op == O_SEND) {
        send_all(e, n);
        return;
    }
    for (int g = 0; g < ngroups_of(e->prog, n->group); g++) {
        switch (n->op) {
        case O_ALLREDUCE: allreduce(e, n, g); break;
        case O_REDUCESCATTER: reducescatter(e, n, g); break;
        case O_ALLGATHER: allgather(e, n, g); break;
        case O_REDUCE: reduce_to_root(e, n, g); break;
        case O_BROADCAST: broadcast(e, n, g); break;
        default: BUG("not a collective: %d", (int)n->op);
        }
    }
}

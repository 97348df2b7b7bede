/* exec_comm.c: collectives and point-to-point transfers across the
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
 *                  (group (j - n->shift) mod ngroups, index i); Linear
 *                  (n->linear): of group j - n->shift when there is one,
 *                  else the rank keeps its own data.
 * Large values are cut into element ranges over threads, each element
 * folded and written by one thread, so the bits never depend on the thread
 * count; no buffer is made besides the outputs. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

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

/* Element-wise work of one collective, done by ranges over threads: the
 * fold of nin inputs (in group-rank order; one input is a rounded copy),
 * written to nout outputs. */
typedef struct {
    const Node *n;
    const double **in; /* room for a group's ranks */
    double **out;
    int nin, nout, room;
    /* ReduceScatter and AllGather: the elements' logical indices */
    const Program *p;
    const Node *walk; /* the node whose local elements are walked */
    int walk_rank;
} Fold;

static double fold_at(const Fold *f, long i)
{
    double acc = f->in[0][i];
    for (int k = 1; k < f->nin; k++)
        acc = reduce_step(f->n->redop, acc, f->in[k][i]);
    return exec_round(f->n->type, acc);
}

/* out[o][i] = the fold of element i */
static void fold_range(void *ctx, long lo, long hi)
{
    const Fold *f = ctx;
    for (long i = lo; i < hi; i++) {
        double v = fold_at(f, i);
        for (int o = 0; o < f->nout; o++)
            f->out[o][i] = v;
    }
}

/* ReduceScatter: out[0][i] = the fold of the logical element that is the
 * walked rank's element i */
static void scatter_range(void *ctx, long lo, long hi)
{
    const Fold *f = ctx;
    GlobalIter it;
    global_iter_start(&it, f->p, f->walk, f->walk_rank);
    global_iter_seek(&it, lo);
    for (long i = lo; i < hi; i++, global_iter_next(&it))
        f->out[0][i] = fold_at(f, it.gidx);
}

/* AllGather: element i of the walked rank's part goes to its logical place
 * in every output */
static void gather_range(void *ctx, long lo, long hi)
{
    const Fold *f = ctx;
    GlobalIter it;
    global_iter_start(&it, f->p, f->walk, f->walk_rank);
    global_iter_seek(&it, lo);
    for (long i = lo; i < hi; i++, global_iter_next(&it)) {
        double v = fold_at(f, i);
        for (int o = 0; o < f->nout; o++)
            f->out[o][it.gidx] = v;
    }
}

static Fold fold_new(Exec *e, const Node *n)
{
    Fold f;
    memset(&f, 0, sizeof f);
    f.n = n;
    f.p = e->prog;
    f.room = (int)group_size_of(e->prog, n->group);
    f.in = xcalloc((size_t)f.room, sizeof *f.in);
    f.out = xcalloc((size_t)f.room, sizeof *f.out);
    return f;
}

static void fold_free(Fold *f)
{
    free(f->in);
    free(f->out);
}

static void fold_input(Exec *e, Fold *f, int rank, long count)
{
    long c;
    ASSERT(f->nin < f->room);
    f->in[f->nin++] = rank_input(e, f->n, rank, &c);
    ASSERT(c == count);
}

static void fold_output(Exec *e, Fold *f, int rank, long count)
{
    ASSERT(f->nout < f->room);
    ASSERT(count == local_count(e->prog, f->n, rank));
    f->out[f->nout++] = exec_alloc(e, f->n->id, rank, count);
}

/* Every rank of group g gets the fold of all (every: 1) or of the root's
 * input only (every: 0; Broadcast). */
static void to_all(Exec *e, const Node *n, int g, int every)
{
    const Program *p = e->prog;
    ASSERT(every || (n->root >= 0 && n->root < group_size_of(p, n->group)));
    long gsize = group_size_of(p, n->group), count;
    rank_input(e, n, rank_of(p, n->group, g, every ? 0 : n->root), &count);
    Fold f = fold_new(e, n);
    for (long i = 0; i < gsize; i++) {
        if (every || i == n->root)
            fold_input(e, &f, rank_of(p, n->group, g, (int)i), count);
        fold_output(e, &f, rank_of(p, n->group, g, (int)i), count);
    }
    parallel_ranges(exec_threads(e, count), count, fold_range, &f);
    fold_free(&f);
}

static void reduce_to_root(Exec *e, const Node *n, int g)
{
    const Program *p = e->prog;
    long gsize = group_size_of(p, n->group), count;
    rank_input(e, n, rank_of(p, n->group, g, 0), &count);
    Fold f = fold_new(e, n);
    for (long i = 0; i < gsize; i++) {
        int rank = rank_of(p, n->group, g, (int)i);
        fold_input(e, &f, rank, count);
        if (i != n->root)
            memset(exec_alloc(e, n->id, rank, count), 0, (size_t)count * sizeof(double));
    }
    fold_output(e, &f, rank_of(p, n->group, g, n->root), count);
    parallel_ranges(exec_threads(e, count), count, fold_range, &f);
    fold_free(&f);
}

static void reducescatter(Exec *e, const Node *n, int g)
{
    const Program *p = e->prog;
    long gsize = group_size_of(p, n->group), total = logical_count(n);
    Fold f = fold_new(e, n);
    for (long i = 0; i < gsize; i++)
        fold_input(e, &f, rank_of(p, n->group, g, (int)i), total);
    for (long i = 0; i < gsize; i++) {
        int rank = rank_of(p, n->group, g, (int)i);
        long c = local_count(p, n, rank);
        f.nout = 0;
        fold_output(e, &f, rank, c);
        f.walk = n;
        f.walk_rank = rank;
        parallel_ranges(exec_threads(e, c), c, scatter_range, &f);
    }
    fold_free(&f);
}

static void allgather(Exec *e, const Node *n, int g)
{
    const Program *p = e->prog;
    const Node *in = &p->node[n->in[0]];
    long gsize = group_size_of(p, n->group), total = logical_count(n);
    Fold f = fold_new(e, n);
    for (long i = 0; i < gsize; i++)
        fold_output(e, &f, rank_of(p, n->group, g, (int)i), total);
    for (long i = 0; i < gsize; i++) {
        int rank = rank_of(p, n->group, g, (int)i);
        long c = local_count(p, in, rank);
        f.nin = 0;
        fold_input(e, &f, rank, c);
        f.walk = in;
        f.walk_rank = rank;
        parallel_ranges(exec_threads(e, c), c, gather_range, &f);
    }
    fold_free(&f);
}

/* Send is not a per-group operation: every rank receives from another group. */
static void send_all(Exec *e, const Node *n)
{
    const Program *p = e->prog;
    int ng = ngroups_of(p, n->group);
    for (int rank = 0; rank < p->nranks; rank++) {
        int j = group_index(p, n->group, rank), i = group_rank(p, n->group, rank);
        int from = ((j - n->shift) % ng + ng) % ng;
        if (n->linear)
            from = j - n->shift >= 0 && j - n->shift < ng ? j - n->shift : j;
        long count;
        rank_input(e, n, rank_of(p, n->group, from, i), &count);
        Fold f = fold_new(e, n);
        fold_input(e, &f, rank_of(p, n->group, from, i), count);
        fold_output(e, &f, rank, count);
        parallel_ranges(exec_threads(e, count), count, fold_range, &f);
        fold_free(&f);
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
        case O_ALLREDUCE: to_all(e, n, g, 1); break;
        case O_REDUCESCATTER: reducescatter(e, n, g); break;
        case O_ALLGATHER: allgather(e, n, g); break;
        case O_REDUCE: reduce_to_root(e, n, g); break;
        case O_BROADCAST: to_all(e, n, g, 0); break;
        default: BUG("not a collective: %d", (int)n->op);
        }
    }
}

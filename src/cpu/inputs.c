/* inputs.c: seeded data for the program's inputs (O_INPUT and O_SCALAR).
 *
 * Every rank's part of an input is drawn from one logical tensor, so that
 * Replicated copies agree and Sliced parts fit together:
 *
 *   stream = (input_index << 32) | (group_index(rank) << 16)
 *            | (layout is Local ? rank + 1 : 0)
 *
 *   Tensor element with logical row-major index gidx (local coordinates plus
 *   the slice offset from local_shape):
 *     type_round(type, lo + (hi - lo) * rng_uniform(seed, stream, gidx))
 *     with [lo, hi) = [0, 1) when the input is updated (optimizer state such
 *     as Adam's second moment must be non-negative), else [-1, 1).
 *   Scalar without a value: type_round(type, 1 - rng_uniform(seed, stream, 0)),
 *     which lies in (0, 1];  with a value: type_round(type, value).
 *
 * group_index uses the node's group kind (0 for G_WORLD), so each group of a
 * G_GROUP value holds its own logical tensor, and Local values differ per rank.
 * Large tensors are filled by element ranges over threads (each element
 * depends only on its index). */
#include "cpu/cpu.h"

/* The type the data is drawn in: the declared one, even in an FP64 program. */
static Type data_type(const Node *n)
{
    return n->fill_type == NTYPE ? n->type : n->fill_type;
}

static uint64_t input_stream(const Program *p, const Node *n, int rank)
{
    uint64_t local = n->layout.kind == L_LOCAL ? (uint64_t)rank + 1 : 0;
    return ((uint64_t)n->input_index << 32)
           | ((uint64_t)group_index(p, n->group, rank) << 16)
           | local;
}

static void fill_scalar(Exec *e, const Node *n, int rank)
{
    double v = n->has_value
                   ? n->value
                   : 1.0 - rng_uniform(e->seed, input_stream(e->prog, n, rank), 0);
    double *out = exec_alloc(e, n->id, rank, 1);
    out[0] = exec_round(data_type(n), v);
}

typedef struct {
    const Program *p;
    const Node *n;
    int rank;
    uint64_t seed, stream;
    double lo, width;
    double *out;
} FillJob;

static void fill_range(void *ctx, long lo, long hi)
{
    const FillJob *j = ctx;
    Type t = data_type(j->n);
    GlobalIter it;
    global_iter_start(&it, j->p, j->n, j->rank);
    global_iter_seek(&it, lo);
    for (long i = lo; i < hi; i++, global_iter_next(&it)) {
        double u = rng_uniform(j->seed, j->stream, (uint64_t)it.gidx);
        j->out[i] = exec_round(t, j->lo + j->width * u);
    }
}

static void fill_tensor(Exec *e, const Node *n, int rank)
{
    const Program *p = e->prog;
    double lo = n->updated_by >= 0 ? 0.0 : -1.0;
    long count = local_count(p, n, rank);
    FillJob j = {p, n, rank, e->seed, input_stream(p, n, rank), lo, 1.0 - lo,
                 exec_alloc(e, n->id, rank, count)};
    parallel_ranges(exec_threads(e, count), count, fill_range, &j);
}

void fill_input(Exec *e, const Node *n)
{
    ASSERT(n->op == O_INPUT || n->op == O_SCALAR);
    for (int rank = 0; rank < e->prog->nranks; rank++) {
        if (n->op == O_SCALAR)
            fill_scalar(e, n, rank);
        else
            fill_tensor(e, n, rank);
    }
}

/* fill.c: seeded data for the program's inputs (O_INPUT and O_SCALAR).
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
 * G_GROUP value holds its own logical tensor, and Local values differ per rank. */
#include "coco.h"

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
    out[0] = type_round(data_type(n), v);
}

static void fill_tensor(Exec *e, const Node *n, int rank)
{
    const Program *p = e->prog;
    uint64_t stream = input_stream(p, n, rank);
    double lo = n->updated_by >= 0 ? 0.0 : -1.0, width = 1.0 - lo;
    long count = local_count(p, n, rank);
    double *out = exec_alloc(e, n->id, rank, count);
    GlobalIter it;
    global_iter_start(&it, p, n, rank);
    for (long i = 0; i < count; i++, global_iter_next(&it))
        out[i] = type_round(data_type(n), lo + width * rng_uniform(e->seed, stream, (uint64_t)it.gidx));
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

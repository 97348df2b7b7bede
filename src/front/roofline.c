/* roofline.c: what a program (or a scheduled variant) must move and compute
 * on each rank, from its graph alone: the figures a roofline compares a
 * measured time with (the CUDA report's roofline table, doc/gpu.md).
 *
 * Counting rules, per rank, for the live (not dead) nodes:
 *   memory  each Tensor input read once, each output and each Updated
 *           tensor written once: the rank's part of it (its slice, or the
 *           whole value when Replicated or Local; a scattered tensor's
 *           members), times its element size. An output that is an Updated
 *           input's new value is that input's write, not a second one. What
 *           our kernels move besides (intermediates, widened copies) is
 *           not counted: this is the program's minimum.
 *   link    bytes this rank sends to others, NCCL's minimal traffic for a
 *           buffer of n elements of s bytes in a group of P ranks:
 *           AllReduce 2(P-1)/P n s; ReduceScatter (n: the whole input) and
 *           AllGather (n: the whole output) (P-1)/P n s; Broadcast and
 *           Reduce n s; Send the rank's part, n s, unless it goes to the
 *           rank itself; everything 0 at P = 1. A collective inside a fused
 *           one counts as itself (a FusedAllReduce's ReduceScatter and
 *           AllGather add up to an AllReduce's).
 *   flops   MatMul 2 M N K (the rank's output elements times twice its part
 *           of the contraction); Conv2D 2 C R S per output element (C: the
 *           rank's input channels); each elementwise operation 1 per
 *           element of its result (Update, a store, and Slice, a copy: 0);
 *           ReduceTensor and PartialReduce 1 per input element, Norm (and a
 *           PartialReduce of squares) 2 (a multiply and an add);
 *           collectives 0 (their additions are not counted). */
#include "front/front.h"

#include <string.h>

static double part_bytes(const Program *p, const Node *n, int rank)
{
    return (double)local_count(p, n, rank) * (double)type_size(n->type);
}

/* 1 when output k of p is an Updated input's new value (written with it) */
static int output_is_new_value(const Program *p, int k)
{
    for (int j = 0; j < p->nexec_in; j++) {
        const Node *in = &p->node[p->exec_in[j]];
        if (in->op == O_INPUT && in->updated_by == p->exec_out[k])
            return 1;
    }
    return 0;
}

static void memory_bytes(const Program *p, int rank, Roofline *r)
{
    for (int j = 0; j < p->nexec_in; j++) {
        const Node *in = &p->node[p->exec_in[j]];
        if (in->op != O_INPUT)
            continue; /* a Scalar is a host value */
        r->read_bytes += part_bytes(p, in, rank);
        if (in->updated_by >= 0 && !p->node[in->updated_by].dead)
            r->write_bytes += part_bytes(p, in, rank);
    }
    for (int k = 0; k < p->nexec_out; k++)
        if (!output_is_new_value(p, k))
            r->write_bytes += part_bytes(p, &p->node[p->exec_out[k]], rank);
}

/* The rank a Send of node n on `rank` goes to. */
static int send_destination(const Program *p, const Node *n, int rank)
{
    int ng = ngroups_of(p, n->group);
    int j = group_index(p, n->group, rank), i = group_rank(p, n->group, rank);
    return rank_of(p, n->group, ((j + n->shift) % ng + ng) % ng, i);
}

double roofline_link(const Program *p, const Node *n, int rank)
{
    const Node *in = &p->node[n->in[0]];
    double P = (double)group_size_of(p, n->group), s = (double)type_size(n->type);
    switch (n->op) {
    case O_ALLREDUCE:
        return 2 * (P - 1) / P * (double)local_count(p, in, rank) * s;
    case O_REDUCESCATTER:
        return (P - 1) / P * (double)local_count(p, in, rank) * s;
    case O_ALLGATHER:
        return (P - 1) / P * (double)local_count(p, n, rank) * s;
    case O_REDUCE:
    case O_BROADCAST:
        return P > 1 ? (double)local_count(p, in, rank) * s : 0;
    case O_SEND:
        return send_destination(p, n, rank) != rank ? part_bytes(p, in, rank) : 0;
    default:
        BUG("link bytes of %s", op_info(n->op)->name);
    }
}

double roofline_flops(const Program *p, const Node *n, int rank)
{
    long shape[MAXDIM];
    double out = (double)local_count(p, n, rank);
    const OpInfo *info = op_info(n->op);
    switch (n->op) {
    case O_MATMUL: {
        const Node *a = &p->node[n->in[0]];
        local_shape(p, a, rank, shape, NULL);
        return 2 * out * (double)shape[a->ndim - 1];
    }
    case O_CONV2D: {
        const Node *w = &p->node[n->in[1]];
        local_shape(p, w, rank, shape, NULL);
        return 2 * out * (double)shape[1] * (double)shape[2] * (double)shape[3];
    }
    case O_NORM:
    case O_MEMBER_NORM: /* a square and an add an element (a root per element: minor) */
        return 2 * (double)local_count(p, &p->node[n->in[0]], rank);
    case O_REDUCE_TENSOR:
    case O_PARTIAL_REDUCE:
        return (n->redop == R_SUMSQ ? 2 : 1) *
               (double)local_count(p, &p->node[n->in[0]], rank);
    case O_UPDATE:
    case O_SLICE:
        return 0;
    default:
        return info->elementwise && (info->kind == K_UNARY || info->kind == K_BINARY) ? out : 0;
    }
}

void roofline_rank(const Program *p, int rank, Roofline *r)
{
    memset(r, 0, sizeof *r);
    memory_bytes(p, rank, r);
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (n->dead)
            continue;
        if (op_is_comm(n->op))
            r->link_bytes += roofline_link(p, n, rank);
        else
            r->flops += roofline_flops(p, n, rank);
    }
}

static double larger(double a, double b)
{
    return a > b ? a : b;
}

void roofline_busiest(const Program *p, Roofline *r)
{
    memset(r, 0, sizeof *r);
    for (int rank = 0; rank < p->nranks; rank++) {
        Roofline x;
        roofline_rank(p, rank, &x);
        r->read_bytes = larger(r->read_bytes, x.read_bytes);
        r->write_bytes = larger(r->write_bytes, x.write_bytes);
        r->link_bytes = larger(r->link_bytes, x.link_bytes);
        r->flops = larger(r->flops, x.flops);
    }
}

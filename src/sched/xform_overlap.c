/* xform_overlap.c: overlap(a, b, ...): a chain in which each operation
 * consumes the previous one runs overlapped. The computation is unchanged;
 * the chain is recorded for the code generator. Where a pair of the chain
 * is one the generated code runs in chunks, the chunks must mean something:
 *   - AllGather then MatMul (a column-parallel layer): the MatMul reads the
 *     gathered value (elementwise computations of it, or its Transpose, at
 *     most) as one operand and does not contract the gathered dimension, so
 *     that each part that arrives gives rows (or columns) of its result;
 *   - MatMul then ReduceScatter: the ReduceScatter reads the MatMul's result
 *     (elementwise computations of it at most), so that each chunk of rows
 *     can be reduced as soon as it is written;
 *   - MatMul then FusedAllReduce: as for a ReduceScatter, and every row
 *     reduction of the fused computation reduces along the last dimension of
 *     a value of the MatMul's rows: a chunk of rows holds each row whole;
 *   - FusedAllReduce then MatMul: as for each AllGather of the fused
 *     operation that the MatMul reads.
 * An item names a MatMul, a communication, a fused operation or a
 * computation's statement; a statement that writes one MatMul inline
 * ('Var h = MatMul(x, w) + b;') stands for that MatMul in these rules. */
#include "sched/sched.h"

#include <string.h>

int in_some_overlap(Program *p, Ref r)
{
    for (int i = 0; i < p->noverlap; i++)
        for (int k = 0; k < p->overlap[i].nitem; k++)
            if (p->overlap[i].item[k] == r)
                return 1;
    return 0;
}

static int is_overlapped_kind(const Node *n)
{
    return n->op == O_MATMUL || op_is_comm(n->op);
}

int overlap_operation(Program *p, Ref r)
{
    if (REF_IS_FUSION(r))
        return -1;
    if (is_overlapped_kind(node_of(p, r)))
        return r;
    int ids[256], c = statement_nodes(p, r, ids, 256), found = -1, count = 0;
    if (c > 256)
        return r; /* a statement that long stands for itself */
    for (int k = 1; k < c; k++)
        if (is_overlapped_kind(node_of(p, ids[k]))) {
            found = ids[k];
            count++;
        }
    return count == 1 && node_of(p, found)->op == O_MATMUL ? found : r;
}

static int is_op(Program *p, int id, Op op)
{
    return id >= 0 && node_of(p, id)->op == op;
}

/* Does node v compute from node from through elementwise operations alone
 * (v == from included)? seen[] marks the nodes already walked. */
static int elementwise_from(Program *p, int from, int v, char *seen)
{
    if (v == from)
        return 1;
    Node *n = node_of(p, v);
    if (seen[v] || !op_info(n->op)->elementwise || n->op == O_UPDATE)
        return 0;
    seen[v] = 1;
    for (int k = 0; k < n->nin; k++)
        if (elementwise_from(p, from, n->in[k], seen))
            return 1;
    return 0;
}

static int computes_from(Program *p, int from, int v)
{
    return elementwise_from(p, from, v, arena_alloc(p->arena, (size_t)p->nnode));
}

/* Which operand of MatMul mm reads AllGather ag (elementwise computations
 * of it, or their Transpose): 0, 1, 2 for both, -1 for neither. *dim gets
 * the gathered dimension as a dimension of that operand. */
static int gathered_operand(Program *p, int ag, const Node *mm, int *dim)
{
    const Node *g = node_of(p, ag);
    int which = -1, d = node_of(p, g->in[0])->layout.dim;
    for (int k = 0; k < 2; k++) {
        const Node *v = node_of(p, mm->in[k]);
        int swap = v->op == O_TRANSPOSE && !v->named;
        const Node *w = swap ? node_of(p, v->in[0]) : v;
        if (!computes_from(p, ag, w->id))
            continue;
        which = which < 0 ? k : 2;
        int od = d + (w->ndim - g->ndim);
        *dim = swap && od >= w->ndim - 2 ? 2 * w->ndim - 3 - od : od;
    }
    return which;
}

static void check_gather_matmul(const Xform *x, int ag, int mm)
{
    Program *p = x->p;
    Node *m = node_of(p, mm);
    int d = -1, k = gathered_operand(p, ag, m, &d);
    if (k < 0)
        refuse(x, "MatMul %s reads %s through other operations: overlapped with an AllGather, "
               "a MatMul reads the gathered value itself (or elementwise computations of it, "
               "or its Transpose)", value_desc(p, mm), value_desc(p, ag));
    if (k == 2)
        refuse(x, "MatMul %s reads %s as both operands: each part that arrives would need "
               "every other part", value_desc(p, mm), value_desc(p, ag));
    int nd = node_of(p, m->in[k])->ndim;
    if (d == (k == 0 ? nd - 1 : nd - 2))
        refuse(x, "MatMul %s contracts the dimension %s gathers (dimension %d of its %s "
               "operand): no row of its result can start before every part has arrived; "
               "the MatMul must read the gathered rows (a dimension of its first operand "
               "other than the last) or columns (the last of its second)",
               value_desc(p, mm), value_desc(p, ag), d, k == 0 ? "first" : "second");
}

static void check_scatter_reads(const Xform *x, int mm, int rs)
{
    Program *p = x->p;
    if (!computes_from(p, mm, node_of(p, rs)->in[0]))
        refuse(x, "ReduceScatter %s reads MatMul %s through %s: overlapped, the "
               "ReduceScatter reduces the MatMul's rows as they are written, so it reads "
               "the MatMul's result (or elementwise computations of it)",
               value_desc(p, rs), value_desc(p, mm),
               op_phrase(p->arena, node_of(p, node_of(p, rs)->in[0])->op));
}

/* A reduction member of fused operation f (overlapped with MatMul mm)
 * that reduces across the MatMul's rows, or -1. */
static int reduction_across_rows(Program *p, int f, const Node *mm)
{
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (n->dead || n->fusion != f || (n->op != O_NORM && n->op != O_REDUCE_TENSOR) ||
            n->axis < 0)
            continue;
        const Node *y = node_of(p, n->in[0]);
        int rows = y->ndim == mm->ndim && n->axis == y->ndim - 1;
        for (int k = 0; rows && k + 1 < y->ndim; k++)
            rows = y->dim[k].n == mm->dim[k].n;
        if (!rows)
            return i;
    }
    return -1;
}

static void check_matmul_fused(const Xform *x, int mm, int f)
{
    Program *p = x->p;
    int rs = -1;
    for (int i = 0; i < p->nnode && rs < 0; i++)
        if (!p->node[i].dead && p->node[i].fusion == f && p->node[i].op == O_REDUCESCATTER)
            rs = i;
    if (rs >= 0)
        check_scatter_reads(x, mm, rs);
    int r = reduction_across_rows(p, f, node_of(p, mm));
    if (r >= 0)
        refuse(x, "%s in '%s' reduces dimension %d of %s, across the rows of MatMul %s: "
               "overlapped, the MatMul's result arrives in chunks of rows, so each reduction "
               "of the fused operation reduces along the last dimension of a value of the "
               "MatMul's shape", value_desc(p, statement_head(p, r)), p->fusion[f].name,
               node_of(p, r)->axis, value_desc(p, node_of(p, r)->in[0]), value_desc(p, mm));
}

/* A MatMul after a FusedAllReduce reads the AllGathers that end it: each
 * it reads, as after that AllGather alone. */
static void check_fused_matmul(const Xform *x, int f, int mm)
{
    Program *p = x->p;
    const Node *m = node_of(p, mm);
    for (int i = 0; i < p->nnode; i++) {
        int d;
        if (!p->node[i].dead && p->node[i].fusion == f && p->node[i].op == O_ALLGATHER &&
            gathered_operand(p, i, m, &d) >= 0)
            check_gather_matmul(x, i, mm);
    }
}

static int is_fused_allreduce(Program *p, Ref r)
{
    return REF_IS_FUSION(r) && p->fusion[REF_FUSION_INDEX(r)].kind == F_ALLREDUCE;
}

/* The rules of the pairs the generated code runs in chunks (top). */
static void check_pair(const Xform *x, Ref a, Ref b)
{
    Program *p = x->p;
    int oa = overlap_operation(p, a), ob = overlap_operation(p, b);
    if (is_op(p, oa, O_ALLGATHER) && is_op(p, ob, O_MATMUL))
        check_gather_matmul(x, oa, ob);
    if (is_fused_allreduce(p, a) && is_op(p, ob, O_MATMUL))
        check_fused_matmul(x, REF_FUSION_INDEX(a), ob);
    if (is_op(p, oa, O_MATMUL) && is_op(p, ob, O_REDUCESCATTER))
        check_scatter_reads(x, oa, ob);
    if (is_op(p, oa, O_MATMUL) && is_fused_allreduce(p, b))
        check_matmul_fused(x, oa, REF_FUSION_INDEX(b));
}

static Ref overlap_item(const Xform *x, Ref *items, int i)
{
    Program *p = x->p;
    Ref r = xform_arg(x, i);
    if (!REF_IS_FUSION(r) && node_of(p, r)->fusion >= 0)
        refuse(x, "%s is inside fused operation '%s': overlap the fused operation",
               ref_desc(p, r), p->fusion[node_of(p, r)->fusion].name);
    if (in_some_overlap(p, r))
        refuse(x, "%s is already overlapped", ref_desc(p, r));
    if (i && !ref_uses(p, items[i - 1], r))
        refuse(x, "%s does not consume %s: only a producer-consumer chain can overlap",
               ref_desc(p, r), ref_desc(p, items[i - 1]));
    if (i)
        check_pair(x, items[i - 1], r);
    return r;
}

void xform_overlap(const Xform *x)
{
    Program *p = x->p;
    if (x->st->policy != P_NONE)
        refuse(x, "it takes no policy");
    if (x->st->narg < 2)
        refuse(x, "it needs at least two operations");
    xform_outs(x, 1, "the overlapped chain");
    Ref *items = arena_alloc(p->arena, (size_t)x->st->narg * sizeof(Ref));
    for (int i = 0; i < x->st->narg; i++)
        items[i] = overlap_item(x, items, i);
    const char *name = overlap_name_check(x);
    Overlap *grown = arena_alloc(p->arena, (size_t)(p->noverlap + 1) * sizeof(Overlap));
    copy_bytes(grown, p->overlap, (size_t)p->noverlap * sizeof(Overlap));
    p->overlap = grown;
    Overlap *o = &p->overlap[p->noverlap++];
    o->name = name;
    o->item = items;
    o->nitem = x->st->narg;
}

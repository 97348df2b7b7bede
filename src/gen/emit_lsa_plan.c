/* emit_lsa_plan.c: does a FusedAllReduce qualify for the kernels over the
 * peers' memory (emit_lsa.c), and which member is computed in which kernel.
 *
 * A fusion qualifies when it is, in program order, one ReduceScatter on
 * WORLD along dimension 0 (so every rank's slice is a contiguous range),
 * then elementwise computations of that slice's shape (or 0-dim), Slices
 * along dimension 0 of whole tensors, AllGathers along dimension 0 of values
 * computed inside, and cross-rank reductions (emit_lsa.h) whose folded
 * elements need no other reduction's result; and when its members read
 * nothing computed between its first member and themselves outside it.
 * Row reductions (along the last dimension, with Keep) and values per row
 * make it one row kernel instead (l->rows, emit_rows.c), where the
 * ReduceScatter's slices are whole rows and the operands are read by row,
 * column or element.
 *
 * Members depending on no reduction are level 0 (kernel 0), the others
 * level 1 (kernel 1). Kernel 1 recomputes the level-0 Slices and 0-dim
 * values it reads (loads and scalar arithmetic) and reads every other
 * level-0 value it needs from a workspace buffer kernel 0 stores (carry).
 *
 * Scattered tensors (language.md 7.1) qualify where the kernels address
 * their members: the ReduceScatter's input (loaded from the peers'
 * members), the whole tensors read at the slice (Slices' inputs and the
 * inputs of whole-tensor reductions: the local members) and AllGathers
 * whose value lives in a scattered tensor's members (stored into the
 * peers' members), all with the same members, whose buckets the kernels
 * then take. Any other scattered operand keeps the NCCL path. */
#include "gen/emit_lsa.h"

#include <stdlib.h>
#include <string.h>

static int members(Emitter *e, int f, int *m)
{
    int n = 0;
    for (int i = 0; i < e->p->nnode; i++)
        if (e->p->node[i].fusion == f && !e->p->node[i].dead)
            m[n++] = i;
    return n;
}

int lsa_is_member(const Lsa *l, int id)
{
    return emit_in_list(l->m, l->nm, id);
}

/* Is a member needed outside the kernels? AllGathers store into the window. */
int lsa_kept(Emitter *e, const Lsa *l, int id)
{
    return emit_needed_outside(e, l->m, l->nm, id);
}

int lsa_red_index(const Lsa *l, int id)
{
    for (int k = 0; k < l->nred; k++)
        if (l->red[k] == id)
            return k;
    return -1;
}

static int unsliced(const Node *n)
{
    return n->layout.kind != L_SLICED;
}

/* AllReduce on WORLD of a 0-dim PartialReduce member of a member y of the
 * slice's shape: the ranks' folds of their slices of y, folded. */
static int partial_allreduce(Emitter *e, const Lsa *l, const Node *rs, const Node *n)
{
    Program *p = e->p;
    Node *pr = node_of(p, n->in[0]);
    if (n->op != O_ALLREDUCE || n->ndim || n->group != G_WORLD || pr->op != O_PARTIAL_REDUCE ||
        pr->ndim || !lsa_is_member(l, pr->id))
        return 0;
    Node *y = node_of(p, pr->in[0]);
    return lsa_is_member(l, y->id) && emit_same_local_shape(y, rs);
}

/* A PartialReduce member: read only by such AllReduces, never kept. */
static int partial_allowed(Emitter *e, const Lsa *l, const Node *rs, const Node *n)
{
    Program *p = e->p;
    if (n->ndim || lsa_kept(e, l, n->id))
        return 0;
    for (int j = 0; j < p->nnode; j++) {
        Node *u = &p->node[j];
        for (int k = 0; !u->dead && k < u->nin; k++)
            if (u->in[k] == n->id && !partial_allreduce(e, l, rs, u))
                return 0;
    }
    return 1;
}

/* Norm or ReduceTensor of every element of a whole Replicated tensor that
 * is not a member and has the ReduceScatter input's shape: each rank folds
 * its slice, the same range the ReduceScatter gives it. */
static int whole_reduction(Emitter *e, const Lsa *l, const Node *rs, const Node *n)
{
    Program *p = e->p;
    Node *x = node_of(p, n->in[0]);
    if ((n->op != O_NORM && n->op != O_REDUCE_TENSOR) || n->ndim || lsa_is_member(l, x->id))
        return 0;
    return x->layout.kind == L_REPLICATED && x->group == G_WORLD &&
           emit_same_local_shape(x, node_of(p, rs->in[0]));
}

/* A row reduction of a value of the slice's shape, or an elementwise value
 * per row (the slice's shape with a last extent of 1): computed row by row
 * in the row kernel (emit_rows.c). The ReduceScatter cuts dimension 0 and
 * the rows lie along the last, another: each slice is whole rows. */
static int row_member(Emitter *e, const Node *rs, const Node *n)
{
    if (rs->ndim < 2)
        return 0;
    if (emit_row_reduction(e->p, n))
        return emit_same_local_shape(node_of(e->p, n->in[0]), rs);
    return emit_is_elementwise(n) && emit_row_shaped(n, rs);
}

static int member_allowed(Emitter *e, const Lsa *l, const Node *rs, const Node *n)
{
    Program *p = e->p;
    if (n->op == O_ALLGATHER)
        return n->group == G_WORLD && lsa_is_member(l, n->in[0]) &&
               node_of(p, n->in[0])->layout.kind == L_SLICED &&
               node_of(p, n->in[0])->layout.dim == 0 && !lsa_kept(e, l, n->in[0]);
    if (n->op == O_SLICE)
        return n->axis == 0 && unsliced(node_of(p, n->in[0])) && !lsa_is_member(l, n->in[0]) &&
               (emit_same_local_shape(n, rs) || (rs->ndim >= 2 && emit_row_shaped(n, rs)));
    if (n->op == O_PARTIAL_REDUCE)
        return partial_allowed(e, l, rs, n);
    if (n->op == O_ALLREDUCE)
        return partial_allreduce(e, l, rs, n);
    if (n->op == O_NORM || n->op == O_REDUCE_TENSOR)
        return whole_reduction(e, l, rs, n) || row_member(e, rs, n);
    if (emit_is_elementwise(n))
        return n->ndim == 0 || emit_same_local_shape(n, rs) || row_member(e, rs, n);
    return 0;
}

/* Nodes outside the fusion that only its members read join the kernel:
 * Slices along dimension 0 (Slice(p, 0) of a Replicated p is a load at the
 * slice's start) and 0-dim computations (1 - beta1), computed in registers. */
static int absorbable(Emitter *e, const Lsa *l, const Node *x)
{
    if (x->fusion >= 0 || lsa_is_member(l, x->id) || x->dead)
        return 0;
    return x->op == O_SLICE || (emit_is_elementwise(x) && x->ndim == 0 && x->op != O_UPDATE);
}

static void absorb_helpers(Emitter *e, Lsa *l)
{
    Program *p = e->p;
    for (int k = 0; k < l->nm; k++) { /* l->nm grows: absorbed nodes are scanned too */
        Node *n = node_of(p, l->m[k]);
        for (int j = 0; j < n->nin; j++) {
            Node *x = node_of(p, n->in[j]);
            if (!absorbable(e, l, x))
                continue;
            l->m[l->nm++] = x->id;
            if (lsa_kept(e, l, x->id))
                l->nm--;
        }
    }
    emit_program_order(l->m, l->nm);
}

/* Levels and the list of cross-rank reductions; 0 when a reduction folds a
 * value that depends on another (that would take a third kernel). */
static int levels(Emitter *e, Lsa *l)
{
    Program *p = e->p;
    for (int k = 0; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        int lev = 0;
        for (int j = 0; j < n->nin; j++) {
            int x = n->in[j];
            if (!lsa_is_member(l, x))
                continue;
            if (x >= n->id)
                return 0; /* not in program order */
            lev = l->level[x] > lev ? l->level[x] : lev;
        }
        if (n->op == O_PARTIAL_REDUCE && lev)
            return 0;
        if (n->op == O_ALLREDUCE || ((n->op == O_NORM || n->op == O_REDUCE_TENSOR) && !n->ndim)) {
            if (l->nred == LSA_MAXRED)
                return 0;
            l->red[l->nred++] = n->id;
            lev = 1;
        }
        l->level[n->id] = (char)lev;
    }
    return 1;
}

/* need[] and carry[]: consumers first, so that a member's readers are
 * marked before it is. */
static void needs(Emitter *e, Lsa *l)
{
    Program *p = e->p;
    for (int k = l->nm - 1; k >= 0; k--) {
        int id = l->m[k];
        Node *n = node_of(p, id);
        if (l->level[id] && (n->op == O_ALLGATHER || lsa_kept(e, l, id)))
            l->need[id] |= LSA_K1;
        if (!(l->need[id] & LSA_K1) || lsa_red_index(l, id) >= 0)
            continue; /* a reduction's value comes from the exchange */
        if (!l->level[id] && n->ndim && n->op != O_SLICE) {
            l->carry[id] = 1;
            continue;
        }
        for (int j = 0; j < n->nin; j++)
            if (lsa_is_member(l, n->in[j]))
                l->need[n->in[j]] |= LSA_K1;
    }
    for (int k = l->nm - 1; k >= 0; k--) {
        int id = l->m[k];
        Node *n = node_of(p, id);
        if (l->level[id])
            continue;
        if (n->op == O_ALLGATHER || n->op == O_PARTIAL_REDUCE || l->carry[id] ||
            lsa_kept(e, l, id))
            l->need[id] |= LSA_K0;
        for (int j = 0; (l->need[id] & LSA_K0) && j < n->nin; j++)
            if (lsa_is_member(l, n->in[j]))
                l->need[n->in[j]] |= LSA_K0;
    }
}

/* Does member n address operand j (-1: its own value) through members?
 * See the top. */
static int member_addressed(const Node *n, int j)
{
    if (j < 0)
        return n->op == O_ALLGATHER;
    return j == 0 && (n->op == O_REDUCESCATTER || n->op == O_SLICE || n->op == O_NORM ||
                      n->op == O_REDUCE_TENSOR);
}

int lsa_scattered(Emitter *e, const Lsa *l, int id)
{
    return l->scat >= 0 && emit_scat_of(e, id) != NULL;
}

/* l->scat, the first scattered operand; 0 when a scattered operand is not
 * one the kernels address through members, or has other members. */
static int scattered_operands(Emitter *e, Lsa *l)
{
    Program *p = e->p;
    for (int k = 0; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        for (int j = -1; j < n->nin; j++) {
            int x = j < 0 ? n->id : n->in[j];
            const Node *t = emit_scat_of(e, x);
            if (!t || (n->op == O_UPDATE && j == 0))
                continue;
            if (!member_addressed(n, j))
                return 0;
            if (l->scat < 0)
                l->scat = x;
            else if (!same_members(emit_scat_of(e, l->scat), t))
                return 0;
        }
    }
    return 1;
}

int lsa_plan(Emitter *e, int f, Lsa *l)
{
    Program *p = e->p;
    memset(l, 0, sizeof *l);
    l->m = emit_alloc(e, (size_t)p->nnode * sizeof(int));
    l->level = emit_alloc(e, (size_t)p->nnode * 1);
    l->need = emit_alloc(e, (size_t)p->nnode * 1);
    l->carry = emit_alloc(e, (size_t)p->nnode * 1);
    l->nm = members(e, f, l->m);
    l->rs = l->nm ? l->m[0] : -1;
    l->seg = e->nsegment + 1 + f;
    l->scat = -1;
    if (p->fusion[f].kind != F_ALLREDUCE || p->fusion[f].dead || l->nm < 2)
        return 0;
    absorb_helpers(e, l);
    Node *rs = node_of(p, l->rs);
    Node *x = rs->op == O_REDUCESCATTER ? node_of(p, rs->in[0]) : NULL;
    if (l->m[0] != rs->id || !x || rs->group != G_WORLD || rs->layout.kind != L_SLICED ||
        rs->layout.dim != 0 || !unsliced(x) || x->ndim == 0 || lsa_kept(e, l, rs->id))
        return 0;
    for (int k = 1; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if (!member_allowed(e, l, rs, n))
            return 0;
        l->rows |= row_member(e, rs, n) || (n->op == O_SLICE && !emit_same_local_shape(n, rs));
        for (int j = 0; j < n->nin; j++) {
            Node *in = node_of(p, n->in[j]);
            if (!lsa_is_member(l, in->id) && in->id > l->rs && op_info(in->op)->kind != K_LEAF)
                return 0;
        }
    }
    if (!levels(e, l) || !scattered_operands(e, l))
        return 0;
    needs(e, l);
    /* rows: no cross-rank reduction, no scattered operand, and operands
     * the row kernel reads (else the NCCL path) */
    return !l->rows || (!l->nred && l->scat < 0 && rows_lsa_ok(e, l));
}

void lsa_free(Emitter *e, Lsa *l)
{
    emit_free(e, l->m);
    emit_free(e, l->level);
    emit_free(e, l->need);
    emit_free(e, l->carry);
}

/* ---- the cross-rank reductions ---- */

int lsa_red_source(Emitter *e, const Lsa *l, int k)
{
    Node *n = node_of(e->p, l->red[k]);
    Node *x = node_of(e->p, n->in[0]);
    return n->op == O_ALLREDUCE ? x->in[0] : x->id;
}

int lsa_red_step(Emitter *e, const Lsa *l, int k)
{
    Node *n = node_of(e->p, l->red[k]);
    if (n->op == O_ALLREDUCE)
        return (int)node_of(e->p, n->in[0])->redop;
    return n->op == O_NORM ? (int)R_SUMSQ : (int)n->redop;
}

int lsa_red_combine(Emitter *e, const Lsa *l, int k)
{
    int step = lsa_red_step(e, l, k);
    return step == (int)R_SUMSQ ? (int)R_SUM : step;
}

int lsa_red_across(Emitter *e, const Lsa *l, int k)
{
    Node *n = node_of(e->p, l->red[k]);
    return n->op == O_ALLREDUCE ? (int)n->redop : lsa_red_combine(e, l, k);
}

int lsa_red_partial_type(Emitter *e, const Lsa *l, int k)
{
    Node *n = node_of(e->p, l->red[k]);
    return n->op == O_ALLREDUCE ? (int)node_of(e->p, n->in[0])->type : -1;
}

/* ---- for emit_cuda.c ---- */

/* Marks in e->lsa_node the nodes fusion f's kernels compute. */
void lsa_claim(Emitter *e, int f)
{
    Lsa l;
    lsa_plan(e, f, &l);
    for (int k = 0; k < l.nm; k++)
        e->lsa_node[l.m[k]] = f;
    lsa_free(e, &l);
}

int lsa_eligible(Emitter *e, int f)
{
    Lsa l;
    int ok = lsa_plan(e, f, &l);
    lsa_free(e, &l);
    return ok;
}

/* emit_scatter.c: scattered tensors in the generated CUDA
 * (rt/kernels/coco_scatter.cuh): which value lives in a scattered tensor's
 * members, where it also needs a contiguous copy, the descriptor c<id> the
 * entry point builds once per member list, the copies between members and
 * copy, and which segment kernels and fusions iterate over members. */
#include "emit_cuda.h"

/* ---- scattered tensors (rt/kernels/coco_scatter.cuh) ---- */

/* The scattered input whose members hold node id's value: the input itself,
 * or the tensor id is the new value of (unless id is computed into an
 * output buffer, then copied into the members). NULL: one buffer. */
const Node *emit_scat_of(Emitter *e, int id)
{
    Node *n = node_of(e->p, id);
    if (n->op == O_INPUT)
        return n->nmember ? n : NULL;
    int t = e->state_of[id];
    if (t >= 0 && e->out_index[id] < 0 && node_of(e->p, t)->nmember)
        return node_of(e->p, t);
    return NULL;
}

/* Does node j, reading scattered value id as its input k, need id's
 * contiguous copy? All but elementwise kernels iterating over its shape,
 * widened reductions (converted from the members) and Slices (copied from
 * the members) do. */
static int reads_contiguous(Emitter *e, int id, int j, int k)
{
    Program *p = e->p;
    Node *u = &p->node[j];
    if (u->dead || u->in[k] != id || (u->op == O_UPDATE && k == 0))
        return 0;
    int seg = e->segment[j];
    if (seg >= 0 && emit_segment_shape(e, seg) >= 0 &&
        emit_same_local_shape(node_of(p, id), node_of(p, emit_segment_shape(e, seg))))
        return 0;
    if (seg < 0 && (u->op == O_SLICE || u->op == O_ALLREDUCE || u->op == O_REDUCESCATTER) &&
        (u->op == O_SLICE || u->type == T_FP16 || u->type == T_BF16))
        return 0;
    return 1;
}

/* Does scattered value id also need a contiguous copy b<id> in the
 * workspace? When a library call or collective writes it (then scattered
 * into the members), or something reads it that cannot address members. */
int emit_scat_needs_buffer(Emitter *e, int id)
{
    Program *p = e->p;
    Node *n = node_of(p, id);
    if ((n->op != O_INPUT && e->segment[id] < 0) || (n->op == O_INPUT && is_output(p, id)))
        return 1;
    for (int j = id + 1; j < p->nnode; j++)
        for (int k = 0; k < p->node[j].nin; k++)
            if (reads_contiguous(e, id, j, k))
                return 1;
    return 0;
}

/* The fusion generated over the peers' memory (emit_lsa.c) whose nodes are
 * the only readers of scattered input i's contiguous copy, or -1. Its
 * kernels address the members; only its NCCL path gathers the copy
 * (emit_scat_gather_for), not the entry point's start. Only for inputs
 * never updated, whose members hold the same values all along. */
int emit_scat_gather_fusion(Emitter *e, int i)
{
    Program *p = e->p;
    Node *n = node_of(p, i);
    if (n->op != O_INPUT || !n->nmember || n->updated_by >= 0 || is_output(p, i) ||
        !e->lsa_node || !emit_scat_needs_buffer(e, i))
        return -1;
    int f = -1;
    for (int j = i + 1; j < p->nnode; j++)
        for (int k = 0; k < p->node[j].nin; k++) {
            if (!reads_contiguous(e, i, j, k))
                continue;
            if (e->lsa_node[j] < 0 || (f >= 0 && e->lsa_node[j] != f))
                return -1;
            f = e->lsa_node[j];
        }
    return f;
}

/* The descriptor c<id> of a scattered value (built once per member list
 * and member pointers, then looked up), and its contiguous copy b<id>. */
void emit_scat_buffer(Emitter *e, const Node *n, const Node *t)
{
    FILE *o = e->o;
    int id = n->id;
    if (n == t) {
        fprintf(o, "    const long z%d[] = {", id);
        for (int m = 0; m < t->nmember; m++) {
            fputs(m ? ", " : "", o);
            emit_size_expr(e, t->member[m].text);
        }
        fprintf(o, "};\n    CocoScat c%d;\n    memset(&c%d, 0, sizeof c%d);\n"
                   "    if (!dry && coco_scat(ctx, %d, \"%s\", z%d, %d, args->members ? "
                   "args->members[%d] : NULL, &c%d))\n        return 1;\n",
                id, id, id, t->pos.line, t->name, id, t->nmember, e->in_index[id], id);
    } else {
        fprintf(o, "    CocoScat c%d = c%d;\n", id, t->id);
    }
    if (emit_scat_needs_buffer(e, id))
        fprintf(o, "    void *b%d = coco_ws(&ws, ctx, %s * %zu);\n", id, emit_room(e, n),
                type_size(n->type));
    else /* no b<id>: nothing may address it as one buffer */
        fprintf(o, "    /* %s: in the members of %s */\n", n->name, t->name);
}

/* Copies between a scattered value's members and its contiguous copy:
 * to_members 0 gathers, 1 scatters. */
void emit_scat_copy(Emitter *e, int scat, int buf, const Node *n, int to_members)
{
    fprintf(e->o, "    if (coco_scat_copy(ctx, %d, c%d, b%d, %s, 0, coco_count(h%d), %d))\n"
                  "        return 1;\n",
            n->pos.line, scat, buf, emit_tname[n->type], n->id, to_members);
}

/* The contiguous copies of the scattered inputs only fusion f's NCCL path
 * reads (scat_gather_fusion), gathered at the start of that path. */
void emit_scat_gather_for(Emitter *e, int f)
{
    Program *p = e->p;
    for (int i = 0; i < p->nnode; i++)
        if (emit_scat_gather_fusion(e, i) == f)
            emit_scat_copy(e, i, i, &p->node[i], 0);
}

/* After node n: a scattered value with a contiguous copy gets the copy
 * filled (computed into the members) or its members filled (computed into
 * the copy). */
void emit_scat_sync(Emitter *e, const Node *n)
{
    if (n->op == O_INPUT || !emit_scat_of(e, n->id) || !emit_scat_needs_buffer(e, n->id))
        return;
    emit_scat_copy(e, n->id, n->id, n, e->segment[n->id] < 0);
}

/* Is operand or stored result x of segment seg's kernel addressed through
 * a scattered tensor's members (a parameter c<id>)? Flat operands and
 * stored results are; others read the contiguous copy. */
int emit_scat_member(Emitter *e, int seg, int x)
{
    return emit_scat_of(e, x) && (e->flat[x] || e->segment[x] == seg);
}

/* The scattered value whose buckets a segment's kernel iterates over (its
 * first flat scattered operand or stored result), or -1: a flat kernel. All
 * others must have the same members. */
int emit_segment_scat(Emitter *e, int seg, const int *ins, int nin)
{
    Program *p = e->p;
    int first = -1;
    for (int k = 0; k < nin + p->nnode; k++) {
        int x = k < nin ? ins[k] : k - nin;
        if (k < nin ? !e->flat[x] || !emit_scat_of(e, x)
                    : e->segment[x] != seg || !emit_stored(e, x) || !emit_scat_of(e, x))
            continue;
        if (first < 0)
            first = x;
        else if (!same_members(emit_scat_of(e, first), emit_scat_of(e, x)))
            error_at(node_of(p, x)->pos, "the CUDA backend computes '%s' and '%s' in one kernel: "
                     "their scattered tensors '%s' and '%s' must have the same members",
                     node_of(p, first)->name, node_of(p, x)->name, emit_scat_of(e, first)->name,
                     emit_scat_of(e, x)->name);
    }
    return first;
}

/* Does fusion f read or write a scattered tensor? (A fused Send over one
 * keeps its NCCL lowering: its kernel addresses contiguous buffers.) */
int emit_fusion_scattered(Emitter *e, int f)
{
    Program *p = e->p;
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (n->dead || n->fusion != f)
            continue;
        if (emit_scat_of(e, i))
            return 1;
        for (int k = 0; k < n->nin; k++)
            if (emit_scat_of(e, n->in[k]))
                return 1;
    }
    return 0;
}


/* emit_scatter.c: scattered tensors in the generated CUDA
 * (rt/kernels/coco_scatter.cuh): which value lives in a scattered tensor's
 * members, where it also needs a contiguous copy, the descriptor c<id> the
 * entry point builds once per member list, the copies between members and
 * copy, which segment kernels and fusions iterate over members, and the
 * ReduceScatters and AllGathers over members that run as one kernel where
 * the peers reach each other's memory (coco_lsa_scat_launch); and
 * Norm(x, Members), a norm per member of x's partition. */
#include "gen/emit_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scattered tensors (rt/kernels/coco_scatter.cuh) ---- */

/* The scattered input whose members hold node id's value: the input itself,
 * or the tensor id is the new value of (an output too: the caller's output
 * buffer, where it gives one, is filled from the members at the end,
 * emit_scat_outputs). NULL: one buffer. */
const Node *emit_scat_of(Emitter *e, int id)
{
    Node *n = node_of(e->p, id);
    if (n->op == O_INPUT)
        return n->nmember ? n : NULL;
    int t = e->state_of[id];
    if (t >= 0 && node_of(e->p, t)->nmember)
        return node_of(e->p, t);
    return NULL;
}

/* At the end of an entry point: each output that is a scattered tensor's
 * new value gathered from the members into the caller's output buffer,
 * where the caller gives one (coco_output_alias lets it give none, and read
 * the tensor's members). */
void emit_scat_outputs(Emitter *e)
{
    Program *p = e->p;
    for (int k = 0; k < p->nexec_out; k++) {
        const Node *n = node_of(p, p->exec_out[k]);
        const Node *t = n->op == O_INPUT ? NULL : emit_scat_of(e, n->id);
        if (t)
            fprintf(e->o, "    if (args->output[%d] && coco_scat_copy(ctx, %d, c%d, "
                          "args->output[%d], %s, 0, coco_count(h%d), 0))\n        return 1;\n",
                    k, n->pos.line, t->id, k, emit_tname[n->type], n->id);
    }
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

/* The one owner (owner(e, j), not -1) of every node j that reads
 * scattered input i's contiguous copy, or -1: some reader has no owner or
 * another one, or i is not an input never updated (whose members hold the
 * same values all along) and not an output, with a copy. */
static int sole_copy_owner(Emitter *e, int i, int (*owner)(Emitter *, int))
{
    Program *p = e->p;
    Node *n = node_of(p, i);
    if (n->op != O_INPUT || !n->nmember || n->updated_by >= 0 || is_output(p, i) ||
        !emit_scat_needs_buffer(e, i))
        return -1;
    int f = -1;
    for (int j = i + 1; j < p->nnode; j++)
        for (int k = 0; k < p->node[j].nin; k++) {
            if (!reads_contiguous(e, i, j, k))
                continue;
            int o = owner(e, j);
            if (o < 0 || (f >= 0 && o != f))
                return -1;
            f = o;
        }
    return f;
}

static int lsa_fusion_of(Emitter *e, int j)
{
    return e->lsa_node[j];
}

/* The fusion generated over the peers' memory (emit_lsa.c) whose nodes are
 * the only readers of scattered input i's contiguous copy, or -1. Its
 * kernels address the members; only its NCCL path gathers the copy
 * (emit_scat_gather_for), not the entry point's start. */
int emit_scat_gather_fusion(Emitter *e, int i)
{
    return e->lsa_node ? sole_copy_owner(e, i, lsa_fusion_of) : -1;
}

/* Does node n also run as one kernel over a scattered tensor's members,
 * where the peers reach each other's memory (coco_lsa_scat_launch,
 * rt/kernels/coco_scatter.cuh; its NCCL lowering stays for the rest)? A
 * ReduceScatter of a scattered value into a buffer, or an AllGather of a
 * buffer into one, on WORLD along dimension 0, outside any fusion. An
 * AllGather's value must not be read as one buffer: its contiguous copy is
 * then never filled (an output is gathered from the members at the end). */
int emit_scat_lsa(Emitter *e, const Node *n)
{
    Program *p = e->p;
    if (n->dead || n->group != G_WORLD || n->fusion >= 0)
        return 0;
    if (n->op == O_REDUCESCATTER)
        return n->axis == 0 && emit_scat_of(e, n->in[0]) && !emit_scat_of(e, n->id);
    const Node *x = n->op == O_ALLGATHER ? node_of(p, n->in[0]) : NULL;
    if (!x || x->layout.dim != 0 || emit_scat_of(e, x->id) || !emit_scat_of(e, n->id))
        return 0;
    for (int j = n->id + 1; j < p->nnode; j++)
        for (int k = 0; k < p->node[j].nin; k++)
            if (reads_contiguous(e, n->id, j, k))
                return 0;
    return 1;
}

static int lsa_reduce_scatter_of(Emitter *e, int j)
{
    const Node *n = node_of(e->p, j);
    return n->op == O_REDUCESCATTER && emit_scat_lsa(e, n) ? j : -1;
}

/* The ReduceScatter with emit_scat_lsa that is the only reader of scattered
 * input i's contiguous copy, or -1: only its NCCL path gathers the copy, as
 * for emit_scat_gather_fusion. */
int emit_scat_gather_node(Emitter *e, int i)
{
    return sole_copy_owner(e, i, lsa_reduce_scatter_of);
}

/* Writes text (lines of generated code) to o, each line indented by
 * `extra` more spaces. */
static void write_indented(FILE *o, const char *text, int extra)
{
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        if (len > 1)
            fprintf(o, "%*s", extra, "");
        fwrite(line, 1, len, o);
        line += len;
    }
}

/* What emit writes for e (its output captured), indented by `extra`. */
static void emit_indented(Emitter *e, int extra, void (*emit)(Emitter *, const Node *),
                          const Node *n)
{
    FILE *saved = e->o;
    char *text = NULL, msg[4096];
    size_t len = 0;
    FILE *captured = open_memstream(&text, &len);
    if (!captured)
        BUG("open_memstream failed");
    e->o = captured;
    ErrorCtx ctx; /* a refusal frees the captured text, then goes on up */
    error_push(&ctx, msg, sizeof msg, e->p->file, e->p->src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        fclose(captured);
        free(text);
        e->o = saved;
        error_again(msg);
    }
    emit(e, n);
    error_pop(&ctx);
    fclose(captured);
    e->o = saved;
    write_indented(e->o, text, extra);
    free(text);
}

/* The contiguous copies ReduceScatter n's NCCL path reads alone,
 * gathered first (emit_scat_gather_node). */
static void emit_gathers_for(Emitter *e, const Node *n)
{
    for (int i = 0; i < e->p->nnode; i++)
        if (emit_scat_gather_node(e, i) == n->id)
            emit_scat_copy(e, i, i, &e->p->node[i], 0);
}

/* An AllGather's NCCL path fills the members from its copy (emit_scat_sync
 * leaves it out). */
static void emit_members_fill(Emitter *e, const Node *n)
{
    emit_scat_copy(e, n->id, n->id, n, 1);
}

/* Collective n with emit_scat_lsa: "if (usable) { the kernel } else { its
 * NCCL path, emit_nccl's }", within its block. The NCCL path first
 * gathers the contiguous copies only it reads; an AllGather's ends by
 * filling the members. */
void emit_scat_lsa_collective(Emitter *e, const Node *n,
                              void (*emit_nccl)(Emitter *, const Node *))
{
    Program *p = e->p;
    FILE *o = e->o;
    const char *name = op_info(n->op)->name;
    int rs = n->op == O_REDUCESCATTER, l = n->pos.line;
    const Node *x = node_of(p, n->in[0]), *part = rs ? n : x, *whole = rs ? x : n;
    fprintf(o, "        if (coco_lsa_scat_usable(ctx, G_WORLD, c%d, %zu)) {\n"
               "            const long cs = coco_padded_count(h%d, 0, G_WORLD) / G_WORLD;\n"
               "            if (coco_lsa_scat_launch<%s, %s, %d>(ctx, c%d, cs, coco_count(h%d), %d, "
               "b%d, st))\n"
               "                COCO_FAIL(ctx, \"%s\", %d, \"no kernel instance for %%ld ranks\", "
               "G_WORLD);\n"
               "            COCO_LAUNCHED(ctx, \"%s\", %d);\n"
               "        } else { /* the NCCL path */\n",
            whole->id, type_size(whole->type), part->id, emit_tname[x->type],
            emit_tname[n->type], rs, whole->id, whole->id, rs ? (int)n->redop : 0, part->id, name,
            l, name, l);
    if (rs)
        emit_indented(e, 8, emit_gathers_for, n);
    emit_indented(e, 4, emit_nccl, n);
    if (!rs)
        emit_indented(e, 8, emit_members_fill, n);
    fputs("        }\n", o);
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
        fprintf(o, "    void *b%d = %s%s * %zu);\n", id, emit_ws(e, id), emit_room(e, n),
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
    if (n->op == O_INPUT || !emit_scat_of(e, n->id) || !emit_scat_needs_buffer(e, n->id) ||
        (n->op == O_ALLGATHER && emit_scat_lsa(e, n)))
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
    int first = -1, nm = e->seg_first[seg + 1] - e->seg_first[seg];
    for (int k = 0; k < nin + nm; k++) {
        int x = k < nin ? ins[k] : e->seg_member[e->seg_first[seg] + k - nin];
        if (k < nin ? !e->flat[x] || !emit_scat_of(e, x) : !emit_stored(e, x) || !emit_scat_of(e, x))
            continue;
        if (first < 0)
            first = x;
        else if (!same_members(emit_scat_of(e, first), emit_scat_of(e, x)))
            error_at(node_of(p, x)->pos, "the CUDA backend computes %s and %s in one kernel: "
                     "their scattered tensors '%s' and '%s' must have the same members",
                     value_desc(p, first), value_desc(p, x), emit_scat_of(e, first)->name,
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


/* ---- Norm(x, Members) (rt/kernels/coco_members.cuh) ---- */

/* Does a node of p take a norm per member (its source then includes
 * coco_members.cuh)? */
int emit_has_member_norm(const Program *p)
{
    for (int i = 0; i < p->nnode; i++)
        if (p->node[i].op == O_MEMBER_NORM && !p->node[i].dead)
            return 1;
    return 0;
}

/* y = Norm(x, Members) over this rank's elements of x; over a Sliced x
 * the members' sums of squares are added across its group (NCCL), in the
 * nm doubles of workspace t<id>. */
void emit_member_norm(Emitter *e, const Node *n)
{
    FILE *o = e->o;
    const Node *x = node_of(e->p, n->in[0]);
    const char *comm = x->layout.kind != L_SLICED ? "(ncclComm_t)NULL"
                       : n->group == G_GROUP ? "(ncclComm_t)ctx->group"
                       : arena_printf(e->p->arena, "coco_world(ctx, %d * sizeof(double))",
                                      n->npart);
    fprintf(o, "    { /* line %d: %s = Norm(..., Members) */\n        const long zm[] = {",
            n->pos.line, n->name);
    for (int m = 0; m < n->npart; m++) {
        fputs(m ? ", " : "", o);
        emit_size_expr(e, n->part[m].text);
    }
    fprintf(o, "};\n        if (coco_member_norm(ctx, %d, b%d, %s, b%d, %s, h%d.off[0], "
               "coco_count(h%d), zm, %d, %s, (double *)t%d))\n            return 1;\n    }\n",
            n->pos.line, x->id, emit_tname[x->type], n->id, emit_tname[n->type], x->id, x->id,
            n->npart, comm, n->id);
}

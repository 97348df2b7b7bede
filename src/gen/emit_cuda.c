/* emit_cuda.c: the CUDA code generator. Writes one .cu file holding, for a
 * program and each of its scheduled variants, an entry point with the C ABI
 * of include/coconet_cuda.h. Lowering, node by node in program order:
 *   - elementwise computations (pointwise, Cast, Dropout, Update) that a
 *     schedule fused, with equal element counts, become one kernel whose
 *     intermediate values stay in registers; unfused ones a kernel each;
 *   - MatMul: cuBLASLt; Conv2D, Slice, Norm/ReduceTensor/PartialReduce:
 *     the kernels of rt/kernels/coco_device.cuh;
 *   - collectives: NCCL on WORLD or on the GROUP communicator; Send/Recv:
 *     ncclSend/ncclRecv on WORLD; a FusedAllReduce is ReduceScatter + one
 *     fused kernel + AllGather (or kernels over the peers' memory:
 *     emit_lsa.c), a fused Send its kernels + ncclSend/ncclRecv (or one
 *     kernel storing into the receiver: emit_send.c); a MatMul overlapped
 *     with a FusedAllReduce runs in chunks (emit_overlap.c), with an
 *     AllGather or ReduceScatter by its blocks (emit_overlap_blocks.c);
 *     other overlapped chains run in order on the stream.
 * Sizes are run-time arguments, so one build serves every size; local shapes
 * are computed from them on the host at each call. Every kernel carries a
 * comment naming the program statements it computes. */
#include "gen/emit_cuda.h"

#include "coconet_cuda.h" /* COCO_RUN_PREFIX, ... */

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- analysis: segments, outputs, state ---- */

static void find_roles(Emitter *e)
{
    Program *p = e->p;
    for (int i = 0; i < p->nnode; i++)
        e->out_index[i] = e->in_index[i] = e->state_of[i] = -1;
    for (int k = p->nexec_out - 1; k >= 0; k--)
        e->out_index[p->exec_out[k]] = k;
    for (int k = 0; k < p->nexec_in; k++)
        e->in_index[p->exec_in[k]] = k;
    for (int i = 0; i < p->nnode; i++)
        if (p->node[i].op == O_INPUT && p->node[i].updated_by >= 0)
            e->state_of[p->node[i].updated_by] = i;
}

/* Groups consecutive fused elementwise nodes of one fusion and one element
 * count into segments; every other elementwise node is a segment alone.
 * First, a fusion's elementwise nodes and row reductions that make one row
 * kernel are one segment (emit_rows.c). */
static void find_segments(Emitter *e)
{
    Program *p = e->p;
    int cur = -1, fusion = -1;
    long count = 0;
    e->row_shape = emit_alloc(e, ((size_t)p->nnode + 1) * sizeof(int));
    e->row_at = emit_alloc(e, ((size_t)p->nnode + 1) * sizeof(int));
    for (int i = 0; i < p->nnode; i++)
        e->segment[i] = e->row_shape[i] = -1;
    rows_find_segments(e);
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (e->segment[i] >= 0) { /* a row kernel's */
            cur = -1;
            continue;
        }
        if (op_info(n->op)->kind == K_LEAF)
            continue;
        if (!emit_is_elementwise(n)) {
            cur = -1;
            continue;
        }
        long c = n->ndim ? dim_count(n) : 0;
        int joins = cur >= 0 && n->fusion >= 0 && n->fusion == fusion &&
                    (c == 0 || count == 0 || c == count);
        if (!joins) {
            cur = e->nsegment++;
            fusion = n->fusion;
            count = 0;
        }
        if (c)
            count = c;
        e->segment[i] = cur;
        if (n->fusion < 0)
            cur = -1;
    }
}

/* Each segment's members in program order (seg_first, seg_member), so that
 * a kernel's code takes time in its members, not in the program's nodes. */
static void list_segments(Emitter *e)
{
    Program *p = e->p;
    e->seg_first = emit_alloc(e, ((size_t)e->nsegment + 2) * sizeof(int));
    e->seg_member = emit_alloc(e, ((size_t)p->nnode + 1) * sizeof(int));
    for (int i = 0; i < p->nnode; i++)
        if (e->segment[i] >= 0)
            e->seg_first[e->segment[i] + 2]++;
    for (int s = 0; s < e->nsegment; s++)
        e->seg_first[s + 2] += e->seg_first[s + 1];
    for (int i = 0; i < p->nnode; i++)
        if (e->segment[i] >= 0)
            e->seg_member[e->seg_first[e->segment[i] + 1]++] = i;
}

/* read_apart: the values a live node of another segment (or none) reads. */
static void find_read_apart(Emitter *e)
{
    Program *p = e->p;
    e->read_apart = emit_alloc(e, (size_t)p->nnode + 1);
    for (int j = 0; j < p->nnode; j++) {
        Node *u = &p->node[j];
        for (int k = 0; !u->dead && k < u->nin; k++)
            if (u->in[k] < j && e->segment[j] != e->segment[u->in[k]])
                e->read_apart[u->in[k]] = 1;
    }
}

/* ---- host code: sizes, shapes, buffers ---- */

static void emit_shape(Emitter *e, const Node *n)
{
    FILE *o = e->o;
    fprintf(o, "    CocoShape h%d;\n    memset(&h%d, 0, sizeof h%d);\n    h%d.nd = %d;\n",
            n->id, n->id, n->id, n->id, n->ndim);
    for (int k = 0; k < n->ndim; k++) {
        fprintf(o, "    h%d.gdim[%d] = (", n->id, k);
        emit_size_expr(e, n->dim[k].text);
        fprintf(o, ");\n");
        if (n->layout.kind == L_SLICED && n->layout.dim == k) {
            const char *g = group_name(n->group);
            fprintf(o, "    h%d.dim[%d] = coco_part_len(h%d.gdim[%d], G_%s, R_%s);\n"
                       "    h%d.off[%d] = coco_part_lo(h%d.gdim[%d], G_%s, R_%s);\n",
                    n->id, k, n->id, k, g, g, n->id, k, n->id, k, g, g);
        } else {
            fprintf(o, "    h%d.dim[%d] = h%d.gdim[%d];\n", n->id, k, n->id, k);
        }
    }
}

static void emit_buffer(Emitter *e, const Node *n)
{
    FILE *o = e->o;
    int id = n->id;
    size_t tsize = type_size(n->type);
    const Node *scat = emit_scat_of(e, id);
    if (scat) {
        emit_scat_buffer(e, n, scat);
    } else if (n->op == O_INPUT) {
        fprintf(o, "    void *b%d = dry ? NULL : args->input[%d];\n", id, e->in_index[id]);
    } else if (e->out_index[id] >= 0) {
        fprintf(o, "    void *b%d = dry ? NULL : args->output[%d];\n", id, e->out_index[id]);
    } else if (e->state_of[id] >= 0) {
        fprintf(o, "    void *b%d = dry ? NULL : args->input[%d];\n", id,
                e->in_index[e->state_of[id]]);
    } else {
        fprintf(o, "    void *b%d = %s%s * %zu);\n", id, emit_ws(e, id), emit_room(e, n), tsize);
    }
}

/* Workspace some operations need besides their result: t<id> (a reorder of
 * parts, reduction partials, or the members' sums of Norm(x, Members)),
 * w<id>i and w<id>o (FP32 copies). */
static void emit_scratch(Emitter *e, const Node *n)
{
    FILE *o = e->o;
    int id = n->id;
    const char *ws = emit_ws(e, id);
    if (op_info(n->op)->kind == K_REDUCTION && e->segment[id] < 0) /* not a row kernel's */
        fprintf(o, "    void *t%d = %scoco_red_scratch_bytes(coco_gcount(h%d)));\n", id, ws, id);
    if (n->op == O_MEMBER_NORM) /* each member's sum of squares */
        fprintf(o, "    void *t%d = %s%d * sizeof(double));\n", id, ws, n->npart);
    int sliced = n->op == O_REDUCESCATTER ? id : n->op == O_ALLGATHER ? n->in[0] : -1;
    int d = n->op == O_REDUCESCATTER ? n->axis : sliced >= 0 ? node_of(e->p, sliced)->layout.dim : 0;
    const char *g = group_name(n->group);
    size_t ts = type_size(n->type);
    /* the G blocks of ceil(extent/G) indices along d (language.md 6) */
    char padded[96];
    snprintf(padded, sizeof padded, "coco_padded_count(h%d, %d, G_%s)", sliced, d, g);
    if (sliced >= 0 && d != 0) /* the parts along d, block q at q * chunk */
        fprintf(o, "    void *t%d = %s%s * %zu);\n", id, ws, padded, ts);
    if (emit_widened(n) && n->op == O_REDUCESCATTER)
        fprintf(o, "    void *w%di = %s%s * 4);\n    void *w%do = %s%s * 4);\n", id, ws, padded,
                id, ws, emit_room(e, n));
    else if (emit_widened(n))
        fprintf(o, "    void *w%di = %s%s * 4);\n    void *w%do = %s%s * 4);\n", id, ws,
                emit_room(e, node_of(e->p, n->in[0])), id, ws, emit_room(e, n));
}

/* ---- elementwise kernels ---- */
/* A kernel over n elements: each thread takes V consecutive elements. Flat
 * operands (the iteration's own shape) are read before the per-element loop
 * with vector loads into l<id>[V]; broadcast ones element by element through
 * their shapes. Stored results gather in s<id>[V] and are written by vector
 * stores. The host launches V = 16 bytes / the narrowest flat element when
 * every flat buffer is aligned for it, else V = 1. */

/* Inputs of segment seg read from memory or passed as scalars, each once,
 * into *ids (made with emit_alloc: room for each member's inputs). */
static int segment_inputs(Emitter *e, int seg, int **ids_out)
{
    Program *p = e->p;
    int n = 0, nm = e->seg_first[seg + 1] - e->seg_first[seg];
    int *ids = *ids_out = emit_alloc(e, ((size_t)nm * MAXIN + 1) * sizeof(int));
    char *seen = e->seen;
    for (int j = e->seg_first[seg]; j < e->seg_first[seg + 1]; j++) {
        Node *m = &p->node[e->seg_member[j]];
        for (int k = 0; k < m->nin; k++) {
            int x = m->in[k];
            Node *xn = node_of(p, x);
            if (e->segment[x] == seg || xn->op == O_CONST || (m->op == O_UPDATE && k == 0) ||
                seen[x])
                continue;
            seen[x] = 1;
            ids[n++] = x;
        }
    }
    for (int k = 0; k < n; k++)
        seen[ids[k]] = 0;
    return n;
}

/* The comment naming the statements of the nodes whose segment is seg. */
static void emit_kernel_comment(Emitter *e, int seg, int (*keep)(Emitter *, int))
{
    Program *p = e->p;
    fprintf(e->o, "// ");
    for (int k = e->seg_first[seg], first = 1; k < e->seg_first[seg + 1]; k++) {
        int i = e->seg_member[k];
        Node *n = &p->node[i];
        if (!n->named && !keep(e, i))
            continue;
        fprintf(e->o, "%s%s (line %d)", first ? "" : ", ", n->name, n->pos.line);
        first = 0;
    }
    fputc('\n', e->o);
}

/* Marks the flat memory inputs of segment seg; returns the widest V their
 * and the stored results' element sizes allow (16 bytes of the narrowest). */
static int mark_flat(Emitter *e, int seg, const int *ins, int nin)
{
    Program *p = e->p;
    int shape = emit_segment_shape(e, seg);
    size_t narrow = 0;
    emit_flat_clear(e);
    for (int k = 0; k < nin && shape >= 0; k++) {
        Node *x = node_of(p, ins[k]);
        if (x->op != O_SCALAR && emit_same_local_shape(x, node_of(p, shape))) {
            emit_flat_set(e, x->id);
            narrow = !narrow || type_size(x->type) < narrow ? type_size(x->type) : narrow;
        }
    }
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1] && shape >= 0; k++) {
        int i = e->seg_member[k];
        if (emit_stored(e, i) && p->node[i].ndim)
            narrow = !narrow || type_size(p->node[i].type) < narrow ? type_size(p->node[i].type)
                                                                     : narrow;
    }
    return narrow ? (int)(16 / narrow) : 1;
}

/* Is member i a Dropout of a tensor (it needs its coordinates)? */
static int dropout_member(Emitter *e, int i)
{
    return e->p->node[i].op == O_DROPOUT && e->p->node[i].ndim;
}

/* Does the kernel need the coordinates of each element? */
static int needs_coords(Emitter *e, int seg, const int *ins, int nin)
{
    for (int k = 0; k < nin; k++)
        if (node_of(e->p, ins[k])->op != O_SCALAR && !e->flat[ins[k]])
            return 1;
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++)
        if (dropout_member(e, e->seg_member[k]))
            return 1;
    return 0;
}

/* Under LIN, before the grid loop: each broadcast operand's count, each
 * Dropout's first logical index (emit_lin_*, emit_common.c). */
static void emit_lin_setup(Emitter *e, int seg, const int *ins, int nin)
{
    for (int k = 0; k < nin; k++)
        if (emit_read_broadcast(e, node_of(e->p, ins[k])))
            emit_lin_count(e, ins[k]);
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++)
        if (dropout_member(e, e->seg_member[k]))
            emit_lin_base(e, e->seg_member[k]);
}

/* The per-element body: each member's value, stored ones into s<id>[v]. */
static void emit_segment_body(Emitter *e, int seg, const int *ins, int nin)
{
    Program *p = e->p;
    FILE *o = e->o;
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++) {
        int i = e->seg_member[k];
        if (emit_stored(e, i) && p->node[i].ndim)
            fprintf(o, "        alignas(16) CocoRaw<%s> s%d[V];\n", emit_tname[p->node[i].type], i);
    }
    int coords = needs_coords(e, seg, ins, nin);
    for (int k = 0; k < nin && e->lin; k++) /* the vector's first index in each, under LIN */
        if (emit_read_broadcast(e, node_of(p, ins[k])))
            emit_lin_first(e, ins[k], "        ");
    emit_vector_loop_open(e, coords, "        ");
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++) {
        int i = e->seg_member[k];
        Node *m = &p->node[i];
        emit_value_statement(e, seg, m);
        if (emit_stored(e, i) && m->ndim)
            fprintf(o, "            coco_st(s%d, v, %s, r%d);\n", i, emit_tname[m->type], i);
        else if (emit_stored(e, i))
            fprintf(o, "            if (i == 0)\n                coco_st(y%d, 0, %s, r%d);\n", i,
                    emit_tname[m->type], i);
    }
    fprintf(o, "        }\n");
}

/* Loads of the flat operands and stores of the stored results around the
 * body: at i0 of flat buffers, or (scattered) at element mo + j0 of the
 * bucket's member. */
static void emit_segment_memory(Emitter *e, int seg, const int *ins, int nin, int scat, int store)
{
    Program *p = e->p;
    FILE *o = e->o;
    int first = store ? e->seg_first[seg] : 0, end = store ? e->seg_first[seg + 1] : nin;
    for (int k = first; k < end; k++) {
        int x = store ? e->seg_member[k] : ins[k];
        Node *n = node_of(p, x);
        if (store ? !emit_stored(e, x) || !n->ndim : !e->flat[x])
            continue;
        const char *t = emit_tname[n->type];
        if (!store)
            fprintf(o, "        alignas(16) CocoRaw<%s> l%d[V];\n", t, x);
        if (scat < 0)
            fprintf(o, store ? "        coco_stv<V, %s>(y%d, i0, n, s%d);\n"
                             : "        coco_ldv<V, %s>(x%d, i0, n, l%d);\n", t, x, x);
        else if (emit_scat_member(e, seg, x))
            fprintf(o, store ? "        coco_stv_any<V, %s>(c%d.member[bk.member], mo + j0, mo + len, s%d);\n"
                             : "        coco_ldv_any<V, %s>(c%d.member[bk.member], mo + j0, mo + len, l%d);\n",
                    t, x, x);
        else
            fprintf(o, store ? "        coco_stv_any<V, %s>(y%d, i0, f0 + len, s%d);\n"
                             : "        coco_ldv_any<V, %s>(x%d, i0, f0 + len, l%d);\n", t, x, x);
    }
}

static void emit_segment_kernel(Emitter *e, int seg)
{
    Program *p = e->p;
    FILE *o = e->o;
    if (e->row_shape[seg] >= 0) {
        rows_emit_segment_kernel(e, seg);
        return;
    }
    int *ins;
    int nin = segment_inputs(e, seg, &ins);
    mark_flat(e, seg, ins, nin);
    int scat = emit_segment_scat(e, seg, ins, nin);
    emit_kernel_comment(e, seg, emit_stored);
    fprintf(o, "template <int V, int LIN>\n__global__ void %s_k%d(long n, CocoShape it, "
               "unsigned long long seed", e->v, seg);
    for (int k = 0; k < nin; k++) {
        Node *x = node_of(p, ins[k]);
        if (x->op == O_SCALAR)
            fprintf(o, ", double s%d", x->id);
        else if (scat >= 0 && emit_scat_member(e, seg, x->id))
            fprintf(o, ", CocoScat c%d", x->id);
        else
            fprintf(o, ", const void *__restrict__ x%d, CocoShape h%d", x->id, x->id);
    }
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++) {
        int i = e->seg_member[k];
        if (emit_stored(e, i))
            fprintf(o, scat >= 0 && p->node[i].ndim && emit_scat_member(e, seg, i) ? ", CocoScat c%d"
                                                                         : ", void *__restrict__ y%d", i);
    }
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++)
        if (dropout_member(e, e->seg_member[k]))
            fprintf(o, ", CocoShape h%d", e->seg_member[k]);
    fprintf(o, ")\n{\n    (void)seed;\n    (void)it;\n");
    e->lin = scat < 0 && needs_coords(e, seg, ins, nin);
    if (e->lin)
        emit_lin_setup(e, seg, ins, nin);
    if (scat < 0) {
        fprintf(o, "    for (long i0 = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V; i0 < n;\n"
                   "         i0 += (long)gridDim.x * blockDim.x * V) {\n");
    } else {
        /* a warp per bucket, round robin; its lanes take V elements each */
        fprintf(o, "    (void)n;\n    const int lane = threadIdx.x & 31;\n"
                   "    const long nwarp = ((long)gridDim.x * blockDim.x) >> 5;\n"
                   "    for (long b = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5; "
                   "b < c%d.nbucket; b += nwarp) {\n"
                   "    const CocoBucket bk = c%d.bucket[b];\n"
                   "    const long f0 = coco_bflat(bk), len = coco_bflat(c%d.bucket[b + 1]) - f0;\n"
                   "    const long mo = f0 - c%d.start[bk.member];\n    (void)mo;\n"
                   "    for (long j0 = lane * V; j0 < len; j0 += 32 * V) {\n"
                   "        const long i0 = f0 + j0;\n",
                scat, scat, scat, scat);
    }
    emit_segment_memory(e, seg, ins, nin, scat, 0);
    emit_segment_body(e, seg, ins, nin);
    emit_segment_memory(e, seg, ins, nin, scat, 1);
    fprintf(o, scat < 0 ? "    }\n}\n\n" : "    }\n    }\n}\n\n");
    e->lin = 0;
    emit_free(e, ins);
}

static void emit_segment_args(Emitter *e, int seg, const int *ins, int nin, int scat)
{
    Program *p = e->p;
    FILE *o = e->o;
    fprintf(o, "(n, it, args->seed");
    for (int k = 0; k < nin; k++) {
        Node *x = node_of(p, ins[k]);
        if (x->op == O_SCALAR && x->has_value)
            fprintf(o, ", %.17g", x->value);
        else if (x->op == O_SCALAR)
            fprintf(o, ", args->scalar[%d]", e->in_index[x->id]);
        else if (scat >= 0 && emit_scat_member(e, seg, x->id))
            fprintf(o, ", c%d", x->id);
        else
            fprintf(o, ", b%d, h%d", x->id, x->id);
    }
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++) {
        int i = e->seg_member[k];
        if (emit_stored(e, i))
            fprintf(o, scat >= 0 && p->node[i].ndim && emit_scat_member(e, seg, i) ? ", c%d" : ", b%d",
                    i);
    }
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++)
        if (dropout_member(e, e->seg_member[k]))
            fprintf(o, ", h%d", e->seg_member[k]);
    fprintf(o, ");\n");
}

static int stored_tensor(Emitter *e, int i)
{
    return emit_stored(e, i) && e->p->node[i].ndim;
}

/* The flat buffers and their element sizes, for coco_pick_vec. */
static int emit_flat_buffers(Emitter *e, int seg, const int *ins, int nin)
{
    Program *p = e->p;
    FILE *o = e->o;
    int count = 0;
    fprintf(o, "        const void *vp[] = {");
    for (int k = 0; k < nin; k++)
        if (e->flat[ins[k]])
            fprintf(o, "%sb%d", count++ ? ", " : "", ins[k]);
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++)
        if (stored_tensor(e, e->seg_member[k]))
            fprintf(o, "%sb%d", count++ ? ", " : "", e->seg_member[k]);
    fprintf(o, "};\n        const int vs[] = {");
    count = 0;
    for (int k = 0; k < nin; k++)
        if (e->flat[ins[k]])
            fprintf(o, "%s%zu", count++ ? ", " : "", type_size(node_of(p, ins[k])->type));
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++)
        if (stored_tensor(e, e->seg_member[k]))
            fprintf(o, "%s%zu", count++ ? ", " : "", type_size(p->node[e->seg_member[k]].type));
    fprintf(o, "};\n");
    return count;
}

/* lin: may the kernel run its LIN instance with vmax elements a thread
 * (the flat buffers aligned for vmax: vec; every broadcast operand
 * coco_lin_bcast, every Dropout coco_lin_global)? */
static void emit_lin_test(Emitter *e, int seg, const int *ins, int nin, int vmax)
{
    FILE *o = e->o;
    fprintf(o, "        int lin = %s;\n", vmax > 1 ? "vec" : "1");
    for (int k = 0; k < nin; k++)
        if (emit_read_broadcast(e, node_of(e->p, ins[k])))
            fprintf(o, "        lin = lin && coco_lin_bcast(h%d, it, %d);\n", ins[k], vmax);
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++)
        if (dropout_member(e, e->seg_member[k]))
            fprintf(o, "        lin = lin && coco_lin_global(h%d, it);\n", e->seg_member[k]);
}

/* if (lin) the LIN instance's launch (grid: a format taking vmax) */
static void emit_lin_launch(Emitter *e, int seg, const int *ins, int nin, int vmax,
                            const char *grid)
{
    fprintf(e->o, "        if (lin)\n            %s_k%d<%d, 1><<<", e->v, seg, vmax);
    fprintf(e->o, grid, vmax);
    fprintf(e->o, ", 256, 0, st>>>");
    emit_segment_args(e, seg, ins, nin, -1);
}

static void emit_segment_launch(Emitter *e, int seg)
{
    Program *p = e->p;
    FILE *o = e->o;
    int *ins;
    int nin = segment_inputs(e, seg, &ins);
    int vmax = mark_flat(e, seg, ins, nin);
    int shape = emit_segment_shape(e, seg);
    int line = 0;
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1] && !line; k++)
        line = p->node[e->seg_member[k]].pos.line;
    fprintf(o, "    {\n        CocoShape it;\n        memset(&it, 0, sizeof it);\n");
    if (shape >= 0)
        fprintf(o, "        it = h%d;\n", shape);
    fprintf(o, "        long n = coco_count(it);\n");
    int scat = emit_segment_scat(e, seg, ins, nin);
    if (scat >= 0) { /* V at any alignment: coco_ldv_any tests each bucket */
        fprintf(o, "        %s_k%d<%d, 0><<<coco_scat_grid(c%d.nbucket), 256, 0, st>>>", e->v,
                seg, vmax, scat);
        emit_segment_args(e, seg, ins, nin, scat);
        fprintf(o, "        COCO_LAUNCHED(ctx, \"computation\", %d);\n    }\n", line);
        emit_free(e, ins);
        return;
    }
    if (vmax > 1) {
        int count = emit_flat_buffers(e, seg, ins, nin);
        fprintf(o, "        const int vec = coco_pick_vec(%d, vp, vs, %d) == %d;\n", vmax, count,
                vmax);
    }
    if (needs_coords(e, seg, ins, nin)) {
        emit_lin_test(e, seg, ins, nin, vmax);
        emit_lin_launch(e, seg, ins, nin, vmax, vmax > 1 ? "coco_grid_vec(n, %d)" : "coco_grid(n)");
        fprintf(o, "        else\n    ");
    }
    if (vmax > 1) {
        fprintf(o, "        if (vec)\n");
        fprintf(o, "            %s_k%d<%d, 0><<<coco_grid_vec(n, %d), 256, 0, st>>>", e->v, seg,
                vmax, vmax);
        emit_segment_args(e, seg, ins, nin, -1);
        fprintf(o, "        else\n    ");
    }
    fprintf(o, "        %s_k%d<1, 0><<<coco_grid(n), 256, 0, st>>>", e->v, seg);
    emit_segment_args(e, seg, ins, nin, -1);
    fprintf(o, "        COCO_LAUNCHED(ctx, \"computation\", %d);\n    }\n", line);
    emit_free(e, ins);
}

/* ---- other operations ---- */

/* The cuBLASLt call of a MatMul with an operand read transposed: A stored
 * [K][M] cannot merge its batches into rows, B is [N][K] (per batch). */
static void emit_matmul_transposed(Emitter *e, const Node *n, const Node *a)
{
    int ta, tb, sa = emit_matmul_source(e, a, &ta);
    int sb = emit_matmul_source(e, node_of(e->p, n->in[1]), &tb);
    if (ta)
        fprintf(e->o, "        long M = h%d.dim[%d], batch = rows / M;\n", a->id, a->ndim - 2);
    else
        fprintf(e->o, "        long M = bmats > 1 ? h%d.dim[%d] : rows, batch = bmats > 1 ? rows / M : 1;\n",
                a->id, a->ndim - 2);
    fprintf(e->o, "        if (coco_matmul_t(ctx, %d, %s, b%d, %d, b%d, %d, b%d, M, N, K, batch, "
                  "bmats > 1 ? K * N : 0))\n            return 1;\n    }\n    }\n",
            n->pos.line, emit_tname[n->type], sa, ta, sb, tb, n->id);
}

static void emit_matmul(Emitter *e, const Node *n)
{
    Program *p = e->p;
    Node *a = node_of(p, n->in[0]), *b = node_of(p, n->in[1]);
    if (a->type != b->type)
        error_at(n->pos, "the CUDA backend needs MatMul operands of one type, but %s is %s and "
                 "%s is %s: Cast one of them", value_desc(p, a->id), type_name(a->type),
                 value_desc(p, b->id), type_name(b->type));
    int ka = a->ndim - 1;
    fprintf(e->o, "    { /* line %d: %s = MatMul */\n", n->pos.line, n->name);
    /* an empty slice of an operand (language.md 6): an empty result, or
     * zeros (the sum over an empty contraction) */
    fprintf(e->o, "    if (coco_count(h%d) == 0 || coco_count(h%d) == 0)\n"
                  "        COCO_CUDA(ctx, \"MatMul\", %d, cudaMemsetAsync(b%d, 0, coco_count(h%d) * "
                  "%zu, st));\n    else {\n", a->id, b->id, n->pos.line, n->id, n->id,
            type_size(n->type));
    fprintf(e->o, "        long K = h%d.dim[%d], N = h%d.dim[%d];\n", a->id, ka, b->id, b->ndim - 1);
    fprintf(e->o, "        long rows = coco_count(h%d) / K, bmats = coco_count(h%d) / (K * N);\n",
            a->id, b->id);
    if (a->op == O_TRANSPOSE || b->op == O_TRANSPOSE) {
        emit_matmul_transposed(e, n, a);
        return;
    }
    fprintf(e->o, "        long M = bmats > 1 ? h%d.dim[%d] : rows, batch = bmats > 1 ? rows / M : 1;\n",
            a->id, a->ndim - 2);
    fprintf(e->o, "        if (coco_matmul(ctx, %d, %s, b%d, b%d, b%d, M, N, K, batch, "
                  "bmats > 1 ? K * N : 0))\n            return 1;\n    }\n    }\n",
            n->pos.line, emit_tname[n->type], a->id, b->id, n->id);
}

static void emit_conv(Emitter *e, const Node *n)
{
    Node *x = node_of(e->p, n->in[0]), *w = node_of(e->p, n->in[1]);
    if (x->type != w->type)
        error_at(n->pos, "the CUDA backend needs Conv2D operands of one type, but %s is %s and "
                 "%s is %s: Cast one of them", value_desc(e->p, x->id), type_name(x->type),
                 value_desc(e->p, w->id), type_name(w->type));
    fprintf(e->o, "    /* line %d: %s = Conv2D */\n"
                  "    if (coco_conv2d(ctx, %d, b%d, b%d, b%d, %s, h%d.dim[0], h%d.dim[1], h%d.dim[2], "
                  "h%d.dim[3], h%d.dim[0], h%d.dim[2], h%d.dim[3], h%d.dim[2], h%d.dim[3], %d, %d))\n"
                  "        return 1;\n",
            n->pos.line, n->name, n->pos.line, x->id, w->id, n->id, emit_tname[n->type], x->id, x->id,
            x->id, x->id, w->id, w->id, w->id, n->id, n->id, n->stride, n->pad);
}

static void emit_reduction(Emitter *e, const Node *n)
{
    Node *x = node_of(e->p, n->in[0]);
    int op = n->op == O_NORM ? 4 : emit_redop_code(n->redop);
    fprintf(e->o, "    { /* line %d: %s = %s */\n", n->pos.line, n->name, op_info(n->op)->name);
    if (n->axis < 0)
        fprintf(e->o, "        long outer = 1, len = coco_count(h%d), inner = 1;\n", x->id);
    else
        fprintf(e->o, "        long len = h%d.dim[%d], inner = 1, outer = 1;\n"
                      "        for (int k = 0; k < %d; k++) outer *= h%d.dim[k];\n"
                      "        for (int k = %d; k < h%d.nd; k++) inner *= h%d.dim[k];\n",
                x->id, n->axis, n->axis, x->id, n->axis + 1, x->id, x->id);
    fprintf(e->o, "        if (coco_reduce(ctx, %d, b%d, %s, b%d, %s, outer, len, inner, %d, %d, t%d))\n"
                  "            return 1;\n    }\n",
            n->pos.line, x->id, emit_tname[x->type], n->id, emit_tname[n->type], op, n->op == O_NORM, n->id);
}

/* A Transpose not read in place: a copy, its matrices transposed. */
static void emit_transpose(Emitter *e, const Node *n)
{
    int r = n->ndim - 2;
    fprintf(e->o, "    { /* line %d: %s = Transpose */\n        long n = coco_count(h%d);\n"
                  "        coco_transpose_kernel<<<coco_grid(n), 256, 0, st>>>(b%d, %s, b%d, h%d.dim[%d], "
                  "h%d.dim[%d], n);\n        COCO_LAUNCHED(ctx, \"Transpose\", %d);\n    }\n",
            n->pos.line, n->name, n->id, n->in[0], emit_tname[n->type], n->id, n->id, r, n->id,
            r + 1, n->pos.line);
}

static void emit_slice(Emitter *e, const Node *n)
{
    Node *x = node_of(e->p, n->in[0]);
    if (emit_scat_of(e, x->id)) { /* 1-D: the slice is a range of the members */
        fprintf(e->o, "    /* line %d: %s = Slice, from the members of %s */\n"
                      "    if (coco_scat_copy(ctx, %d, c%d, b%d, %s, h%d.off[0], h%d.off[0] + "
                      "h%d.dim[0], 0))\n        return 1;\n",
                n->pos.line, n->name, emit_scat_of(e, x->id)->name, n->pos.line, x->id, n->id,
                emit_tname[n->type], n->id, n->id, n->id);
        return;
    }
    fprintf(e->o, "    { /* line %d: %s = Slice */\n        long n = coco_count(h%d);\n"
                  "        coco_slice_kernel<<<coco_grid(n), 256, 0, st>>>(b%d, %s, h%d, b%d, h%d, %d);\n"
                  "        COCO_LAUNCHED(ctx, \"Slice\", %d);\n    }\n",
            n->pos.line, n->name, n->id, x->id, emit_tname[n->type], x->id, n->id, n->id, n->axis,
            n->pos.line);
}

/* The source, destination and NCCL type of a reducing collective; FP16/BF16
 * are widened to FP32 copies first (see emit_widened): count elements of src. */
static void emit_reduce_operands(Emitter *e, const Node *n, const char *src, const char *count)
{
    FILE *o = e->o;
    int id = n->id, xi = n->in[0];
    /* a scattered operand has no b<xi>: its members are converted (never narrow) */
    int members = emit_scat_of(e, xi) && !strcmp(src, arena_printf(e->p->arena, "b%d", xi));
    fprintf(o, "        const void *src = %s;\n        void *dst = b%d;\n"
               "        ncclDataType_t nt = coco_nccl_type(%s);\n",
            emit_widened(n) && members ? "NULL" : src, id, emit_tname[n->type]);
    if (!emit_widened(n))
        return;
    fprintf(o, "        if (!narrow) {\n");
    if (members)
        fprintf(o, "            coco_scat_convert_kernel<<<coco_scat_grid(c%d.nbucket), 256, 0, st>>>"
                   "(c%d, %s, w%di, COCO_FP32);\n", xi, xi, emit_tname[n->type], id);
    else
        fprintf(o, "            coco_convert_kernel<<<coco_grid(%s), 256, 0, st>>>(%s, %s, "
                   "w%di, COCO_FP32, %s);\n", count, src, emit_tname[n->type], id, count);
    fprintf(o, "            COCO_LAUNCHED(ctx, \"%s\", %d);\n"
               "            src = w%di;\n            dst = w%do;\n"
               "            nt = ncclFloat32;\n        }\n",
            op_info(n->op)->name, n->pos.line, id, id);
}

/* Send: each rank sends to the same index in group g + shift and receives
 * from group g - shift (mod the number of groups). Linear: no wrap-around;
 * a rank with no group g + shift sends nothing, one with no group g - shift
 * receives nothing and keeps its own value (the CPU executor's rule). */
static void emit_send(Emitter *e, const Node *n)
{
    const char *g = group_name(n->group), *name = op_info(n->op)->name, *t = emit_tname[n->type];
    int l = n->pos.line, id = n->id, xi = n->in[0];
    fprintf(e->o, "        long ng = ctx->nranks / G_%s, g = rank / G_%s, idx = rank %% G_%s;\n",
            g, g, g);
    if (n->linear)
        fprintf(e->o, "        long tg = g + %d, fg = g - %d;\n"
                      "        int dst = tg >= 0 && tg < ng ? (int)(tg * G_%s + idx) : -1;\n"
                      "        int src = fg >= 0 && fg < ng ? (int)(fg * G_%s + idx) : -1;\n",
                n->shift, n->shift, g, g);
    else
        fprintf(e->o, "        int dst = (int)((((g + %d) %% ng + ng) %% ng) * G_%s + idx);\n"
                      "        int src = (int)((((g - %d) %% ng + ng) %% ng) * G_%s + idx);\n",
                n->shift, g, n->shift, g);
    fprintf(e->o, "        size_t bytes = coco_count(h%d) * coco_type_size(%s);\n"
                  "        ncclComm_t comm = coco_world(ctx, coco_gcount(h%d) * coco_type_size(%s));\n"
                  "        if (dst == rank || src < 0) {\n"
                  "            COCO_CUDA(ctx, \"%s\", %d, cudaMemcpyAsync(b%d, b%d, bytes, "
                  "cudaMemcpyDeviceToDevice, st));\n        }\n"
                  "        if (dst != rank && (dst >= 0 || src >= 0)) {\n"
                  "            COCO_NCCL(ctx, \"%s\", %d, ncclGroupStart());\n"
                  "            if (dst >= 0)\n"
                  "                COCO_NCCL(ctx, \"%s\", %d, ncclSend(b%d, coco_count(h%d), "
                  "coco_nccl_type(%s), dst, comm, st));\n"
                  "            if (src >= 0)\n"
                  "                COCO_NCCL(ctx, \"%s\", %d, ncclRecv(b%d, coco_count(h%d), "
                  "coco_nccl_type(%s), src, comm, st));\n"
                  "            COCO_NCCL(ctx, \"%s\", %d, ncclGroupEnd());\n        }\n",
            id, t, id, t, name, l, id, xi, name, l, name, l, xi, xi, t, name, l, id, id, t, name, l);
}

/* The blocks of a ReduceScatter or AllGather along d: block q (rank q's
 * part, language.md 6) starts at q*cs elements, cs = the padded count / G;
 * it holds coco_part_len(extent, G, q) * inner elements, inner being the
 * elements of one index along d. One ncclReduceScatter or ncclAllGather
 * moves them when every block is whole and a multiple of 16 bytes
 * (coco_nccl_direct); otherwise one ncclReduce or ncclBroadcast per block,
 * grouped, moves each block's exact elements: on a symmetric window NCCL
 * 2.28's ReduceScatter and AllGather gave wrong results with 2004-byte
 * blocks (doc/design.md). */
static void emit_block_sizes(Emitter *e, int sliced, int d, const char *g, const char *es)
{
    fprintf(e->o, "        const long cs = coco_padded_count(h%d, %d, G_%s) / G_%s;\n"
                  "        const long inner = cs / coco_chunk(h%d.gdim[%d], G_%s);\n"
                  "        const int direct = coco_nccl_direct(h%d, %d, G_%s, %s);\n",
            sliced, d, g, g, sliced, d, g, sliced, d, g, es);
}

/* ReduceScatter along d (along d > 0 the parts are first put in order,
 * t<id>); the blocks as emit_block_sizes says. */
static void emit_reduce_scatter(Emitter *e, const Node *n)
{
    FILE *o = e->o;
    int l = n->pos.line, xi = n->in[0], id = n->id, d = n->axis, rop = emit_redop_code(n->redop);
    const char *g = group_name(n->group), *t = emit_tname[n->type], *comm = emit_comm_of(e, n);
    /* the bytes of an element NCCL reduces: FP32 where widened, unless narrow */
    const char *es = arena_printf(e->p->arena, emit_widened(n) ? "(narrow ? %zu : 4)" : "%zu",
                                  type_size(n->type));
    char src[32], count[64];
    snprintf(src, sizeof src, d ? "t%d" : "b%d", d ? id : xi);
    snprintf(count, sizeof count, d ? "coco_padded_count(h%d, %d, G_%s)" : "coco_count(h%d)",
             d ? id : xi, d, g);
    emit_narrow(e, n);
    emit_block_sizes(e, id, d, g, es);
    if (d)
        fprintf(o, "        coco_parts_kernel<<<coco_grid(coco_count(h%d)), 256, 0, st>>>(b%d, h%d, "
                   "t%d, %s, %d, coco_chunk(h%d.gdim[%d], G_%s), 1);\n"
                   "        COCO_LAUNCHED(ctx, \"ReduceScatter\", %d);\n",
                xi, xi, xi, id, t, d, id, d, g, l);
    emit_reduce_operands(e, n, src, count);
    fprintf(o, "        if (direct) {\n            COCO_NCCL(ctx, \"ReduceScatter\", %d, "
               "ncclReduceScatter(src, dst, coco_count(h%d), nt, coco_nccl_op(%d), %s, st));\n"
               "        } else {\n"
               "            COCO_NCCL(ctx, \"ReduceScatter\", %d, ncclGroupStart());\n"
               "            for (int q = 0; q < G_%s; q++) {\n"
               "                const long len = coco_part_len(h%d.gdim[%d], G_%s, q) * inner;\n"
               "                if (len > 0)\n"
               "                    COCO_NCCL(ctx, \"ReduceScatter\", %d, ncclReduce((const char *)src "
               "+ q * cs * %s, dst, len, nt, coco_nccl_op(%d), q, %s, st));\n"
               "            }\n"
               "            COCO_NCCL(ctx, \"ReduceScatter\", %d, ncclGroupEnd());\n        }\n",
            l, id, rop, comm, l, g, id, d, g, l, es, rop, comm, l);
    emit_reduce_result(e, n);
}

/* AllGather of a value sliced along d (along d > 0 into t<id>, then put in
 * order); the blocks as emit_block_sizes says, each broadcast from its rank
 * when they are not sent whole. */
static void emit_all_gather(Emitter *e, const Node *n)
{
    FILE *o = e->o;
    int l = n->pos.line, xi = n->in[0], id = n->id, d = node_of(e->p, xi)->layout.dim;
    const char *g = group_name(n->group), *t = emit_tname[n->type], *comm = emit_comm_of(e, n);
    size_t es = type_size(n->type);
    emit_block_sizes(e, xi, d, g, arena_printf(e->p->arena, "%zu", es));
    fprintf(o, "        char *out = (char *)%s%d;\n"
               "        if (direct) {\n            COCO_NCCL(ctx, \"AllGather\", %d, ncclAllGather(b%d, "
               "out, cs, coco_nccl_type(%s), %s, st));\n"
               "        } else {\n"
               "            COCO_NCCL(ctx, \"AllGather\", %d, ncclGroupStart());\n"
               "            for (int q = 0; q < G_%s; q++) {\n"
               "                const long len = coco_part_len(h%d.gdim[%d], G_%s, q) * inner;\n"
               "                if (len > 0)\n"
               "                    COCO_NCCL(ctx, \"AllGather\", %d, ncclBroadcast(b%d, out + q * cs * "
               "%zu, len, coco_nccl_type(%s), q, %s, st));\n"
               "            }\n"
               "            COCO_NCCL(ctx, \"AllGather\", %d, ncclGroupEnd());\n        }\n",
            d ? "t" : "b", id, l, xi, t, comm, l, g, xi, d, g, l, xi, es, t, comm, l);
    if (d)
        fprintf(o, "        coco_parts_kernel<<<coco_grid(coco_count(h%d)), 256, 0, st>>>(b%d, h%d, t%d, "
                   "%s, %d, coco_chunk(h%d.gdim[%d], G_%s), 0);\n"
                   "        COCO_LAUNCHED(ctx, \"AllGather\", %d);\n",
                id, id, id, id, t, d, xi, d, g, l);
}

static void emit_comm(Emitter *e, const Node *n)
{
    FILE *o = e->o;
    Node *x = node_of(e->p, n->in[0]);
    const char *name = op_info(n->op)->name, *comm = emit_comm_of(e, n), *t = emit_tname[n->type];
    int l = n->pos.line, xi = x->id, id = n->id, rop = emit_redop_code(n->redop);
    char src[32];
    snprintf(src, sizeof src, "b%d", xi);
    fprintf(o, "    { /* line %d: %s = %s */\n", l, n->name, name);
    switch (n->op) {
    case O_ALLREDUCE:
        emit_narrow(e, n);
        emit_reduce_operands(e, n, src, arena_printf(e->p->arena, "coco_count(h%d)", xi));
        fprintf(o, "        COCO_NCCL(ctx, \"AllReduce\", %d, ncclAllReduce(src, dst, coco_count(h%d), "
                   "nt, coco_nccl_op(%d), %s, st));\n", l, id, rop, comm);
        emit_reduce_result(e, n);
        break;
    case O_REDUCESCATTER:
    case O_ALLGATHER: {
        void (*nccl)(Emitter *, const Node *) =
            n->op == O_REDUCESCATTER ? emit_reduce_scatter : emit_all_gather;
        if (emit_scat_lsa(e, n)) /* over a scattered tensor's members: also one kernel */
            emit_scat_lsa_collective(e, n, nccl);
        else
            nccl(e, n);
        break;
    }
    case O_REDUCE:
        emit_narrow(e, n);
        emit_reduce_operands(e, n, src, arena_printf(e->p->arena, "coco_count(h%d)", xi));
        fprintf(o, "        COCO_CUDA(ctx, \"Reduce\", %d, cudaMemsetAsync(dst, 0, coco_count(h%d) * "
                   "(nt == ncclFloat32 ? 4 : coco_type_size(%s)), st));\n"
                   "        COCO_NCCL(ctx, \"Reduce\", %d, ncclReduce(src, dst, coco_count(h%d), nt, "
                   "coco_nccl_op(%d), %d, %s, st));\n",
                l, id, t, l, id, rop, n->root, comm);
        emit_reduce_result(e, n);
        break;
    case O_BROADCAST:
        fprintf(o, "        COCO_NCCL(ctx, \"Broadcast\", %d, ncclBroadcast(b%d, b%d, coco_count(h%d), "
                   "coco_nccl_type(%s), %d, %s, st));\n", l, xi, id, id, t, n->root, comm);
        break;
    case O_SEND:
        emit_send(e, n);
        break;
    default:
        BUG("not a collective");
    }
    fprintf(o, "    }\n");
}

static void emit_node(Emitter *e, const Node *n, int *done_segment)
{
    int seg = e->segment[n->id];
    if (seg >= 0 && e->row_shape[seg] >= 0) { /* launched at one of its members */
        if (n->id == e->row_at[seg] && !done_segment[seg])
            rows_emit_segment_launch(e, seg);
        done_segment[seg] |= n->id == e->row_at[seg];
        return;
    }
    if (seg >= 0) {
        if (!done_segment[seg])
            emit_segment_launch(e, seg);
        done_segment[seg] = 1;
    } else if (n->op == O_MATMUL) {
        emit_matmul(e, n);
    } else if (n->op == O_CONV2D) {
        emit_conv(e, n);
    } else if (op_info(n->op)->kind == K_REDUCTION) {
        emit_reduction(e, n);
    } else if (n->op == O_SLICE) {
        emit_slice(e, n);
    } else if (n->op == O_TRANSPOSE) {
        if (emit_transpose_in_place(e, n))
            return;
        emit_transpose(e, n);
    } else if (n->op == O_MEMBER_NORM) {
        emit_member_norm(e, n);
    } else if (op_info(n->op)->kind == K_COMM) {
        emit_comm(e, n);
    } else {
        return;
    }
    emit_scat_sync(e, n);
    emit_state_copy(e, n);
}

/* Outputs that are inputs of the program are copies of them. */
static void emit_input_outputs(Emitter *e)
{
    Program *p = e->p;
    for (int k = 0; k < p->nexec_out; k++) {
        Node *n = node_of(p, p->exec_out[k]);
        if (n->op != O_INPUT && n->op != O_SCALAR && n->op != O_CONST)
            continue;
        if (n->op != O_INPUT)
            error_at(n->pos, "the CUDA backend cannot output Scalar or constant '%s'", n->name);
        fprintf(e->o, "    COCO_CUDA(ctx, \"output\", %d, cudaMemcpyAsync(args->output[%d], b%d, "
                      "coco_count(h%d) * coco_type_size(%s), cudaMemcpyDeviceToDevice, st));\n",
                n->pos.line, k, n->id, n->id, emit_tname[n->type]);
    }
}

static void emit_body(Emitter *e, const char *entry)
{
    Program *p = e->p;
    FILE *o = e->o;
    fprintf(o, "static int %s_body(coco_cuda_ctx *ctx, const coco_cuda_args *args, const long *size,\n"
               "                   size_t *need)\n{\n    const int dry = args == NULL;\n"
               "    const int rank = ctx->rank;\n    (void)rank;\n"
               "    const long G_WORLD = ctx->nranks, R_WORLD = rank;\n"
               "    const long G_GROUP = ctx->group_size, R_GROUP = rank %% ctx->group_size;\n"
               "    (void)G_WORLD; (void)R_WORLD; (void)G_GROUP; (void)R_GROUP;\n"
               "    cudaStream_t st = (cudaStream_t)ctx->stream;\n    (void)st;\n"
               "    size_t ws = 0, wst = 0;\n", e->v);
    for (int i = 0; i < p->nsize; i++)
        fprintf(o, "    const long S_%s = size[%d];\n    (void)S_%s;\n", p->size[i].name, i,
                p->size[i].name);
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (n->op == O_CONST || n->op == O_SCALAR)
            continue;
        emit_shape(e, n);
        int in_registers = e->segment[i] >= 0 && !emit_stored(e, i);
        if (!in_registers && !emit_transpose_in_place(e, n))
            emit_buffer(e, n);
        emit_scratch(e, n);
    }
    for (int f = 0; f < p->nfusion; f++)
        if (e->lsa[f] && p->fusion[f].kind == F_ALLREDUCE)
            lsa_emit_workspace(e, f);
    /* wst: the NCCL paths' buffers, needed only where those paths can run */
    fprintf(o, "    if (dry) {\n        *need = coco_ws_need(ctx, G_WORLD, ws, wst);\n"
               "        return 0;\n    }\n"
               "    if (ws > ctx->workspace_bytes)\n"
               "        COCO_FAIL(ctx, \"workspace\", 0, \"%%zu bytes needed, %%zu given\", ws, "
               "ctx->workspace_bytes);\n");
    for (int i = 0; i < p->nnode; i++) /* scattered inputs some operation reads contiguous */
        if (p->node[i].op == O_INPUT && p->node[i].nmember && emit_scat_needs_buffer(e, i) &&
            emit_scat_gather_fusion(e, i) < 0 && emit_scat_gather_node(e, i) < 0)
            emit_scat_copy(e, i, i, &p->node[i], 0);
    emit_input_outputs(e);
    int *done = emit_alloc(e, ((size_t)e->nsegment + 1) * sizeof(int));
    int *fused_done = emit_alloc(e, ((size_t)p->nfusion + 1) * sizeof(int));
    for (int i = 0; i < p->nnode; i++) {
        int f = e->lsa_node[i];
        if (ovl_deferred(e, i)) /* computed by its overlapped fusion's launch */
            continue;
        if (e->ovl_block[i] == OVL_BLOCK_DEFERRED) /* with the MatMul it overlaps */
            continue;
        if (f >= 0 && !p->node[i].dead) {
            if (!fused_done[f] && p->fusion[f].kind == F_SEND)
                send_emit_launch(e, f, done);
            else if (!fused_done[f])
                lsa_emit_launch(e, f, done);
            fused_done[f] = 1;
            continue;
        }
        if (!ovl_blocks_launch(e, i, done)) /* a MatMul by a collective's blocks */
            emit_node(e, &p->node[i], done);
    }
    emit_free(e, fused_done);
    emit_free(e, done);
    emit_scat_outputs(e);
    fprintf(o, "    return 0;\n}\n\n");
    fprintf(o, "extern \"C\" int " COCO_RUN_PREFIX "%s(coco_cuda_ctx *ctx, "
               "const coco_cuda_args *args)\n{\n"
               "    return %s_body(ctx, args, args->size, NULL);\n}\n\n", entry, e->v);
    fprintf(o, "extern \"C\" size_t " COCO_WORKSPACE_PREFIX "%s(const coco_cuda_ctx *ctx, "
               "const long *size)\n{\n"
               "    size_t need = 0;\n    coco_cuda_ctx c = *ctx;\n    char msg[256];\n"
               "    c.err = msg;\n    c.errlen = sizeof msg;\n"
               "    return %s_body(&c, NULL, size, &need) ? 0 : need;\n}\n\n", entry, e->v);
}

/* The argument holding value id (or its members), marked in in[] or out[];
 * a workspace value is none (the workspace lies in the window) */
static void mark_argument(Emitter *e, int id, char *in, char *out)
{
    const Node *scat = emit_scat_of(e, id);
    if (scat)
        id = scat->id;
    if (e->in_index[id] >= 0)
        in[e->in_index[id]] = 1;
    if (e->out_index[id] >= 0)
        out[e->out_index[id]] = 1;
    if (e->state_of[id] >= 0)
        in[e->in_index[e->state_of[id]]] = 1;
}

static void emit_index_list(FILE *o, const char *prefix, const char *entry, const char *mark, int n)
{
    fprintf(o, "extern \"C\" const int %s%s[] = {", prefix, entry);
    for (int i = 0; i < n; i++)
        if (mark[i])
            fprintf(o, "%d, ", i);
    fprintf(o, "-1};\n");
}

/* coco_window_inputs__ENTRY and coco_window_outputs__ENTRY (coconet_cuda.h):
 * the arguments the peer-memory kernels reach in the other ranks' windows
 * (the FusedAllReduces' reduced inputs and gathered values, the fused
 * Sends' results, the scattered tensors of the one-kernel collectives). A
 * caller with such a buffer outside its window takes the NCCL path there,
 * and so must every rank (a session's caller checks: coconet.torch). */
static void emit_window_args(Emitter *e, const char *entry)
{
    Program *p = e->p;
    char *in = emit_alloc(e, (size_t)p->nexec_in + 1), *out = emit_alloc(e, (size_t)p->nexec_out + 1);
    int *ids = emit_alloc(e, ((size_t)p->nnode + 1) * sizeof(int));
    for (int f = 0; f < p->nfusion; f++) {
        if (!e->lsa[f])
            continue;
        int n = 0;
        if (p->fusion[f].kind == F_ALLREDUCE)
            n = lsa_window_nodes(e, f, ids);
        else /* a fused Send: its result, stored into the receiver */
            for (int i = 0; i < p->nnode; i++)
                if (p->node[i].fusion == f && p->node[i].op == O_SEND && !p->node[i].dead)
                    ids[n++] = i;
        for (int k = 0; k < n; k++)
            mark_argument(e, ids[k], in, out);
    }
    for (int i = 0; i < p->nnode; i++)
        if (!p->node[i].dead && emit_scat_lsa(e, &p->node[i])) {
            mark_argument(e, p->node[i].in[0], in, out);
            mark_argument(e, i, in, out);
        }
    emit_index_list(e->o, COCO_WINDOW_INPUTS_PREFIX, entry, in, p->nexec_in);
    emit_index_list(e->o, COCO_WINDOW_OUTPUTS_PREFIX, entry, out, p->nexec_out);
    fputc('\n', e->o);
    emit_free(e, ids);
    emit_free(e, out);
    emit_free(e, in);
}

static void emit_variant_code(Emitter *e, int vi)
{
    Program *p = e->p;
    e->v = arena_printf(p->arena, "v%d", vi);
    e->segment = emit_alloc(e, (size_t)p->nnode * sizeof(int));
    e->out_index = emit_alloc(e, (size_t)p->nnode * sizeof(int));
    e->in_index = emit_alloc(e, (size_t)p->nnode * sizeof(int));
    e->state_of = emit_alloc(e, (size_t)p->nnode * sizeof(int));
    e->flat = emit_alloc(e, (size_t)p->nnode);
    e->flat_ids = emit_alloc(e, ((size_t)p->nnode + 1) * sizeof(int));
    e->seen = emit_alloc(e, (size_t)p->nnode);
    e->emit_node = emit_node;
    find_roles(e);
    find_segments(e);
    list_segments(e);
    find_read_apart(e);
    emit_list_readers(e);
    const char *entry = p->applied ? p->applied : "program";
    fprintf(e->o, "// ================= %s: %s =================\n\n", p->exec_name, entry);
    for (int s = 0; s < e->nsegment; s++)
        emit_segment_kernel(e, s);
    e->lsa = emit_alloc(e, ((size_t)p->nfusion + 1) * sizeof(int));
    e->lsa_node = emit_alloc(e, (size_t)p->nnode * sizeof(int));
    e->overlap_mm = emit_alloc(e, ((size_t)p->nfusion + 1) * sizeof(int));
    for (int i = 0; i < p->nnode; i++)
        e->lsa_node[i] = -1;
    for (int f = 0; f < p->nfusion; f++)
        e->overlap_mm[f] = -1;
    for (int f = 0; f < p->nfusion; f++)
        if ((e->lsa[f] = lsa_eligible(e, f))) {
            e->overlap_mm[f] = p->fusion[f].kind == F_ALLREDUCE ? ovl_matmul(e, f) : -1;
            lsa_claim(e, f);
            lsa_emit_kernel(e, f);
        } else if ((e->lsa[f] = !emit_fusion_scattered(e, f) && send_eligible(e, f))) {
            send_claim(e, f);
            send_emit_kernel(e, f);
        }
    ovl_blocks_find(e);
    e->nccl_only = emit_alloc(e, (size_t)p->nnode);
    for (int f = 0; f < p->nfusion; f++)
        if (e->lsa[f] && p->fusion[f].kind == F_ALLREDUCE)
            lsa_mark_nccl_only(e, f);
    emit_body(e, entry);
    emit_window_args(e, entry);
}

/* Variant vi of the source. A refusal (error_at) on the way frees what the
 * emitter holds (emit_alloc), then goes on to the caller's context. */
static void emit_variant(FILE *o, Program *p, int vi)
{
    Emitter *e = xcalloc(1, sizeof *e);
    e->p = p;
    e->o = o;
    char msg[4096];
    ErrorCtx ctx;
    error_push(&ctx, msg, sizeof msg, p->file, p->src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        emit_free_all(e);
        free(e);
        error_again(msg);
    }
    emit_variant_code(e, vi);
    error_pop(&ctx);
    emit_free_all(e);
    free(e);
}

/* The Execute input whose new value output k is in program p, or -1. */
static int output_state_input(const Program *p, int k)
{
    int out = p->exec_out[k];
    for (int j = 0; j < p->nexec_in; j++)
        if (p->node[p->exec_in[j]].op == O_INPUT && p->node[p->exec_in[j]].updated_by == out)
            return j;
    return -1;
}

/* coco_output_alias[k]: the input whose buffer output k may share (the
 * output is that Updated input's new value in every variant), or -1; a
 * scattered input's: the caller may give no output buffer (NULL) and read
 * the members (emit_scat_outputs). */
static void emit_output_alias(Program **variants, int n, FILE *o)
{
    Program *p = variants[0];
    fprintf(o, "extern \"C\" {\nextern const int coco_output_alias[];\n"
               "const int coco_output_alias[] = {");
    for (int k = 0; k < p->nexec_out; k++) {
        int j = output_state_input(p, k);
        for (int v = 1; v < n && j >= 0; v++)
            if (output_state_input(variants[v], k) != j)
                j = -1;
        fprintf(o, "%d, ", j);
    }
    fprintf(o, "-2};\n}\n\n");
}

/* Does a node of p compute a Conv2D (its source then includes coco_conv.cuh)? */
static int has_conv(const Program *p)
{
    for (int i = 0; i < p->nnode; i++)
        if (p->node[i].op == O_CONV2D && !p->node[i].dead)
            return 1;
    return 0;
}

/* The source of variants[0..n) (variants[0]: the program), each emitted as
 * lowered[i] (cuda_compile's lowering of it). */
void emit_cuda(Program **variants, Program **lowered, int n, FILE *o)
{
    Program *p = variants[0];
    fprintf(o, "// CUDA code generated by coconet %s for program '%s' of %s: %d variant%s.\n"
               "// Entry points follow include/coconet_cuda.h. Do not edit.\n"
               "#include <string.h>\n#include \"coco_device.cuh\"\n#include \"coco_scatter.cuh\"\n#include \"coco_send.cuh\"\n\n",
            COCONET_VERSION, p->exec_name, p->file, n, n == 1 ? "" : "s");
    if (emit_has_member_norm(p))
        fputs("#include \"coco_members.cuh\"\n\n", o);
    if (has_conv(p)) /* its kernel instances: most of a build's time, where unused */
        fputs("#include \"coco_conv.cuh\"\n\n", o);
    /* the parts a build may compile apart (cuda_build_parts): each variant,
     * then the tables */
    for (int i = 0; i < n; i++) {
        fprintf(o, "%s\n", CUDA_PART_VARIANT);
        emit_variant(o, lowered[i], i);
    }
    fprintf(o, "%s\nextern \"C\" {\nint coco_nccl_version = NCCL_VERSION_CODE;\n}\n\n",
            CUDA_PART_TABLES);
    emit_output_alias(variants, n, o);
    fprintf(o, "extern \"C\" {\nextern const char *const coco_schedule_names[];\n"
               "const char *const coco_schedule_names[] = {");
    for (int i = 0; i < n; i++)
        fprintf(o, "\"%s\", ", variants[i]->applied ? variants[i]->applied : "program");
    fprintf(o, "NULL};\n}\n");
}

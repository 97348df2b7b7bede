/* emit_common.c: what the parts of the CUDA code generator share (see
 * emit_cuda.h): its working memory, which nodes are elementwise and stored,
 * lists of node ids,
 * sizes and workspace room as C, the kernels' parameter lists, and the copy
 * of a new value into its tensor. It calls no other part of the generator. */
#include "gen/emit_cuda.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const char *const emit_tname[NTYPE] = {"COCO_FP16", "COCO_BF16", "COCO_FP32", "COCO_FP64"};

void *emit_alloc(Emitter *e, size_t n)
{
    if (e->nscratch == e->capscratch) {
        e->capscratch = e->capscratch ? 2 * e->capscratch : 16;
        void **grown = xmalloc((size_t)e->capscratch * sizeof *grown);
        copy_bytes(grown, e->scratch, (size_t)e->nscratch * sizeof *grown);
        free(e->scratch);
        e->scratch = grown;
    }
    void *block = xcalloc(n ? n : 1, 1);
    e->scratch[e->nscratch++] = block;
    return block;
}

/* Blocks are freed mostly in the reverse order of their making: the look
 * starts from the newest. */
void emit_free(Emitter *e, void *block)
{
    for (int i = e->nscratch - 1; i >= 0; i--)
        if (e->scratch[i] == block) {
            e->scratch[i] = e->scratch[--e->nscratch];
            free(block);
            return;
        }
    BUG("emit_free of a block emit_alloc did not give");
}

void emit_free_all(Emitter *e)
{
    for (int i = 0; i < e->nscratch; i++)
        free(e->scratch[i]);
    free(e->scratch);
    e->scratch = NULL;
    e->nscratch = e->capscratch = 0;
}

int emit_is_elementwise(const Node *n)
{
    return op_info(n->op)->elementwise;
}

const char *emit_ws(const Emitter *e, int id)
{
    return e->nccl_only && e->nccl_only[id] ? "coco_ws_tail(&wst, ctx, " : "coco_ws(&ws, ctx, ";
}

/* Must member i of its segment be written to memory? */
int emit_stored(Emitter *e, int i)
{
    return e->out_index[i] >= 0 || e->state_of[i] >= 0 || e->p->node[i].op == O_UPDATE ||
           e->read_apart[i];
}

void emit_flat_set(Emitter *e, int id)
{
    if (!e->flat[id])
        e->flat_ids[e->nflat++] = id;
    e->flat[id] = 1;
}

/* Clears what was set (clearing all nodes for each kernel would take time
 * quadratic in the nodes). */
void emit_flat_clear(Emitter *e)
{
    for (int k = 0; k < e->nflat; k++)
        e->flat[e->flat_ids[k]] = 0;
    e->nflat = 0;
}

/* A size expression ("4*H") as C, its names read from the size array. */
void emit_size_expr(Emitter *e, const char *text)
{
    for (const char *c = text; *c;) {
        if (isalpha((unsigned char)*c) || *c == '_') {
            const char *s = c;
            while (isalnum((unsigned char)*c) || *c == '_')
                c++;
            fprintf(e->o, "S_%.*s", (int)(c - s), s);
        } else {
            fputc(*c++, e->o);
        }
    }
}

/* The elements every rank reserves in the workspace for node n's value:
 * its count, or for a value sliced along d the longest part (every rank's
 * chunk). Workspace sizes must not depend on the rank: NCCL's collectives
 * on symmetric windows and the peer-memory kernels address a buffer by its
 * offset, which has to be the same on every rank. */
const char *emit_room(Emitter *e, const Node *n)
{
    if (n->layout.kind != L_SLICED)
        return arena_printf(e->p->arena, "coco_count(h%d)", n->id);
    const char *g = group_name(n->group);
    return arena_printf(e->p->arena, "(coco_padded_count(h%d, %d, G_%s) / G_%s)", n->id,
                        n->layout.dim, g, g);
}

/* Are a and b of one local shape, for every size and rank? */
int emit_same_local_shape(const Node *a, const Node *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int k = 0; k < a->ndim; k++) {
        int sa = a->layout.kind == L_SLICED && a->layout.dim == k;
        int sb = b->layout.kind == L_SLICED && b->layout.dim == k;
        if (sa != sb || (sa && a->group != b->group) || a->dim[k].n != b->dim[k].n)
            return 0;
        if ((a->dim[k].text == NULL) != (b->dim[k].text == NULL) ||
            (a->dim[k].text && strcmp(a->dim[k].text, b->dim[k].text)))
            return 0;
    }
    return 1;
}

/* Is d the literal extent 1 (as a Keep reduction leaves it)? */
static int literal_one(const Dim *d)
{
    return d->text && !strcmp(d->text, "1");
}

static int sliced_on(const Node *n, int k)
{
    return n->layout.kind == L_SLICED && n->layout.dim == k;
}

/* Are dimension ka of a and kb of b one local extent, for every size and rank? */
static int same_dim(const Node *a, int ka, const Node *b, int kb)
{
    int sa = sliced_on(a, ka), sb = sliced_on(b, kb);
    const char *ta = a->dim[ka].text, *tb = b->dim[kb].text;
    return sa == sb && (!sa || a->group == b->group) && a->dim[ka].n == b->dim[kb].n &&
           (ta == NULL) == (tb == NULL) && (!ta || !strcmp(ta, tb));
}

int emit_row_reduction(Program *p, const Node *n)
{
    if ((n->op != O_NORM && n->op != O_REDUCE_TENSOR) || !n->keepdim || n->ndim < 1)
        return 0;
    const Node *x = node_of(p, n->in[0]);
    return n->axis == x->ndim - 1 && !literal_one(&x->dim[n->axis]);
}

int emit_row_shaped(const Node *x, const Node *s)
{
    int last = s->ndim - 1;
    if (x->ndim != s->ndim || last < 0 || !literal_one(&x->dim[last]) ||
        literal_one(&s->dim[last]) || sliced_on(x, last))
        return 0;
    for (int k = 0; k < last; k++)
        if (!same_dim(x, k, s, k))
            return 0;
    return 1;
}

int emit_col_shaped(const Node *x, const Node *s)
{
    int lx = x->ndim - 1, ls = s->ndim - 1;
    if (lx < 0 || x->ndim > s->ndim || literal_one(&s->dim[ls]) || !same_dim(x, lx, s, ls))
        return 0;
    for (int k = 0; k < lx; k++)
        if (!literal_one(&x->dim[k]))
            return 0;
    return 1;
}

/* Sorts ids[0..n) ascending: program order. */
void emit_program_order(int *ids, int n)
{
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && ids[b - 1] > ids[b]; b--) {
            int t = ids[b];
            ids[b] = ids[b - 1];
            ids[b - 1] = t;
        }
}

int emit_in_list(const int *ids, int n, int id)
{
    for (int k = 0; k < n; k++)
        if (ids[k] == id)
            return 1;
    return 0;
}

int emit_needed_outside(Emitter *e, const int *m, int nm, int id)
{
    if (e->out_index[id] >= 0 || e->state_of[id] >= 0)
        return 1;
    for (int r = e->reader_first[id]; r < e->reader_first[id + 1]; r++)
        if (!emit_in_list(m, nm, e->reader[r]))
            return 1;
    return 0;
}

/* reader_first and reader: each node's live readers (a reader reading it
 * twice is listed twice), so that questions about a value's readers take
 * time in its readers, not in the program's nodes. */
void emit_list_readers(Emitter *e)
{
    Program *p = e->p;
    e->reader_first = emit_alloc(e, ((size_t)p->nnode + 2) * sizeof(int));
    e->reader = emit_alloc(e, ((size_t)p->nnode * MAXIN + 1) * sizeof(int));
    for (int j = 0; j < p->nnode; j++)
        for (int k = 0; !p->node[j].dead && k < p->node[j].nin; k++)
            e->reader_first[p->node[j].in[k] + 2]++;
    for (int i = 0; i < p->nnode; i++)
        e->reader_first[i + 2] += e->reader_first[i + 1];
    for (int j = 0; j < p->nnode; j++)
        for (int k = 0; !p->node[j].dead && k < p->node[j].nin; k++)
            e->reader[e->reader_first[p->node[j].in[k] + 1]++] = j;
}

int emit_outside_operands(Emitter *e, const int *m, int nm, int *ids)
{
    int n = 0;
    for (int k = 0; k < nm; k++) {
        Node *x = node_of(e->p, m[k]);
        if (!emit_is_elementwise(x))
            continue;
        for (int j = 0; j < x->nin; j++) {
            Node *in = node_of(e->p, x->in[j]);
            if (emit_in_list(m, nm, in->id) || in->op == O_CONST || (x->op == O_UPDATE && j == 0))
                continue;
            n = emit_add_once(ids, n, in->id);
        }
    }
    return n;
}

void emit_param(Emitter *e, int mode, const char *typed, const char *host, const char *forward,
                int id)
{
    fprintf(e->o, mode == EMIT_TYPED ? typed : mode == EMIT_HOST ? host : forward, id);
}

void emit_input_param(Emitter *e, const Node *x, int mode)
{
    FILE *o = e->o;
    if (x->op == O_SCALAR && mode == EMIT_TYPED)
        fprintf(o, ", double s%d", x->id);
    else if (x->op == O_SCALAR && mode == EMIT_FORWARD)
        fprintf(o, ", s%d", x->id);
    else if (x->op == O_SCALAR && x->has_value)
        fprintf(o, ", %.17g", x->value);
    else if (x->op == O_SCALAR)
        fprintf(o, ", args->scalar[%d]", e->in_index[x->id]);
    else
        fprintf(o, mode == EMIT_TYPED  ? ", const void *x%d, CocoShape h%d"
                   : mode == EMIT_HOST ? ", b%d, h%d"
                                       : ", x%d, h%d", x->id, x->id);
}

/* Appends id to ids[0..n) unless it is there; the new count. */
int emit_add_once(int *ids, int n, int id)
{
    for (int j = 0; j < n; j++)
        if (ids[j] == id)
            return n;
    ids[n] = id;
    return n + 1;
}

/* The member whose shape the segment iterates over (0-dim only: -1). */
int emit_segment_shape(Emitter *e, int seg)
{
    int best = -1;
    for (int k = e->seg_first[seg]; k < e->seg_first[seg + 1]; k++) {
        int i = e->seg_member[k];
        if (e->p->node[i].ndim && (best < 0 || e->p->node[i].ndim > e->p->node[best].ndim))
            best = i;
    }
    return best;
}

/* A value that is both an output and a tensor's new value is computed into
 * the output buffer, then copied into the tensor; a scattered tensor's, into
 * the members (emit_scat_outputs fills the output buffer at the end). */
void emit_state_copy(Emitter *e, const Node *n)
{
    int t = e->state_of[n->id];
    if (t < 0 || e->out_index[n->id] < 0 || node_of(e->p, t)->nmember)
        return;
    fprintf(e->o, "    if (args->input[%d] != b%d) /* not one buffer (coco_output_alias) */\n"
                  "        COCO_CUDA(ctx, \"Update\", %d, cudaMemcpyAsync(args->input[%d], b%d, "
                  "coco_count(h%d) * coco_type_size(%s), cudaMemcpyDeviceToDevice, st));\n",
            e->in_index[t], n->id, n->pos.line, e->in_index[t], n->id, n->id,
            emit_tname[n->type]);
}

/* Before a vector's element loop: c, the coordinates of its first element
 * i0 (divisions, once a vector). */
static void emit_coords_first(Emitter *e, const char *indent)
{
    fprintf(e->o, "%slong c[COCO_MAXDIM];\n%scoco_coords(it, i0, c);\n", indent, indent);
}

/* At the top of the element loop: c advanced to element i0 + v (a step with
 * carries from the last, for v > 0; the loop is unrolled). */
static void emit_coords_next(Emitter *e, const char *indent)
{
    fprintf(e->o, "%sif (v)\n%s    coco_coords_next(it, c);\n", indent, indent);
}

/* The same in a kernel with a LIN parameter (e->lin): under LIN, the indices
 * come from i alone (emit_value.c), and the coordinates are not computed. */
static void emit_coords_first_lin(Emitter *e, const char *indent)
{
    fprintf(e->o, "%slong c[COCO_MAXDIM];\n%sif (!LIN)\n%s    coco_coords(it, i0, c);\n", indent,
            indent, indent);
}

static void emit_coords_next_lin(Emitter *e, const char *indent)
{
    fprintf(e->o, "%sif (!LIN && v)\n%s    coco_coords_next(it, c);\n", indent, indent);
}

void emit_vector_loop_open(Emitter *e, int coords, const char *indent)
{
    char inner[64];
    snprintf(inner, sizeof inner, "%s    ", indent);
    if (coords && e->lin)
        emit_coords_first_lin(e, indent);
    else if (coords)
        emit_coords_first(e, indent);
    fprintf(e->o, "#pragma unroll\n%sfor (int v = 0; v < V; v++) {\n%sconst long i = i0 + v;\n"
                  "%s(void)i;\n", indent, inner, inner);
    if (coords && e->lin)
        emit_coords_next_lin(e, inner);
    else if (coords)
        emit_coords_next(e, inner);
}

/* Is x read with broadcasting, at an index found from the coordinates (or,
 * under LIN, from the element's linear index: emit_lin_*)? */
int emit_read_broadcast(Emitter *e, const Node *x)
{
    return x->op != O_SCALAR && x->op != O_CONST && x->ndim && !e->flat[x->id];
}

/* Under LIN, before the element loops: broadcast operand x's count lm<x>
 * (coco_lin_bcast: its index for element i is i modulo that), and a
 * Dropout's first logical index lg<id> (coco_lin_global). */
void emit_lin_count(Emitter *e, int x)
{
    fprintf(e->o, "    const long lm%d = LIN ? coco_count(h%d) : 1;\n    (void)lm%d;\n", x, x, x);
}

void emit_lin_base(Emitter *e, int id)
{
    fprintf(e->o, "    const long lg%d = LIN ? coco_lin_gbase(h%d) : 0;\n    (void)lg%d;\n", id, id,
            id);
}

/* Under LIN, before a vector's element loop: x's index for its first
 * element i0, lq<x>, and its elements for the vector, lb<x>
 * (coco_ld_wrapped: one vector load where they lie whole in x), which the
 * element loop reads as a flat operand's (emit_operand). */
void emit_lin_first(Emitter *e, int x, const char *indent)
{
    const char *t = emit_tname[node_of(e->p, x)->type];
    fprintf(e->o, "%sconst long lq%d = LIN ? coco_mod(i0, lm%d) : 0;\n%s(void)lq%d;\n", indent, x,
            x, indent, x);
    fprintf(e->o, "%salignas(16) CocoRaw<%s> lb%d[V];\n%sif (LIN)\n%s    coco_ld_wrapped<V, %s>(x%d, "
            "lq%d, lm%d, lb%d);\n", indent, t, x, indent, indent, t, x, x, x, x);
}

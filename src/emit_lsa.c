/* emit_lsa.c: a FusedAllReduce generated as one kernel over the peers'
 * memory (NCCL device API, rt/kernels/coco_lsa.cuh), beside its NCCL
 * ReduceScatter + kernel + AllGather lowering, chosen at run time.
 *
 * A fusion qualifies when it is, in program order, one ReduceScatter on
 * WORLD along dimension 0 (so every rank's slice is a contiguous range),
 * then elementwise computations of that slice's shape (or 0-dim), Slices
 * along dimension 0 of whole tensors, and AllGathers along dimension 0 of
 * values computed inside; and when its members read nothing computed
 * between its first member and themselves outside it. The kernel:
 *   barrier; for its slice (two-shot) or every slice (one-shot): load the
 *   slice from every peer and reduce in double in rank order (the CPU
 *   executor's order, so results are bit for bit the CPU's), compute the
 *   members in registers, store the gathered values into every peer's
 *   buffer (one-shot: its own) and the members needed later locally;
 *   barrier.
 * One-shot is generated only when no member is kept locally, none reads a
 * sliced operand and none is a Dropout (whose mask depends on the slice). */
#include "emit_cuda.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int *m;    /* members, in program order */
    int nm;
    int rs;    /* the ReduceScatter */
    int seg;   /* the segment number the members take while the kernel is written */
} Lsa;

static int members(Emitter *e, int f, int *m)
{
    int n = 0;
    for (int i = 0; i < e->p->nnode; i++)
        if (e->p->node[i].fusion == f && !e->p->node[i].dead)
            m[n++] = i;
    return n;
}

static int is_member(const Lsa *l, int id)
{
    for (int k = 0; k < l->nm; k++)
        if (l->m[k] == id)
            return 1;
    return 0;
}

/* Is a member needed outside the kernel (an output, a tensor's new value,
 * or read by a node outside the fusion)? AllGathers store into the window. */
static int kept(Emitter *e, const Lsa *l, int id)
{
    Program *p = e->p;
    if (e->out_index[id] >= 0 || e->state_of[id] >= 0)
        return 1;
    for (int j = 0; j < p->nnode; j++) {
        Node *u = &p->node[j];
        for (int k = 0; !u->dead && !is_member(l, j) && k < u->nin; k++)
            if (u->in[k] == id)
                return 1;
    }
    return 0;
}

static int unsliced(const Node *n)
{
    return n->layout.kind != L_SLICED;
}

static int member_allowed(Emitter *e, const Lsa *l, const Node *rs, const Node *n)
{
    Program *p = e->p;
    if (n->op == O_ALLGATHER)
        return n->group == G_WORLD && is_member(l, n->in[0]) &&
               node_of(p, n->in[0])->layout.kind == L_SLICED &&
               node_of(p, n->in[0])->layout.dim == 0 && !kept(e, l, n->in[0]);
    if (n->op == O_SLICE)
        return n->axis == 0 && unsliced(node_of(p, n->in[0])) &&
               !is_member(l, n->in[0]) && emit_same_local_shape(n, rs);
    if (emit_is_elementwise(n))
        return n->ndim == 0 || emit_same_local_shape(n, rs);
    return 0;
}

/* Nodes outside the fusion that only its members read join the kernel:
 * Slices along dimension 0 (Slice(p, 0) of a Replicated p is a load at the
 * slice's start) and 0-dim computations (1 - beta1), computed in registers. */
static int absorbable(Emitter *e, const Lsa *l, const Node *x)
{
    if (x->fusion >= 0 || is_member(l, x->id) || x->dead)
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
            if (kept(e, l, x->id))
                l->nm--;
        }
    }
    for (int a = 1; a < l->nm; a++) /* program order */
        for (int b = a; b > 0 && l->m[b - 1] > l->m[b]; b--) {
            int t = l->m[b];
            l->m[b] = l->m[b - 1];
            l->m[b - 1] = t;
        }
}

/* Fills l with fusion f's members; does it qualify? */
static int plan(Emitter *e, int f, Lsa *l)
{
    Program *p = e->p;
    l->m = xmalloc((size_t)p->nnode * sizeof(int));
    l->nm = members(e, f, l->m);
    l->rs = l->nm ? l->m[0] : -1;
    l->seg = e->nsegment + 1 + f;
    if (p->fusion[f].kind != F_ALLREDUCE || p->fusion[f].dead || l->nm < 2)
        return 0;
    absorb_helpers(e, l);
    Node *rs = node_of(p, l->rs);
    Node *x = rs->op == O_REDUCESCATTER ? node_of(p, rs->in[0]) : NULL;
    if (l->m[0] != rs->id || !x || rs->group != G_WORLD || rs->layout.kind != L_SLICED ||
        rs->layout.dim != 0 || !unsliced(x) || x->ndim == 0 || kept(e, l, rs->id))
        return 0;
    for (int k = 1; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if (!member_allowed(e, l, rs, n))
            return 0;
        for (int j = 0; j < n->nin; j++) {
            Node *in = node_of(p, n->in[j]);
            if (!is_member(l, in->id) && in->id > l->rs && op_info(in->op)->kind != K_LEAF)
                return 0;
        }
    }
    return 1;
}

/* Marks in e->lsa_node the nodes fusion f's kernel computes. */
void lsa_claim(Emitter *e, int f)
{
    Lsa l;
    plan(e, f, &l);
    for (int k = 0; k < l.nm; k++)
        e->lsa_node[l.m[k]] = f;
    free(l.m);
}

int lsa_eligible(Emitter *e, int f)
{
    Lsa l;
    int ok = plan(e, f, &l);
    free(l.m);
    return ok;
}

/* Memory and scalar operands the elementwise members read from outside. */
static int outside_inputs(Emitter *e, const Lsa *l, int *ids)
{
    Program *p = e->p;
    int n = 0;
    for (int k = 0; k < l->nm; k++) {
        Node *m = node_of(p, l->m[k]);
        if (!emit_is_elementwise(m))
            continue;
        for (int j = 0; j < m->nin; j++) {
            int x = m->in[j];
            if (is_member(l, x) || node_of(p, x)->op == O_CONST || (m->op == O_UPDATE && j == 0))
                continue;
            n = emit_add_once(ids, n, x);
        }
    }
    return n;
}

static int has_op(Emitter *e, const Lsa *l, Op op)
{
    for (int k = 0; k < l->nm; k++)
        if (node_of(e->p, l->m[k])->op == op)
            return 1;
    return 0;
}

/* May every rank compute every slice (one-shot)? */
static int oneshot_allowed(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    Program *p = e->p;
    Node *rs = node_of(p, l->rs);
    if (has_op(e, l, O_DROPOUT))
        return 0;
    for (int k = 1; k < l->nm; k++)
        if (node_of(p, l->m[k])->op != O_ALLGATHER && kept(e, l, l->m[k]))
            return 0;
    for (int k = 0; k < nin; k++) {
        Node *x = node_of(p, ins[k]);
        if (x->op != O_SCALAR && x->ndim >= rs->ndim)
            return 0;
    }
    return 1;
}

/* The widest V for the element sizes of the vector operands. */
static int widest(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    Program *p = e->p;
    size_t narrow = type_size(node_of(p, node_of(p, l->rs)->in[0])->type);
    for (int k = 0; k < nin; k++)
        if (e->flat[ins[k]] && type_size(node_of(p, ins[k])->type) < narrow)
            narrow = type_size(node_of(p, ins[k])->type);
    for (int k = 1; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if ((n->op == O_ALLGATHER || n->op == O_SLICE || kept(e, l, n->id)) && n->ndim &&
            type_size(n->type) < narrow)
            narrow = type_size(n->type);
    }
    return (int)(16 / narrow);
}

static void mark_flat(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    memset(e->flat, 0, (size_t)e->p->nnode);
    for (int k = 0; k < nin; k++) {
        Node *x = node_of(e->p, ins[k]);
        if (x->op != O_SCALAR && emit_same_local_shape(x, node_of(e->p, l->rs)))
            e->flat[x->id] = 1;
    }
}

static int needs_coords(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    for (int k = 0; k < nin; k++)
        if (node_of(e->p, ins[k])->op != O_SCALAR && !e->flat[ins[k]])
            return 1;
    for (int k = 0; k < l->nm; k++)
        if (node_of(e->p, l->m[k])->op == O_DROPOUT && node_of(e->p, l->m[k])->ndim)
            return 1;
    return 0;
}

/* What the kernel and its launch both need: fusion f's plan, the operands
 * read from outside (*ins, freed by the caller with l->m) and which are flat. */
static int prepare(Emitter *e, int f, Lsa *l, int **ins)
{
    plan(e, f, l);
    *ins = xmalloc((size_t)e->p->nnode * sizeof(int));
    int nin = outside_inputs(e, l, *ins);
    mark_flat(e, l, *ins, nin);
    return nin;
}

/* ---- the kernel ---- */

/* The parameters (typed = 1) or the host's arguments (typed = 0). */
static void emit_params(Emitter *e, const Lsa *l, const int *ins, int nin, int typed)
{
    Program *p = e->p;
    FILE *o = e->o;
    Node *rs = node_of(p, l->rs);
    int w = 1; /* lo[] index of the next window buffer */
    fprintf(o, typed ? "ncclDevComm dc, ncclWindow_t win, long n, CocoShape it, "
                       "unsigned long long seed, int rank, size_t o%d"
                     : "dc, win, n, it, args->seed, rank, lo[0]", rs->in[0]);
    for (int k = 1; k < l->nm; k++)
        if (node_of(p, l->m[k])->op == O_ALLGATHER) {
            if (typed)
                fprintf(o, ", size_t o%d", l->m[k]);
            else
                fprintf(o, ", lo[%d]", w++);
        }
    for (int k = 1; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if (n->op == O_SLICE)
            fprintf(o, typed ? ", const void *z%d" : ", b%d", n->in[0]);
    }
    for (int k = 0; k < nin; k++) {
        Node *x = node_of(p, ins[k]);
        if (x->op == O_SCALAR && typed)
            fprintf(o, ", double s%d", x->id);
        else if (x->op == O_SCALAR && x->has_value)
            fprintf(o, ", %.17g", x->value);
        else if (x->op == O_SCALAR)
            fprintf(o, ", args->scalar[%d]", e->in_index[x->id]);
        else
            fprintf(o, typed ? ", const void *x%d, CocoShape h%d" : ", b%d, h%d", x->id, x->id);
    }
    for (int k = 1; k < l->nm; k++)
        if (node_of(p, l->m[k])->op != O_ALLGATHER && kept(e, l, l->m[k]))
            fprintf(o, typed ? ", void *y%d" : ", b%d", l->m[k]);
    for (int k = 1; k < l->nm; k++)
        if (node_of(p, l->m[k])->op == O_DROPOUT && node_of(p, l->m[k])->ndim)
            fprintf(o, typed ? ", CocoShape h%d" : ", h%d", l->m[k]);
}

static void emit_loads(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    Program *p = e->p;
    FILE *o = e->o;
    Node *rs = node_of(p, l->rs), *x = node_of(p, rs->in[0]);
    fprintf(o, "            double l%d[V];\n            coco_lsa_reduce<V, %s, P>(win, o%d, base, "
               "i0, n, %d, l%d);\n", rs->id, emit_tname[x->type], x->id,
            rs->redop == R_SUM ? 0 : rs->redop == R_PROD ? 1 : rs->redop == R_MAX ? 2 : 3, rs->id);
    for (int k = 1; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if (n->op == O_SLICE)
            fprintf(o, "            alignas(16) CocoRaw<%s> l%d[V];\n"
                       "            coco_ldv<V, %s>((const char *)z%d + base * %zu, i0, n, l%d);\n",
                    emit_tname[n->type], n->id, emit_tname[n->type], n->in[0], type_size(n->type),
                    n->id);
        else if (n->op == O_ALLGATHER || (kept(e, l, n->id) && n->ndim))
            fprintf(o, "            alignas(16) CocoRaw<%s> g%d[V];\n", emit_tname[n->type], n->id);
    }
    for (int k = 0; k < nin; k++)
        if (e->flat[ins[k]])
            fprintf(o, "            alignas(16) CocoRaw<%s> l%d[V];\n"
                       "            coco_ldv<V, %s>(x%d, i0, n, l%d);\n",
                    emit_tname[node_of(p, ins[k])->type], ins[k],
                    emit_tname[node_of(p, ins[k])->type], ins[k], ins[k]);
}

static void emit_member(Emitter *e, const Lsa *l, const Node *n)
{
    FILE *o = e->o;
    if (n->op == O_REDUCESCATTER)
        fprintf(o, "                double r%d = coco_round(l%d[v], %s);\n", n->id, n->id,
                emit_tname[n->type]);
    else if (n->op == O_SLICE)
        fprintf(o, "                double r%d = coco_ld(l%d, v, %s);\n", n->id, n->id,
                emit_tname[n->type]);
    else if (n->op == O_ALLGATHER)
        fprintf(o, "                coco_st(g%d, v, %s, r%d);\n", n->id, emit_tname[n->type],
                n->in[0]);
    else
        emit_value_statement(e, l->seg, n);
    if (n->op == O_ALLGATHER || !kept(e, l, n->id))
        return;
    if (n->ndim)
        fprintf(o, "                coco_st(g%d, v, %s, r%d);\n", n->id, emit_tname[n->type],
                n->id);
    else
        fprintf(o, "                if (i == 0 && part == rank)\n"
                   "                    coco_st(y%d, 0, %s, r%d);\n", n->id, emit_tname[n->type],
                n->id);
}

static void emit_stores(Emitter *e, const Lsa *l)
{
    Program *p = e->p;
    FILE *o = e->o;
    for (int k = 1; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if (n->op == O_ALLGATHER)
            fprintf(o, "            coco_lsa_store<V, %s, P>(win, o%d, base, i0, n, ONESHOT ? "
                       "rank : 0, ONESHOT ? rank : P - 1, g%d);\n",
                    emit_tname[n->type], n->id, n->id);
        else if (kept(e, l, n->id) && n->ndim)
            fprintf(o, "            coco_stv<V, %s>(y%d, i0, n, g%d);\n", emit_tname[n->type],
                    n->id, n->id);
    }
}

static void emit_comment(Emitter *e, int f, const Lsa *l)
{
    Program *p = e->p;
    fprintf(e->o, "// FusedAllReduce %s as one kernel over the peers' memory:", p->fusion[f].name);
    for (int k = 0; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if (n->named || kept(e, l, n->id) || n->op == O_ALLGATHER)
            fprintf(e->o, " %s (line %d)", n->name, n->pos.line);
    }
    fputc('\n', e->o);
}

void lsa_emit_kernel(Emitter *e, int f)
{
    Program *p = e->p;
    FILE *o = e->o;
    Lsa l;
    int *ins;
    int nin = prepare(e, f, &l, &ins);
    int *saved = xmalloc((size_t)l.nm * sizeof(int));
    for (int k = 0; k < l.nm; k++) {
        saved[k] = e->segment[l.m[k]];
        e->segment[l.m[k]] = l.seg;
    }
    emit_comment(e, f, &l);
    fprintf(o, "template <int V, int P, int ONESHOT>\n__global__ void __launch_bounds__(512) "
               "%s_f%d(", e->v, f);
    emit_params(e, &l, ins, nin, 1);
    fprintf(o, ")\n{\n    ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, "
               "ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};\n"
               "    bar.sync(ncclCoopCta(), cuda::memory_order_acquire);\n"
               "    (void)seed;\n    (void)it;\n"
               "    for (int part = ONESHOT ? 0 : rank; part < (ONESHOT ? P : rank + 1); part++) {\n"
               "        const long base = part * n;\n"
               "        for (long i0 = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V; i0 < n;\n"
               "             i0 += (long)gridDim.x * blockDim.x * V) {\n");
    emit_loads(e, &l, ins, nin);
    fprintf(o, "#pragma unroll\n            for (int v = 0; v < V; v++) {\n"
               "                const long i = i0 + v;\n                (void)i;\n");
    if (needs_coords(e, &l, ins, nin))
        fprintf(o, "                long c[COCO_MAXDIM];\n                coco_coords(it, i, c);\n");
    for (int k = 0; k < l.nm; k++)
        emit_member(e, &l, node_of(p, l.m[k]));
    fprintf(o, "            }\n");
    emit_stores(e, &l);
    fprintf(o, "        }\n    }\n    bar.sync(ncclCoopCta(), cuda::memory_order_release);\n}\n\n");
    /* the host's dispatch over the instances */
    int vmax = widest(e, &l, ins, nin), one = oneshot_allowed(e, &l, ins, nin);
    fprintf(o, "static int %s_f%d_go(int V, int P, int ONESHOT, dim3 grid, dim3 block, "
               "cudaStream_t st, ", e->v, f);
    emit_params(e, &l, ins, nin, 1);
    fprintf(o, ")\n{\n");
    static const int peers[] = {2, 4, 8};
    for (int vi = 0; vi < (vmax > 1 ? 2 : 1); vi++)
        for (int pi = 0; pi < 3; pi++)
            for (int os = 0; os <= one; os++) {
                int v = vi ? 1 : vmax;
                fprintf(o, "    if (V == %d && P == %d && ONESHOT == %d)\n        %s_f%d<%d, %d, %d>"
                           "<<<grid, block, 0, st>>>(", v, peers[pi], os, e->v, f, v, peers[pi], os);
                fprintf(o, "dc, win, n, it, seed, rank, o%d", node_of(p, l.rs)->in[0]);
                for (int k = 1; k < l.nm; k++)
                    if (node_of(p, l.m[k])->op == O_ALLGATHER)
                        fprintf(o, ", o%d", l.m[k]);
                for (int k = 1; k < l.nm; k++)
                    if (node_of(p, l.m[k])->op == O_SLICE)
                        fprintf(o, ", z%d", node_of(p, l.m[k])->in[0]);
                for (int k = 0; k < nin; k++)
                    fprintf(o, node_of(p, ins[k])->op == O_SCALAR ? ", s%d" : ", x%d, h%d", ins[k],
                            ins[k]);
                for (int k = 1; k < l.nm; k++)
                    if (node_of(p, l.m[k])->op != O_ALLGATHER && kept(e, &l, l.m[k]))
                        fprintf(o, ", y%d", l.m[k]);
                for (int k = 1; k < l.nm; k++)
                    if (node_of(p, l.m[k])->op == O_DROPOUT && node_of(p, l.m[k])->ndim)
                        fprintf(o, ", h%d", l.m[k]);
                fprintf(o, ");\n    else\n");
            }
    fprintf(o, "        return 1;\n    return 0;\n}\n\n");
    for (int k = 0; k < l.nm; k++)
        e->segment[l.m[k]] = saved[k];
    free(saved);
    free(ins);
    free(l.m);
}

/* ---- the launch, inside the entry point ---- */

/* The buffers of the window: the reduced input first, then the gathered. */
static int emit_window_buffers(Emitter *e, const Lsa *l)
{
    Program *p = e->p;
    FILE *o = e->o;
    int x = node_of(p, l->rs)->in[0], count = 1;
    fprintf(o, "        const void *lb[] = {b%d", x);
    for (int k = 1; k < l->nm; k++)
        if (node_of(p, l->m[k])->op == O_ALLGATHER)
            fprintf(o, ", b%d", l->m[k]), count++;
    fprintf(o, "};\n        const size_t lbytes[] = {(size_t)coco_count(h%d) * %zu", x,
            type_size(node_of(p, x)->type));
    for (int k = 1; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if (n->op == O_ALLGATHER)
            fprintf(o, ", (size_t)coco_count(h%d) * %zu", n->id, type_size(n->type));
    }
    fprintf(o, "};\n        size_t lo[%d];\n", count);
    return count;
}

/* Pointers whose alignment decides V: every vector operand at a slice's start. */
static int emit_vector_buffers(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    Program *p = e->p;
    FILE *o = e->o;
    int count = 0, x = node_of(p, l->rs)->in[0];
    char sizes[4096] = "";
    size_t used = 0;
#define ADD(fmt, id, size)                                                                        \
    do {                                                                                         \
        fprintf(o, "%s" fmt, count++ ? ", " : "", id, size);                                     \
        used += (size_t)snprintf(sizes + used, sizeof sizes - used, "%s%zu",                      \
                                 used ? ", " : "", (size_t)(size));                               \
    } while (0)
    fprintf(o, "        const void *vp[] = {");
    ADD("(const char *)b%d + n * %zu", x, type_size(node_of(p, x)->type));
    for (int k = 1; k < l->nm; k++) {
        Node *n = node_of(p, l->m[k]);
        if (n->op == O_ALLGATHER)
            ADD("(const char *)b%d + n * %zu", n->id, type_size(n->type));
        else if (n->op == O_SLICE)
            ADD("(const char *)b%d + n * %zu", n->in[0], type_size(n->type));
        else if (kept(e, l, n->id) && n->ndim)
            ADD("(const char *)b%d + 0 * %zu", n->id, type_size(n->type));
    }
    for (int k = 0; k < nin; k++)
        if (e->flat[ins[k]])
            ADD("(const char *)b%d + 0 * %zu", ins[k], type_size(node_of(p, ins[k])->type));
#undef ADD
    fprintf(o, "};\n        const int vs[] = {%s};\n", sizes);
    return count;
}

void lsa_emit_launch(Emitter *e, int f, int *done_segment)
{
    Program *p = e->p;
    FILE *o = e->o;
    Lsa l;
    int *ins;
    int nin = prepare(e, f, &l, &ins);
    Node *rs = node_of(p, l.rs);
    int vmax = widest(e, &l, ins, nin), one = oneshot_allowed(e, &l, ins, nin);
    fprintf(o, "    { /* line %d: FusedAllReduce %s */\n", rs->pos.line, p->fusion[f].name);
    int nwin = emit_window_buffers(e, &l);
    fprintf(o, "        if (coco_lsa_usable(ctx, G_WORLD, lb, lbytes, lo, %d) && (G_WORLD == 2 || "
               "G_WORLD == 4 || G_WORLD == 8)) {\n", nwin);
    fprintf(o, "        CocoShape it = h%d;\n        long n = coco_count(it);\n", rs->id);
    int nvec = emit_vector_buffers(e, &l, ins, nin);
    fprintf(o, "        int V = coco_pick_vec(%d, vp, vs, %d) == %d ? %d : 1;\n", vmax, nvec, vmax,
            vmax);
    fprintf(o, "        int one = coco_lsa_oneshot(ctx, %d, lbytes[0]);\n", one);
    fprintf(o, "        dim3 grid, block;\n        coco_lsa_grid(ctx, n, V, "
               "&grid, &block);\n"
               "        ncclDevComm dc = *(const ncclDevComm *)ctx->lsa_comm;\n"
               "        ncclWindow_t win = (ncclWindow_t)ctx->lsa_window;\n");
    fprintf(o, "        if (%s_f%d_go(V, (int)G_WORLD, one, grid, block, st, ", e->v, f);
    emit_params(e, &l, ins, nin, 0);
    fprintf(o, "))\n            COCO_FAIL(ctx, \"FusedAllReduce\", %d, \"no kernel instance for "
               "%%ld ranks\", G_WORLD);\n        COCO_LAUNCHED(ctx, \"FusedAllReduce\", %d);\n",
            rs->pos.line, rs->pos.line);
    for (int k = 0; k < l.nm; k++)
        emit_state_copy(e, node_of(p, l.m[k]));
    fprintf(o, "        } else {\n");
    for (int k = 0; k < l.nm; k++)
        emit_node(e, node_of(p, l.m[k]), done_segment);
    fprintf(o, "        }\n    }\n");
    free(ins);
    free(l.m);
}

/* emit_send.c: a fused Send (fuse(..., SendFuse)) generated as one kernel
 * that computes the fused elementwise values and stores the Send's value
 * straight into the receiving rank's buffer over NCCL's device API
 * (rt/kernels/coco_send.cuh says how the two LSA barriers order it), beside
 * its NCCL lowering (the members' kernels, then ncclSend/ncclRecv), chosen
 * at run time in the same entry point: the kernel when the receiver's memory
 * is reachable (a device communicator, the buffers in its window, not
 * COCONET_FUSED=nccl); a Send to the rank itself (one group) is the kernel
 * storing locally.
 *
 * A fusion qualifies when its members are, besides the one Send: elementwise
 * computations of the Send's local shape (or 0-dim), and Slices along
 * dimension 0 of whole tensors computed outside (loaded at the slice's
 * start); Slices and 0-dim computations outside that only members read join
 * it; no member reads the Send's value, and none reads a value computed
 * outside after the first member. Each thread takes V consecutive elements
 * (16-byte loads and stores where every flat buffer allows), computes each
 * operation as emit_value.c says (the CPU executor's bits) and stores the
 * sent values and the members needed later. */
#include "gen/emit_cuda.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int *m;   /* members in program order (absorbed helpers included) */
    int nm;
    int send; /* the Send */
    int *ins; /* operands read from outside (memory or Scalars) */
    int nin;
    int seg;  /* the segment number members take while the kernel is written */
} SendPlan;

static Node *nd(Emitter *e, int id)
{
    return node_of(e->p, id);
}

static int is_member(const SendPlan *s, int id)
{
    return emit_in_list(s->m, s->nm, id);
}

static int kept(Emitter *e, const SendPlan *s, int id)
{
    return emit_needed_outside(e, s->m, s->nm, id);
}

/* Members stored to local memory: kept ones, but the Send (its value goes
 * to the receiver). */
static int stores_local(Emitter *e, const SendPlan *s, int id)
{
    return id != s->send && kept(e, s, id);
}

/* Does id's value live in a scattered tensor's members (no one buffer)? */
static int scattered(Emitter *e, int id)
{
    Node *n = nd(e, id);
    return (n->op == O_INPUT && n->nmember) ||
           (e->state_of[id] >= 0 && nd(e, e->state_of[id])->nmember);
}

/* A Slice the kernel can load at the slice's start: along dimension 0 of a
 * whole tensor computed outside, with the Send's local shape. */
static int loadable_slice(Emitter *e, const SendPlan *s, const Node *send, const Node *n)
{
    Node *x = nd(e, n->in[0]);
    return n->op == O_SLICE && n->axis == 0 && x->layout.kind != L_SLICED &&
           x->ndim == n->ndim && !is_member(s, x->id) && emit_same_local_shape(n, send);
}

/* Such Slices and 0-dim computations outside any fusion that only members
 * read join the kernel. */
static void absorb_helpers(Emitter *e, SendPlan *s)
{
    Node *send = nd(e, s->send);
    for (int k = 0; k < s->nm; k++) { /* s->nm grows: absorbed nodes are scanned too */
        Node *n = nd(e, s->m[k]);
        for (int j = 0; j < n->nin; j++) {
            Node *x = nd(e, n->in[j]);
            if (x->fusion >= 0 || x->dead || is_member(s, x->id) ||
                !(loadable_slice(e, s, send, x) ||
                  (emit_is_elementwise(x) && x->ndim == 0 && x->op != O_UPDATE)))
                continue;
            s->m[s->nm++] = x->id;
            if (kept(e, s, x->id))
                s->nm--;
        }
    }
    emit_program_order(s->m, s->nm);
}

/* May member n be computed in the kernel of Send `send`? */
static int member_allowed(Emitter *e, const SendPlan *s, const Node *send, const Node *n)
{
    if (n->id == send->id)
        return 1;
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] == send->id)
            return 0; /* it needs the received value */
    if (n->op == O_SLICE)
        return loadable_slice(e, s, send, n);
    if (emit_is_elementwise(n))
        return n->ndim == 0 || emit_same_local_shape(n, send);
    return 0;
}

/* Fills s->m and s->send from fusion f; does the fusion qualify? */
static int plan_members(Emitter *e, int f, SendPlan *s)
{
    Program *p = e->p;
    s->send = -1;
    for (int i = 0; i < p->nnode; i++) {
        if (p->node[i].fusion != f || p->node[i].dead)
            continue;
        s->m[s->nm++] = i;
        if (p->node[i].op == O_SEND) {
            if (s->send >= 0)
                return 0;
            s->send = i;
        }
    }
    if (p->fusion[f].kind != F_SEND || p->fusion[f].dead || s->send < 0 ||
        !is_member(s, nd(e, s->send)->in[0]))
        return 0;
    absorb_helpers(e, s);
    Node *send = nd(e, s->send);
    for (int k = 0; k < s->nm; k++) {
        Node *n = nd(e, s->m[k]);
        if (!member_allowed(e, s, send, n) || scattered(e, n->id))
            return 0;
        for (int j = 0; j < n->nin; j++) {
            Node *in = nd(e, n->in[j]);
            if (scattered(e, in->id))
                return 0;
            if (!is_member(s, in->id) && in->id > s->m[0] && op_info(in->op)->kind != K_LEAF)
                return 0; /* computed after the kernel's launch */
        }
    }
    return 1;
}

/* Operands the members read from outside, each once; marks the flat ones
 * (the Send's local shape: vector loads). */
static void plan_inputs(Emitter *e, SendPlan *s)
{
    Node *send = nd(e, s->send);
    emit_flat_clear(e);
    s->nin = emit_outside_operands(e, s->m, s->nm, s->ins);
    for (int k = 0; k < s->nin; k++) {
        Node *x = nd(e, s->ins[k]);
        if (x->op != O_SCALAR && emit_same_local_shape(x, send))
            emit_flat_set(e, x->id);
    }
}

/* Fusion f's plan (free with plan_free); does it qualify? */
static int plan(Emitter *e, int f, SendPlan *s)
{
    memset(s, 0, sizeof *s);
    s->m = emit_alloc(e, (size_t)e->p->nnode * sizeof(int));
    s->ins = emit_alloc(e, (size_t)e->p->nnode * sizeof(int));
    s->seg = e->nsegment + 1 + f;
    if (!plan_members(e, f, s))
        return 0;
    plan_inputs(e, s);
    return 1;
}

static void plan_free(Emitter *e, SendPlan *s)
{
    emit_free(e, s->m);
    emit_free(e, s->ins);
}

/* The widest V for the element sizes of the vector operands and stores. */
static int widest(Emitter *e, const SendPlan *s)
{
    size_t narrow = type_size(nd(e, s->send)->type);
    for (int k = 0; k < s->nin; k++)
        if (e->flat[s->ins[k]] && type_size(nd(e, s->ins[k])->type) < narrow)
            narrow = type_size(nd(e, s->ins[k])->type);
    for (int k = 0; k < s->nm; k++) {
        Node *n = nd(e, s->m[k]);
        if ((n->op == O_SLICE || (stores_local(e, s, n->id) && n->ndim)) &&
            type_size(n->type) < narrow)
            narrow = type_size(n->type);
    }
    return (int)(16 / narrow);
}

/* ---- the kernel ---- */

/* The kernel's parameters (EMIT_TYPED), the entry point's arguments (EMIT_HOST) or
 * _go's arguments to the kernel (EMIT_FORWARD). */
static void emit_params(Emitter *e, const SendPlan *s, int mode)
{
    FILE *o = e->o;
    static const char *const head[] = {
        "ncclDevComm dc, ncclWindow_t win, size_t off, int to, int keep, void *dl, long n, "
        "CocoShape it, unsigned long long seed",
        "coco_send_devcomm(ctx, peer), peer ? (ncclWindow_t)ctx->lsa_window : NULL, lo[0], to, "
        "keep, b%d, n, it, args->seed",
        "dc, win, off, to, keep, dl, n, it, seed"};
    fprintf(o, head[mode], s->send);
    for (int k = 0; k < s->nin; k++) {
        Node *x = nd(e, s->ins[k]);
        emit_input_param(e, x, mode);
    }
    for (int k = 0; k < s->nm; k++) {
        Node *n = nd(e, s->m[k]);
        if (n->op == O_SLICE && mode == EMIT_HOST)
            fprintf(o, ", coco_send_slice(b%d, h%d, %zu)", n->in[0], n->id, type_size(n->type));
        else if (n->op == O_SLICE)
            fprintf(o, mode == EMIT_TYPED ? ", const void *z%d" : ", z%d", n->id);
    }
    for (int k = 0; k < s->nm; k++)
        if (stores_local(e, s, s->m[k]))
            emit_param(e, mode, ", void *y%d", ", b%d", ", y%d", s->m[k]);
    for (int k = 0; k < s->nm; k++)
        if (nd(e, s->m[k])->op == O_DROPOUT && nd(e, s->m[k])->ndim)
            fprintf(o, mode == EMIT_TYPED ? ", CocoShape h%d" : ", h%d", s->m[k]);
}

static int needs_coords(Emitter *e, const SendPlan *s)
{
    for (int k = 0; k < s->nin; k++) {
        Node *x = nd(e, s->ins[k]);
        if (x->op != O_SCALAR && x->ndim && !e->flat[x->id])
            return 1;
    }
    for (int k = 0; k < s->nm; k++)
        if (nd(e, s->m[k])->op == O_DROPOUT && nd(e, s->m[k])->ndim)
            return 1;
    return 0;
}

/* Vector loads of the flat operands and Slices; arrays of the stores. */
static void emit_loads(Emitter *e, const SendPlan *s)
{
    FILE *o = e->o;
    for (int k = 0; k < s->nin; k++)
        if (e->flat[s->ins[k]]) {
            const char *t = emit_tname[nd(e, s->ins[k])->type];
            fprintf(o, "        alignas(16) CocoRaw<%s> l%d[V];\n        coco_ldv<V, %s>"
                       "(x%d, i0, n, l%d);\n", t, s->ins[k], t, s->ins[k], s->ins[k]);
        }
    for (int k = 0; k < s->nm; k++) {
        Node *n = nd(e, s->m[k]);
        const char *t = emit_tname[n->type];
        if (n->op == O_SLICE)
            fprintf(o, "        alignas(16) CocoRaw<%s> l%d[V];\n        coco_ldv<V, %s>"
                       "(z%d, i0, n, l%d);\n", t, n->id, t, n->id, n->id);
        if (n->id == s->send || (stores_local(e, s, n->id) && n->ndim))
            fprintf(o, "        alignas(16) CocoRaw<%s> g%d[V];\n", t, n->id);
    }
}

/* Member n's statements inside the element loop. */
static void emit_member(Emitter *e, const SendPlan *s, const Node *n)
{
    FILE *o = e->o;
    const char *t = emit_tname[n->type];
    if (n->id == s->send) {
        fprintf(o, "            coco_st(g%d, v, %s, r%d);\n", n->id, t, n->in[0]);
        return;
    }
    if (n->op == O_SLICE)
        emit_register_load(e, "            ", n, arena_printf(e->p->arena, "l%d", n->id));
    else
        emit_value_statement(e, s->seg, n);
    if (stores_local(e, s, n->id) && n->ndim)
        fprintf(o, "            coco_st(g%d, v, %s, r%d);\n", n->id, t, n->id);
    else if (stores_local(e, s, n->id))
        fprintf(o, "            if (i == 0)\n                coco_st(y%d, 0, %s, r%d);\n",
                n->id, t, n->id);
}

static void emit_stores(Emitter *e, const SendPlan *s)
{
    FILE *o = e->o;
    for (int k = 0; k < s->nm; k++) {
        Node *n = nd(e, s->m[k]);
        const char *t = emit_tname[n->type];
        if (n->id == s->send)
            fprintf(o, "        if (out)\n            coco_stv<V, %s>(out, i0, n, g%d);\n"
                       "        if (keep)\n            coco_stv<V, %s>(dl, i0, n, g%d);\n",
                    t, n->id, t, n->id);
        else if (stores_local(e, s, n->id) && n->ndim)
            fprintf(o, "        coco_stv<V, %s>(y%d, i0, n, g%d);\n", t, n->id, n->id);
    }
}

static void emit_comment(Emitter *e, int f, const SendPlan *s)
{
    fprintf(e->o, "// fused Send %s as one kernel storing into the receiver's memory:",
            e->p->fusion[f].name);
    for (int k = 0; k < s->nm; k++) {
        Node *n = nd(e, s->m[k]);
        if (n->named || n->id == s->send || kept(e, s, n->id))
            fprintf(e->o, " %s (line %d)", n->name, n->pos.line);
    }
    fputc('\n', e->o);
}

static void emit_kernel(Emitter *e, int f, const SendPlan *s)
{
    FILE *o = e->o;
    fprintf(o, "template <int V, int PEER>\n__global__ void __launch_bounds__(512, 2) %s_s%d(",
            e->v, f);
    emit_params(e, s, EMIT_TYPED);
    fprintf(o, ")\n{\n    (void)seed;\n    (void)it;\n"
               "    CocoSendSync<PEER> xfer(dc);\n"
               "    void *out = to >= 0 ? xfer.target(win, off, to, dl) : nullptr;\n"
               "    for (long i0 = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V; i0 < n;\n"
               "         i0 += (long)gridDim.x * blockDim.x * V) {\n");
    emit_loads(e, s);
    int coords = needs_coords(e, s);
    emit_vector_loop_open(e, coords, "        ");
    for (int k = 0; k < s->nm; k++)
        emit_member(e, s, nd(e, s->m[k]));
    fprintf(o, "        }\n");
    emit_stores(e, s);
    fprintf(o, "    }\n    xfer.finish();\n}\n\n");
}

/* The host's dispatch over the instances. */
static void emit_go(Emitter *e, int f, const SendPlan *s)
{
    FILE *o = e->o;
    int vmax = widest(e, s);
    fprintf(o, "static int %s_s%d_go(int V, int PEER, dim3 grid, dim3 block, cudaStream_t st, ",
            e->v, f);
    emit_params(e, s, EMIT_TYPED);
    fprintf(o, ")\n{\n");
    for (int vi = 0; vi < (vmax > 1 ? 2 : 1); vi++)
        for (int peer = 0; peer < 2; peer++) {
            fprintf(o, "    if (V == %d && PEER == %d)\n        %s_s%d<%d, %d><<<grid, block, 0, "
                       "st>>>(", vi ? 1 : vmax, peer, e->v, f, vi ? 1 : vmax, peer);
            emit_params(e, s, EMIT_FORWARD);
            fprintf(o, ");\n    else\n");
        }
    fprintf(o, "        return 1;\n    return 0;\n}\n\n");
}

/* Sets the members' segment to s->seg while the kernel is written (so that
 * emit_value_statement reads them from registers); restore with 0. */
static void swap_segments(Emitter *e, const SendPlan *s, int *saved, int set)
{
    for (int k = 0; k < s->nm; k++) {
        if (set) {
            saved[k] = e->segment[s->m[k]];
            e->segment[s->m[k]] = s->seg;
        } else {
            e->segment[s->m[k]] = saved[k];
        }
    }
}

void send_emit_kernel(Emitter *e, int f)
{
    SendPlan s;
    plan(e, f, &s);
    int *saved = emit_alloc(e, (size_t)s.nm * sizeof(int));
    swap_segments(e, &s, saved, 1);
    emit_comment(e, f, &s);
    emit_kernel(e, f, &s);
    emit_go(e, f, &s);
    swap_segments(e, &s, saved, 0);
    emit_free(e, saved);
    plan_free(e, &s);
}

/* ---- the launch, inside the entry point ---- */

/* The receiver: the same index in group (g + shift) mod ngroups, as the
 * NCCL lowering (emit_cuda.c) and the CPU executor pair them. Linear: group
 * g + shift if there is one (else to = -1: the value goes nowhere), and a
 * rank no group sends to stores its own value (keep). peer is the same on
 * every rank: every rank then takes part in the barriers. */
static void emit_receiver(Emitter *e, const Node *send)
{
    const char *g = group_name(send->group);
    int k = send->shift;
    fprintf(e->o, "        const long ngr = ctx->nranks / G_%s, grp = rank / G_%s;\n", g, g);
    if (!send->linear) {
        fprintf(e->o, "        const int to = (int)((((grp + %d) %% ngr + ngr) %% ngr) * G_%s + "
                      "rank %% G_%s);\n        const int peer = to != rank, keep = 0;\n",
                k, g, g);
        return;
    }
    fprintf(e->o, "        const long tgr = grp + %d, fgr = grp - %d;\n"
                  "        const int to = tgr >= 0 && tgr < ngr ? (int)(tgr * G_%s + rank %% G_%s) "
                  ": -1;\n        const int keep = !(fgr >= 0 && fgr < ngr);\n"
                  "        const int peer = %d != 0 && %d < ngr && %d < ngr;\n",
            k, k, g, g, k, k, -k);
}

/* Elements a rank computes, from the logical sizes only (the grid of a
 * kernel with barriers must be the same on every rank). */
static void emit_grid_count(Emitter *e, const Node *send)
{
    FILE *o = e->o;
    fprintf(o, "        long most = 1;\n");
    for (int k = 0; k < send->ndim; k++) {
        if (send->layout.kind == L_SLICED && send->layout.dim == k)
            fprintf(o, "        most *= (h%d.gdim[%d] + G_%s - 1) / G_%s;\n", send->id, k,
                    group_name(send->group), group_name(send->group));
        else
            fprintf(o, "        most *= h%d.gdim[%d];\n", send->id, k);
    }
}

/* Pointers whose alignment decides V. */
static int emit_vector_buffers(Emitter *e, const SendPlan *s)
{
    FILE *o = e->o;
    int count = 0;
    char sizes[4096] = "";
    size_t used = 0;
#define ADD(fmt, ...)                                                                          \
    do {                                                                                      \
        fprintf(o, "%s" fmt, count++ ? ", " : "", __VA_ARGS__);                               \
    } while (0)
#define SIZE(t) (used += (size_t)snprintf(sizes + used, sizeof sizes - used, "%s%zu",         \
                                          used ? ", " : "", type_size(t)))
    fprintf(o, "        const void *vp[] = {");
    ADD("b%d", s->send);
    SIZE(nd(e, s->send)->type);
    for (int k = 0; k < s->nin; k++)
        if (e->flat[s->ins[k]]) {
            ADD("b%d", s->ins[k]);
            SIZE(nd(e, s->ins[k])->type);
        }
    for (int k = 0; k < s->nm; k++) {
        Node *n = nd(e, s->m[k]);
        if (n->op == O_SLICE) {
            ADD("coco_send_slice(b%d, h%d, %zu)", n->in[0], n->id, type_size(n->type));
            SIZE(n->type);
        } else if (stores_local(e, s, n->id) && n->ndim) {
            ADD("b%d", n->id);
            SIZE(n->type);
        }
    }
#undef ADD
#undef SIZE
    fprintf(o, "};\n        const int vs[] = {%s};\n", sizes);
    return count;
}

void send_emit_launch(Emitter *e, int f, int *done_segment)
{
    FILE *o = e->o;
    SendPlan s;
    plan(e, f, &s);
    Node *send = nd(e, s.send);
    int l = send->pos.line, vmax = widest(e, &s);
    fprintf(o, "    { /* line %d: fused Send %s */\n", l, e->p->fusion[f].name);
    emit_receiver(e, send);
    fprintf(o, "        const void *lb[] = {b%d};\n        const size_t lbytes[] = {(size_t)"
               "coco_count(h%d) * %zu};\n        size_t lo[1] = {0};\n"
               "        if (ctx->fused_algo != COCO_FUSED_NCCL &&\n"
               "            (!peer || coco_lsa_usable(ctx, G_WORLD, lb, lbytes, lo, 1))) {\n",
            send->id, send->id, type_size(send->type));
    fprintf(o, "        CocoShape it = h%d;\n        long n = coco_count(it);\n", send->id);
    int nvec = emit_vector_buffers(e, &s);
    fprintf(o, "        int V = !ctx->fused_vec && coco_pick_vec(%d, vp, vs, %d) == %d ? %d : 1;\n",
            vmax, nvec, vmax, vmax);
    emit_grid_count(e, send);
    /* with barriers, the grid from vmax and the logical sizes: the same on
     * every rank, so every rank syncs each barrier equally often */
    fprintf(o, "        dim3 grid = coco_grid_vec(n, V), block(256);\n"
               "        if (peer)\n            coco_lsa_grid(ctx, most, %d, &grid, &block);\n"
               "        (void)most;\n", vmax);
    fprintf(o, "        if (%s_s%d_go(V, peer, grid, block, st, ", e->v, f);
    emit_params(e, &s, EMIT_HOST);
    fprintf(o, "))\n            COCO_FAIL(ctx, \"Send\", %d, \"no kernel instance for V = %%d\", "
               "V);\n        COCO_LAUNCHED(ctx, \"Send\", %d);\n", l, l);
    for (int k = 0; k < s.nm; k++)
        emit_state_copy(e, nd(e, s.m[k]));
    fprintf(o, "        } else {\n");
    for (int k = 0; k < s.nm; k++)
        e->emit_node(e, nd(e, s.m[k]), done_segment);
    fprintf(o, "        }\n    } /* fused Send %s */\n", e->p->fusion[f].name);
    plan_free(e, &s);
}

/* ---- for emit_cuda.c ---- */

int send_eligible(Emitter *e, int f)
{
    SendPlan s;
    int ok = plan(e, f, &s);
    plan_free(e, &s);
    return ok;
}

void send_claim(Emitter *e, int f)
{
    SendPlan s;
    plan(e, f, &s);
    for (int k = 0; k < s.nm; k++)
        e->lsa_node[s.m[k]] = f;
    plan_free(e, &s);
}

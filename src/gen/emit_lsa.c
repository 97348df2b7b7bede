/* emit_lsa.c: a FusedAllReduce generated as kernels over the peers' memory
 * (NCCL device API, rt/kernels/coco_lsa.cuh), beside its NCCL ReduceScatter
 * + kernels + AllGather lowering, chosen at run time. Which fusions qualify
 * and which member goes to which kernel: emit_lsa_plan.c.
 *
 * Without cross-rank reductions, one kernel:
 *   barrier; for its slice (two-shot) or every slice (one-shot): load the
 *   slice from every peer and reduce in double in rank order (the CPU
 *   executor's order, so results are bit for bit the CPU's), compute the
 *   members in registers, store the gathered values into every peer's
 *   buffer (one-shot: its own) and the members needed later locally;
 *   barrier.
 * Push (template parameter PUSH): after the first
 * barrier each rank stores every peer's part of the ReduceScatter's input
 * into that peer's staging slots (workspace fs<rs>, in the window), a
 * barrier, and the loop reduces from the local slots instead of loading
 * from the peers (coco_lsa.cuh); kernel 0 of two over contiguous operands
 * does so in rounds of rsteps steps a thread (coco_lsa_rounds; the host's
 * choice, coco_lsa_push_round), round r + 1's stores while round r
 * computes (emit_rounds). Its staging buffer is allocated only when the
 * run takes it (fpush<rs>, decided on the host, dry run included).
 * With cross-rank reductions (LAMB's Norms), two kernels on the same grid:
 *   kernel 0: barrier; the level-0 members as above, each thread folding
 *     the elements of every reduction it visits; each block's fold (a fixed
 *     tree) to a workspace array; level-0 values kernel 1 needs stored
 *     (carry);
 *   kernel 1: every block folds the blocks' partials in a fixed order (so
 *     every block of a rank has the same bits) and publishes the rank's
 *     value in its slot of the symmetric window; barrier; every block reads
 *     the P ranks' values and folds them in rank order (bit-identical on
 *     every rank: Replicated results agree); the level-1 members; the
 *     gathered stores into every peer; barrier.
 * Why two kernels rather than one cooperative kernel with a grid-wide sync:
 * the end of kernel 0 is that sync, with no cooperative launch, no
 * occupancy limit on the grid and no second barrier kind; it costs one
 * launch (a few microseconds, queued behind kernel 0 on the stream) and a
 * store and load of the carried values, which are what kernel 1 would
 * otherwise reload from the peers. Both kernels use the same grid, so every
 * rank syncs each LSA barrier (one per block) the same number of times.
 * One-shot is generated only when no member is kept locally, none reads a
 * sliced operand, none is a Dropout (whose mask depends on the slice) and
 * there is no cross-rank reduction. 0-dim members are computed once per
 * thread, before the element loop.
 *
 * With scattered operands (Lsa.scat, emit_lsa_plan.c) the same kernels
 * iterate over the buckets of the part instead of its elements, a warp a
 * bucket (coco_lsa_scat_walk, rt/kernels/coco_scatter.cuh): the ReduceScatter's
 * input is reduced from the peers' members and gathered values are stored
 * into the peers' members at the member's window offset; whole tensors are
 * read from the local members; contiguous operands as before, at the
 * part-local index, at any alignment.
 *
 * One rank takes the same kernels' instance for P = 1: its only part, its
 * own buffers (addresses for offsets), no barrier, no device communicator
 * (coco_lsa.cuh); one instance whatever the algorithm asked. A fusion of
 * one kernel over contiguous operands also gets an elementwise form for
 * one rank (<v>_f<f>_one), which the launch takes when the whole tensor
 * goes at once (no overlap chunks): the same step over every element,
 * launched as the elementwise kernels are (emit_one_rank_kernel). */
#include "gen/emit_lsa.h"

#include "coconet_cuda.h" /* COCO_LSA_RANKS */

#include <stdlib.h>
#include <string.h>

/* The rank counts that get kernel instances, increasing */
static const int lsa_ranks[] = {COCO_LSA_RANKS(COCO_LSA_RANK_ITEM)};
enum { NLSA_RANKS = sizeof lsa_ranks / sizeof *lsa_ranks };

static Node *nd(Emitter *e, int id)
{
    return node_of(e->p, id);
}

/* Is member id stored to y<id> (a local buffer)? */
static int stores_local(Emitter *e, const Lsa *l, int id)
{
    return nd(e, id)->op != O_ALLGATHER && lsa_kept(e, l, id);
}

/* Whole tensors read at the slice's start: Slices' inputs and the inputs
 * of whole-tensor reductions, each once. */
static int slice_sources(Emitter *e, const Lsa *l, int *ids)
{
    int n = 0;
    for (int k = 0; k < l->nm; k++)
        if (nd(e, l->m[k])->op == O_SLICE)
            n = emit_add_once(ids, n, nd(e, l->m[k])->in[0]);
    for (int k = 0; k < l->nred; k++)
        if (nd(e, l->red[k])->op != O_ALLREDUCE)
            n = emit_add_once(ids, n, lsa_red_source(e, l, k));
    return n;
}

static int has_op(Emitter *e, const Lsa *l, Op op)
{
    for (int k = 0; k < l->nm; k++)
        if (nd(e, l->m[k])->op == op)
            return 1;
    return 0;
}

/* May every rank compute every slice (one-shot)? */
static int oneshot_allowed(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    Node *rs = nd(e, l->rs);
    if (has_op(e, l, O_DROPOUT) || l->nred || l->rows)
        return 0;
    for (int k = 0; k < l->nm; k++)
        if (stores_local(e, l, l->m[k]))
            return 0;
    for (int k = 0; k < nin; k++) {
        Node *x = nd(e, ins[k]);
        if (x->op != O_SCALAR && x->ndim >= rs->ndim)
            return 0;
    }
    return 1;
}

/* Is the push algorithm generated (coco_lsa.cuh)? Over contiguous
 * operands always (two kernels: in rounds, push_rounds). Over scattered
 * operands its stores walk the buckets as the element loop does, in one
 * round (coco_lsa_scat_push_parts), so not with cross-rank reductions:
 * kernel 0 has no gathered stores, and pushing everything first would
 * serialise its NVLink traffic and its local work (LAMB measured slower
 * so: doc/design.md, The CUDA backend). When the run takes it:
 * push_choice. */
static int push_allowed(const Lsa *l)
{
    return !l->rows && (!l->nred || l->scat < 0);
}

/* Does kernel 0's element loop go in rounds when its instance pushes
 * (coco_lsa_rounds, pipelined: emit_rounds; the instances that load keep
 * the plain loop)? In kernel 0 of two over contiguous operands, which has
 * no gathered stores to overlap its pushes with. One kernel pushes
 * everything first: its gathered stores overlap its local work (rounds
 * measured no clear gain there: doc/design.md, The CUDA backend). */
static int push_rounds(const Lsa *l)
{
    return l->scat < 0 && l->nred > 0;
}

/* coco_lsa_pushes' `allowed`: one kernel, over contiguous or scattered
 * operands, by size (push measured faster on large scattered operands:
 * doc/gpu.md, Scattered tensors); two kernels (cross-rank reductions) on
 * request only (loads measured faster: doc/design.md, The CUDA backend). */
static const char *push_choice(const Lsa *l)
{
    return l->nred ? "ctx->fused_algo == COCO_FUSED_PUSH" : "1";
}

/* V, the elements a thread takes a step: 16 bytes of the widest vector
 * operand (4 elements beside FP32 state). The kernels are built for two
 * blocks of 512 threads per SM (__launch_bounds__(512, 2), coco_lsa.cuh's
 * COCO_LSA_MIN_BLOCKS; LSA_BLOCKS is that many blocks of an H200, all
 * resident at once), so at most 64 registers a thread. 16 bytes of the
 * narrowest (8 elements of FP16 gradients beside FP32 parameters and
 * state) needs more registers than that, one block an SM, and measured
 * slower: doc/gpu.md, Fused collectives in one kernel. */
static int vector_width(Emitter *e, const Lsa *l, const int *ins, int nin, const int *zs, int nz)
{
    size_t size = type_size(nd(e, nd(e, l->rs)->in[0])->type);
#define TAKE(t) (size = type_size(t) > size ? type_size(t) : size)
    for (int k = 0; k < nin; k++)
        if (e->flat[ins[k]])
            TAKE(nd(e, ins[k])->type);
    for (int k = 0; k < nz; k++)
        TAKE(nd(e, zs[k])->type);
    for (int k = 0; k < l->nm; k++) {
        Node *n = nd(e, l->m[k]);
        if ((n->op == O_ALLGATHER || stores_local(e, l, n->id) || l->carry[n->id]) && n->ndim)
            TAKE(n->type);
    }
#undef TAKE
    return (int)(16 / size);
}

static void mark_flat(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    emit_flat_clear(e);
    for (int k = 0; k < nin; k++) {
        Node *x = nd(e, ins[k]);
        if (x->op != O_SCALAR && emit_same_local_shape(x, nd(e, l->rs)))
            emit_flat_set(e, x->id);
    }
}

/* Is member id computed element by element in kernel kn (not a 0-dim
 * value, computed once; not a carried value, loaded)? */
static int in_loop(const Lsa *l, const Node *n, int kn)
{
    int bit = kn ? LSA_K1 : LSA_K0;
    return (l->need[n->id] & bit) && n->ndim > 0 && n->op != O_PARTIAL_REDUCE &&
           !(kn == 1 && l->carry[n->id]);
}

/* Does kernel kn read operand x (from outside) element by element? */
static int reads_in_loop(Emitter *e, const Lsa *l, int kn, int x)
{
    for (int k = 0; k < l->nm; k++) {
        Node *m = nd(e, l->m[k]);
        for (int j = 0; emit_is_elementwise(m) && in_loop(l, m, kn) && j < m->nin; j++)
            if (m->in[j] == x && !(m->op == O_UPDATE && j == 0))
                return 1;
    }
    return 0;
}

static int needs_coords(Emitter *e, const Lsa *l, int kn, const int *ins, int nin)
{
    for (int k = 0; k < nin; k++) {
        Node *x = nd(e, ins[k]);
        if (x->op != O_SCALAR && x->ndim && !e->flat[x->id] && reads_in_loop(e, l, kn, x->id))
            return 1;
    }
    for (int k = 0; k < l->nm; k++) {
        Node *n = nd(e, l->m[k]);
        if (n->op == O_DROPOUT && in_loop(l, n, kn))
            return 1;
    }
    return 0;
}

/* Do the kernels take LIN (linear indices, emit_cuda.h)? Over a
 * contiguous part, where some kernel needs coordinates. The launch's
 * choice (lin) picks an instance with LIN a template parameter: a
 * run-time LIN keeps the coordinate path's arrays in every instance, which
 * spill at 64 registers (doc/design.md, The CUDA backend); a constant one
 * leaves them out. Only the vector instances have a LIN = 1 twin
 * (emit_go): the others take the coordinates, which serve every shape. */
static int lin_param(Emitter *e, const Lsa *l, const int *ins, int nin)
{
    return !l->rows && l->scat < 0 &&
           (needs_coords(e, l, 0, ins, nin) || needs_coords(e, l, 1, ins, nin));
}

/* A broadcast operand that kernel kn reads element by element */
static int lin_operand(Emitter *e, const Lsa *l, int kn, int x)
{
    return emit_read_broadcast(e, nd(e, x)) && reads_in_loop(e, l, kn, x);
}

/* What the kernels and their launch all need: fusion f's plan (freed by
 * the caller with lsa_free), the operands read from outside (*ins) and the
 * whole tensors read at the slice (*zs), both freed by the caller. */
static int prepare(Emitter *e, int f, Lsa *l, int **ins, int **zs, int *nz)
{
    lsa_plan(e, f, l);
    *ins = emit_alloc(e, (size_t)e->p->nnode * sizeof(int));
    *zs = emit_alloc(e, (size_t)e->p->nnode * sizeof(int));
    int nin = emit_outside_operands(e, l->m, l->nm, *ins);
    *nz = slice_sources(e, l, *zs);
    mark_flat(e, l, *ins, nin);
    return nin;
}

/* ---- the kernels ---- */

/* A buffer the kernels address in the peers' windows: its offset o<id>
 * (the entry point's lo[*w]), or, scattered, its member table mb<id>. */
static void window_param(Emitter *e, const Lsa *l, int id, int mode, int *w)
{
    FILE *o = e->o;
    if (lsa_scattered(e, l, id))
        emit_param(e, mode, ", void *const *mb%d", ", c%d.member", ", mb%d", id);
    else if (mode == EMIT_HOST)
        fprintf(o, ", lo[%d]", (*w)++);
    else
        fprintf(o, mode == EMIT_TYPED ? ", size_t o%d" : ", o%d", id);
}

/* The kernels' parameters (EMIT_TYPED), the entry point's arguments
 * (EMIT_HOST) or _go's arguments to the kernels (EMIT_FORWARD); every kernel
 * takes them all. */
static void emit_params(Emitter *e, const Lsa *l, const int *ins, int nin, const int *zs, int nz,
                        int mode)
{
    FILE *o = e->o;
    int w = 0; /* lo[] index of the next window buffer */
    static const char *const head[] = {
        "ncclDevComm dc, ncclWindow_t win, long cs, long nall, CocoChunks ck, CocoShape it, "
        "unsigned long long seed, int rank",
        "dc, win, cs, nall, ck, it, args->seed, rank", "dc, win, cs, nall, ck, it, seed, rank"};
    fputs(head[mode], o);
    if (l->scat >= 0 && mode == EMIT_HOST) /* the buckets: of c<scat>, each part's first in pb */
        fprintf(o, ", (const char *)ctx->lsa_base, c%d, pb", l->scat);
    else if (l->scat >= 0)
        fputs(mode == EMIT_TYPED ? ", const char *lbase, CocoScat sc, CocoLsaParts pb"
                            : ", lbase, sc, pb", o);
    window_param(e, l, nd(e, l->rs)->in[0], mode, &w);
    for (int k = 0; k < l->nm; k++)
        if (nd(e, l->m[k])->op == O_ALLGATHER)
            window_param(e, l, l->m[k], mode, &w);
    if (push_allowed(l) && mode == EMIT_HOST) /* the push algorithm's staging buffer */
        fprintf(o, ", lo[%d]", w++);
    else if (push_allowed(l))
        fputs(mode == EMIT_TYPED ? ", size_t ost" : ", ost", o);
    if (push_rounds(l) && mode == EMIT_HOST) /* its steps a round */
        fputs(", coco_lsa_push_round(ctx)", o);
    else if (push_rounds(l))
        fputs(mode == EMIT_TYPED ? ", long rsteps" : ", rsteps", o);
    if (l->nred && mode == EMIT_HOST)
        fprintf(o, ", lo[%d], (double *)fp%d", w, l->rs);
    else if (l->nred)
        fprintf(o, mode == EMIT_TYPED ? ", size_t ored, double *blk" : ", ored, blk");
    for (int k = 0; k < nz; k++)
        if (lsa_scattered(e, l, zs[k]))
            emit_param(e, mode, ", void *const *mb%d", ", c%d.member", ", mb%d", zs[k]);
        else
            emit_param(e, mode, ", const void *z%d", ", b%d", ", z%d", zs[k]);
    for (int k = 0; k < nin; k++) {
        Node *x = nd(e, ins[k]);
        emit_input_param(e, x, mode);
    }
    for (int k = 0; k < l->nm; k++)
        if (stores_local(e, l, l->m[k]))
            emit_param(e, mode, ", void *y%d", ", b%d", ", y%d", l->m[k]);
    for (int k = 0; k < l->nm; k++)
        if (l->carry[l->m[k]])
            emit_param(e, mode, ", void *c%d", ", fc%d", ", c%d", l->m[k]);
    for (int k = 0; k < l->nm; k++)
        if (nd(e, l->m[k])->op == O_DROPOUT && nd(e, l->m[k])->ndim)
            fprintf(o, mode == EMIT_TYPED ? ", CocoShape h%d" : ", h%d", l->m[k]);
    if (lin_param(e, l, ins, nin))
        fputs(mode == EMIT_TYPED ? ", int lin" : ", lin", o);
}

/* Over buckets, every load and store takes its vector path only where the
 * address allows (coco_ldv_any): a bucket starts anywhere in a part. Over
 * a contiguous part, the loop's shift aligns the peers' buffers and the
 * whole ones (index base + i0); the part-local arrays (index i0: sliced
 * outputs and inputs, carried values) are read and written at any
 * alignment in both. */
static const char *any(const Lsa *l)
{
    return l->scat >= 0 ? "_any" : "";
}

/* Where kernel code finds element i0 of operand id read at the slice:
 * "PTR, INDEX, BOUND" -- in the bucket's member (scattered) or at the
 * part's start of one buffer (contiguous, p: the buffer's expression). */
static const char *at_slice(Emitter *e, const Lsa *l, int id, const char *p)
{
    if (lsa_scattered(e, l, id))
        return arena_printf(e->p->arena, "mp%d, m0, mlim", id);
    return arena_printf(e->p->arena, "(const char *)%s + base * %zu, i0, lim", p,
                        type_size(nd(e, id)->type));
}

/* The same for a buffer of the peers' windows: "OFFSET, FIRST, INDEX, BOUND"
 * (elements FIRST + INDEX at the window offset). */
static const char *at_window(Emitter *e, const Lsa *l, int id)
{
    if (lsa_scattered(e, l, id))
        return arena_printf(e->p->arena, "w%d, 0, m0, mlim", id);
    return arena_printf(e->p->arena, "o%d, base, i0, lim", id);
}

static void emit_loads(Emitter *e, const Lsa *l, int kn, const int *ins, int nin)
{
    FILE *o = e->o;
    Node *rs = nd(e, l->rs), *x = nd(e, rs->in[0]);
    int bit = kn ? LSA_K1 : LSA_K0;
    if (kn == 0 && (l->need[rs->id] & LSA_K0)) {
        const char *t = emit_tname[x->type], *indent = "            ";
        fprintf(o, "            CocoLsaAcc<P, %s> l%d[V];\n", t, rs->id);
        if (push_allowed(l)) { /* from the local staging slots (coco_lsa.cuh, coco_scatter.cuh) */
            fprintf(o, "            if constexpr (PUSH)\n                ");
            if (l->scat >= 0)
                fprintf(o, "coco_lsa_reduce_staged_any<V, %s, P>(win, w%d, m0, mlim, ost, rank, cs, "
                           "i0, lim, %d, l%d);\n", t, x->id, (int)rs->redop, rs->id);
            else
                fprintf(o, "coco_lsa_reduce_staged<V, %s, P>(win, o%d, ost, rank, base, cs, i0, "
                           "lim, %d, l%d);\n", t, x->id, (int)rs->redop, rs->id);
            fprintf(o, "            else\n");
            indent = "                ";
        }
        fprintf(o, "%scoco_lsa_reduce%s<V, %s, P, U%s>(win, %s, %d, l%d);\n", indent, any(l), t,
                l->scat >= 0 ? "" : ", RO", at_window(e, l, x->id), (int)rs->redop, rs->id);
    }
    for (int k = 0; k < l->nm; k++) {
        Node *n = nd(e, l->m[k]);
        const char *t = emit_tname[n->type];
        if (n->op == O_SLICE && (l->need[n->id] & bit)) /* coco_ldv_in: RO's loads */
            fprintf(o, "            alignas(16) CocoRaw<%s> l%d[V];\n            %sV, %s>("
                       "%s, l%d);\n", t, n->id, l->scat >= 0 ? "coco_ldv_any<" : "coco_ldv_in<RO, ",
                    t, at_slice(e, l, n->in[0], arena_printf(e->p->arena, "z%d", n->in[0])), n->id);
        else if (kn == 1 && l->carry[n->id])
            fprintf(o, "            alignas(16) CocoRaw<%s> q%d[V];\n            coco_ldv_any<V, %s>("
                       "c%d, i0, lim, q%d);\n", t, n->id, t, n->id, n->id);
        else if (kn == 0 && l->carry[n->id])
            fprintf(o, "            alignas(16) CocoRaw<%s> q%d[V];\n", t, n->id);
        if (l->level[n->id] == kn && in_loop(l, n, kn) &&
            (n->op == O_ALLGATHER || stores_local(e, l, n->id)))
            fprintf(o, "            alignas(16) CocoRaw<%s> g%d[V];\n", t, n->id);
    }
    for (int k = 0; kn == 0 && k < l->nred; k++) {
        Node *z = nd(e, lsa_red_source(e, l, k));
        if (nd(e, l->red[k])->op != O_ALLREDUCE)
            fprintf(o, "            alignas(16) CocoRaw<%s> k%d[V];\n            coco_ldv%s<V, %s>("
                       "%s, k%d);\n", emit_tname[z->type], l->red[k], any(l),
                    emit_tname[z->type],
                    at_slice(e, l, z->id, arena_printf(e->p->arena, "z%d", z->id)), l->red[k]);
    }
    for (int k = 0; k < nin; k++)
        if (e->flat[ins[k]] && reads_in_loop(e, l, kn, ins[k]))
            fprintf(o, "            alignas(16) CocoRaw<%s> l%d[V];\n"
                       "            coco_ldv_any<V, %s>(x%d, i0, lim, l%d);\n",
                    emit_tname[nd(e, ins[k])->type], ins[k], emit_tname[nd(e, ins[k])->type],
                    ins[k], ins[k]);
}

/* Member n's statements inside the element loop of kernel kn. */
static void emit_member(Emitter *e, const Lsa *l, int kn, const Node *n)
{
    FILE *o = e->o;
    const char *t = emit_tname[n->type];
    if (kn == 1 && l->carry[n->id])
        emit_register_load(e, "                ", n, arena_printf(e->p->arena, "q%d", n->id));
    if (!in_loop(l, n, kn))
        return;
    if (n->op == O_REDUCESCATTER)
        emit_register_round(e, "                ", n, arena_printf(e->p->arena, "l%d[v]", n->id));
    else if (n->op == O_SLICE)
        emit_register_load(e, "                ", n, arena_printf(e->p->arena, "l%d", n->id));
    else if (n->op == O_ALLGATHER)
        fprintf(o, "                coco_st(g%d, v, %s, r%d);\n", n->id, t, n->in[0]);
    else
        emit_value_statement(e, l->seg, n);
    if (l->level[n->id] == kn && stores_local(e, l, n->id))
        fprintf(o, "                coco_st(g%d, v, %s, r%d);\n", n->id, t, n->id);
    if (kn == 0 && l->carry[n->id])
        fprintf(o, "                coco_st(q%d, v, %s, r%d);\n", n->id, t, n->id);
}

/* Each thread's fold of the elements it visits, in kernel 0. */
static void emit_partials(Emitter *e, const Lsa *l)
{
    for (int k = 0; k < l->nred; k++) {
        int src = lsa_red_source(e, l, k), r = l->red[k];
        fprintf(e->o, "                if (i < lim)\n                    a%d = coco_red_step(%d, "
                      "a%d, ", r, lsa_red_step(e, l, k), r);
        if (nd(e, r)->op == O_ALLREDUCE)
            fprintf(e->o, "r%d);\n", src);
        else
            fprintf(e->o, "coco_ld(k%d, v, %s));\n", r, emit_tname[nd(e, src)->type]);
    }
}

static void emit_stores(Emitter *e, const Lsa *l, int kn)
{
    FILE *o = e->o;
    for (int k = 0; k < l->nm; k++) {
        Node *n = nd(e, l->m[k]);
        const char *t = emit_tname[n->type];
        if (kn == 0 && l->carry[n->id])
            fprintf(o, "            coco_stv_any<V, %s>(c%d, i0, lim, q%d);\n", t, n->id, n->id);
        if (l->level[n->id] != kn || !in_loop(l, n, kn))
            continue;
        if (n->op == O_ALLGATHER)
            fprintf(o, "            coco_lsa_store%s<V, %s, P>(win, %s, ONESHOT ? rank : 0, "
                       "ONESHOT ? rank : P - 1, g%d);\n", any(l), t, at_window(e, l, n->id),
                    n->id);
        else if (stores_local(e, l, n->id))
            fprintf(o, "            coco_stv_any<V, %s>(y%d, i0, lim, g%d);\n", t, n->id, n->id);
    }
}

/* The 0-dim members of kernel kn, once per thread, before the loop. */
static void emit_scalars(Emitter *e, const Lsa *l, int kn)
{
    FILE *o = e->o;
    int bit = kn ? LSA_K1 : LSA_K0;
    for (int k = 0; k < l->nm; k++) {
        Node *n = nd(e, l->m[k]);
        int r = lsa_red_index(l, n->id);
        if (n->ndim || !(l->need[n->id] & bit) || n->op == O_PARTIAL_REDUCE)
            continue;
        if (r >= 0)
            fprintf(o, "    %s r%d = %sred[%d];\n", emit_register_type(n->type), n->id,
                    n->type == T_FP64 ? "" : "(float)", r);
        else
            emit_value_statement(e, l->seg, n);
        if (l->level[n->id] == kn && stores_local(e, l, n->id))
            fprintf(o, "    if (blockIdx.x == 0 && threadIdx.x == 0)\n        coco_st(y%d, 0, %s, "
                       "r%d);\n", n->id, emit_tname[n->type], n->id);
    }
}

/* Is id a scattered operand kernel code addresses in the peers' windows
 * (the ReduceScatter's input, a gathered value: w<id>), or in the local
 * members (a whole tensor read at the slice: mp<id>)? */
static int peer_member(Emitter *e, const Lsa *l, int id)
{
    return lsa_scattered(e, l, id) &&
           (id == nd(e, l->rs)->in[0] || (lsa_is_member(l, id) && nd(e, id)->op == O_ALLGATHER));
}

/* How the bucket walk's `at` addresses operand id in a bucket's member:
 * a peer's member at its window offset (AT_PEER: w<id>), a local one by its
 * address (AT_LOCAL: mp<id>), or not at all (0). */
enum { AT_PEER = 1, AT_LOCAL = 2 };
static int at_kind(Emitter *e, const Lsa *l, int id)
{
    if (peer_member(e, l, id))
        return AT_PEER;
    return lsa_scattered(e, l, id) && !lsa_is_member(l, id) ? AT_LOCAL : 0;
}

/* The loop heads: over the part's elements, V a thread, grid-stride, in
 * steps that align base + i0 (coco_lsa_first, coco_lsa_step; the push's
 * stores take the same steps): the peers' and whole buffers take vectors
 * whatever cs, part-local arrays where their address allows; or
 * over the buckets of c<scat> that intersect the part (pb.first[part] is
 * the first) through coco_lsa_scat_walk (coco_scatter.cuh), the walk the
 * push's stores take too, with the element loop's body as its lambda:
 * elements [lo, lim) of each bucket, part-local indices (i0) for contiguous
 * operands, member-local ones (m0 = i0 - ms) for scattered ones, at window
 * offset w<id> (peers) or address mp<id> (local), which the walk's `at`
 * finds for each bucket's member (a CocoAt of them). */
static void emit_loop_head(Emitter *e, const Lsa *l, int round, const int *zs, int nz)
{
    FILE *o = e->o;
    if (round) { /* round r's steps (coco_lsa_round_span) */
        fprintf(o, "        long jb, je;\n        coco_lsa_round_span<V>(base, n, r, steps, jb, je);\n"
                   "        for (long j0 = jb; j0 < je; j0 += coco_lsa_stride<V>()) {\n"
                   "            long i0, lim;\n            coco_lsa_step<V>(j0, n, i0, lim);\n");
        return;
    }
    if (l->scat < 0) { /* elements [chunk_lo, chunk_hi) of the part (emit_overlap.c) */
        fprintf(o, "        const long hi = n < chunk_hi ? n : chunk_hi;\n"
                   "        for (long j0 = chunk_lo + coco_lsa_first<V>(base + chunk_lo); j0 < hi; "
                   "j0 += coco_lsa_stride<V>()) {\n            long i0, lim;\n"
                   "            coco_lsa_span<V>(j0, chunk_lo, hi, i0, lim);\n");
        return;
    }
    int *ids = emit_alloc(e, (size_t)(l->nm + nz + 1) * sizeof(int)), count = 0, nfield = 0;
    count = emit_add_once(ids, count, nd(e, l->rs)->in[0]);
    for (int k = 0; k < l->nm; k++)
        count = emit_add_once(ids, count, l->m[k]);
    for (int k = 0; k < nz; k++)
        count = emit_add_once(ids, count, zs[k]);
    /* CocoAt's fields, how `at` fills them, then the body's names for them */
    fprintf(o, "        struct CocoAt {");
    for (int k = 0; k < count; k++)
        if (at_kind(e, l, ids[k]))
            fprintf(o, at_kind(e, l, ids[k]) == AT_PEER ? " size_t w%d;" : " const void *p%d;",
                    ids[k]);
    fprintf(o, " };\n        coco_lsa_scat_walk<V>(sc, pb.first[part], base, n,\n"
               "            [&](unsigned m) { return CocoAt{");
    for (int k = 0; k < count; k++)
        if (at_kind(e, l, ids[k]))
            fprintf(o, at_kind(e, l, ids[k]) == AT_PEER ? "%scoco_lsa_member_off(mb%d, m, lbase)"
                                                        : "%smb%d[m]",
                    nfield++ ? ", " : "", ids[k]);
    ASSERT(nfield > 0); /* a scattered fusion addresses some member */
    fprintf(o, "}; },\n            [&](long i0, long lim, long ms, const CocoAt &a) {\n");
    for (int k = 0; k < count; k++)
        if (at_kind(e, l, ids[k]))
            fprintf(o, at_kind(e, l, ids[k]) == AT_PEER
                           ? "            const size_t w%d = a.w%d;\n            (void)w%d;\n"
                           : "            const void *mp%d = a.p%d;\n            (void)mp%d;\n",
                    ids[k], ids[k], ids[k]);
    fprintf(o, "            const long m0 = i0 - ms, mlim = lim - ms;\n"
               "            (void)m0;\n            (void)mlim;\n");
    emit_free(e, ids);
}

/* Part `part`'s bounds: elements [base, base + n) of the whole, it the
 * part's shape (language.md 6). */
static void emit_part_bounds(Emitter *e)
{
    fprintf(e->o, "        const long base = part * cs;\n"
                  "        const long n = coco_lsa_part_n(part, cs, nall);\n"
                  "        it.dim[0] = coco_part_len(it.gdim[0], P, part);\n"
                  "        it.off[0] = coco_part_lo(it.gdim[0], P, part);\n");
}

/* One step of kernel kn's element loop: elements [i0, lim) of the part,
 * loaded, computed and stored. */
static void emit_step(Emitter *e, const Lsa *l, int kn, const int *ins, int nin)
{
    FILE *o = e->o;
    emit_loads(e, l, kn, ins, nin);
    int coords = needs_coords(e, l, kn, ins, nin);
    for (int k = 0; k < nin && e->lin; k++)
        if (lin_operand(e, l, kn, ins[k]))
            emit_lin_first(e, ins[k], "            ");
    emit_vector_loop_open(e, coords, "            ");
    for (int k = 0; k < l->nm; k++)
        emit_member(e, l, kn, nd(e, l->m[k]));
    if (kn == 0)
        emit_partials(e, l);
    fprintf(o, "            }\n");
    emit_stores(e, l, kn);
}

/* The element loop of kernel kn; round: of round r only (emit_rounds). */
static void emit_loop(Emitter *e, const Lsa *l, int kn, int round, const int *ins, int nin,
                      const int *zs, int nz)
{
    FILE *o = e->o;
    fprintf(o, "    for (int part = ONESHOT ? 0 : rank; part < (ONESHOT ? P : rank + 1); "
               "part++) {\n");
    emit_part_bounds(e);
    emit_loop_head(e, l, round, zs, nz);
    emit_step(e, l, kn, ins, nin);
    fprintf(o, l->scat >= 0 ? "        });\n    }\n" : "        }\n    }\n");
}

/* Kernel 1's start: the ranks' values of every reduction, in red[]. */
static void emit_exchange(Emitter *e, const Lsa *l)
{
    FILE *o = e->o;
    fprintf(o, "    __shared__ double red[%d];\n", l->nred);
    fprintf(o, "    double *slot = (double *)coco_lsa_ptr<P>(win, ored, rank) + blockIdx.x;\n");
    for (int k = 0; k < l->nred; k++) {
        int t = lsa_red_partial_type(e, l, k);
        fprintf(o, "    {\n        double a = coco_lsa_rank_fold(%d, blk + %d * COCO_LSA_MAXBLOCKS, "
                   "gridDim.x);\n        if (threadIdx.x == 0)\n            slot[%d * "
                   "COCO_LSA_MAXBLOCKS] = %s%s%s;\n    }\n", lsa_red_combine(e, l, k), k, k,
                t >= 0 ? "coco_round(a, " : "a", t >= 0 ? emit_tname[t] : "", t >= 0 ? ")" : "");
    }
    fprintf(o, "    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);\n"
               "    if (threadIdx.x == 0) {\n");
    for (int k = 0; k < l->nred; k++) {
        Node *r = nd(e, l->red[k]);
        fprintf(o, "        red[%d] = coco_round(%scoco_lsa_peer_fold<P>(win, ored + (%d * "
                   "COCO_LSA_MAXBLOCKS + blockIdx.x) * sizeof(double), %d)%s, %s);\n", k,
                r->op == O_NORM ? "__dsqrt_rn(" : "", k, lsa_red_across(e, l, k),
                r->op == O_NORM ? ")" : "", emit_tname[r->type]);
    }
    fprintf(o, "    }\n    __syncthreads();\n");
}

/* Kernel 0's end with reductions: each block's folds, for kernel 1. */
static void emit_block_folds(Emitter *e, const Lsa *l)
{
    for (int k = 0; k < l->nred; k++)
        fprintf(e->o, "    {\n        double a = coco_lsa_block_fold(%d, a%d);\n"
                      "        if (threadIdx.x == 0)\n            blk[%d * COCO_LSA_MAXBLOCKS + "
                      "blockIdx.x] = a;\n    }\n", lsa_red_combine(e, l, k), l->red[k], k);
}

/* Does kernel 1 compute anything element by element? */
static int loop_in_k1(const Lsa *l, Emitter *e)
{
    for (int k = 0; k < l->nm; k++)
        if (in_loop(l, nd(e, l->m[k]), 1))
            return 1;
    return 0;
}

/* Does kernel 0 store gathered values into the peers? */
static int gathers_in_k0(Emitter *e, const Lsa *l)
{
    for (int k = 0; k < l->nm; k++)
        if (nd(e, l->m[k])->op == O_ALLGATHER && !l->level[l->m[k]])
            return 1;
    return 0;
}

/* Kernel 0 of two over contiguous operands, when the instance pushes: in
 * rounds (coco_lsa_rounds), pipelined. Round 0's stores into the peers'
 * staging slots and a barrier; then each round r stores round r + 1's,
 * computes its own elements meanwhile (their slots ordered by the last
 * barrier) and syncs, so that the stores drain while the block computes
 * instead of before a barrier. Every rank syncs each block's barrier
 * 1 + (rounds - 1) times. Ends on the `else` whose plain loop the
 * instances that load take (emit_kernel), as they did before rounds. */
static void emit_rounds(Emitter *e, const Lsa *l, const int *ins, int nin, const int *zs, int nz)
{
    int x = nd(e, l->rs)->in[0];
    const char *t = emit_tname[nd(e, x)->type];
    fprintf(e->o, "    if constexpr (PUSH) { /* in rounds: coco_lsa_rounds */\n"
                  "    long steps, rounds;\n    coco_lsa_rounds<V>(cs, rsteps, steps, rounds);\n"
                  "    coco_lsa_push_parts<V, %s, P>(win, o%d, ost, rank, cs, nall, 0, steps);\n"
                  "    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);\n"
                  "    for (long r = 0; r < rounds; r++) {\n"
                  "    if (r + 1 < rounds) /* round r + 1's stores, while round r computes */\n"
                  "        coco_lsa_push_parts<V, %s, P>(win, o%d, ost, rank, cs, nall, r + 1, "
                  "steps);\n", t, x, t, x);
    emit_loop(e, l, 0, 1, ins, nin, zs, nz);
    fprintf(e->o, "    if (r + 1 < rounds) /* round r + 1's stores seen by the peers */\n"
                  "        bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);\n    }\n"
                  "    } else {\n");
}

/* Can the kernel go chunk by chunk (emit_overlap.c)? One kernel over
 * contiguous operands. */
static int chunked(const Lsa *l)
{
    return !l->nred && l->scat < 0;
}

/* The lines before a kernel's loops that take LIN: the broadcast operands'
 * lengths and the Dropouts' first indices (emit_common.c). */
static void emit_lin_preamble(Emitter *e, const Lsa *l, int kn, const int *ins, int nin)
{
    fprintf(e->o, "    (void)lin;\n");
    for (int k = 0; k < nin; k++)
        if (lin_operand(e, l, kn, ins[k]))
            emit_lin_count(e, ins[k]);
    for (int k = 0; k < l->nm; k++)
        if (nd(e, l->m[k])->op == O_DROPOUT && in_loop(l, nd(e, l->m[k]), kn))
            emit_lin_base(e, l->m[k]);
}

static void emit_kernel(Emitter *e, int f, const Lsa *l, int kn, const int *ins, int nin,
                        const int *zs, int nz)
{
    FILE *o = e->o;
    /* two blocks per SM (vector_width), over scattered operands too:
     * coco_lsa_scat_walk takes one bucket at a time, which keeps them near
     * 64 registers, with little spilling (doc/design.md, The CUDA backend) */
    e->lin = lin_param(e, l, ins, nin);
    fprintf(o, "template <int V, int P, int ONESHOT, int U, int PUSH%s>\n__global__ void "
               "__launch_bounds__(512, COCO_LSA_MIN_BLOCKS(P)) %s_f%d%s(", e->lin ? ", int LIN" : "", e->v, f,
            kn ? "_b" : "");
    emit_params(e, l, ins, nin, zs, nz, EMIT_TYPED);
    fprintf(o, ")\n{\n    CocoLsaBarrier<P> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), "
               "dc.lsaBarrier, blockIdx.x};\n"
               "    constexpr int RO = 0; /* coco_ldv_in: coherent loads */\n    (void)RO;\n"
               "    (void)seed;\n    (void)it;\n    (void)ck;\n");
    if (e->lin) /* the launch's choice (lsa_emit_launch), the instance's LIN */
        emit_lin_preamble(e, l, kn, ins, nin);
    int x = nd(e, l->rs)->in[0], rounds = kn == 0 && push_rounds(l);
    if (kn == 0) {
        fprintf(o, "    bar.sync(ncclCoopCta(), cuda::memory_order_acquire);\n");
        if (push_allowed(l) && !rounds) /* all of them, in one round (chunks: each after its MatMul) */
            fprintf(o, "    if constexpr (PUSH)%s { /* the reduce-scatter's stores into the "
                       "peers' staging slots */\n        %s<V, %s, P>(win, %s%d, ost, rank, cs, nall%s);\n"
                       "        bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);\n    }\n",
                    chunked(l) ? " if (ck.count == 1)" : "",
                    l->scat >= 0 ? "coco_lsa_scat_push_parts" : "coco_lsa_push_parts",
                    emit_tname[nd(e, x)->type], l->scat >= 0 ? "sc, pb, mb" : "o", x,
                    l->scat >= 0 ? "" : ", 0, coco_lsa_steps<V>(cs)");
        for (int k = 0; k < l->nred; k++)
            fprintf(o, "    double a%d = coco_red_identity(%d);\n", l->red[k],
                    lsa_red_step(e, l, k));
    } else {
        emit_exchange(e, l);
    }
    if (push_rounds(l))
        fprintf(o, "    (void)rsteps;\n");
    emit_scalars(e, l, kn);
    if (rounds)
        emit_rounds(e, l, ins, nin, zs, nz);
    if (kn == 0 && chunked(l)) { /* emit_overlap.c: chunk by chunk, each after its MatMul */
        fprintf(o, "    for (int c = ck.from; c < ck.to; c++) {\n"
                   "    const long chunk_lo = coco_chunk_lo(ck, c), chunk_hi = coco_chunk_lo(ck, c + 1);\n"
                   "    if (ck.count > 1) { /* chunk c written here (its flag), then on every rank */\n"
                   "        if (ck.flag)\n            coco_chunk_wait(ck, c);\n");
        if (push_allowed(l)) /* its parts into the peers' staging slots */
            fprintf(o, "        if constexpr (PUSH)\n            coco_lsa_push_chunk<V, %s, P>(win, "
                       "o%d, ost, rank, cs, nall, chunk_lo, chunk_hi);\n",
                    emit_tname[nd(e, x)->type], x);
        fprintf(o, "        bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);\n    }\n");
        emit_loop(e, l, kn, 0, ins, nin, zs, nz);
        fprintf(o, "    }\n");
    } else if (kn == 0 || loop_in_k1(l, e)) {
        fprintf(o, "    const long chunk_lo = 0, chunk_hi = cs; /* the whole part */\n"
                   "    (void)chunk_lo;\n    (void)chunk_hi;\n");
        emit_loop(e, l, kn, 0, ins, nin, zs, nz);
    }
    if (rounds)
        fprintf(o, "    }\n");
    if (kn == 0 && l->nred && gathers_in_k0(e, l))
        fprintf(o, "    __threadfence_system(); /* stores into peers: seen after kernel 1's "
                   "barriers */\n");
    if (kn == 0 && l->nred)
        emit_block_folds(e, l);
    else
        fprintf(o, "    bar.sync(ncclCoopCta(), cuda::memory_order_release);\n");
    fprintf(o, "}\n\n");
    e->lin = 0;
}

/* The one-rank form of a chunked() fusion's kernel: over one rank the
 * ReduceScatter's sum is its operand and there is one part, the whole
 * tensor, so kernel 0's step runs as an elementwise kernel's: a thread V
 * elements a step, grid-stride, 256 threads a block over coco_grid_vec's
 * grid, without the fused kernels' bound of two blocks of 512 an SM and
 * without their aligned-step arithmetic, its reads through the read-only
 * path (RO, coco_ldv_in). Same operands, same statements, so the same
 * bits. It measured faster than the fused instance on the layers' chain
 * and slower on the optimizers (doc/gpu.md, One rank), whence FORM. */
static void emit_one_rank_kernel(Emitter *e, int f, const Lsa *l, const int *ins, int nin,
                                 const int *zs, int nz)
{
    FILE *o = e->o;
    e->lin = lin_param(e, l, ins, nin);
    fprintf(o, "template <int V%s>\n__global__ void __launch_bounds__(256) %s_f%d_one(",
            e->lin ? ", int LIN" : "", e->v, f);
    emit_params(e, l, ins, nin, zs, nz, EMIT_TYPED);
    fprintf(o, ")\n{\n    constexpr int P = 1, ONESHOT = 0, U = 0, PUSH = 0, RO = 1;\n"
               "    (void)ONESHOT;\n    (void)U;\n    (void)PUSH;\n    (void)RO;\n    (void)dc;\n"
               "    (void)seed;\n"
               "    (void)ck;\n    (void)rank;\n");
    if (e->lin)
        emit_lin_preamble(e, l, 0, ins, nin);
    emit_scalars(e, l, 0);
    fprintf(o, "    {\n        const int part = 0;\n");
    emit_part_bounds(e);
    fprintf(o, "        for (long i0 = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V; i0 < n;\n"
               "             i0 += (long)gridDim.x * blockDim.x * V) {\n"
               "            const long lim = n;\n");
    emit_step(e, l, 0, ins, nin);
    fprintf(o, "        }\n    }\n}\n\n");
    e->lin = 0;
}

static void emit_comment(Emitter *e, int f, const Lsa *l)
{
    Program *p = e->p;
    fprintf(e->o, "// FusedAllReduce %s as %s over the peers' memory:", p->fusion[f].name,
            l->rows ? "a row kernel (emit_rows.c)"
            : l->nred ? "two kernels (a cross-rank reduction between them)" : "one kernel");
    for (int k = 0; k < l->nm; k++) {
        Node *n = nd(e, l->m[k]);
        if (n->named || lsa_kept(e, l, n->id) || n->op == O_ALLGATHER)
            fprintf(e->o, " %s (line %d)", n->name, n->pos.line);
    }
    fputc('\n', e->o);
}

/* The one-rank elementwise form's launch for vector width v (lins: the
 * LIN instances), when the whole tensor goes at once and FORM allows it:
 * neither ctx->one_rank_fused nor an algorithm asked for (ctx->fused_algo,
 * which at one rank takes the fused kernel's one instance). */
static void emit_go_one_rank(Emitter *e, int f, const Lsa *l, const int *ins, int nin,
                             const int *zs, int nz, int v, int lins)
{
    FILE *o = e->o;
    fprintf(o, "    if (FORM && V == %d && P == 1 && ck.count == 1 && !ck.flag) {\n", v);
    for (int lin = lins - 1; lin >= 0; lin--) {
        if (lins == 2 && v > 1)
            fprintf(o, lin ? "        if (lin)\n    " : "        else\n    ");
        else if (lin)
            continue; /* V = 1: the coordinates, whatever lin says */
        fprintf(o, "        %s_f%d_one<%d%s><<<coco_grid_vec(nall, %d), 256, 0, st>>>(", e->v, f,
                v, lins == 2 ? (lin ? ", 1" : ", 0") : "", v);
        emit_params(e, l, ins, nin, zs, nz, EMIT_FORWARD);
        fprintf(o, ");\n");
    }
    fprintf(o, "    } else\n");
}

/* The host's dispatch over the instances: _go launches the kernel(s). */
static void emit_go(Emitter *e, int f, const Lsa *l, const int *ins, int nin, const int *zs,
                    int nz)
{
    FILE *o = e->o;
    int vmax = vector_width(e, l, ins, nin, zs, nz), one = oneshot_allowed(e, l, ins, nin);
    int lins = lin_param(e, l, ins, nin) ? 2 : 1; /* instances LIN = 0 and 1 */
    fprintf(o, "static int %s_f%d_go(int V, int P, int ONESHOT, int U, int PUSH, int FORM, "
               "dim3 grid, dim3 block, cudaStream_t st, ", e->v, f);
    emit_params(e, l, ins, nin, zs, nz, EMIT_TYPED);
    fprintf(o, ")\n{\n");
    /* V: vmax, or 1 (misaligned buffers, or ctx->fused_vec); U: every
     * peer's loads in flight, or one's (ctx->fused_peers); push: two-shot
     * only, its loads all local (U = 0). One rank: one instance whatever
     * the algorithm asked (its only part, loaded locally, no barrier) */
    for (int vi = 0; vi < (vmax > 1 ? 2 : 1); vi++)
        for (int pi = 0; pi < NLSA_RANKS; pi++)
            for (int os = 0; os < 3; os++) /* two-shot, one-shot, push */
                for (int u = 0; u < (os == 2 ? 1 : 2); u++) {
                    if ((os == 1 && !one) || (os == 2 && !push_allowed(l)) ||
                        (lsa_ranks[pi] == 1 && (os || u)))
                        continue;
                    int v = vi ? 1 : vmax, oneshot = os == 1, push = os == 2;
                    fprintf(o, "#if COCO_HAS_P(%d)\n", lsa_ranks[pi]);
                    if (lsa_ranks[pi] == 1 && chunked(l))
                        emit_go_one_rank(e, f, l, ins, nin, zs, nz, v, lins);
                    if (lsa_ranks[pi] == 1)
                        fprintf(o, "    if (V == %d && P == 1) {\n", v);
                    else
                        fprintf(o, "    if (V == %d && P == %d && ONESHOT == %d && U == %d && "
                                   "PUSH == %d) {\n", v, lsa_ranks[pi], oneshot, u, push);
                    for (int kn = 0; kn < (l->nred ? 2 : 1); kn++)
                        for (int lin = lins - 1; lin >= 0; lin--) {
                            if (lins == 2 && v > 1)
                                fprintf(o, lin ? "        if (lin)\n    " : "        else\n    ");
                            else if (lin)
                                continue; /* V = 1: the coordinates, whatever lin says */
                            fprintf(o, "        %s_f%d%s<%d, %d, %d, %d, %d%s><<<grid, block, 0, "
                                       "st>>>(", e->v, f, kn ? "_b" : "", v, lsa_ranks[pi], oneshot,
                                    u, push, lins == 2 ? (lin ? ", 1" : ", 0") : "");
                            emit_params(e, l, ins, nin, zs, nz, EMIT_FORWARD);
                            fprintf(o, ");\n");
                        }
                    fprintf(o, "    } else\n#endif\n");
                }
    fprintf(o, "        return 1;\n    return 0;\n}\n\n");
}

/* A fusion of whole rows (l->rows): one row kernel, its body emit_rows.c's
 * (each rank its slice's rows; R, the vectors a thread holds, and W, the
 * warps a row, chosen by the host: coco_rows_shape). No push, one-shot,
 * U = 1 or LIN instances. */
static void emit_row_kernel(Emitter *e, int f, const Lsa *l, const int *ins, int nin,
                            const int *zs, int nz)
{
    fprintf(e->o, "template <int V, int P, int R, int W>\n__global__ void __launch_bounds__(%s) "
                  "%s_f%d(", rows_lsa_bounds(e, l), e->v, f);
    emit_params(e, l, ins, nin, zs, nz, EMIT_TYPED);
    fprintf(e->o, ")\n");
    rows_emit_lsa_body(e, l);
}

typedef struct {
    const Lsa *l;
    const int *ins, *zs;
    int nin, nz;
} RowArgs;

static void emit_row_args(Emitter *e, const void *ctx)
{
    const RowArgs *a = ctx;
    fputc('(', e->o);
    emit_params(e, a->l, a->ins, a->nin, a->zs, a->nz, EMIT_FORWARD);
    fprintf(e->o, ");\n");
}

/* The host's dispatch over a row kernel's instances (V, P and R: block
 * from V and H, the grid the launch's, the same on every rank) */
static void emit_go_rows(Emitter *e, int f, const Lsa *l, const int *ins, int nin, const int *zs,
                         int nz)
{
    FILE *o = e->o;
    int vmax = rows_lsa_vmax(e, l);
    RowArgs a = {l, ins, zs, nin, nz};
    fprintf(o, "static int %s_f%d_go(int V, int P, int ONESHOT, int U, int PUSH, int FORM, "
               "dim3 grid, dim3 block, cudaStream_t st, ", e->v, f);
    emit_params(e, l, ins, nin, zs, nz, EMIT_TYPED);
    fprintf(o, ")\n{\n    (void)ONESHOT;\n    (void)U;\n    (void)PUSH;\n    (void)FORM;\n"
               "    const long H = it.dim[it.nd - 1];\n"
               "    const CocoRowsShape shape = coco_rows_shape(H, V);\n    (void)shape;\n"
               "    block = coco_rows_block(H, V);\n");
    for (int vi = 0; vi < (vmax > 1 ? 2 : 1); vi++)
        for (int pi = 0; pi < NLSA_RANKS; pi++) {
            int v = vi ? 1 : vmax;
            fprintf(o, "#if COCO_HAS_P(%d)\n    if (V == %d && P == %d) {\n", lsa_ranks[pi], v,
                    lsa_ranks[pi]);
            rows_emit_instances(e, arena_printf(e->p->arena, "%s_f%d", e->v, f), v,
                                arena_printf(e->p->arena, ", %d", lsa_ranks[pi]), emit_row_args, &a);
            fprintf(o, "    } else\n#endif\n");
        }
    fprintf(o, "        return 1;\n    return 0;\n}\n\n");
}

void lsa_emit_kernel(Emitter *e, int f)
{
    Lsa l;
    int *ins, *zs, nz;
    int nin = prepare(e, f, &l, &ins, &zs, &nz);
    int *saved = emit_alloc(e, (size_t)l.nm * sizeof(int));
    for (int k = 0; k < l.nm; k++) {
        saved[k] = e->segment[l.m[k]];
        e->segment[l.m[k]] = l.seg;
    }
    emit_comment(e, f, &l);
    if (l.rows) {
        emit_row_kernel(e, f, &l, ins, nin, zs, nz);
        emit_go_rows(e, f, &l, ins, nin, zs, nz);
    } else {
        for (int kn = 0; kn < (l.nred ? 2 : 1); kn++)
            emit_kernel(e, f, &l, kn, ins, nin, zs, nz);
        if (chunked(&l))
            emit_one_rank_kernel(e, f, &l, ins, nin, zs, nz);
        emit_go(e, f, &l, ins, nin, zs, nz);
    }
    for (int k = 0; k < l.nm; k++)
        e->segment[l.m[k]] = saved[k];
    emit_free(e, saved);
    emit_free(e, ins);
    emit_free(e, zs);
    lsa_free(e, &l);
}

/* ---- the launch, inside the entry point ---- */

/* Workspace of the kernels, declared with the body's buffers (so that the
 * dry run counts it): the published values (in the window: fr), the
 * blocks' partial folds (fp) and the carried values (fc<id>). */
void lsa_emit_workspace(Emitter *e, int f)
{
    Lsa l;
    lsa_plan(e, f, &l);
    if (push_allowed(&l)) { /* the push algorithm's staging buffer (coco_lsa_slot) */
        Node *rs = nd(e, l.rs), *x = nd(e, rs->in[0]);
        int *ins = emit_alloc(e, (size_t)e->p->nnode * sizeof(int));
        int nin = emit_outside_operands(e, l.m, l.nm, ins);
        fprintf(e->o, "    const int fpush%d = coco_lsa_pushes(ctx, %s, %d, (size_t)coco_count(h%d) "
                      "* %zu);\n    void *fs%d = coco_ws(&ws, ctx, fpush%d ? coco_lsa_stage_bytes("
                      "h%d, G_WORLD, %zu) : 0);\n", rs->id, push_choice(&l),
                oneshot_allowed(e, &l, ins, nin), x->id, type_size(x->type), rs->id, rs->id, rs->id,
                type_size(x->type));
        emit_free(e, ins);
    }
    if (l.nred)
        fprintf(e->o, "    void *fr%d = coco_ws(&ws, ctx, %d * COCO_LSA_MAXBLOCKS * "
                      "sizeof(double));\n    void *fp%d = coco_ws(&ws, ctx, %d * "
                      "COCO_LSA_MAXBLOCKS * sizeof(double));\n", l.rs, l.nred, l.rs, l.nred);
    for (int k = 0; k < l.nm; k++)
        if (l.carry[l.m[k]])
            fprintf(e->o, "    void *fc%d = coco_ws(&ws, ctx, %s * %zu);\n", l.m[k],
                    emit_room(e, nd(e, l.m[k])), type_size(nd(e, l.m[k])->type));
    lsa_free(e, &l);
}

/* The buffers only the NCCL path uses: the members the kernels keep in
 * registers (neither stored locally nor gathered into a contiguous
 * buffer) or address in their members (scattered), and a scattered reduced
 * input that path alone gathers. */
void lsa_mark_nccl_only(Emitter *e, int f)
{
    Lsa l;
    lsa_plan(e, f, &l);
    for (int k = 0; k < l.nm; k++) {
        int id = l.m[k];
        int gathered = nd(e, id)->op == O_ALLGATHER && !lsa_scattered(e, &l, id);
        e->nccl_only[id] = !gathered && !stores_local(e, &l, id);
    }
    int x = nd(e, l.rs)->in[0];
    if (lsa_scattered(e, &l, x) && emit_scat_gather_fusion(e, x) == f)
        e->nccl_only[x] = 1;
    lsa_free(e, &l);
}

/* The values whose buffers (or members) the kernels reach in the peers'
 * windows: the reduced input and the gathered members; their count */
int lsa_window_nodes(Emitter *e, int f, int *ids)
{
    Lsa l;
    lsa_plan(e, f, &l);
    int n = 0;
    ids[n++] = nd(e, l.rs)->in[0];
    for (int k = 0; k < l.nm; k++)
        if (nd(e, l.m[k])->op == O_ALLGATHER)
            ids[n++] = l.m[k];
    lsa_free(e, &l);
    return n;
}

/* The buffers of the window (lb[], their offsets to lo[]): the reduced
 * input first, then the gathered, then the published values; scattered
 * ones are not among them (their members are checked apart). */
static int emit_window_buffers(Emitter *e, const Lsa *l)
{
    FILE *o = e->o;
    int *ids = emit_alloc(e, (size_t)(l->nm + 1) * sizeof(int)), count = 0;
    int x = nd(e, l->rs)->in[0];
    for (int k = -1; k < l->nm; k++) {
        int id = k < 0 ? x : l->m[k];
        if ((k < 0 || nd(e, id)->op == O_ALLGATHER) && !lsa_scattered(e, l, id))
            ids[count++] = id;
    }
    int push = push_allowed(l); /* the staging buffer, even over scattered operands alone */
    if (!count && !push && !l->nred) {
        emit_free(e, ids);
        return 0;
    }
    fprintf(o, "        const void *lb[] = {");
    for (int k = 0; k < count; k++)
        fprintf(o, "%sb%d", k ? ", " : "", ids[k]);
    if (push)
        fprintf(o, "%sfs%d", count ? ", " : "", l->rs);
    if (l->nred)
        fprintf(o, "%sfr%d", count + push ? ", " : "", l->rs);
    fprintf(o, "};\n        const size_t lbytes[] = {");
    for (int k = 0; k < count; k++)
        fprintf(o, "%s(size_t)coco_count(h%d) * %zu", k ? ", " : "", ids[k],
                type_size(nd(e, ids[k])->type));
    if (push)
        fprintf(o, "%sfpush%d ? coco_lsa_stage_bytes(h%d, G_WORLD, %zu) : 0",
                count ? ", " : "", l->rs, l->rs, type_size(nd(e, x)->type));
    if (l->nred)
        fprintf(o, "%s%d * COCO_LSA_MAXBLOCKS * sizeof(double)", count + push ? ", " : "",
                l->nred);
    fprintf(o, "};\n        size_t lo[%d];\n", count + push + (l->nred > 0));
    emit_free(e, ids);
    return count + push + (l->nred > 0);
}

/* The condition of the kernels' path: peers reachable, every window
 * buffer in the window, and every peer-addressed member too. */
static void emit_usable(Emitter *e, const Lsa *l, int nwin)
{
    FILE *o = e->o;
    int x = nd(e, l->rs)->in[0];
    if (nwin)
        fprintf(o, "        if (coco_lsa_usable(ctx, G_WORLD, lb, lbytes, lo, %d)", nwin);
    else
        fprintf(o, "        if (coco_lsa_usable(ctx, G_WORLD, NULL, NULL, NULL, 0)");
    for (int k = -1; k < l->nm; k++) {
        int id = k < 0 ? x : l->m[k];
        if ((k < 0 || nd(e, id)->op == O_ALLGATHER) && lsa_scattered(e, l, id))
            fprintf(o, " &&\n            coco_lsa_members_usable(ctx, c%d, %zu)", id,
                    type_size(nd(e, id)->type));
    }
    if (l->rows) /* rows of some element (an empty row takes the NCCL path) */
        fprintf(o, " && h%d.dim[h%d.nd - 1] > 0", l->rs, l->rs);
    for (int pi = 0; pi < NLSA_RANKS; pi++)
        fprintf(o, "%sG_WORLD == %d", pi ? " || " : " && (", lsa_ranks[pi]);
    fprintf(o, ")) {\n");
}

/* Pointers whose alignment decides V: the starts of the buffers addressed
 * at base + i0 (the reduced input, the gathered outputs, the whole tensors
 * read at the slice), which the loop's shift aligns from there on whatever
 * cs. The part-local arrays need no check (coco_ldv_any). */
static int emit_vector_buffers(Emitter *e, const Lsa *l, const int *zs, int nz)
{
    FILE *o = e->o;
    int count = 0, *ids = emit_alloc(e, (size_t)(1 + nz + l->nm) * sizeof(int));
    ids[count++] = nd(e, l->rs)->in[0];
    for (int k = 0; k < nz; k++)
        ids[count++] = zs[k];
    for (int k = 0; k < l->nm; k++)
        if (nd(e, l->m[k])->op == O_ALLGATHER)
            ids[count++] = l->m[k];
    fprintf(o, "        const void *vp[] = {");
    for (int k = 0; k < count; k++)
        fprintf(o, "%sb%d", k ? ", " : "", ids[k]);
    fprintf(o, "};\n        const int vs[] = {");
    for (int k = 0; k < count; k++)
        fprintf(o, "%s%zu", k ? ", " : "", type_size(nd(e, ids[k])->type));
    fprintf(o, "};\n");
    emit_free(e, ids);
    return count;
}

/* The AllGather member of a fusion that is a bare AllReduce (its
 * ReduceScatter, then the AllGather of that, nothing else) into a
 * workspace value, over a value that is not a tensor input (which an Update
 * may rewrite later) and with no MatMul overlapped: on one rank its value is
 * its operand's, so its buffer may be the operand's. Else -1. */
static int one_rank_alias(Emitter *e, const Lsa *l, int f)
{
    if (l->nm != 2 || l->scat >= 0 || e->overlap_mm[f] >= 0)
        return -1;
    int ag = l->m[0] == l->rs ? l->m[1] : l->m[0];
    const Node *g = nd(e, ag), *x = nd(e, nd(e, l->rs)->in[0]);
    if (g->op != O_ALLGATHER || g->in[0] != l->rs || g->type != x->type ||
        e->out_index[ag] >= 0 || e->state_of[ag] >= 0 || lsa_kept(e, l, l->rs) ||
        e->in_index[x->id] >= 0 || x->op == O_SCALAR)
        return -1;
    return ag;
}

/* lin: may the kernels find each operand from the element's index in the
 * part (it: this rank's)? Every broadcast operand is it's trailing
 * dimensions below the first (the same for every part, one-shot's too) and
 * every Dropout is cut along its first dimension at most. */
static void emit_lin_test(Emitter *e, const Lsa *l, const int *ins, int nin, int vmax)
{
    FILE *o = e->o;
    fprintf(o, "        int lin = 1;\n");
    for (int k = 0; k < nin; k++)
        if (lin_operand(e, l, 0, ins[k]) || lin_operand(e, l, 1, ins[k]))
            fprintf(o, "        lin = lin && h%d.nd < it.nd && coco_lin_bcast(h%d, it, %d);\n",
                    ins[k], ins[k], vmax);
    for (int k = 0; k < l->nm; k++)
        if (nd(e, l->m[k])->op == O_DROPOUT && nd(e, l->m[k])->ndim)
            fprintf(o, "        lin = lin && coco_lin_global(h%d, it);\n", l->m[k]);
}

void lsa_emit_launch(Emitter *e, int f, int *done_segment)
{
    Program *p = e->p;
    FILE *o = e->o;
    Lsa l;
    int *ins, *zs, nz;
    int nin = prepare(e, f, &l, &ins, &zs, &nz);
    Node *rs = nd(e, l.rs), *x = nd(e, rs->in[0]);
    int vmax = l.rows ? rows_lsa_vmax(e, &l) : vector_width(e, &l, ins, nin, zs, nz);
    int one = oneshot_allowed(e, &l, ins, nin);
    fprintf(o, "    { /* line %d: FusedAllReduce %s */\n", rs->pos.line, p->fusion[f].name);
    int alias = one_rank_alias(e, &l, f);
    if (alias >= 0) /* no kernel, no copy: the sum over one rank is the value */
        fprintf(o, "        if (G_WORLD == 1) {\n            b%d = b%d;\n        } else {\n",
                alias, x->id);
    emit_usable(e, &l, emit_window_buffers(e, &l));
    fprintf(o, "        CocoShape it = h%d;\n"
               "        const long cs = coco_padded_count(it, 0, G_WORLD) / G_WORLD, nall = "
               "coco_count(h%d);\n", rs->id, x->id);
    if (l.rows) {
        rows_emit_lsa_choice(e, &l); /* H, V, grid and block */
    } else if (l.scat < 0) {
        int nvec = emit_vector_buffers(e, &l, zs, nz);
        fprintf(o, "        int V = !ctx->fused_vec && coco_pick_vec(%d, vp, vs, %d) == %d ? "
                   "%d : 1;\n", vmax, nvec, vmax, vmax);
    } else { /* V at any alignment; the first bucket of each part, found on the host */
        fprintf(o, "        int V = ctx->fused_vec ? 1 : %d;\n"
                   "        CocoLsaParts pb = coco_lsa_parts(c%d, cs, G_WORLD);\n", vmax, l.scat);
    }
    fprintf(o, "        int one = coco_lsa_oneshot(ctx, %d, (size_t)nall * %zu);\n", one,
            type_size(x->type));
    /* the grid from vmax, not V, and from cs or the bucket count, not the
     * rank's own slice (the last ones may be shorter): every rank must sync
     * each barrier (one per block) equally often */
    if (l.rows)
        ; /* rows_emit_lsa_choice's */
    else if (l.scat < 0)
        fprintf(o, "        dim3 grid, block;\n        coco_lsa_grid(ctx, cs, %d, &grid, &block);\n",
                vmax);
    else
        fprintf(o, "        dim3 grid, block;\n        coco_lsa_scat_grid(ctx, c%d, G_WORLD, &grid, "
                   "&block);\n", l.scat);
    if (lin_param(e, &l, ins, nin))
        emit_lin_test(e, &l, ins, nin, vmax);
    fprintf(o, "        ncclDevComm dc = coco_lsa_devcomm(ctx);\n"
               "        ncclWindow_t win = (ncclWindow_t)ctx->lsa_window;\n");
    /* go(stream, push, grid, chunks): the kernels (chunks: emit_overlap.c's, or all at once) */
    fprintf(o, "        auto go = [&](cudaStream_t s, int push, dim3 g, CocoChunks ck) {\n"
               "            return %s_f%d_go(V, (int)G_WORLD, one, push ? 0 : ctx->fused_peers, "
               "push, !ctx->one_rank_fused && ctx->fused_algo == COCO_FUSED_AUTO, g, block, s, ",
            e->v, f);
    emit_params(e, &l, ins, nin, zs, nz, EMIT_HOST);
    fprintf(o, ");\n        };\n");
    const char *push = push_allowed(&l) ? arena_printf(e->p->arena, "fpush%d", l.rs) : "0";
    int mm = e->overlap_mm[f];
    if (mm >= 0)
        ovl_emit_launch(e, mm, rs->pos.line, push, done_segment);
    else
        fprintf(o, "        if (go(st, %s, grid, coco_chunks_all(cs)))\n            COCO_FAIL(ctx, "
                   "\"FusedAllReduce\", %d, \"no kernel instance for %%ld ranks\", G_WORLD);\n"
                   "        COCO_LAUNCHED(ctx, \"FusedAllReduce\", %d);\n",
                push, rs->pos.line, rs->pos.line);
    for (int k = 0; k < l.nm; k++)
        emit_state_copy(e, nd(e, l.m[k]));
    fprintf(o, "        } else {\n"
               "        if (!coco_ws_fits(ctx, ws, wst))\n"
               "            COCO_FAIL(ctx, \"FusedAllReduce\", %d, \"its NCCL path (some buffer "
               "outside the window, or COCONET_FUSED=nccl) needs %%zu workspace bytes, %%zu "
               "given\", coco_ws_total(ws, wst), ctx->workspace_bytes);\n",
            rs->pos.line);
    if (mm >= 0) /* the overlapped MatMul first, on the NCCL path too */
        e->emit_node(e, nd(e, mm), done_segment);
    emit_scat_gather_for(e, f);
    for (int k = 0; k < l.nm; k++)
        e->emit_node(e, nd(e, l.m[k]), done_segment);
    fprintf(o, alias >= 0 ? "        }\n        }\n    }\n" : "        }\n    }\n");
    emit_free(e, ins);
    emit_free(e, zs);
    lsa_free(e, &l);
}

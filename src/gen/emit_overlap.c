/* emit_overlap.c: overlap(MatMul, FusedAllReduce) (language.md 10.5) as
 * the MatMul in chunks, each chunk's share of the collective running as
 * soon as it is written, while the next chunk is multiplied.
 *
 * The FusedAllReduce's kernel (emit_lsa.c) takes part q of the MatMul's
 * output on rank q (rows [q*Mp, (q+1)*Mp) of M = P*Mp rows). Chunk c is
 * the same sub-range of every part: rows q*Mp + [c*Mp/C, (c+1)*Mp/C) for
 * each q, one strided batched cuBLASLt call (P products of those rows of A
 * with the one B). So each rank, after chunk c, holds chunk c of every
 * part, and the kernel's elements of chunk c (CocoChunks) can go. Every
 * rank owns the elements it would own without chunks, so kept slices,
 * Dropout's masks and the values are the unchunked kernel's bit for bit.
 *
 * The kernel is launched once, on the side stream, after the MatMul's
 * chunks are enqueued (so that CUDA's lazy loading of their code cannot
 * wait for the kernel that waits for them), on a grid of two blocks an SM of the SMs it keeps
 * (COCONET_OVERLAP_SMS, 32 by default; the MatMul's cuBLASLt SM target is
 * the rest, so both always find SMs). On the main stream each chunk is
 * followed by a one-thread kernel that sets the chunk's flag in device
 * memory (coco_chunk_signal: a stream-ordered write). Each block of the
 * fused kernel, before chunk c, waits for flag c with a bounded spin
 * (coco_chunk_wait: 20 s, then it traps and the run fails), then syncs its
 * barrier with the same block of every peer: when it passes, chunk c is
 * written on every rank. With COCONET_FUSED=push the block first stores
 * chunk c's rows of every peer's part into that peer's staging slots
 * (coco_lsa_push_chunk), then syncs, and reduces from local memory; by
 * default the kernel loads from the peers (measured as fast as push or
 * faster in most settings: doc/gpu.md, The generated code). The main
 * stream waits for the side stream at the end. Rank-staggered chunk orders
 * (the paper's) are not needed here: at each chunk every rank reads a
 * different part, its own.
 *
 * Knobs (ctx, COCONET_OVERLAP_CHUNKS, COCONET_OVERLAP_SMS and
 * COCONET_OVERLAP_TAIL): the chunk count C (by default 4 or 1 by the
 * MatMul's FLOPs per byte of the collective and its rows,
 * coco_overlap_default_chunks; 1: no overlap, the MatMul then the kernel on
 * one stream), the SMs the kernel keeps, and where the last chunk goes
 * (with the others on the side stream, or, with TAIL, a second launch of
 * the kernel on the main stream after the MatMul and the side kernel, on
 * the whole grid, with no flag to wait for: its first barrier finds the
 * MatMul done on every rank). Chunking needs rows that part the same way
 * as the tensor: M a multiple of P, each part Mp whole rows
 * (coco_overlap_chunks decides at run time; else C = 1). Where the fusion
 * reduces within a rank's rows (a reduction along a dimension after the
 * sliced one: row_unit), the chunks are whole units of the rows one such
 * reduction spans (mU), so that each reduction finds all of its elements
 * in one chunk: the kernels' chunk c is then units [u c / C, u (c + 1) / C)
 * of the u of a part. Not chunked:
 * fusions with cross-rank reductions (two kernels, the second needs every
 * element) or scattered operands. */
#include "gen/emit_lsa.h"

#include <string.h>

static Node *nd(Emitter *e, int id)
{
    return node_of(e->p, id);
}

/* Is node id read by any live node other than `reader`, or an output? */
static int read_elsewhere(Emitter *e, int id, int reader)
{
    Program *p = e->p;
    if (is_output(p, id))
        return 1;
    for (int j = 0; j < p->nnode; j++)
        for (int k = 0; j != reader && !p->node[j].dead && k < p->node[j].nin; k++)
            if (p->node[j].in[k] == id)
                return 1;
    return 0;
}

/* Does the program write a new value into input x (an Update of it)? */
static int updated(const Node *x)
{
    return x->op == O_INPUT && x->updated_by >= 0;
}

/* The MatMul that overlap() places right before fusion f, or -1. */
static int overlapped_producer(Emitter *e, int f)
{
    Program *p = e->p;
    for (int i = 0; i < p->noverlap; i++)
        for (int k = 1; k < p->overlap[i].nitem; k++) {
            Ref before = p->overlap[i].item[k - 1];
            if (p->overlap[i].item[k] == REF_FUSION(f) && !REF_IS_FUSION(before) &&
                nd(e, before)->op == O_MATMUL)
                return before;
        }
    return -1;
}

static int is_row_reduction(Emitter *e, const Lsa *l, const Node *n)
{
    return (n->op == O_REDUCE_TENSOR || n->op == O_NORM || n->op == O_PARTIAL_REDUCE) &&
           lsa_red_index(l, n->id) < 0;
}

/* Where fusion l holds reductions within a rank's rows (row reductions:
 * along a dimension a > 0 of a member x shaped as the ReduceScatter's
 * value), each reduces, for each index of x's dimensions before a, the
 * elements of x's dimensions from a on: whole MatMul rows, as many as x's
 * dimensions a to the last but one hold, so the chunks must be made of
 * such units. The unit's rows as C ("": one row, no reduction spans more),
 * or NULL where chunks cannot keep the reductions whole. */
static const char *row_unit(Emitter *e, const Lsa *l)
{
    const Node *rs = nd(e, l->rs), *x = NULL;
    int axis = rs->ndim - 1;
    for (int k = 0; k < l->nm; k++) {
        const Node *n = nd(e, l->m[k]), *in = n->nin ? nd(e, n->in[0]) : NULL;
        if (!is_row_reduction(e, l, n))
            continue;
        if (n->axis < 1 || !emit_same_local_shape(in, rs))
            return NULL;
        if (n->axis < axis)
            x = in, axis = n->axis;
    }
    char *unit = arena_printf(e->p->arena, "%s", "");
    for (int d = axis; x && d < x->ndim - 1; d++)
        unit = arena_printf(e->p->arena, "%s%sh%d.dim[%d]", unit, *unit ? " * " : "", x->id, d);
    return unit;
}

int ovl_matmul(Emitter *e, int f)
{
    int mm = overlapped_producer(e, f);
    if (mm < 0)
        return -1;
    Lsa l;
    lsa_plan(e, f, &l);
    Node *rs = nd(e, l.rs), *a = nd(e, nd(e, mm)->in[0]), *b = nd(e, nd(e, mm)->in[1]);
    /* the MatMul moves to the fusion's launch: no new value of its operands
     * may be written in between (an Update of A or B: none at all) */
    /* (an operand read transposed is not cut into chunks of rows) */
    int ok = rs->in[0] == mm && !l.nred && l.scat < 0 && a->type == b->type && b->ndim == 2 &&
             a->op != O_TRANSPOSE && b->op != O_TRANSPOSE &&
             a->ndim >= 2 && a->nmember == 0 && b->nmember == 0 && !updated(a) && !updated(b) &&
             !read_elsewhere(e, mm, rs->id) && row_unit(e, &l);
    lsa_free(e, &l);
    return ok ? mm : -1;
}

int ovl_deferred(Emitter *e, int id)
{
    for (int f = 0; f < e->p->nfusion; f++)
        if (e->overlap_mm && e->overlap_mm[f] == id)
            return 1;
    return 0;
}

/* The MatMul's sizes in the launch block: K, N, rows M, and `chunks` (of
 * units of mU rows where the fusion's row reductions span several: row_unit) */
static void emit_sizes(Emitter *e, const Node *mm, const char *unit)
{
    Node *a = nd(e, mm->in[0]), *b = nd(e, mm->in[1]);
    fprintf(e->o, "        const long mK = h%d.dim[%d], mN = h%d.dim[1], mM = mK ? coco_count(h%d) / mK : 0;\n",
            a->id, a->ndim - 1, b->id, a->id);
    if (*unit)
        fprintf(e->o, "        const long mU = %s; /* the rows a row reduction spans */\n"
                      "        const int chunks = mU > 0 ? coco_overlap_chunks(ctx, mM / mU, mN * mU, mK, "
                      "%zu, G_WORLD, cs, nall) : 1;\n", unit, type_size(mm->type));
    else
        fprintf(e->o, "        const int chunks = coco_overlap_chunks(ctx, mM, mN, mK, %zu, G_WORLD, cs, nall);\n",
                type_size(mm->type));
}

/* The chunks of the MatMul and their signals on the main stream, then `go`
 * (the launch block's lambda): the kernel on the side stream, each block
 * waiting for each chunk's flag; with the tail, the last chunk's launch on
 * the main stream after it. With a row unit (row_unit), the chunks are
 * whole units: the kernels' chunk c is units [u*c/C, u*(c+1)/C) of the u
 * of a part, each mN * mU elements, the MatMul's the same rows. */
static void emit_chunks(Emitter *e, const Node *mm, int line, const char *push, const char *unit)
{
    FILE *o = e->o;
    size_t es = type_size(mm->type);
    int l = mm->pos.line, u = *unit != 0;
    const char *rows = u ? "mP / mU" : "mP", *cols = u ? "mN * mU" : "mN";
    const char *row0 = u ? "mP / mU * c / chunks * mU" : "mP * c / chunks";
    const char *row1 = u ? "mP / mU * (c + 1) / chunks * mU" : "mP * (c + 1) / chunks";
    fprintf(o, "            const long mP = mM / G_WORLD;\n"
               "            cudaStream_t side = (cudaStream_t)ctx->side_stream;\n"
               "            cudaEvent_t *ev = coco_overlap_events(ctx);\n"
               "            unsigned *flag = ev ? coco_overlap_flags(ctx) : NULL;\n"
               "            if (!flag)\n                return 1;\n"
               "            /* the chunks' flags cleared on this launch's stream: a replay waits too */\n"
               "            COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaMemsetAsync(flag, 0, chunks * sizeof(unsigned), st));\n"
               "            /* the side kernel's chunks: all, or all but the last (COCONET_OVERLAP_TAIL) */\n"
               "            const int tail = ctx->overlap_tail ? 1 : 0;\n"
               "            const int by_push = %s && ctx->fused_algo == COCO_FUSED_PUSH;\n"
               "            CocoChunks ck = {chunks, %s, %s, flag, 0, chunks - tail};\n"
               "            COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaEventRecord(ev[0], st));\n"
               "            COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaStreamWaitEvent(side, ev[0], 0));\n"
               "            const int sms = coco_overlap_matmul_sms(ctx);\n"
               "            for (int c = 0; c < chunks; c++) {\n"
               "                const long row0 = %s, row1 = %s;\n"
               "                if (coco_matmul_on(ctx, %d, %s, (const char *)b%d + row0 * mK * %zu, b%d, "
               "(char *)b%d + row0 * mN * %zu, row1 - row0, mN, mK, G_WORLD, mP * mK, 0, mP * mN, sms, st))\n"
               "                    return 1;\n"
               "                coco_chunk_signal<<<1, 1, 0, st>>>(flag, c);\n"
               "                COCO_LAUNCH_CHECK(ctx, \"MatMul\", %d);\n"
               "            }\n"
               "            /* launched last: everything it waits for is enqueued (and its code\n"
               "               loaded: a lazy load while it spins could wait for it) */\n"
               "            if (go(side, by_push, coco_overlap_grid(ctx, grid), ck))\n"
               "                COCO_FAIL(ctx, \"FusedAllReduce\", %d, \"no kernel instance for %%ld "
               "ranks\", G_WORLD);\n"
               "            COCO_LAUNCH_CHECK(ctx, \"FusedAllReduce\", %d);\n"
               "            COCO_CUDA_QUIET(ctx, \"FusedAllReduce\", %d, cudaEventRecord(ev[1], side));\n"
               "            COCO_CUDA_QUIET(ctx, \"FusedAllReduce\", %d, cudaStreamWaitEvent(st, ev[1], 0));\n"
               "            COCO_MARK(ctx, COCO_MARK_KERNEL, \"overlap(MatMul, FusedAllReduce)\", %d, "
               "\"chunks\");\n"
               "            if (tail) { /* the last chunk on the whole grid, after the MatMul */\n"
               "                const CocoChunks last = {chunks, %s, %s, NULL, chunks - 1, chunks};\n"
               "                if (go(st, by_push, grid, last))\n"
               "                    COCO_FAIL(ctx, \"FusedAllReduce\", %d, \"no kernel instance for %%ld "
               "ranks\", G_WORLD);\n"
               "                COCO_LAUNCHED(ctx, \"FusedAllReduce\", %d);\n"
               "            }\n",
            l, push, rows, cols, l, l, row0, row1, l, emit_tname[mm->type], mm->in[0], es, mm->in[1],
            mm->id, es, l, line, line, line, line, line, rows, cols, line, line);
}

/* The row unit (row_unit) of the fusion whose launch chunks MatMul mm */
static const char *unit_of(Emitter *e, int mm)
{
    int f = 0;
    while (f < e->p->nfusion && e->overlap_mm[f] != mm)
        f++;
    Lsa l;
    lsa_plan(e, f, &l);
    const char *unit = row_unit(e, &l);
    lsa_free(e, &l);
    return unit;
}

void ovl_emit_launch(Emitter *e, int mm, int line, const char *push, int *done_segment)
{
    FILE *o = e->o;
    Node *m = nd(e, mm);
    const char *unit = unit_of(e, mm);
    emit_sizes(e, m, unit);
    fprintf(o, "        if (chunks > 1) { /* line %d: MatMul %s, chunk by chunk, overlapped */\n",
            m->pos.line, m->name);
    emit_chunks(e, m, line, push, unit);
    fprintf(o, "        } else {\n");
    e->emit_node(e, m, done_segment);
    fprintf(o, "            if (go(st, %s, grid, coco_chunks_all(cs)))\n"
               "                COCO_FAIL(ctx, \"FusedAllReduce\", %d, \"no kernel instance for "
               "%%ld ranks\", G_WORLD);\n"
               "            COCO_LAUNCHED(ctx, \"FusedAllReduce\", %d);\n        }\n",
            push, line, line);
}

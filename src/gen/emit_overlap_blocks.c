/* emit_overlap_blocks.c: overlap(AllGather, MatMul) and overlap(MatMul,
 * ReduceScatter) (language.md 10.5) as the MatMul by the collective's blocks
 * of rows, each block's NCCL call on the side stream, the two streams meeting
 * at events.
 *
 * Both collectives cut dimension 0 of a [d0, ..., K or N] tensor: block q
 * (rank q's, language.md 6) is one run of whole rows of the MatMul, rpi
 * rows an index along dimension 0 from row coco_part_lo(d0, P, q) * rpi.
 * Each block is cut into `sub` chunks of whole rows (coco_block_rows;
 * coco_overlap_block_chunks says how many: by default one over P > 1 ranks,
 * none on one rank; COCONET_OVERLAP_CHUNKS asks others, 1 none):
 *   - AllGather -> MatMul(g, w): the side stream broadcasts chunk c of
 *     block q from rank q (ncclBroadcast into g, rank order, the same calls
 *     on every rank), each followed by an event; the main stream multiplies
 *     this rank's own block first, from x's rows (no wait), then each other
 *     chunk after its event. One AllGather becomes P * sub broadcasts that
 *     move the same bytes; the MatMul of what has arrived hides the rest.
 *   - MatMul(a, w) -> ReduceScatter: the main stream multiplies block q's
 *     chunk c, records an event, and goes on with the next; the side stream
 *     waits for it and reduces it to rank q (ncclReduce; FP16 and BF16
 *     widened to FP32 first where the ReduceScatter is: emit_widened).
 * The main stream waits for the side stream at the end, so that the
 * collective's value and every NCCL call are done before what follows (the
 * next NCCL call on the communicator included). The MatMul's chunks are
 * cuBLASLt calls over those rows (coco_matmul_rows) that take the whole
 * product's algorithm, so each element is the unchunked call's at the same
 * SM target (rt/kernels/coco_matmul.cuh); over P > 1 ranks the target
 * leaves the collective's SMs (coco_overlap_block_sms). The ranks decide the
 * chunks from values the same on every rank (the blocks' rows, the gathered
 * depth, the reduced width), so they issue the same NCCL calls.
 *
 * The pair is emitted where the MatMul is, so the AllGather moves down to it
 * (no other reader of g may come between) and the ReduceScatter up (its one
 * operand is the MatMul's result). Without chunks the two run in order, as
 * without the overlap, except that on one rank a gathered workspace value is
 * the operand's buffer (no copy: the MatMul alone). Not by blocks (in order
 * instead): collectives along another dimension (their blocks are strided),
 * batched MatMuls, a left operand read transposed, scattered operands, a
 * collective inside a fused operation, a MatMul that another overlap
 * already chunks (emit_overlap.c). */
#include "gen/emit_cuda.h"


static Node *nd(Emitter *e, int id)
{
    return node_of(e->p, id);
}

static const Node *live_node(const Program *p, Ref r)
{
    if (REF_IS_FUSION(r) || r >= p->nnode)
        return NULL;
    const Node *n = &p->node[r];
    return n->dead || n->fusion >= 0 ? NULL : n;
}

/* A MatMul of one batch: a 2-D right operand, both of one type, neither
 * scattered, the left one of rows (2-D or more) */
static int one_batch(const Program *p, const Node *mm)
{
    const Node *a = &p->node[mm->in[0]], *b = &p->node[mm->in[1]];
    return mm->op == O_MATMUL && a->ndim >= 2 && b->ndim == 2 && a->type == b->type &&
           a->nmember == 0 && b->nmember == 0;
}

int overlap_block_pair(const Program *p, Ref before, Ref after)
{
    const Node *c = live_node(p, before), *m = live_node(p, after);
    if (c && m && c->op == O_ALLGATHER && m->op == O_MATMUL && m->in[0] == c->id &&
        one_batch(p, m)) {
        const Node *x = &p->node[c->in[0]];
        if (x->layout.kind == L_SLICED && x->layout.dim == 0)
            return OVERLAP_GATHER;
    }
    m = live_node(p, before), c = live_node(p, after);
    if (c && m && c->op == O_REDUCESCATTER && m->op == O_MATMUL && c->in[0] == m->id &&
        c->axis == 0 && one_batch(p, m) && p->node[m->in[0]].op != O_TRANSPOSE)
        return OVERLAP_SCATTER;
    return 0;
}

/* Is any of the nodes addressed through a scattered tensor's members? */
static int any_scattered(Emitter *e, const int *ids, int n)
{
    for (int k = 0; k < n; k++)
        if (emit_scat_of(e, ids[k]) || emit_scat_lsa(e, nd(e, ids[k])))
            return 1;
    return 0;
}

/* Does a live node other than mm, before it, read g? */
static int read_before(Emitter *e, int g, int mm)
{
    for (int k = e->reader_first[g]; k < e->reader_first[g + 1]; k++)
        if (e->reader[k] != mm && e->reader[k] < mm)
            return 1;
    return 0;
}

/* Is x an input that an Update rewrites (in its buffer)? */
static int updated(const Node *x)
{
    return x->op == O_INPUT && x->updated_by >= 0;
}

/* Can the pair (collective c, MatMul mm) of kind `kind` go by blocks here?
 * Neither chunked already, nor fused, nor over members; the collective no
 * tensor's new value (it moves). An AllGather moves down to its MatMul: no
 * other reader of g before it, no Update of its operand. */
static int pair_usable(Emitter *e, int kind, int c, int mm)
{
    const Node *m = nd(e, mm), *x = nd(e, nd(e, c)->in[0]);
    int ids[] = {c, x->id, m->in[0], m->in[1], mm};
    if (e->ovl_block[mm] != -1 || e->ovl_block[c] != -1 || ovl_deferred(e, mm) ||
        e->lsa_node[c] >= 0 || e->lsa_node[mm] >= 0 || e->state_of[c] >= 0 ||
        any_scattered(e, ids, 5))
        return 0;
    return kind == OVERLAP_SCATTER || (!read_before(e, c, mm) && !updated(x));
}

void ovl_blocks_find(Emitter *e)
{
    Program *p = e->p;
    e->ovl_block = emit_alloc(e, ((size_t)p->nnode + 1) * sizeof(int));
    for (int i = 0; i < p->nnode; i++)
        e->ovl_block[i] = -1;
    for (int o = 0; o < p->noverlap; o++)
        for (int k = 1; k < p->overlap[o].nitem; k++) {
            Ref before = p->overlap[o].item[k - 1], after = p->overlap[o].item[k];
            int kind = overlap_block_pair(p, before, after);
            int mm = kind == OVERLAP_GATHER ? after : before, c = mm == after ? before : after;
            if (kind && pair_usable(e, kind, c, mm)) {
                e->ovl_block[mm] = c;
                e->ovl_block[c] = OVL_BLOCK_DEFERRED;
            }
        }
}

/* ---- the launch ---- */

/* What both pairs' chunked paths name: the MatMul's source buffers and
 * whether B is read transposed, the collective's group and line */
typedef struct {
    const Node *mm, *c;
    int a, b, tb; /* the buffers MatMul reads: b<a>, b<b> (B stored [N][K] where tb) */
    const char *g; /* the collective's group: WORLD or GROUP */
    const char *t; /* the element type, COCO_... */
    size_t es;
    int line, cline;
} Pair;

static Pair pair_of(Emitter *e, int mm)
{
    Pair q;
    q.mm = nd(e, mm);
    q.c = nd(e, e->ovl_block[mm]);
    int ta;
    q.a = emit_matmul_source(e, nd(e, q.mm->in[0]), &ta);
    q.b = emit_matmul_source(e, nd(e, q.mm->in[1]), &q.tb);
    q.g = group_name(q.c->group);
    q.t = emit_tname[q.mm->type];
    q.es = type_size(q.mm->type);
    q.line = q.mm->pos.line;
    q.cline = q.c->pos.line;
    return q;
}

/* The side stream, the events (last: the join), the MatMul chunks' alignment
 * and SM target; the side stream after everything enqueued so far. x: a
 * buffer the chunks also read rows of, or NULL. */
static void emit_streams(Emitter *e, const Pair *q, const char *x)
{
    const char *name = op_info(q->c->op)->name;
    fprintf(e->o, "            cudaStream_t side = (cudaStream_t)ctx->side_stream;\n"
                  "            const int last = (int)G_%s * sub + 1;\n"
                  "            cudaEvent_t *ev = coco_overlap_block_events(ctx, last + 1);\n"
                  "            if (!ev)\n                return 1;\n"
                  "            const int align = coco_matmul_rows_align(b%d, b%d, b%d, %s, mK, mN, %zu);\n"
                  "            const int sms = coco_overlap_block_sms(ctx, G_%s);\n"
                  "            ncclComm_t comm = %s;\n"
                  "            COCO_CUDA_QUIET(ctx, \"%s\", %d, cudaEventRecord(ev[0], st));\n"
                  "            COCO_CUDA_QUIET(ctx, \"%s\", %d, cudaStreamWaitEvent(side, ev[0], 0));\n",
            q->g, q->a, q->b, q->mm->id, x, q->es, q->g, emit_comm_of(e, q->c), name, q->cline,
            name, q->cline);
}

/* The main stream after the side stream */
static void emit_join(Emitter *e, const Pair *q)
{
    const char *name = op_info(q->c->op)->name;
    fprintf(e->o, "            COCO_CUDA_QUIET(ctx, \"%s\", %d, cudaEventRecord(ev[last], side));\n"
                  "            COCO_CUDA_QUIET(ctx, \"%s\", %d, cudaStreamWaitEvent(st, ev[last], 0));\n",
            name, q->cline, name, q->cline);
}

/* One mark for the whole (--breakdown), and the MatMul's new value */
static void emit_done(Emitter *e, const Pair *q, const char *what)
{
    fprintf(e->o, "            COCO_MARK(ctx, COCO_MARK_KERNEL, \"%s\", %d, \"chunks\");\n", what,
            q->line);
    emit_state_copy(e, q->mm);
}

/* INDENT first, lo, hi: the rows of chunk c of block q (coco_block_rows) */
static void emit_rows(Emitter *e, const Pair *q, const char *indent)
{
    fprintf(e->o, "%slong first, lo, hi;\n"
                  "%scoco_block_rows(nidx, G_%s, q, rpi, sub, c, &first, &lo, &hi);\n",
            indent, indent, q->g);
}

/* ---- AllGather -> MatMul ---- */

/* Every block's chunks broadcast from its rank into g on the side stream,
 * in rank order on every rank, each followed by its event */
static void emit_broadcasts(Emitter *e, const Pair *q)
{
    int x = q->c->in[0];
    fprintf(e->o, "            for (long q = 0; q < G_%s; q++) /* in rank order, on every rank */\n"
                  "                for (int c = 0; c < sub; c++) {\n", q->g);
    emit_rows(e, q, "                    ");
    fprintf(e->o, "                    const char *own = (const char *)b%d + (q == R_%s ? (lo - first) * mK * %zu : 0);\n"
                  "                    if (hi > lo)\n"
                  "                        COCO_CHECKED(NCCL, ctx, \"AllGather\", %d, ncclBroadcast(own, "
                  "(char *)b%d + lo * mK * %zu, (size_t)((hi - lo) * mK), coco_nccl_type(%s), "
                  "(int)q, comm, side), \"ncclBroadcast\");\n"
                  "                    COCO_CUDA_QUIET(ctx, \"AllGather\", %d, cudaEventRecord(ev[1 + "
                  "q * sub + c], side));\n                }\n",
            x, q->g, q->es, q->cline, q->c->id, q->es, q->t, q->cline);
}

/* The MatMul's chunks: this rank's block first, from x's rows (i = -1: no
 * wait), then every other block's chunks after their events */
static void emit_gathered_chunks(Emitter *e, const Pair *q)
{
    int x = q->c->in[0];
    fprintf(e->o, "            for (long i = -1; i < G_%s; i++)\n"
                  "                for (int c = 0; i != R_%s && c < sub; c++) {\n"
                  "                    const long q = i < 0 ? R_%s : i;\n", q->g, q->g, q->g);
    emit_rows(e, q, "                    ");
    fprintf(e->o, "                    if (i >= 0)\n"
                  "                        COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaStreamWaitEvent(st, "
                  "ev[1 + q * sub + c], 0));\n"
                  "                    const char *a = i < 0 ? (const char *)b%d + (lo - first) * mK * %zu\n"
                  "                                          : (const char *)b%d + lo * mK * %zu;\n"
                  "                    if (hi > lo && mN > 0 && coco_matmul_rows(ctx, %d, %s, a, b%d, %d, "
                  "(char *)b%d + lo * mN * %zu, hi - lo, mN, mK, mM, align, sms, st))\n"
                  "                        return 1;\n                }\n",
            q->line, x, q->es, q->a, q->es, q->line, q->t, q->b, q->tb, q->mm->id, q->es);
}

/* On one rank, may g's buffer be its operand's? So it may where g is a
 * workspace value (no output, no tensor's new value) of an operand that no
 * Update rewrites. */
static int gather_alias(Emitter *e, const Node *g)
{
    return e->out_index[g->id] < 0 && e->state_of[g->id] < 0 && !updated(nd(e, g->in[0]));
}

/* Without chunks: the AllGather (on one rank, where gather_alias allows,
 * the operand's buffer instead), then the MatMul */
static void emit_gather_in_order(Emitter *e, const Pair *q, int *done)
{
    int alias = gather_alias(e, q->c);
    if (alias)
        fprintf(e->o, "        if (G_%s == 1) { /* one rank: the value is the operand (no copy) */\n"
                      "            b%d = b%d;\n        } else {\n", q->g, q->c->id, q->c->in[0]);
    e->emit_node(e, q->c, done);
    if (alias)
        fprintf(e->o, "        }\n");
    e->emit_node(e, q->mm, done);
}

static void emit_gather(Emitter *e, const Pair *q, int *done)
{
    const Node *g = q->c, *y = q->mm;
    fprintf(e->o, "    { /* line %d: %s = MatMul of %s = AllGather (line %d), by its blocks as "
                  "they arrive */\n"
                  "        const long mK = h%d.dim[%d], mM = mK ? coco_count(h%d) / mK : 0;\n"
                  "        const long nidx = h%d.dim[0], rpi = nidx ? mM / nidx : 0;\n"
                  "        const int sub = coco_overlap_block_chunks(ctx, G_%s, coco_chunk(nidx, G_%s) "
                  "* rpi, mM, mK);\n"
                  "        if (sub > 0) {\n            const long mN = h%d.dim[%d];\n",
            q->line, y->name, g->name, q->cline, g->id, g->ndim - 1, g->id, g->id, q->g, q->g,
            y->id, y->ndim - 1);
    emit_streams(e, q, arena_printf(e->p->arena, "b%d", g->in[0]));
    emit_broadcasts(e, q);
    emit_gathered_chunks(e, q);
    emit_join(e, q);
    emit_done(e, q, "overlap(AllGather, MatMul)");
    fprintf(e->o, "        } else {\n");
    emit_gather_in_order(e, q, done);
    fprintf(e->o, "        }\n    }\n");
}

/* ---- MatMul -> ReduceScatter ---- */

/* What NCCL reduces (the MatMul's result, or its FP32 copy where widened)
 * into what (the ReduceScatter's value, or its FP32 copy), elements of ns
 * bytes */
static void emit_reduced(Emitter *e, const Pair *q)
{
    const Node *z = q->c;
    fprintf(e->o, "            const void *src = b%d;\n            void *dst = b%d;\n"
                  "            ncclDataType_t nt = coco_nccl_type(%s);\n            long ns = %zu;\n",
            q->mm->id, z->id, q->t, q->es);
    if (emit_widened(z))
        fprintf(e->o, "            if (!narrow) {\n                src = w%di;\n"
                      "                dst = w%do;\n                nt = ncclFloat32;\n"
                      "                ns = 4;\n            }\n", z->id, z->id);
}

/* Chunk c of block q multiplied on the main stream (zeros for an empty
 * contraction), then its event, which the side stream waits for */
static void emit_product_chunk(Emitter *e, const Pair *q)
{
    fprintf(e->o, "                    const long k = 1 + q * sub + c, n = (hi - lo) * mN;\n"
                  "                    if (hi > lo && mK == 0) /* an empty contraction: zeros */\n"
                  "                        COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaMemsetAsync((char *)b%d + "
                  "lo * mN * %zu, 0, n * %zu, st));\n"
                  "                    else if (hi > lo && coco_matmul_rows(ctx, %d, %s, (const char *)b%d + "
                  "lo * mK * %zu, b%d, %d, (char *)b%d + lo * mN * %zu, hi - lo, mN, mK, mM, align, sms, st))\n"
                  "                        return 1;\n"
                  "                    COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaEventRecord(ev[k], st));\n"
                  "                    COCO_CUDA_QUIET(ctx, \"ReduceScatter\", %d, cudaStreamWaitEvent(side, ev[k], 0));\n",
            q->line, q->mm->id, q->es, q->es, q->line, q->t, q->a, q->es, q->b, q->tb, q->mm->id,
            q->es, q->line, q->cline);
}

/* Chunk c of block q reduced to rank q on the side stream (widened first
 * where the ReduceScatter is, unless narrow) */
static void emit_reduce_chunk(Emitter *e, const Pair *q)
{
    const Node *z = q->c;
    fprintf(e->o, "                    if (hi == lo)\n                        continue;\n");
    if (emit_widened(z))
        fprintf(e->o, "                    if (!narrow) {\n"
                      "                        coco_convert_kernel<<<coco_grid(n), 256, 0, side>>>((const char *)b%d + "
                      "lo * mN * %zu, %s, (char *)w%di + lo * mN * 4, COCO_FP32, n);\n"
                      "                        COCO_LAUNCH_CHECK(ctx, \"ReduceScatter\", %d);\n"
                      "                    }\n",
                q->mm->id, q->es, q->t, z->id, q->cline);
    fprintf(e->o, "                    void *out = (char *)dst + (q == R_%s ? (lo - first) * mN * ns : 0);\n"
                  "                    COCO_CHECKED(NCCL, ctx, \"ReduceScatter\", %d, ncclReduce((const char *)src "
                  "+ lo * mN * ns, out, (size_t)n, nt, coco_nccl_op(%d), (int)q, comm, side), \"ncclReduce\");\n",
            q->g, q->cline, emit_redop_code(z->redop));
}

static void emit_scatter(Emitter *e, const Pair *q, int *done)
{
    const Node *z = q->c, *y = q->mm, *a = nd(e, y->in[0]);
    fprintf(e->o, "    { /* line %d: %s = MatMul by the blocks of %s = ReduceScatter (line %d), each "
                  "reduced as it is written */\n"
                  "        const long mN = h%d.dim[%d], mM = mN ? coco_count(h%d) / mN : 0;\n"
                  "        const long nidx = h%d.dim[0], rpi = nidx ? mM / nidx : 0;\n"
                  "        const int sub = coco_overlap_block_chunks(ctx, G_%s, coco_chunk(nidx, G_%s) "
                  "* rpi, mM, mN);\n"
                  "        if (sub > 0) {\n            const long mK = h%d.dim[%d];\n",
            q->line, y->name, z->name, q->cline, y->id, y->ndim - 1, y->id, y->id, q->g, q->g,
            a->id, a->ndim - 1);
    emit_narrow(e, z);
    emit_streams(e, q, "NULL");
    emit_reduced(e, q);
    fprintf(e->o, "            for (long q = 0; q < G_%s; q++) /* in rank order, on every rank */\n"
                  "                for (int c = 0; c < sub; c++) {\n", q->g);
    emit_rows(e, q, "                    ");
    emit_product_chunk(e, q);
    emit_reduce_chunk(e, q);
    fprintf(e->o, "                }\n");
    emit_join(e, q);
    emit_reduce_result(e, z); /* the FP32 copy narrowed into z, where widened */
    emit_done(e, q, "overlap(MatMul, ReduceScatter)");
    fprintf(e->o, "        } else {\n");
    e->emit_node(e, y, done);
    e->emit_node(e, z, done);
    fprintf(e->o, "        }\n    }\n");
}

int ovl_blocks_launch(Emitter *e, int mm, int *done_segment)
{
    if (!e->ovl_block || e->ovl_block[mm] < 0)
        return 0;
    Pair q = pair_of(e, mm);
    if (q.c->op == O_ALLGATHER)
        emit_gather(e, &q, done_segment);
    else
        emit_scatter(e, &q, done_segment);
    return 1;
}

/* emit_overlap.c: overlap(MatMul, FusedAllReduce) (language.md 10.5) as
 * the MatMul in chunks, each chunk's collective kernels running while the
 * next chunk is multiplied.
 *
 * The FusedAllReduce's kernels (emit_lsa.c) take part q of the MatMul's
 * output on rank q (rows [q*Mp, (q+1)*Mp) of M = P*Mp rows). Chunk c is
 * the same sub-range of every part: rows q*Mp + [c*Mp/C, (c+1)*Mp/C) for
 * each q, one strided batched cuBLASLt call (P products of those rows of A
 * with the one B). So each rank, after chunk c, holds chunk c of every
 * part; the kernels' instance over elements [chunk_lo, chunk_hi) of each part then
 * runs on the side stream after an event recorded behind the chunk, while
 * the main stream goes on to chunk c + 1. Every rank owns the elements it
 * would own without chunks, so kept slices, Dropout's masks and the values
 * are the unchunked kernels' bit for bit.
 *
 * The ranks meet at the kernels' own barrier: each kernel's first barrier
 * (one per block, coco_lsa.cuh) passes only when every rank's kernel for
 * chunk c has started, that is, when every rank's chunk c is written (its
 * event). The events are the stream-ordered flags of the chunks, and the
 * barrier is the bounded wait on the peers' flags; no persistent kernel
 * holds SMs while the MatMul runs. The main stream waits for the side
 * stream's last kernel before anything after the overlap.
 *
 * Knobs (ctx, COCONET_OVERLAP_CHUNKS and COCONET_OVERLAP_SMS): the chunk
 * count C (1, the default: no overlap, the MatMul then the kernels on one
 * stream; measured faster than any C from 2 to 8 on 4 x H100, doc/gpu.md),
 * and
 * the SMs the MatMul leaves to the kernels (CUBLASLT_MATMUL_DESC_SM_COUNT_
 * TARGET; the kernels' grid is then two blocks an SM of those). Chunking
 * needs rows that part the same way as the tensor: M a multiple of P, each
 * part Mp whole rows (coco_overlap_chunks decides at run time; else C = 1).
 * Not chunked: fusions with cross-rank reductions (two kernels, the second
 * needs every element) or scattered operands. */
#include "cuda/emit_lsa.h"

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

int ovl_matmul(Emitter *e, int f)
{
    int mm = overlapped_producer(e, f);
    if (mm < 0)
        return -1;
    Lsa l;
    lsa_plan(e, f, &l);
    Node *rs = nd(e, l.rs), *a = nd(e, nd(e, mm)->in[0]), *b = nd(e, nd(e, mm)->in[1]);
    int ok = rs->in[0] == mm && !l.nred && l.scat < 0 && a->type == b->type && b->ndim == 2 &&
             a->ndim >= 2 && a->nmember == 0 && b->nmember == 0 && !read_elsewhere(e, mm, rs->id);
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

/* The MatMul's sizes in the launch block: K, N, rows M, and `chunks`. */
static void emit_sizes(Emitter *e, const Node *mm)
{
    Node *a = nd(e, mm->in[0]), *b = nd(e, mm->in[1]);
    fprintf(e->o, "        const long mK = h%d.dim[%d], mN = h%d.dim[1], mM = mK ? coco_count(h%d) / mK : 0;\n"
                  "        const int chunks = coco_overlap_chunks(ctx, mM, mN, G_WORLD, cs, nall);\n",
            a->id, a->ndim - 1, b->id, a->id);
}

/* The chunk loop: `go` (the launch block's lambda) runs the kernels. */
static void emit_chunks(Emitter *e, const Node *mm, int line)
{
    FILE *o = e->o;
    size_t es = type_size(mm->type);
    int l = mm->pos.line;
    fprintf(o, "            const long mP = mM / G_WORLD;\n"
               "            cudaStream_t side = (cudaStream_t)ctx->side_stream;\n"
               "            cudaEvent_t *ev = coco_overlap_events(ctx, chunks + 1);\n"
               "            if (!ev)\n                return 1;\n"
               "            const int sms = coco_overlap_matmul_sms(ctx);\n"
               "            dim3 cgrid = coco_overlap_grid(ctx, grid);\n"
               "            COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaEventRecord(ev[chunks], st));\n"
               "            COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaStreamWaitEvent(side, ev[chunks], 0));\n"
               "            for (int c = 0; c < chunks; c++) {\n"
               "                const long row0 = mP * c / chunks, row1 = mP * (c + 1) / chunks;\n"
               "                if (coco_matmul_on(ctx, %d, %s, (const char *)b%d + row0 * mK * %zu, b%d, "
               "(char *)b%d + row0 * mN * %zu, row1 - row0, mN, mK, G_WORLD, mP * mK, 0, mP * mN, sms, st))\n"
               "                    return 1;\n"
               "                COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaEventRecord(ev[c], st));\n"
               "                COCO_CUDA_QUIET(ctx, \"MatMul\", %d, cudaStreamWaitEvent(side, ev[c], 0));\n"
               "                if (go(side, row0 * mN, row1 * mN, 0, cgrid))\n"
               "                    COCO_FAIL(ctx, \"FusedAllReduce\", %d, \"no kernel instance for %%ld "
               "ranks\", G_WORLD);\n"
               "                COCO_LAUNCH_CHECK(ctx, \"FusedAllReduce\", %d);\n"
               "            }\n"
               "            COCO_CUDA_QUIET(ctx, \"FusedAllReduce\", %d, cudaEventRecord(ev[chunks], side));\n"
               "            COCO_CUDA_QUIET(ctx, \"FusedAllReduce\", %d, cudaStreamWaitEvent(st, ev[chunks], 0));\n"
               "            COCO_MARK(ctx, COCO_MARK_KERNEL, \"overlap(MatMul, FusedAllReduce)\", %d, "
               "\"chunks\");\n",
            l, l, l, emit_tname[mm->type], mm->in[0], es, mm->in[1], mm->id, es, l, l, line, line,
            line, line, line);
}

void ovl_emit_launch(Emitter *e, int mm, int line, const char *push, int *done_segment)
{
    FILE *o = e->o;
    Node *m = nd(e, mm);
    emit_sizes(e, m);
    fprintf(o, "        if (chunks > 1) { /* line %d: MatMul %s, chunk by chunk, overlapped */\n",
            m->pos.line, m->name);
    emit_chunks(e, m, line);
    fprintf(o, "        } else {\n");
    e->emit_node(e, m, done_segment);
    fprintf(o, "            if (go(st, 0, cs, %s, grid))\n"
               "                COCO_FAIL(ctx, \"FusedAllReduce\", %d, \"no kernel instance for "
               "%%ld ranks\", G_WORLD);\n"
               "            COCO_LAUNCHED(ctx, \"FusedAllReduce\", %d);\n        }\n",
            push, line, line);
}

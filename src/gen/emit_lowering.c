/* emit_lowering.c: what the lowering of a collective or a MatMul
 * (emit_cuda.c) shares with the overlaps that lower them otherwise
 * (emit_overlap_blocks.c): a collective's communicator and reduction code,
 * whether it reduces FP16 and BF16 values in FP32, and the buffer a MatMul
 * reads for each operand. */
#include "gen/emit_cuda.h"

/* Does collective n reduce FP16/BF16 values? Those reduce in FP32 (the
 * language's semantics: reductions accumulate in higher precision, rounded
 * once), at the cost of moving FP32 data; but for FP16 over at most two
 * ranks, see emit_narrow. */
int emit_widened(const Node *n)
{
    int reduces = n->op == O_ALLREDUCE || n->op == O_REDUCESCATTER || n->op == O_REDUCE;
    return reduces && (n->type == T_FP16 || n->type == T_BF16);
}

/* `narrow`, for a widened collective: whether NCCL reduces the FP16 values
 * themselves, which it does over at most two ranks. There each element is
 * one operation on two FP16 values, rounded once: NCCL's FP16 sum (or
 * product, max, min) is correctly rounded, and so is the language's, FP32
 * then FP16 (a rounding to 24 bits and then to 11 is one rounding to 11,
 * 24 >= 2 x 11 + 2): the same bits, with half the bytes and no conversions.
 * BF16 keeps FP32 (a BF16 subnormal is an FP32 one: that NCCL's BF16 sum
 * keeps it is not established), and so does a scattered operand (its
 * conversion gathers its members). */
void emit_narrow(Emitter *e, const Node *n)
{
    if (emit_widened(n))
        fprintf(e->o, "        const int narrow = %d && G_%s <= 2; /* emit_lowering.c, emit_narrow */\n",
                n->type == T_FP16 && !emit_scat_of(e, n->in[0]), group_name(n->group));
}

/* Where n is widened, unless narrow: its FP32 result w<n>o into b<n> */
void emit_reduce_result(Emitter *e, const Node *n)
{
    if (!emit_widened(n))
        return;
    fprintf(e->o, "        if (!narrow) {\n"
                  "            coco_convert_kernel<<<coco_grid(coco_count(h%d)), 256, 0, st>>>(w%do, "
                  "COCO_FP32, b%d, %s, coco_count(h%d));\n"
                  "            COCO_LAUNCHED(ctx, \"%s\", %d);\n        }\n",
            n->id, n->id, n->id, emit_tname[n->type], n->id, op_info(n->op)->name, n->pos.line);
}

/* The communicator of n's NCCL calls: GROUP's, or over WORLD the one that
 * coco_world picks for the whole value's bytes (the same on every rank). */
const char *emit_comm_of(Emitter *e, const Node *n)
{
    if (n->group == G_GROUP)
        return "(ncclComm_t)ctx->group";
    return arena_printf(e->p->arena, "coco_world(ctx, coco_gcount(h%d) * %zu)", n->id,
                        type_size(n->type));
}

int emit_redop_code(RedOp r)
{
    return r == R_SUM ? 0 : r == R_PROD ? 1 : r == R_MAX ? 2 : r == R_MIN ? 3 : 4;
}

/* Is n a Transpose that the MatMuls reading it read in place (cuBLASLt's
 * transpose flag, no copy)? So it is when it is read only as MatMul
 * operands and is no output; MatMuls with a Transpose operand are not
 * overlapped with a FusedAllReduce (emit_overlap.c), so their launch reads
 * the Transpose's input (by a collective's blocks, emit_overlap_blocks.c,
 * they read it too: emit_matmul_source). */
int emit_transpose_in_place(Emitter *e, const Node *n)
{
    if (n->op != O_TRANSPOSE || e->out_index[n->id] >= 0)
        return 0;
    for (int j = n->id + 1; j < e->p->nnode; j++) {
        const Node *u = &e->p->node[j];
        for (int k = 0; !u->dead && k < u->nin; k++)
            if (u->in[k] == n->id && u->op != O_MATMUL)
                return 0;
    }
    return 1;
}

/* The buffer a MatMul reads for operand x: x's, or for a Transpose read in
 * place its input's (*trans set). */
int emit_matmul_source(Emitter *e, const Node *x, int *trans)
{
    *trans = emit_transpose_in_place(e, x);
    return *trans ? x->in[0] : x->id;
}

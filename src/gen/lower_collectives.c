/* lower_collectives.c: on the CUDA backend, the collectives that no
 * schedule fused but that run better as a FusedAllReduce with no
 * computation are generated as one:
 *   - an AllReduce over a scattered tensor (language.md 7.1), whose kernel
 *     reads the members directly (src/gen/emit_lsa.c over buckets), with no
 *     copy into a contiguous buffer;
 *   - an AllReduce of FP16 or BF16 values, whose kernel moves 16-bit
 *     elements between the GPUs and sums them in registers at higher
 *     precision, where NCCL would need FP32 copies (its own FP16 sum over
 *     more than two ranks is not the language's: emit_cuda.c, widened and
 *     emit_narrow).
 * Each is generated as fuse(split(x, ARSplitRSAG), AllReduceFuse), and a
 * ReduceScatter of that kind whose only reader is an AllGather as
 * fuse(rs, ag, AllReduceFuse). An overlap naming the collective then names
 * the fused operation (overlap(MatMul, AllReduce) runs as emit_overlap.c's
 * chunks). Where the peers reach each other's memory that is one kernel;
 * elsewhere its run-time fallback is the NCCL ReduceScatter and AllGather.
 * The values are the program's (a FusedAllReduce reduces in rank order, as
 * the CPU executor does), so the variant keeps its name. */
#include "gen/gen.h"

#include <limits.h>
#include <string.h>

/* Is node n a live `op` over WORLD, in no fused operation? */
static int unfused(Program *p, const Node *n, Op op)
{
    return n->op == op && !n->dead && n->fusion < 0 && n->group == G_WORLD;
}

/* Does node n read a scattered input, or reduce 16-bit floats? */
static int wants_kernel(Program *p, const Node *n)
{
    const Node *x = node_of(p, n->in[0]);
    return (x->op == O_INPUT && x->nmember > 0) || n->type == T_FP16 || n->type == T_BF16;
}

/* Is node n an unfused AllReduce over WORLD that wants the kernel? */
static int lowerable(Program *p, const Node *n)
{
    return unfused(p, n, O_ALLREDUCE) && n->ndim && wants_kernel(p, n);
}

/* While a collective is lowered, the overlaps' items that named it hold
 * PENDING (the statements renumber nodes, and leave fusion references
 * alone); then they name the fused operation. */
#define PENDING REF_FUSION(INT_MAX / 2)

static void overlaps_pend(Program *p, int id)
{
    for (int i = 0; i < p->noverlap; i++)
        for (int k = 0; k < p->overlap[i].nitem; k++)
            if (p->overlap[i].item[k] == id)
                p->overlap[i].item[k] = PENDING;
}

static void overlaps_name(Program *p, const char *fused)
{
    int f = -1;
    for (int k = 0; k < p->nfusion; k++)
        if (!p->fusion[k].dead && !strcmp(p->fusion[k].name, fused))
            f = k;
    ASSERT(f >= 0);
    for (int i = 0; i < p->noverlap; i++)
        for (int k = 0; k < p->overlap[i].nitem; k++)
            if (p->overlap[i].item[k] == PENDING)
                p->overlap[i].item[k] = REF_FUSION(f);
}

/* unfused, and named so that a schedule statement reaches it */
static int free_collective(Program *p, const Node *n, Op op)
{
    return unfused(p, n, op) && program_find(p, n->name) == n->id;
}

/* The AllGather that is the only reader of ReduceScatter n (n a
 * ReduceScatter that wants the kernel, no output), or -1. */
static int sole_gather(Program *p, const Node *n)
{
    if (!free_collective(p, n, O_REDUCESCATTER) || is_output(p, n->id) || !wants_kernel(p, n))
        return -1;
    int ag = -1, readers = 0;
    for (int j = 0; j < p->nnode; j++)
        for (int k = 0; k < p->node[j].nin && !p->node[j].dead; k++)
            if (p->node[j].in[k] == n->id) {
                readers++;
                ag = j;
            }
    return readers == 1 && free_collective(p, node_of(p, ag), O_ALLGATHER) ? ag : -1;
}

/* fuse ReduceScatter rs and AllGather ag */
static void fuse_pair(Program *p, int rs, int ag)
{
    const char *parts[] = {node_of(p, rs)->name, node_of(p, ag)->name};
    const char *out[] = {schedule_fresh_name(p, arena_printf(p->arena, "fused_%s", parts[0]))};
    SchedStmt st = schedule_stmt(p->arena, V_FUSE, parts, 2, P_ALLREDUCE_FUSE);
    st.out = out;
    st.nout = 1;
    overlaps_pend(p, rs);
    overlaps_pend(p, ag);
    schedule_apply_stmts(p, "(ReduceScatter as a FusedAllReduce)", &st, 1);
    overlaps_name(p, out[0]);
}

/* split and fuse AllReduce id, named by its statement (split finds an
 * AllReduce written inline); refusals go to the current error context */
static void lower_one(Program *p, int id)
{
    const char *ar = node_of(p, statement_head(p, id))->name;
    const char *rs = schedule_fresh_name(p, arena_printf(p->arena, "rs_%s", ar));
    const char *ag = schedule_fresh_name(p, arena_printf(p->arena, "ag_%s", ar));
    const char *fused = schedule_fresh_name(p, arena_printf(p->arena, "fused_%s", ar));
    const char *split_out[] = {rs, ag}, *fuse_out[] = {fused}, *parts[] = {rs, ag};
    SchedStmt st[2] = {schedule_stmt(p->arena, V_SPLIT, &ar, 1, P_AR_SPLIT_RS_AG),
                       schedule_stmt(p->arena, V_FUSE, parts, 2, P_ALLREDUCE_FUSE)};
    st[0].out = split_out;
    st[0].nout = 2;
    st[1].out = fuse_out;
    st[1].nout = 1;
    overlaps_pend(p, id);
    schedule_apply_stmts(p, "(AllReduce as a FusedAllReduce)", st, 2);
    overlaps_name(p, fused);
}

Program *lower_collectives(Program *p)
{
    int any = 0;
    for (int i = 0; i < p->nnode && !any; i++)
        any = lowerable(p, &p->node[i]) || sole_gather(p, &p->node[i]) >= 0;
    if (!any)
        return NULL;
    Program *clone = program_clone(p);
    char err[512];
    ErrorCtx ctx;
    error_push(&ctx, err, sizeof err, clone->file, clone->src);
    if (setjmp(ctx.jb)) { /* a refusal: the variant is generated as written */
        error_pop(&ctx);
        program_free(clone);
        return NULL;
    }
    for (int i = 0, ag; i < clone->nnode; i++)
        if (lowerable(clone, &clone->node[i])) {
            lower_one(clone, i);
            i = -1; /* ids may have moved: look again from the start */
        } else if ((ag = sole_gather(clone, &clone->node[i])) >= 0) {
            fuse_pair(clone, i, ag);
            i = -1;
        }
    error_pop(&ctx);
    return clone;
}

/* lower_scattered.c: on the CUDA backend, an AllReduce over a scattered
 * tensor (language.md 7.1) that no schedule fused is generated as
 * fuse(split(x, ARSplitRSAG), AllReduceFuse), and a ReduceScatter of one
 * whose only reader is an AllGather as fuse(rs, ag, AllReduceFuse): a
 * FusedAllReduce with no computation. Where the peers reach each other's memory that is one kernel
 * reading the members directly (src/emit_lsa.c over buckets), with no copy
 * into a contiguous buffer; elsewhere its run-time fallback is what an
 * AllReduce was before: the members gathered into one buffer, NCCL. The
 * values are the program's (a FusedAllReduce reduces in rank order, as the
 * CPU executor does), so the variant keeps its name. */
#include "cuda/cuda.h"

/* Is node n a live `op` over WORLD, in no fused operation or overlap? */
static int unfused(Program *p, const Node *n, Op op)
{
    return n->op == op && !n->dead && n->fusion < 0 && n->group == G_WORLD &&
           !in_some_overlap(p, n->id);
}

/* Does node n read a scattered input? */
static int reads_scattered(Program *p, const Node *n)
{
    const Node *x = node_of(p, n->in[0]);
    return x->op == O_INPUT && x->nmember > 0;
}

/* Is node n an unfused AllReduce over WORLD of a scattered input? */
static int lowerable(Program *p, const Node *n)
{
    return unfused(p, n, O_ALLREDUCE) && n->ndim && reads_scattered(p, n);
}

/* unfused, and named so that a schedule statement reaches it */
static int free_collective(Program *p, const Node *n, Op op)
{
    return unfused(p, n, op) && program_find(p, n->name) == n->id;
}

/* The AllGather that is the only reader of ReduceScatter n (n a
 * ReduceScatter of a scattered input, no output), or -1. */
static int sole_gather(Program *p, const Node *n)
{
    if (!free_collective(p, n, O_REDUCESCATTER) || is_output(p, n->id) || !reads_scattered(p, n))
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
    SchedStmt st = schedule_stmt(p->arena, "fuse", parts, 2, "AllReduceFuse");
    st.out = out;
    st.nout = 1;
    schedule_apply_stmts(p, "(scattered ReduceScatter)", &st, 1);
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
    SchedStmt st[2] = {schedule_stmt(p->arena, "split", &ar, 1, "ARSplitRSAG"),
                       schedule_stmt(p->arena, "fuse", parts, 2, "AllReduceFuse")};
    st[0].out = split_out;
    st[0].nout = 2;
    st[1].out = fuse_out;
    st[1].nout = 1;
    schedule_apply_stmts(p, "(scattered AllReduce)", st, 2);
}

Program *lower_scattered_allreduces(Program *p)
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

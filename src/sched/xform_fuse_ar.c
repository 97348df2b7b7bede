/* xform_fuse_ar.c: the forms of fuse(..., AllReduceFuse) that stand for
 * more than one step.
 *
 * fuse(ar, C..., AllReduceFuse), ar an AllReduce (the original CoCoNet's
 *   fuse of an AllReduce with the computations after it): shorthand for
 *     (rs, ag) = split(ar, ARSplitRSAG);
 *     (sc..., ags...) = reorder(ag, C..., AGReorder);
 *     f = fuse(rs, sc..., ags..., AllReduceFuse);
 *   each applied as that statement would be (same checks, same names), so
 *   the graph is the spelled-out schedule's; a refused step is named.
 * Update(t, AllGather(x)) inside a FusedAllReduce (the RS-C-AG form written
 *   by hand): the Update becomes the sliced Update(t, x) and the AllGather
 *   follows it as t's new value, which is the graph reorder makes of an
 *   Update, so the AllGather ends the fused operation. */
#include "sched/sched.h"

#include <string.h>

/* verb(args, policy) as written, for messages */
static const char *stmt_text(Arena *a, const SchedStmt *st)
{
    const char *s = arena_printf(a, "%s(", st->verb);
    for (int i = 0; i < st->narg; i++)
        s = arena_printf(a, "%s%s%s", s, i ? ", " : "", st->arg[i]);
    if (st->policy)
        s = arena_printf(a, "%s%s%s", s, st->narg ? ", " : "", st->policy);
    return arena_printf(a, "%s)", s);
}

/* Applies one step of the shorthand; its result names go to got[] (*ngot).
 * A refusal of the step refuses the fuse, naming the step and why. */
static void shorthand_step(const Xform *x, SchedStmt *st, void (*apply)(const Xform *),
                           const char **got, int *ngot)
{
    Program *p = x->p;
    st->pos = x->st->pos;
    Xform sub = {.p = p, .st = st, .sched = x->sched, .got = got, .ngot = ngot};
    char msg[1024];
    ErrorCtx ctx;
    error_push(&ctx, msg, sizeof msg, "-", NULL);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        const char *m = strstr(msg, "error: ");
        m = m ? m + 7 : msg;
        const char *prefix = arena_printf(p->arena, "schedule '%s': %s: ", x->sched, st->verb);
        if (!strncmp(m, prefix, strlen(prefix)))
            m += strlen(prefix);
        size_t len = strcspn(m, "\n");
        refuse(x, "fuse(%s, ...) of an AllReduce stands for split, reorder and fuse; its %s "
               "is refused: %.*s", x->st->arg[0], stmt_text(p->arena, st), (int)len, m);
    }
    apply(&sub);
    program_resort(p);
    verify_program(p);
    error_pop(&ctx);
}

/* Is argument 0 of the fuse an AllReduce (not a Norm's sum across ranks)? */
static int names_allreduce(const Xform *x)
{
    Ref r = xform_arg(x, 0);
    if (REF_IS_FUSION(r))
        return 0;
    Node *n = node_of(x->p, r);
    return n->op == O_ALLREDUCE && node_of(x->p, n->in[0])->op != O_PARTIAL_REDUCE &&
           n->fusion < 0;
}

int fuse_allreduce_shorthand(const Xform *x)
{
    if (!names_allreduce(x))
        return 0;
    Program *p = x->p;
    if (x->st->narg < 2)
        refuse(x, "fuse(%s, ...) of an AllReduce needs the computations after it to fuse",
               x->st->arg[0]);
    for (int i = 1; i < x->st->narg; i++) {
        Ref r = xform_arg(x, i);
        if (!REF_IS_FUSION(r) && op_is_comm(node_of(p, r)->op))
            refuse(x, "fuse(%s, ...) of an AllReduce takes the computations after it, but "
                   "'%s' is a communication (%s)", x->st->arg[0], x->st->arg[i],
                   op_info(node_of(p, r)->op)->name);
    }
    int cap = 2 * p->nnode + x->st->narg + 16, nsplit = 0, nreorder = 0;
    const char **split_out = arena_alloc(p->arena, (size_t)cap * sizeof(char *));
    const char **reorder_out = arena_alloc(p->arena, (size_t)cap * sizeof(char *));
    SchedStmt split = schedule_stmt(p->arena, "split", x->st->arg, 1, "ARSplitRSAG");
    shorthand_step(x, &split, xform_split, split_out, &nsplit);
    ASSERT(nsplit == 2);
    const char **args = arena_alloc(p->arena, (size_t)(x->st->narg + cap) * sizeof(char *));
    args[0] = split_out[1];
    for (int i = 1; i < x->st->narg; i++)
        args[i] = x->st->arg[i];
    SchedStmt reorder = schedule_stmt(p->arena, "reorder", args, x->st->narg, "AGReorder");
    shorthand_step(x, &reorder, xform_reorder, reorder_out, &nreorder);
    args[0] = split_out[0];
    for (int i = 0; i < nreorder; i++)
        args[i + 1] = reorder_out[i];
    SchedStmt fuse = schedule_stmt(p->arena, "fuse", args, nreorder + 1, x->st->policy);
    fuse.out = x->st->out;
    fuse.nout = x->st->nout;
    int nfuse = 0;
    shorthand_step(x, &fuse, xform_fuse, reorder_out, &nfuse);
    return 1;
}

/* Is node u an Update whose new value is an AllGather written inline in
 * it, read by nothing else? */
static int update_of_gather(Program *p, int u)
{
    Node *n = node_of(p, u);
    if (n->op != O_UPDATE || n->fusion >= 0 || n->layout.kind != L_REPLICATED)
        return 0;
    Node *g = node_of(p, n->in[1]);
    int users[2];
    return g->op == O_ALLGATHER && !g->named && g->fusion < 0 &&
           node_users(p, g->id, users, 2) == 1;
}

/* Update(t, AllGather(v)) -> sc = Update(t, v) (sliced); AllGather(sc),
 * which takes the Update's name and place as t's new value. */
static void gather_after_update(const Xform *x, int u)
{
    Program *p = x->p;
    int old_gather = node_of(p, u)->in[1];
    node_of(p, u)->in[1] = node_of(p, old_gather)->in[0];
    node_of(p, old_gather)->dead = 1;
    check_node(x, node_of(p, u));
    Node *g = node_new(p, O_ALLGATHER, node_of(p, old_gather)->pos);
    int gid = g->id;
    g->nin = 1;
    g->in[0] = u;
    g->seq = node_of(p, u)->seq + 0.5;
    check_node(x, g);
    replace_uses(p, u, gid, -1);
    Node *un = node_of(p, u);
    node_of(p, un->target)->updated_by = gid;
    if (un->named) {
        g->name = un->name;
        g->named = 1;
        un->name = schedule_fresh_name(p, arena_printf(p->arena, "sc_%s", g->name));
    }
}

void fuse_gathers_after_updates(const Xform *x)
{
    Program *p = x->p;
    int ids[256], changed = 0;
    for (int i = 0; i < x->st->narg; i++) {
        Ref r = xform_arg(x, i);
        if (REF_IS_FUSION(r))
            continue;
        int c = statement_nodes(p, r, ids, 256);
        for (int k = 0; k < c && k < 256; k++)
            if (update_of_gather(p, ids[k])) {
                gather_after_update(x, ids[k]);
                changed = 1;
            }
    }
    if (changed)
        program_resort(p);
}

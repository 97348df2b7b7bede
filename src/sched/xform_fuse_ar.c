/* xform_fuse_ar.c: the schedule verb fuse, with its shorthand for an
 * AllReduce (the original CoCoNet's fuse of an AllReduce with the
 * computations after it, the paper's FusedAllReduce):
 *   f = fuse(ar, C..., AllReduceFuse);   ar an AllReduce
 * stands for
 *   (rs, ag) = split(ar, ARSplitRSAG);
 *   (sc..., ags...) = reorder(ag, C..., AGReorder);
 *   f = fuse(rs, sc..., ags..., AllReduceFuse);
 * each applied as that statement would be (same checks, same names), so the
 * graph is the spelled-out schedule's; a refused step is named. Any other
 * fuse is xform_fuse's (xform_fuse.c). */
#include "sched/sched.h"

#include <string.h>

/* verb(args, policy) as written, for messages */
static const char *stmt_text(Arena *a, const SchedStmt *st)
{
    const char *s = arena_printf(a, "%s(", stmt_verb_word(st));
    for (int i = 0; i < st->narg; i++)
        s = arena_printf(a, "%s%s%s", s, i ? ", " : "", st->arg[i]);
    if (st->policy != P_NONE)
        s = arena_printf(a, "%s%s%s", s, st->narg ? ", " : "", policy_word(st->policy));
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
        const char *prefix = arena_printf(p->arena, "schedule '%s': %s: ", x->sched,
                                          stmt_verb_word(st));
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

/* Is this fuse an AllReduceFuse whose argument 0 is an AllReduce (not a
 * Norm's sum across ranks)? */
static int names_allreduce(const Xform *x)
{
    if (policy_fuse_kind(x->st->policy) != F_ALLREDUCE || x->st->narg < 1)
        return 0;
    Ref r = xform_arg(x, 0);
    if (REF_IS_FUSION(r))
        return 0;
    Node *n = node_of(x->p, r);
    return n->op == O_ALLREDUCE && node_of(x->p, n->in[0])->op != O_PARTIAL_REDUCE &&
           n->fusion < 0;
}

static int fuse_allreduce_shorthand(const Xform *x)
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
    SchedStmt split = schedule_stmt(p->arena, V_SPLIT, x->st->arg, 1, P_AR_SPLIT_RS_AG);
    shorthand_step(x, &split, xform_split, split_out, &nsplit);
    ASSERT(nsplit == 2);
    const char **args = arena_alloc(p->arena, (size_t)(x->st->narg + cap) * sizeof(char *));
    args[0] = split_out[1];
    for (int i = 1; i < x->st->narg; i++)
        args[i] = x->st->arg[i];
    SchedStmt reorder = schedule_stmt(p->arena, V_REORDER, args, x->st->narg, P_AG_REORDER);
    shorthand_step(x, &reorder, xform_reorder, reorder_out, &nreorder);
    args[0] = split_out[0];
    for (int i = 0; i < nreorder; i++)
        args[i + 1] = reorder_out[i];
    SchedStmt fuse = schedule_stmt(p->arena, V_FUSE, args, nreorder + 1, x->st->policy);
    fuse.out = x->st->out;
    fuse.nout = x->st->nout;
    int nfuse = 0;
    shorthand_step(x, &fuse, xform_fuse, reorder_out, &nfuse);
    return 1;
}

void xform_fuse_verb(const Xform *x)
{
    if (!fuse_allreduce_shorthand(x))
        xform_fuse(x);
}

/* xform.c: what every transformation shares: resolving the names a
 * statement uses (values and fused operations), giving the names it defines,
 * checking a rebuilt node, and formatting refusals: "schedule 'S': fuse:
 * <rule that failed>" at the statement's position. */
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

_Noreturn void refuse(const Xform *x, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_at(x->st->pos, "schedule '%s': %s: %s", x->sched, stmt_verb_word(x->st), msg);
}

static int find_fusion(Program *p, const char *name)
{
    for (int i = p->nfusion - 1; i >= 0; i--)
        if (!p->fusion[i].dead && !strcmp(p->fusion[i].name, name))
            return i;
    return -1;
}

static int find_overlap(Program *p, const char *name)
{
    for (int i = 0; i < p->noverlap; i++)
        if (!strcmp(p->overlap[i].name, name))
            return i;
    return -1;
}

Ref xform_arg(const Xform *x, int i)
{
    const char *name = x->st->arg[i];
    int f = find_fusion(x->p, name);
    if (f >= 0)
        return REF_FUSION(f);
    int id = program_find(x->p, name);
    if (id >= 0)
        return id;
    if (find_overlap(x->p, name) >= 0)
        refuse(x, "'%s' names an overlap, which cannot be transformed further", name);
    refuse(x, "unknown name '%s' (names of removed values cannot be used)", name);
}

void xform_outs(const Xform *x, int n, const char *what)
{
    if (x->st->nout == 0)
        return; /* names are made from the defaults */
    if (x->st->nout != n)
        refuse(x, "it defines %d name%s (%s), but %d %s given", n, n == 1 ? "" : "s", what,
               x->st->nout, x->st->nout == 1 ? "is" : "are");
}

static int name_taken(Program *p, const char *name, Ref self)
{
    int id = program_find(p, name), f = find_fusion(p, name);
    return (id >= 0 && id != self) || (f >= 0 && REF_FUSION(f) != self) ||
           find_overlap(p, name) >= 0 || size_find(p, name);
}

/* dflt, or dflt_2, dflt_3, ...: the first name not taken. */
static const char *fresh_name(Program *p, const char *dflt, Ref self)
{
    const char *name = dflt;
    for (int k = 2; name_taken(p, name, self); k++)
        name = arena_printf(p->arena, "%s_%d", dflt, k);
    return name;
}

static void record_result(const Xform *x, int i, Ref r)
{
    if (!x->got)
        return;
    x->got[i] = ref_name(x->p, r);
    if (*x->ngot < i + 1)
        *x->ngot = i + 1;
}

void xform_name(const Xform *x, int i, Ref r, const char *dflt)
{
    Program *p = x->p;
    if (x->st->nout == 0) {
        const char *name = fresh_name(p, dflt, r);
        if (REF_IS_FUSION(r))
            p->fusion[REF_FUSION_INDEX(r)].name = name;
        else
            node_set_name(p, node_of(p, r), name);
        record_result(x, i, r);
        return;
    }
    const char *name = x->st->out[i];
    if (is_reserved(name))
        refuse(x, "'%s' is a keyword and cannot name a result", name);
    for (int k = 0; k < i; k++)
        if (!strcmp(x->st->out[k], name))
            refuse(x, "'%s' is named twice", name);
    if (name_taken(p, name, REF_IS_FUSION(r) ? 1 << 30 : r))
        refuse(x, "'%s' is already defined", name);
    if (REF_IS_FUSION(r)) {
        p->fusion[REF_FUSION_INDEX(r)].name = arena_strdup(p->arena, name);
    } else {
        node_set_name(p, node_of(p, r), arena_strdup(p->arena, name));
    }
    record_result(x, i, r);
}

/* Node id with the unnamed computations written inline in its statement. */
/* Is node id among the stored out[0..min(count, max))? A look along them
 * while the statement is short; past 32 parts, marks (*mark, made here and
 * kept up by the caller), so that a long expression takes linear time. */
static int collected(Program *p, const int *out, int count, int max, int id, char **mark)
{
    int stored = count < max ? count : max;
    if (!*mark && stored > 32) {
        *mark = xcalloc((size_t)p->nnode, 1);
        for (int j = 0; j < stored; j++)
            (*mark)[out[j]] = 1;
    }
    if (*mark)
        return (*mark)[id];
    for (int j = 0; j < stored; j++)
        if (out[j] == id)
            return 1;
    return 0;
}

int statement_nodes(Program *p, int id, int *out, int max)
{
    int count = 0, head = 0;
    char *mark = NULL;
    if (max > 0)
        out[count] = id;
    count++;
    while (head < count && head < max) {
        Node *n = node_of(p, out[head++]);
        for (int k = 0; k < n->nin; k++) {
            Node *in = node_of(p, n->in[k]);
            if (in->named || op_info(in->op)->kind == K_LEAF ||
                collected(p, out, count, max, in->id, &mark))
                continue;
            if (count < max) {
                out[count] = in->id;
                if (mark)
                    mark[in->id] = 1;
            }
            count++;
        }
    }
    free(mark);
    return count;
}

int is_computation(const Node *n)
{
    OpKind k = op_info(n->op)->kind;
    return k == K_UNARY || k == K_BINARY || k == K_TERNARY || k == K_UPDATE || k == K_REDUCTION;
}

void check_node(const Xform *x, Node *n)
{
    char msg[1024];
    ErrorCtx ctx;
    error_push(&ctx, msg, sizeof msg, "-", NULL);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        char *m = strstr(msg, "error: ");
        m = m ? m + 7 : msg;
        size_t len = strlen(m);
        if (len && m[len - 1] == '\n')
            m[len - 1] = 0;
        refuse(x, "the result would not check: %s", m);
    }
    infer_node(x->p, n);
    error_pop(&ctx);
}

const char *overlap_name_check(const Xform *x)
{
    Program *p = x->p;
    if (x->st->nout == 0)
        return fresh_name(p, arena_printf(p->arena, "ol_%s", x->st->arg[0]), 1 << 30);
    if (is_reserved(x->st->out[0]))
        refuse(x, "'%s' is a keyword and cannot name a result", x->st->out[0]);
    if (name_taken(p, x->st->out[0], 1 << 30))
        refuse(x, "'%s' is already defined", x->st->out[0]);
    return arena_strdup(p->arena, x->st->out[0]);
}

const char *schedule_fresh_name(Program *p, const char *dflt)
{
    return fresh_name(p, dflt, -1);
}

SchedStmt schedule_stmt(Arena *a, Verb verb, const char **args, int nargs, Policy policy)
{
    SchedStmt st;
    memset(&st, 0, sizeof st);
    st.verb = verb;
    st.arg = arena_alloc(a, (size_t)(nargs + 1) * sizeof(char *));
    st.argpos = arena_alloc(a, (size_t)(nargs + 1) * sizeof(Pos));
    for (int i = 0; i < nargs; i++)
        st.arg[i] = arena_strdup(a, args[i]);
    st.narg = nargs;
    st.policy = policy;
    return st;
}

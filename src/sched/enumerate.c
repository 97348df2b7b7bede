/* enumerate.c: enumerates the distinct valid schedules of a program, as the
 * paper's autotuner does: first fuse each connected group of computations
 * (ComputationFuse), then explore split, reorder (with asSlice and dead of
 * the state it slices), fuse and, last, overlap, breadth first. Every
 * candidate is applied for real (so invalid ones are dropped by the same
 * rules a user meets) and two schedules giving the same graph are one.
 * Each result gets a name in the paper's notation, e.g. ol(MM,fuse(RS-C-AG)). */
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_STATES = 4000, MAX_DEPTH = 10 };

typedef struct {
    SchedStmt *stmt;
    int n;
} Seq;

typedef struct {
    Program *base;
    Arena *a;
    Seq *queue;
    int nqueue, head;
    char **seen;
    int nseen;
} Enum;

static Seq seq_extend(Arena *a, Seq s, const SchedStmt *more, int nmore)
{
    Seq t = {arena_alloc(a, (size_t)(s.n + nmore + 1) * sizeof(SchedStmt)), s.n + nmore};
    copy_bytes(t.stmt, s.stmt, (size_t)s.n * sizeof(SchedStmt));
    copy_bytes(t.stmt + s.n, more, (size_t)nmore * sizeof(SchedStmt));
    return t;
}

/* Applies a sequence to a clone of the program; NULL when it is refused. */
static Program *try_seq(Program *base, Seq s)
{
    Program *q = program_clone(base);
    char msg[1024];
    ErrorCtx ctx;
    error_push(&ctx, msg, sizeof msg, base->file, base->src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        program_free(q);
        return NULL;
    }
    Schedule sc;
    memset(&sc, 0, sizeof sc);
    sc.name = "candidate";
    sc.stmt = s.stmt;
    sc.nstmt = s.n;
    sc.generated = 1;
    schedule_apply(q, &sc);
    error_pop(&ctx);
    return q;
}

/* Appends text to the growing signature s (length *len, capacity *cap). */
static char *sig_put(char *s, size_t *len, size_t *cap, const char *text)
{
    size_t k = strlen(text);
    if (*len + k + 1 > *cap) {
        *cap = 2 * (*cap + k);
        s = realloc(s, *cap);
        if (!s)
            BUG("out of memory");
    }
    memcpy(s + *len, text, k + 1);
    *len += k;
    return s;
}

/* A fusion's number in order of first appearance, so that fusing in another
 * order (another index in q->fusion) gives the same signature. */
static int canon_fusion(Program *q, const int *order, int f)
{
    return f < 0 ? -1 : order[f];
}

/* One node: its operation, operands, type, shape, layout and attributes,
 * and its name where the user wrote it (a name the program has); the names
 * transformations generate (sc_x, fused_x, rs_x...) are left out. */
static void sig_node(Program *q, const Node *n, const int *order, char *item, size_t size)
{
    int k = snprintf(item, size, "%d:t%d.l%d.%d.g%d.f%d.%d", n->op, n->type, n->layout.kind,
                     n->layout.dim, n->group,
                     n->fusion >= 0 ? (int)q->fusion[n->fusion].kind : -1,
                     canon_fusion(q, order, n->fusion));
    k += snprintf(item + k, size - (size_t)k, ".a%.17g.%d.%d.%d.%d.%d.%d.%d.%d.%d.%d.%d.%d",
                  n->value, n->redop, n->axis, n->root, n->shift, n->is_recv, n->linear, n->stride,
                  n->pad, n->to, n->dropout_id, n->target, n->ndim);
    for (int j = 0; j < n->ndim && k < (int)size - 24; j++)
        k += snprintf(item + k, size - (size_t)k, "x%ld", n->dim[j].n);
    for (int j = 0; j < n->nin && k < (int)size - 24; j++)
        k += snprintf(item + k, size - (size_t)k, ",%d", n->in[j]);
    if (n->named && q->base && program_find(q->base, n->name) >= 0 && k < (int)size - MAXNAME - 4)
        snprintf(item + k, size - (size_t)k, "=%s", n->name);
}

/* The graph without generated names: two schedules with the same one are
 * the same schedule. */
static char *signature(Program *q)
{
    size_t cap = 256, len = 0;
    char *s = xmalloc(cap);
    s[0] = 0;
    int *order = xmalloc(((size_t)q->nfusion + 1) * sizeof(int));
    int nf = 0;
    for (int f = 0; f < q->nfusion; f++)
        order[f] = -1;
    for (int i = 0; i < q->nnode; i++) {
        Node *n = &q->node[i];
        if (n->fusion >= 0 && order[n->fusion] < 0)
            order[n->fusion] = nf++;
        char item[512];
        sig_node(q, n, order, item, sizeof item);
        s = sig_put(s, &len, &cap, item);
        s = sig_put(s, &len, &cap, ";");
    }
    char tail[512];
    int k = snprintf(tail, sizeof tail, "ol%d", q->noverlap);
    for (int o = 0; o < q->noverlap && k < 400; o++)
        for (int i = 0; i < q->overlap[o].nitem; i++) {
            Ref r = q->overlap[o].item[i];
            int first;
            ref_members(q, r, &first, 1); /* a fusion by its first member */
            k += snprintf(tail + k, sizeof tail - (size_t)k, ",%d", first);
        }
    s = sig_put(s, &len, &cap, tail);
    free(order);
    return s;
}

/* The name of the unit (fused computation or statement) holding node id. */
static const char *unit_of(Program *q, int id)
{
    Node *n = node_of(q, id);
    if (n->fusion >= 0) {
        FuseKind k = q->fusion[n->fusion].kind;
        return k == F_ALLREDUCE ? NULL : q->fusion[n->fusion].name;
    }
    if (!is_computation(n) && n->op != O_SEND)
        return NULL;
    int h = statement_head(q, id);
    return node_of(q, h)->named ? node_of(q, h)->name : NULL;
}

static int add_name(const char **names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name))
            return n;
    names[n++] = name; /* names has room for every node's */
    return n;
}

/* The computation units downstream of node from (through computations). */
static int downstream_units(Program *q, int from, const char **units)
{
    int n = 0;
    char *reach = xcalloc((size_t)q->nnode, 1);
    reach[from] = 1;
    for (int i = from + 1; i < q->nnode; i++) {
        Node *d = &q->node[i];
        int hit = 0;
        for (int k = 0; k < d->nin; k++)
            hit |= reach[d->in[k]];
        const char *u = hit ? unit_of(q, i) : NULL;
        if (!u)
            continue;
        reach[i] = 1;
        n = add_name(units, n, u);
    }
    free(reach);
    return n;
}

/* Is everything written in statement id a computation (no inline collective)? */
static int pure_statement(Program *p, int id)
{
    int ids[256], c = statement_nodes(p, id, ids, 256);
    for (int k = 0; k < c && k < 256; k++)
        if (!is_computation(node_of(p, ids[k])))
            return 0;
    return c <= 256;
}

/* The base: each connected group of computation statements fused. */
static Seq base_seq(Enum *e)
{
    Program *p = e->base;
    int *group = xmalloc((size_t)p->nnode * sizeof(int));
    for (int i = 0; i < p->nnode; i++)
        group[i] = -1;
    for (int i = 0; i < p->nnode; i++) {
        if (!p->node[i].named || !is_computation(&p->node[i]) || !pure_statement(p, i))
            continue;
        group[i] = i;
        int ids[256], c = statement_nodes(p, i, ids, 256);
        for (int k = 0; k < c && k < 256; k++)
            for (int j = 0; j < node_of(p, ids[k])->nin; j++) {
                int v = node_of(p, ids[k])->in[j];
                if (group[v] < 0 || v == i)
                    continue;
                int from = group[v], to = group[i];
                for (int m = 0; m < p->nnode; m++)
                    if (group[m] == from)
                        group[m] = to;
            }
    }
    Seq s = {NULL, 0};
    const char **names = xmalloc((size_t)p->nnode * sizeof(char *));
    for (int g = 0; g < p->nnode; g++) {
        int c = 0;
        for (int i = 0; i < p->nnode; i++)
            if (group[i] == g)
                names[c++] = p->node[i].name;
        if (c < 2)
            continue;
        SchedStmt st = schedule_stmt(e->a, V_FUSE, names, c, P_COMPUTATION_FUSE);
        Seq t = seq_extend(e->a, s, &st, 1);
        Program *q = try_seq(p, t);
        if (q) {
            s = t;
            program_free(q);
        }
    }
    free(names);
    free(group);
    return s;
}

static void push(Enum *e, Seq s)
{
    if (e->nqueue == MAX_STATES)
        return;
    Program *q = try_seq(e->base, s);
    if (!q)
        return;
    char *sig = signature(q);
    program_free(q);
    for (int i = 0; i < e->nseen; i++)
        if (!strcmp(e->seen[i], sig)) {
            free(sig);
            return;
        }
    e->seen[e->nseen++] = sig;
    e->queue[e->nqueue++] = s;
}

static void push1(Enum *e, Seq s, Verb verb, const char **args, int n, Policy pol)
{
    SchedStmt st = schedule_stmt(e->a, verb, args, n, pol);
    push(e, seq_extend(e->a, s, &st, 1));
}

/* Is AllReduce id already followed by Slice + AllGather (ARSliceAG)? */
static int sliced_after(Program *q, int id)
{
    int users[8], n = node_users(q, id, users, 8);
    for (int k = 0; k < n && k < 8; k++)
        if (node_of(q, users[k])->op == O_SLICE)
            return 1;
    return 0;
}

static void splits_and_reorders(Enum *e, Seq s, Program *q, const char **args)
{
    for (int i = 0; i < q->nnode; i++) {
        Node *n = &q->node[i];
        if (n->fusion >= 0)
            continue;
        if (n->op == O_ALLREDUCE && node_of(q, n->in[0])->op != O_PARTIAL_REDUCE &&
            !sliced_after(q, i)) {
            args[0] = node_of(q, statement_head(q, i))->name; /* names it inline too */
            push1(e, s, V_SPLIT, args, 1, P_AR_SPLIT_RS_AG);
            push1(e, s, V_SPLIT, args, 1, P_AR_SLICE_AG);
        }
        if (n->op == O_ALLGATHER) {
            int c = downstream_units(q, i, args + 1);
            args[0] = n->name;
            if (c)
                push1(e, s, V_REORDER, args, c + 1, P_AG_REORDER);
        }
    }
}

static void slice_state(Enum *e, Seq s, Program *q)
{
    for (int i = 0; i < q->nnode; i++) {
        Node *t = &q->node[i];
        if (t->op != O_INPUT || t->updated_by < 0 || t->layout.kind != L_REPLICATED)
            continue;
        Node *g = node_of(q, t->updated_by);
        if (g->op != O_ALLGATHER || is_output(q, g->id))
            continue;
        const char *a1[1] = {t->name}, *a2[1] = {g->name};
        SchedStmt st[2] = {schedule_stmt(e->a, V_ASSLICE, a1, 1, P_NONE),
                           schedule_stmt(e->a, V_DEAD, a2, 1, P_NONE)};
        push(e, seq_extend(e->a, s, st, 2));
    }
}

static void fusions(Enum *e, Seq s, Program *q, const char **args)
{
    for (int i = 0; i < q->nnode; i++) {
        Node *n = &q->node[i];
        if (n->fusion >= 0)
            continue;
        if (n->op == O_REDUCESCATTER) {
            int c = 1;
            args[0] = n->name;
            char *reach = xcalloc((size_t)q->nnode, 1);
            reach[i] = 1;
            for (int j = i + 1; j < q->nnode; j++) {
                Node *d = &q->node[j];
                for (int k = 0; k < d->nin && !reach[j]; k++)
                    reach[j] = reach[d->in[k]] && (is_computation(d) || d->op == O_ALLGATHER ||
                                                   d->op == O_ALLREDUCE);
                if (reach[j] && d->op == O_ALLGATHER && d->fusion < 0)
                    c = add_name(args, c, d->name);
            }
            free(reach);
            if (c > 1)
                push1(e, s, V_FUSE, args, c, P_ALLREDUCE_FUSE);
        }
        if (n->op == O_SEND) {
            const char *u = unit_of(q, n->in[0]);
            if (u) {
                args[0] = u;
                args[1] = n->name;
                push1(e, s, V_FUSE, args, 2, P_SEND_FUSE);
            }
        }
    }
}

/* Operations that can overlap: MatMul, communication, fused collectives. */
static int overlap_units(Program *q, Ref *units)
{
    int n = 0;
    for (int f = 0; f < q->nfusion; f++)
        if (!q->fusion[f].dead && q->fusion[f].kind != F_COMPUTATION)
            units[n++] = REF_FUSION(f);
    for (int i = 0; i < q->nnode; i++) {
        Node *d = &q->node[i];
        if (d->fusion < 0 && (d->op == O_MATMUL || op_is_comm(d->op)) && n < 256)
            units[n++] = i;
    }
    return n;
}

static void overlaps(Enum *e, Seq s, Program *q)
{
    if (q->noverlap)
        return;
    Ref units[256];
    int n = overlap_units(q, units);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            if (a == b || !ref_uses(q, units[a], units[b]))
                continue;
            const char *args[3] = {ref_name(q, units[a]), ref_name(q, units[b]), NULL};
            push1(e, s, V_OVERLAP, args, 2, P_NONE);
            for (int c = 0; c < n; c++) {
                if (c == a || c == b || !ref_uses(q, units[b], units[c]))
                    continue;
                args[2] = ref_name(q, units[c]);
                push1(e, s, V_OVERLAP, args, 3, P_NONE);
            }
        }
}

static void expand(Enum *e, Seq s)
{
    if (s.n >= MAX_DEPTH)
        return;
    Program *q = try_seq(e->base, s);
    if (!q || q->noverlap) {
        program_free(q);
        return;
    }
    const char **args = xmalloc(((size_t)q->nnode + 2) * sizeof(char *)); /* room for all */
    splits_and_reorders(e, s, q, args);
    slice_state(e, s, q);
    fusions(e, s, q, args);
    overlaps(e, s, q);
    free(args);
    program_free(q);
}

/* The schedule's name: its note's letters and digits, runs of anything
 * else as one '_', made unique with _2, _3... */
static const char *ident_of(Arena *a, const char *note, Program *p)
{
    char *buf = arena_alloc(a, strlen(note) + 1);
    size_t n = 0;
    for (const char *c = note; *c && *c != ' '; c++) {
        int alnum = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
        if (alnum)
            buf[n++] = *c;
        else if (n && buf[n - 1] != '_')
            buf[n++] = '_';
    }
    while (n && buf[n - 1] == '_')
        n--;
    buf[n] = 0;
    const char *name = buf;
    for (int k = 2; schedule_find(p, name); k++)
        name = arena_printf(a, "%s_%d", buf, k);
    return name;
}

static void add_schedule(Program *p, Seq s, const char *note)
{
    Schedule *grown = arena_alloc(p->arena, (size_t)(p->nsched + 1) * sizeof(Schedule));
    copy_bytes(grown, p->sched, (size_t)p->nsched * sizeof(Schedule));
    p->sched = grown;
    Schedule *sc = &p->sched[p->nsched];
    sc->name = ident_of(p->arena, note, p);
    sc->note = note;
    sc->stmt = s.stmt;
    sc->nstmt = s.n;
    sc->generated = 1;
    p->nsched++;
}

int enumerate_schedules(Program *p)
{
    Enum e;
    memset(&e, 0, sizeof e);
    e.base = p;
    e.a = p->arena;
    e.queue = xmalloc(MAX_STATES * sizeof(Seq));
    e.seen = xmalloc(MAX_STATES * sizeof(char *));
    push(&e, base_seq(&e));
    while (e.head < e.nqueue)
        expand(&e, e.queue[e.head++]);
    int before = p->nsched;
    for (int i = 0; i < e.nqueue; i++) {
        Program *q = try_seq(p, e.queue[i]);
        add_schedule(p, e.queue[i], paper_note(p->arena, q));
        program_free(q);
    }
    for (int i = 0; i < e.nseen; i++)
        free(e.seen[i]);
    free(e.seen);
    free(e.queue);
    return p->nsched - before;
}

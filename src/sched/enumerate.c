/* enumerate.c: enumerates the distinct valid schedules of a program, as the
 * paper's autotuner does: first fuse each connected group of computations
 * (ComputationFuse), then explore split, reorder (with asSlice and dead of
 * the state it slices), fuse and, last, overlap (then only more overlaps of
 * MatMuls), breadth first. Every
 * candidate is applied for real (so invalid ones are dropped by the same
 * rules a user meets) and two schedules giving the same graph are one.
 * Each result gets a name in the paper's notation, e.g. ol(MM,fuse(RS-C-AG))
 * (paper_name.c).
 *
 * Cost: a candidate is applied to a clone of the state it extends, and the
 * questions asked of a state's graph are answered from facts gathered once
 * (enum_graph.c), so that a candidate costs time linear in the program.
 * The search keeps at most MAX_STATES schedules of at most MAX_DEPTH
 * statements; when a program has more, the list stops at the cap, or at
 * the depth, and a note on stderr says so. */
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_STATES = 4000, MAX_DEPTH = 10 };

typedef struct {
    SchedStmt *stmt;
    int n;
} Seq;

/* A byte string and its hash (made by bytes()). */
typedef struct {
    const char *s;
    size_t len;
    unsigned long hash;
} Bytes;

/* A set of byte strings, open addressing; frees its strings if it owns them. */
typedef struct {
    Bytes *slot; /* s == NULL: empty */
    size_t cap, n;
    int owns;
} ByteSet;

typedef struct {
    Program *base;
    Program *root; /* the base with its computations fused: the first state */
    int nroot;     /* the statements that made root */
    Arena *a;
    Seq *queue;
    const char **note; /* each queued schedule's name in the paper's notation */
    int nqueue, head;
    ByteSet seen;      /* the queued schedules' graph signatures */
    int cut;           /* a distinct valid schedule was left out at the cap */
    int deep;          /* a schedule of MAX_DEPTH statements was not extended */
    const char **args; /* a candidate's arguments: room for every node's name */
    int nargs;         /* room in args */
} Enum;

/* s and its hash: FNV-1a over 8 bytes at a time, then the rest */
static Bytes bytes(const char *s, size_t len)
{
    unsigned long h = 1469598103934665603ul, word;
    size_t i = 0;
    for (; i + sizeof word <= len; i += sizeof word) {
        memcpy(&word, s + i, sizeof word);
        h = (h ^ word) * 1099511628211ul;
    }
    for (; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ul;
    return (Bytes){s, len, h ^ (h >> 29)};
}

static size_t set_slot(const ByteSet *set, Bytes k)
{
    size_t i = k.hash & (set->cap - 1);
    while (set->slot[i].s && (set->slot[i].hash != k.hash || set->slot[i].len != k.len ||
                              memcmp(set->slot[i].s, k.s, k.len)))
        i = (i + 1) & (set->cap - 1);
    return i;
}

static int set_has(const ByteSet *set, Bytes k)
{
    return set->cap && set->slot[set_slot(set, k)].s;
}

static void set_grow(ByteSet *set)
{
    size_t cap = set->cap ? 2 * set->cap : 64;
    ByteSet bigger = {xcalloc(cap, sizeof(Bytes)), cap, set->n, set->owns};
    for (size_t i = 0; i < set->cap; i++)
        if (set->slot[i].s)
            bigger.slot[set_slot(&bigger, set->slot[i])] = set->slot[i];
    free(set->slot);
    *set = bigger;
}

/* Adds k, which is not in the set (which then owns it, if it owns keys). */
static void set_add(ByteSet *set, Bytes k)
{
    if (2 * (set->n + 1) > set->cap)
        set_grow(set);
    set->slot[set_slot(set, k)] = k;
    set->n++;
}

static void set_free(ByteSet *set)
{
    for (size_t i = 0; set->owns && i < set->cap; i++)
        free((char *)set->slot[i].s);
    free(set->slot);
}

static Bytes text(const char *s)
{
    return bytes(s, strlen(s));
}

static Seq seq_extend(Arena *a, Seq s, const SchedStmt *more, int nmore)
{
    Seq t = {arena_alloc(a, (size_t)(s.n + nmore + 1) * sizeof(SchedStmt)), s.n + nmore};
    copy_bytes(t.stmt, s.stmt, (size_t)s.n * sizeof(SchedStmt));
    copy_bytes(t.stmt + s.n, more, (size_t)nmore * sizeof(SchedStmt));
    return t;
}

/* Statements st applied to a clone of from (the base or a state made from
 * it, so that the result is what applying the whole sequence to the base
 * gives); NULL when one is refused. */
static Program *apply_to_clone(Program *from, const SchedStmt *st, int n)
{
    Program *q = program_clone(from);
    char msg[1024];
    ErrorCtx ctx;
    error_push(&ctx, msg, sizeof msg, from->file, from->src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        program_free(q);
        return NULL;
    }
    Schedule sc = {.name = "candidate", .stmt = (SchedStmt *)st, .nstmt = n, .generated = 1};
    schedule_apply(q, &sc);
    error_pop(&ctx);
    return q;
}

/* The program of queued schedule s. */
static Program *state_program(Enum *e, Seq s)
{
    return apply_to_clone(e->root, s.stmt + e->nroot, s.n - e->nroot);
}

/* A graph's signature: its facts as bytes (not text: it is only compared). */
typedef struct {
    char *b;
    size_t len, cap;
} Sig;

static void sig_bytes(Sig *s, const void *bytes, size_t n)
{
    if (s->len + n > s->cap) {
        s->cap = 2 * (s->cap + n);
        s->b = realloc(s->b, s->cap);
        if (!s->b)
            BUG("out of memory");
    }
    memcpy(s->b + s->len, bytes, n);
    s->len += n;
}

static void sig_long(Sig *s, long v)
{
    sig_bytes(s, &v, sizeof v);
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
static void sig_node(Sig *s, Program *q, const Node *n, const int *order)
{
    const long facts[] = {n->op, n->type, n->layout.kind, n->layout.dim, n->group,
                          n->fusion >= 0 ? (long)q->fusion[n->fusion].kind : -1,
                          canon_fusion(q, order, n->fusion), n->redop, n->axis, n->root,
                          n->shift, n->is_recv, n->linear, n->stride, n->pad, n->to,
                          n->dropout_id, n->target, n->ndim, n->nin};
    sig_bytes(s, facts, sizeof facts);
    sig_bytes(s, &n->value, sizeof n->value);
    for (int j = 0; j < n->ndim; j++)
        sig_long(s, n->dim[j].n);
    for (int j = 0; j < n->nin; j++)
        sig_long(s, n->in[j]);
    int user_named = n->named && q->base && program_find(q->base, n->name) >= 0;
    sig_bytes(s, user_named ? n->name : "", user_named ? strlen(n->name) + 1 : 1);
}

static void sig_overlaps(Sig *s, Program *q)
{
    sig_long(s, q->noverlap);
    for (int o = 0; o < q->noverlap; o++)
        for (int i = 0; i < q->overlap[o].nitem; i++) {
            int first;
            ref_members(q, q->overlap[o].item[i], &first, 1); /* a fusion by its first member */
            sig_long(s, first);
        }
}

/* The graph without generated names: two schedules with the same one are
 * the same schedule. */
static Sig signature(Program *q)
{
    Sig s = {NULL, 0, 0};
    int *order = xmalloc(((size_t)q->nfusion + 1) * sizeof(int));
    int nf = 0;
    for (int f = 0; f < q->nfusion; f++)
        order[f] = -1;
    for (int i = 0; i < q->nnode; i++) {
        Node *n = &q->node[i];
        if (n->fusion >= 0 && order[n->fusion] < 0)
            order[n->fusion] = nf++;
        sig_node(&s, q, n, order);
    }
    sig_overlaps(&s, q);
    free(order);
    return s;
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

static int set_of(int *up, int i)
{
    while (up[i] != i)
        i = up[i] = up[up[i]];
    return i;
}

/* Joins computation statement i with those its statement reads (i, the
 * largest id so far, becomes the group's). */
static void join_readers(Program *p, int *up, int i)
{
    up[i] = i;
    int ids[256], c = statement_nodes(p, i, ids, 256);
    for (int k = 0; k < c && k < 256; k++)
        for (int j = 0; j < node_of(p, ids[k])->nin; j++) {
            int v = node_of(p, ids[k])->in[j];
            if (up[v] >= 0 && v != i)
                up[set_of(up, v)] = i;
        }
}

/* Each named computation statement's group: the largest id of the
 * statements connected to it through what they read (-1: none). */
static int *computation_groups(Program *p)
{
    int *up = xmalloc(((size_t)p->nnode + 1) * sizeof(int));
    for (int i = 0; i < p->nnode; i++) {
        up[i] = -1;
        if (p->node[i].named && is_computation(&p->node[i]) && pure_statement(p, i))
            join_readers(p, up, i);
    }
    for (int i = 0; i < p->nnode; i++)
        if (up[i] >= 0)
            up[i] = set_of(up, i);
    return up;
}

/* Links each group's statements in program order: the first of group g is
 * first[g], the one after statement i next[i] (-1: none). */
static void link_groups(const int *group, int n, int *first, int *next)
{
    int *last = xmalloc(((size_t)n + 1) * sizeof(int));
    for (int i = 0; i < n; i++)
        first[i] = next[i] = -1;
    for (int i = 0; i < n; i++) {
        int g = group[i];
        if (g >= 0 && first[g] < 0)
            first[g] = i;
        else if (g >= 0)
            next[last[g]] = i;
        if (g >= 0)
            last[g] = i;
    }
    free(last);
}

/* One ComputationFuse per group of two or more statements, in the order of
 * the groups, naming the statements in program order; their count. */
static int group_fusions(Enum *e, const int *group, SchedStmt *st)
{
    Program *p = e->base;
    int *first = xmalloc(((size_t)p->nnode + 1) * sizeof(int));
    int *next = xmalloc(((size_t)p->nnode + 1) * sizeof(int)), n = 0;
    link_groups(group, p->nnode, first, next);
    for (int g = 0; g < p->nnode; g++) {
        int c = 0;
        for (int i = first[g]; i >= 0; i = next[i])
            e->args[c++] = p->node[i].name;
        if (c >= 2)
            st[n++] = schedule_stmt(e->a, V_FUSE, e->args, c, P_COMPUTATION_FUSE);
    }
    free(next);
    free(first);
    return n;
}

/* e->root: the base under those of statements st that apply, each on the
 * state the ones before it made; moves them to the front, gives their count. */
static int apply_each(Enum *e, SchedStmt *st, int n)
{
    int kept = 0;
    e->root = program_clone(e->base);
    for (int i = 0; i < n; i++) {
        Program *q = apply_to_clone(e->root, &st[i], 1);
        if (q) {
            program_free(e->root);
            e->root = q;
            st[kept++] = st[i];
        }
    }
    return kept;
}

/* The first state: each connected group of computation statements fused,
 * the fusions that apply (all of them, unless one is refused). Sets e->root
 * and e->nroot. */
static Seq root_seq(Enum *e)
{
    Program *p = e->base;
    int *group = computation_groups(p);
    SchedStmt *st = arena_alloc(e->a, ((size_t)p->nnode + 1) * sizeof(SchedStmt));
    Seq s = {st, group_fusions(e, group, st)};
    free(group);
    e->root = apply_to_clone(p, st, s.n);
    if (!e->root)
        s.n = apply_each(e, st, s.n);
    e->nroot = s.n;
    return s;
}

/* Is program q's graph one no queued schedule gives? Then its signature
 * and name are kept for the schedule about to be queued; at the cap, the
 * cut is recorded instead. */
static int is_new(Enum *e, Program *q)
{
    Sig sig = signature(q);
    Bytes key = bytes(sig.b, sig.len);
    int fresh = !set_has(&e->seen, key);
    if (fresh && e->nqueue == MAX_STATES) {
        e->cut = 1;
        fresh = 0;
    }
    if (!fresh) {
        free(sig.b);
        return 0;
    }
    set_add(&e->seen, key);
    e->note[e->nqueue] = paper_note(e->a, q);
    return 1;
}

/* Tries statements st (their names may be q's) after schedule s, whose
 * program is q; queues the result, with its own copy of st, when new. */
static void try_candidate(Enum *e, Seq s, Program *q, const SchedStmt *st, int n)
{
    if (e->cut)
        return; /* the list is full and known to be cut */
    Program *c = apply_to_clone(q, st, n);
    if (c && is_new(e, c)) {
        SchedStmt kept[2];
        ASSERT(n <= 2);
        for (int i = 0; i < n; i++)
            kept[i] = schedule_stmt(e->a, st[i].verb, st[i].arg, st[i].narg, st[i].policy);
        e->queue[e->nqueue++] = seq_extend(e->a, s, kept, n);
    }
    program_free(c);
}

static void try1(Enum *e, Seq s, Program *q, Verb verb, const char **args, int n, Policy pol)
{
    SchedStmt st = {.verb = verb, .arg = args, .narg = n, .policy = pol};
    try_candidate(e, s, q, &st, 1);
}

/* e->args with room for n names and two more */
static void room_for_args(Enum *e, int n)
{
    if (n + 2 <= e->nargs)
        return;
    free(e->args);
    e->nargs = n + 2;
    e->args = xmalloc((size_t)e->nargs * sizeof(char *));
}

/* Both splits of AllReduce i (not a Norm's sum, not split already). */
static void splits(Enum *e, Seq s, Program *q, StateGraph *g, int i)
{
    if (node_of(q, q->node[i].in[0])->op == O_PARTIAL_REDUCE || state_sliced_after(g, i))
        return;
    /* its statement's name: split finds an AllReduce written inline */
    const char *ar[1] = {node_of(q, state_statement_head(g, i))->name};
    try1(e, s, q, V_SPLIT, ar, 1, P_AR_SPLIT_RS_AG);
    try1(e, s, q, V_SPLIT, ar, 1, P_AR_SLICE_AG);
}

/* The reorder of AllGather i with every unit downstream of it. */
static void reorders(Enum *e, Seq s, Program *q, StateGraph *g, int i)
{
    int c = state_downstream_units(g, i, e->args + 1);
    e->args[0] = q->node[i].name;
    if (c)
        try1(e, s, q, V_REORDER, e->args, c + 1, P_AG_REORDER);
}

static void splits_and_reorders(Enum *e, Seq s, Program *q, StateGraph *g)
{
    for (int i = 0; i < q->nnode; i++) {
        Node *n = &q->node[i];
        if (n->fusion < 0 && n->op == O_ALLREDUCE)
            splits(e, s, q, g, i);
        if (n->fusion < 0 && n->op == O_ALLGATHER)
            reorders(e, s, q, g, i);
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
        SchedStmt st[2] = {{.verb = V_ASSLICE, .arg = a1, .narg = 1},
                           {.verb = V_DEAD, .arg = a2, .narg = 1}};
        try_candidate(e, s, q, st, 2);
    }
}

static void fusions(Enum *e, Seq s, Program *q, StateGraph *g)
{
    for (int i = 0; i < q->nnode; i++) {
        Node *n = &q->node[i];
        if (n->fusion >= 0)
            continue;
        if (n->op == O_REDUCESCATTER) {
            int c = state_gathers_after(g, i, e->args);
            if (c > 1)
                try1(e, s, q, V_FUSE, e->args, c, P_ALLREDUCE_FUSE);
        }
        const char *u = n->op == O_SEND ? state_unit_of(g, n->in[0]) : NULL;
        if (u) {
            const char *args[2] = {u, n->name};
            try1(e, s, q, V_FUSE, args, 2, P_SEND_FUSE);
        }
    }
}

/* Does one of the n items stand for a MatMul? */
static int has_matmul(Program *q, const Ref *item, int n)
{
    for (int k = 0; k < n; k++) {
        int op = overlap_operation(q, item[k]);
        if (op >= 0 && node_of(q, op)->op == O_MATMUL)
            return 1;
    }
    return 0;
}

static int first_node(Program *q, Ref r)
{
    int first = -1;
    ref_members(q, r, &first, 1);
    return first;
}

/* May overlap(items) follow q's overlaps? Several overlaps are those of
 * MatMuls (both MatMuls of a layer), each after the ones before it in
 * program order: one order for each set. */
static int may_follow(Program *q, const Ref *items, int n)
{
    if (!q->noverlap)
        return 1;
    if (!has_matmul(q, items, n))
        return 0;
    int last = -1;
    for (int o = 0; o < q->noverlap; o++) {
        const Overlap *ol = &q->overlap[o];
        if (!has_matmul(q, ol->item, ol->nitem))
            return 0;
        for (int k = 0; k < ol->nitem; k++)
            if (first_node(q, ol->item[k]) > last)
                last = first_node(q, ol->item[k]);
    }
    return first_node(q, items[0]) > last;
}

/* overlap of the n candidates u[] when it may follow q's overlaps */
static void try_overlap(Enum *e, Seq s, Program *q, StateGraph *g, const int *u, int n)
{
    Ref items[3];
    const char *args[3];
    for (int k = 0; k < n; k++) {
        items[k] = state_unit(g, u[k]);
        args[k] = ref_name(q, items[k]);
    }
    if (may_follow(q, items, n))
        try1(e, s, q, V_OVERLAP, args, n, P_NONE);
}

/* overlap(a, b), then overlap(a, b, c) for each candidate c reading b. */
static void overlaps_from(Enum *e, Seq s, Program *q, StateGraph *g, int a, int b)
{
    int u[3] = {a, b};
    try_overlap(e, s, q, g, u, 2);
    const int *rc;
    int nc = state_unit_readers(g, b, &rc);
    for (int j = 0; j < nc; j++) {
        if (rc[j] == a || rc[j] == b)
            continue;
        u[2] = rc[j];
        try_overlap(e, s, q, g, u, 3);
    }
}

/* Overlaps of two or three candidates, each reading the one before. */
static void overlaps(Enum *e, Seq s, Program *q, StateGraph *g)
{
    int n = state_overlap_units(g);
    for (int a = 0; a < n; a++) {
        const int *rb;
        int nb = state_unit_readers(g, a, &rb);
        for (int i = 0; i < nb; i++)
            overlaps_from(e, s, q, g, a, rb[i]);
    }
}

static void expand(Enum *e, Seq s)
{
    if (s.n >= MAX_DEPTH) {
        e->deep = 1;
        return;
    }
    Program *q = state_program(e, s);
    if (!q)
        return;
    StateGraph *g = state_graph_new(q);
    room_for_args(e, q->nnode);
    if (!q->noverlap) { /* after an overlap come only overlaps */
        splits_and_reorders(e, s, q, g);
        slice_state(e, s, q);
        fusions(e, s, q, g);
    }
    overlaps(e, s, q, g);
    state_graph_free(g);
    program_free(q);
}

/* The schedule's name: its note's letters and digits, runs of anything
 * else as one '_', made unique with _2, _3... among names (then added). */
static const char *ident_of(Arena *a, const char *note, ByteSet *names)
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
    for (int k = 2; set_has(names, text(name)); k++)
        name = arena_printf(a, "%s_%d", buf, k);
    set_add(names, text(name));
    return name;
}

/* The queued schedules, in order, after p's own. */
static void add_schedules(Program *p, const Enum *e)
{
    Schedule *all = arena_alloc(p->arena, (size_t)(p->nsched + e->nqueue + 1) * sizeof(Schedule));
    copy_bytes(all, p->sched, (size_t)p->nsched * sizeof(Schedule));
    p->sched = all;
    ByteSet names = {NULL, 0, 0, 0};
    for (int i = 0; i < p->nsched; i++)
        set_add(&names, text(p->sched[i].name));
    for (int i = 0; i < e->nqueue; i++) {
        Schedule *sc = &p->sched[p->nsched++];
        sc->name = ident_of(p->arena, e->note[i], &names);
        sc->note = e->note[i];
        sc->stmt = e->queue[i].stmt;
        sc->nstmt = e->queue[i].n;
        sc->generated = 1;
    }
    set_free(&names);
}

/* Breadth first from the first state, until no state is left or the list
 * is full and known to be cut. */
static void search(Enum *e)
{
    e->queue = xmalloc(MAX_STATES * sizeof(Seq));
    e->note = xmalloc(MAX_STATES * sizeof(char *));
    room_for_args(e, e->base->nnode);
    Seq root = root_seq(e);
    if (is_new(e, e->root))
        e->queue[e->nqueue++] = root;
    while (e->head < e->nqueue && !e->cut)
        expand(e, e->queue[e->head++]);
}

int enumerate_schedules(Program *p)
{
    Enum e = {.base = p, .a = p->arena, .seen = {NULL, 0, 0, 1}};
    search(&e);
    int before = p->nsched;
    add_schedules(p, &e);
    if (e.cut)
        fprintf(stderr, "%s: note: the enumeration stopped at its cap of %d schedules; the "
                "program has more\n", p->file, MAX_STATES);
    else if (e.deep)
        fprintf(stderr, "%s: note: the enumeration tried schedules of at most %d statements; "
                "longer ones were not tried\n", p->file, MAX_DEPTH);
    program_free(e.root);
    set_free(&e.seen);
    free(e.args);
    free(e.note);
    free(e.queue);
    return p->nsched - before;
}

/* rewrite.c: graph surgery shared by the schedule transformations: cloning
 * a program, copying nodes, redirecting uses (through an index of readers
 * while the graph is unsorted), re-sorting the nodes into a topological
 * order after new ones were added, and questions about fused operations and
 * references (a node or a fusion) that the rules ask. */
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

Program *program_clone(Program *base)
{
    Arena *a = arena_new();
    Program *p = arena_alloc(a, sizeof(Program));
    *p = *base;
    p->arena = a;
    p->base = base->base ? base->base : base;
    p->readers = NULL;
    p->node = xmalloc((size_t)(base->capnode ? base->capnode : 1) * sizeof(Node));
    copy_bytes(p->node, base->node, (size_t)base->nnode * sizeof(Node));
    p->exec_in = arena_alloc(a, (size_t)(base->nexec_in + 1) * sizeof(int));
    copy_bytes(p->exec_in, base->exec_in, (size_t)base->nexec_in * sizeof(int));
    p->exec_out = arena_alloc(a, (size_t)(base->nexec_out + 1) * sizeof(int));
    copy_bytes(p->exec_out, base->exec_out, (size_t)base->nexec_out * sizeof(int));
    p->fusion = arena_alloc(a, (size_t)(base->nfusion + 1) * sizeof(Fusion));
    copy_bytes(p->fusion, base->fusion, (size_t)base->nfusion * sizeof(Fusion));
    p->overlap = arena_alloc(a, (size_t)(base->noverlap + 1) * sizeof(Overlap));
    for (int i = 0; i < base->noverlap; i++) {
        Overlap *o = &p->overlap[i];
        *o = base->overlap[i];
        o->item = arena_alloc(a, (size_t)o->nitem * sizeof(Ref));
        copy_bytes(o->item, base->overlap[i].item, (size_t)o->nitem * sizeof(Ref));
    }
    return p;
}

/* The same program with every value FP64 (inputs keep their declared data):
 * the exact evaluation that rounding differences are measured against. */
Program *program_exact(Program *base)
{
    Program *p = program_clone(base);
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (n->fill_type == NTYPE)
            n->fill_type = n->type;
        n->type = T_FP64;
        n->to = T_FP64;
    }
    verify_program(p);
    return p;
}

Node *node_copy(Program *p, int id, double seq)
{
    Node *n = node_new(p, O_CONST, (Pos){0, 0});
    int nid = n->id;
    *n = *node_of(p, id);
    n->id = nid;
    n->seq = seq;
    n->named = 0;
    n->fusion = -1;
    n->name = arena_printf(p->arena, "_t%d", nid);
    return n;
}

/* ---- the reader index ----
 * While splits are applied to an unsorted graph (sched.c), the readers of
 * each node are listed, so that replace_uses visits the readers of a value
 * and not the whole graph. A list may still hold a reader that no longer
 * reads the node (each is checked when used); nodes from nlisted on are not
 * listed yet and are looked at directly. An entry reader < 0 stands for
 * Execute output slot -(reader + 1). Memory comes from the program's arena
 * and is kept for the next run of splits. */
typedef struct {
    int reader, next;
} ReaderEntry;

struct Readers {
    int active;
    int *head; /* head[id]: id's first entry, or -1 */
    int nhead, caphead;
    int nlisted;
    ReaderEntry *entry;
    int nentry, capentry;
};

static void readers_room(Program *p, Readers *r, int nhead)
{
    if (nhead > r->caphead) {
        r->caphead = 2 * nhead + 64;
        int *grown = arena_alloc(p->arena, (size_t)r->caphead * sizeof(int));
        copy_bytes(grown, r->head, (size_t)r->nhead * sizeof(int));
        r->head = grown;
    }
    for (; r->nhead < nhead; r->nhead++)
        r->head[r->nhead] = -1;
}

static void readers_add(Program *p, Readers *r, int id, int reader)
{
    if (r->nentry == r->capentry) {
        r->capentry = 2 * r->capentry + 256;
        ReaderEntry *grown = arena_alloc(p->arena, (size_t)r->capentry * sizeof(ReaderEntry));
        copy_bytes(grown, r->entry, (size_t)r->nentry * sizeof(ReaderEntry));
        r->entry = grown;
    }
    r->entry[r->nentry] = (ReaderEntry){reader, r->head[id]};
    r->head[id] = r->nentry++;
}

void readers_update(Program *p)
{
    Readers *r = p->readers;
    readers_room(p, r, p->nnode);
    for (; r->nlisted < p->nnode; r->nlisted++)
        for (int k = 0; k < p->node[r->nlisted].nin; k++)
            readers_add(p, r, p->node[r->nlisted].in[k], r->nlisted);
}

void readers_start(Program *p)
{
    if (!p->readers)
        p->readers = arena_alloc(p->arena, sizeof(Readers));
    Readers *r = p->readers;
    r->active = 1;
    r->nhead = r->nlisted = r->nentry = 0;
    readers_update(p);
    for (int i = 0; i < p->nexec_out; i++)
        readers_add(p, r, p->exec_out[i], -(i + 1));
}

void readers_stop(Program *p)
{
    if (p->readers)
        p->readers->active = 0;
}

/* Does node i read old after floor_seq (and is it not with)? It reads with. */
static int redirect_reader(Program *p, int i, int old, int with, double floor_seq)
{
    Node *n = &p->node[i];
    int moved = 0;
    if (n->dead || i == with || n->seq <= floor_seq)
        return 0;
    for (int k = 0; k < n->nin; k++)
        if (n->in[k] == old) {
            n->in[k] = with;
            moved = 1;
        }
    return moved;
}

/* Entry reader of old's list: redirected to with as replace_uses would. */
static void redirect_entry(Program *p, int reader, int old, int with, double floor_seq)
{
    Readers *r = p->readers;
    if (reader < 0 && p->exec_out[-(reader + 1)] == old) {
        p->exec_out[-(reader + 1)] = with;
        readers_add(p, r, with, reader);
    } else if (reader >= 0 && redirect_reader(p, reader, old, with, floor_seq)) {
        readers_add(p, r, with, reader);
    }
}

/* replace_uses through the reader index: old's list, then the unlisted. */
static void replace_listed(Program *p, int old, int with, double floor_seq)
{
    Readers *r = p->readers;
    readers_room(p, r, p->nnode);
    for (int e = r->head[old]; e >= 0; e = r->entry[e].next)
        redirect_entry(p, r->entry[e].reader, old, with, floor_seq);
    for (int i = r->nlisted; i < p->nnode; i++)
        redirect_reader(p, i, old, with, floor_seq);
}

/* Makes every live reader of old whose seq is greater than the seq of node
 * after_seq_of (or every reader, when -1) read with instead. */
void replace_uses(Program *p, int old, int with, int after_seq_of)
{
    double floor_seq = after_seq_of >= 0 ? node_of(p, after_seq_of)->seq : -1e300;
    if (p->readers && p->readers->active) {
        replace_listed(p, old, with, floor_seq);
        return;
    }
    for (int i = 0; i < p->nnode; i++)
        redirect_reader(p, i, old, with, floor_seq);
    for (int i = 0; i < p->nexec_out; i++)
        if (p->exec_out[i] == old)
            p->exec_out[i] = with;
}

static int remap(const int *newid, int id)
{
    return id < 0 ? id : newid[id];
}

static void remap_program(Program *p, const int *newid)
{
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        for (int k = 0; k < n->nin; k++)
            n->in[k] = remap(newid, n->in[k]);
        n->target = remap(newid, n->target);
        n->updated_by = remap(newid, n->updated_by);
    }
    for (int i = 0; i < p->nexec_in; i++)
        p->exec_in[i] = remap(newid, p->exec_in[i]);
    for (int i = 0; i < p->nexec_out; i++)
        p->exec_out[i] = remap(newid, p->exec_out[i]);
    for (int i = 0; i < p->noverlap; i++)
        for (int k = 0; k < p->overlap[i].nitem; k++)
            if (!REF_IS_FUSION(p->overlap[i].item[k]))
                p->overlap[i].item[k] = remap(newid, p->overlap[i].item[k]);
}

/* The nodes ready to be placed (all inputs placed), a heap by (seq, id). */
typedef struct {
    const Program *p;
    int *item;
    int n;
} ReadyHeap;

static int ready_before(const ReadyHeap *h, int a, int b)
{
    double sa = h->p->node[a].seq, sb = h->p->node[b].seq;
    return sa < sb || (sa == sb && a < b);
}

static void ready_swap(ReadyHeap *h, int i, int j)
{
    int t = h->item[i];
    h->item[i] = h->item[j];
    h->item[j] = t;
}

static void ready_push(ReadyHeap *h, int id)
{
    int i = h->n++;
    h->item[i] = id;
    for (; i > 0 && ready_before(h, h->item[i], h->item[(i - 1) / 2]); i = (i - 1) / 2)
        ready_swap(h, i, (i - 1) / 2);
}

static int ready_pop(ReadyHeap *h)
{
    int top = h->item[0];
    h->item[0] = h->item[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && ready_before(h, h->item[l], h->item[m]))
            m = l;
        if (r < h->n && ready_before(h, h->item[r], h->item[m]))
            m = r;
        if (m == i)
            break;
        ready_swap(h, i, m);
        i = m;
    }
    return top;
}

/* Orders the live nodes topologically, among ready ones the least seq first
 * (the one of least id on a tie); a live node reading a removed one is left
 * out. Returns their number. Linear in the graph, but for the heap. */
static int topological_order(Program *p, int *order)
{
    int n = p->nnode;
    int *pending = xcalloc((size_t)n + 1, sizeof(int)); /* inputs not placed */
    int *first = xcalloc((size_t)n + 2, sizeof(int));   /* readers, CSR */
    int *reader = xmalloc((size_t)n * MAXIN * sizeof(int) + sizeof(int));
    for (int i = 0; i < n; i++)
        for (int k = 0; !p->node[i].dead && k < p->node[i].nin; k++)
            first[p->node[i].in[k] + 2]++;
    for (int i = 0; i < n; i++)
        first[i + 2] += first[i + 1];
    ReadyHeap h = {p, xmalloc((size_t)(n + 1) * sizeof(int)), 0};
    for (int i = 0; i < n; i++) {
        Node *d = &p->node[i];
        if (d->dead)
            continue;
        pending[i] = d->nin;
        for (int k = 0; k < d->nin; k++)
            reader[first[d->in[k] + 1]++] = i;
        if (!d->nin)
            ready_push(&h, i);
    }
    int count = 0;
    while (h.n) {
        int pick = ready_pop(&h);
        order[count++] = pick;
        for (int r = first[pick]; r < first[pick + 1]; r++)
            if (--pending[reader[r]] == 0)
                ready_push(&h, reader[r]);
    }
    free(h.item);
    free(reader);
    free(first);
    free(pending);
    return count;
}

void program_resort(Program *p)
{
    int n = p->nnode;
    int *order = xmalloc((size_t)(n + 1) * sizeof(int));
    int *newid = xmalloc((size_t)(n + 1) * sizeof(int));
    int count = topological_order(p, order);
    for (int i = 0; i < n; i++) {
        Node *d = &p->node[i];
        for (int k = 0; !d->dead && k < d->nin; k++)
            if (p->node[d->in[k]].dead)
                BUG("live node %d (%s) reads removed node %d", i, d->name, d->in[k]);
    }
    for (int i = 0; i < n; i++)
        newid[i] = -1;
    for (int i = 0; i < count; i++)
        newid[order[i]] = i;
    Node *sorted = xmalloc((size_t)(p->capnode ? p->capnode : 1) * sizeof(Node));
    for (int i = 0; i < count; i++) {
        sorted[i] = p->node[order[i]];
        sorted[i].id = i;
        sorted[i].seq = i;
    }
    free(p->node);
    p->node = sorted;
    p->nnode = count;
    program_names_changed(p);
    remap_program(p, newid);
    free(order);
    free(newid);
}

int fusion_new(Program *p, const char *name, FuseKind kind)
{
    Fusion *grown = arena_alloc(p->arena, (size_t)(p->nfusion + 1) * sizeof(Fusion));
    copy_bytes(grown, p->fusion, (size_t)p->nfusion * sizeof(Fusion));
    p->fusion = grown;
    Fusion *f = &p->fusion[p->nfusion];
    f->name = arena_strdup(p->arena, name);
    f->kind = kind;
    return p->nfusion++;
}

int ref_members(Program *p, Ref r, int *out, int max)
{
    if (!REF_IS_FUSION(r)) {
        if (max > 0)
            out[0] = r;
        return 1;
    }
    int f = REF_FUSION_INDEX(r), c = 0;
    for (int i = 0; i < p->nnode; i++)
        if (!p->node[i].dead && p->node[i].fusion == f) {
            if (c < max)
                out[c] = i;
            c++;
        }
    return c;
}

/* The named node whose statement writes node id inline (id itself if named). */
int statement_head(Program *p, int id)
{
    int users[2];
    while (!node_of(p, id)->named && op_info(node_of(p, id)->op)->kind != K_LEAF &&
           node_users(p, id, users, 2) == 1)
        id = users[0];
    return id;
}

/* A node reference stands for its whole statement (its inline parts too). */
static int in_ref(Program *p, Ref r, int id)
{
    Node *n = node_of(p, id);
    if (REF_IS_FUSION(r))
        return n->fusion == REF_FUSION_INDEX(r);
    return id == r || (!n->named && n->fusion < 0 && statement_head(p, id) == r);
}

/* Does some member of b read a value made by a member of a? */
int ref_uses(Program *p, Ref a, Ref b)
{
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (n->dead || !in_ref(p, b, i))
            continue;
        for (int k = 0; k < n->nin; k++)
            if (in_ref(p, a, n->in[k]) && !in_ref(p, b, n->in[k]))
                return 1;
    }
    return 0;
}

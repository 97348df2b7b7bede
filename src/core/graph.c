/* graph.c: creating programs and nodes, and looking things up in them.
 * Nodes live in one growing array indexed by id; ids follow program order,
 * so every node's inputs have smaller ids (the graph is kept topological).
 * Names (of named nodes and of sizes) are found through a hash table in the
 * program's arena, so that checking a program takes time linear in its
 * size: node_set_name and size declarations add entries; an entry whose
 * node was renamed or removed since is skipped when looked up and dropped
 * when the table is rebuilt (on growth, in a clone, after a re-sort). */
#include "coco.h"

#include <stdlib.h>
#include <string.h>

Program *program_new(const char *file, const char *src)
{
    Arena *a = arena_new();
    Program *p = arena_alloc(a, sizeof(Program));
    p->arena = a;
    p->file = arena_strdup(a, file);
    char *text = arena_strdup(a, src);
    text_unify_line_ends(text);
    p->src = text;
    p->nranks = 1;
    return p;
}

/* ---- the name index ---- */

/* An entry names node id (>= 0) or size -(id+1); next chains a bucket. */
typedef struct {
    const char *name;
    int id;
    int next;
} NameEntry;

struct NameIndex {
    const Program *owner; /* a clone copies the pointer: it rebuilds its own */
    int *bucket;          /* first entry of each bucket, or -1 */
    unsigned mask;        /* number of buckets - 1 */
    NameEntry *entry;
    int nentry, capentry;
};

static unsigned name_hash(const char *s)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void index_add(NameIndex *ix, const char *name, int id)
{
    ASSERT(ix->nentry < ix->capentry);
    unsigned b = name_hash(name) & ix->mask;
    ix->entry[ix->nentry] = (NameEntry){name, id, ix->bucket[b]};
    ix->bucket[b] = ix->nentry++;
}

static int node_has_name(const Program *p, int id, const char *name)
{
    if (id >= p->nnode)
        return 0;
    const Node *n = &p->node[id];
    return n->named && !n->dead && !strcmp(n->name, name);
}

/* A fresh table for p's live names, with room for as many more. */
static void index_rebuild(Program *p)
{
    int live = p->nsize;
    for (int i = 0; i < p->nnode; i++)
        live += p->node[i].named && !p->node[i].dead;
    unsigned nbucket = 64;
    while (nbucket < 2u * (unsigned)live + 16)
        nbucket *= 2;
    NameIndex *ix = arena_alloc(p->arena, sizeof *ix);
    ix->owner = p;
    ix->mask = nbucket - 1;
    ix->capentry = (int)nbucket;
    ix->bucket = arena_alloc(p->arena, nbucket * sizeof(int));
    ix->entry = arena_alloc(p->arena, nbucket * sizeof(NameEntry));
    for (unsigned b = 0; b < nbucket; b++)
        ix->bucket[b] = -1;
    for (int i = 0; i < p->nsize; i++)
        index_add(ix, p->size[i].name, -(i + 1));
    for (int i = 0; i < p->nnode; i++)
        if (p->node[i].named && !p->node[i].dead)
            index_add(ix, p->node[i].name, i);
    p->names = ix;
}

static NameIndex *index_of(Program *p)
{
    if (!p->names || p->names->owner != p)
        index_rebuild(p);
    return p->names;
}

/* Records a new name of node id (>= 0) or size -(id+1). */
static void index_insert(Program *p, const char *name, int id)
{
    NameIndex *ix = index_of(p);
    if (ix->nentry == ix->capentry) {
        index_rebuild(p); /* drops stale entries and doubles the room */
        return;           /* the rebuilt table holds the new name already */
    }
    index_add(ix, name, id);
}

void program_names_changed(Program *p)
{
    p->names = NULL;
}

void node_set_name(Program *p, Node *n, const char *name)
{
    n->name = name;
    n->named = 1;
    if (!n->dead)
        index_insert(p, name, n->id);
}

void size_named(Program *p, int i)
{
    index_insert(p, p->size[i].name, -(i + 1));
}

void program_free(Program *p)
{
    if (!p)
        return;
    free(p->node);
    if (!p->base)
        free(p->size);
    arena_free(p->arena);
}

Node *node_new(Program *p, Op op, Pos pos)
{
    if (p->nnode == p->capnode) {
        p->capnode = p->capnode ? 2 * p->capnode : 64;
        Node *grown = xmalloc((size_t)p->capnode * sizeof(Node));
        if (p->nnode)
            memcpy(grown, p->node, (size_t)p->nnode * sizeof(Node));
        free(p->node);
        p->node = grown;
    }
    Node *n = &p->node[p->nnode];
    memset(n, 0, sizeof *n);
    n->id = p->nnode++;
    n->op = op;
    n->pos = pos;
    n->axis = -1;
    n->target = -1;
    n->updated_by = -1;
    n->input_index = -1;
    n->fusion = -1;
    n->fill_type = NTYPE;
    n->seq = n->id;
    n->stride = 1;
    n->name = arena_printf(p->arena, "_t%d", n->id);
    return n;
}

Node *node_of(Program *p, int id)
{
    ASSERT(id >= 0 && id < p->nnode);
    return &p->node[id];
}

/* The newest live node with this user-visible name. */
int program_find(Program *p, const char *name)
{
    NameIndex *ix = index_of(p);
    int best = -1;
    for (int e = ix->bucket[name_hash(name) & ix->mask]; e >= 0; e = ix->entry[e].next) {
        int id = ix->entry[e].id;
        if (id > best && node_has_name(p, id, name))
            best = id;
    }
    return best;
}

/* The Execute input with this name (a Tensor or Scalar), or -1. */
int program_input(const Program *p, const char *name)
{
    for (int i = 0; i < p->nexec_in; i++)
        if (!strcmp(p->node[p->exec_in[i]].name, name))
            return p->exec_in[i];
    return -1;
}

SizeDecl *size_find(Program *p, const char *name)
{
    NameIndex *ix = index_of(p);
    for (int e = ix->bucket[name_hash(name) & ix->mask]; e >= 0; e = ix->entry[e].next) {
        int i = -ix->entry[e].id - 1;
        if (i >= 0 && i < p->nsize && !strcmp(p->size[i].name, name))
            return &p->size[i];
    }
    return NULL;
}

long dim_count(const Node *n)
{
    long c = 1;
    for (int i = 0; i < n->ndim; i++)
        c *= n->dim[i].n;
    return c;
}

int node_users(Program *p, int id, int *users, int max)
{
    int c = 0;
    for (int i = id + 1; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] == id) {
                if (c < max)
                    users[c] = i;
                c++;
                break;
            }
    }
    return c;
}

const char *ref_name(Program *p, Ref r)
{
    return REF_IS_FUSION(r) ? p->fusion[REF_FUSION_INDEX(r)].name : node_of(p, r)->name;
}

int is_output(const Program *p, int id)
{
    for (int i = 0; i < p->nexec_out; i++)
        if (p->exec_out[i] == id)
            return 1;
    return 0;
}

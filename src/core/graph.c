/* graph.c: creating programs and nodes, and looking things up in them.
 * Nodes live in one growing array indexed by id; ids follow program order,
 * so every node's inputs have smaller ids (the graph is kept topological). */
#include "coco.h"

#include <stdlib.h>
#include <string.h>

Program *program_new(const char *file, const char *src)
{
    Arena *a = arena_new();
    Program *p = arena_alloc(a, sizeof(Program));
    p->arena = a;
    p->file = arena_strdup(a, file);
    p->src = arena_strdup(a, src);
    p->nranks = 1;
    return p;
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
    for (int i = p->nnode - 1; i >= 0; i--)
        if (p->node[i].named && !p->node[i].dead && !strcmp(p->node[i].name, name))
            return i;
    return -1;
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
    for (int i = 0; i < p->nsize; i++)
        if (!strcmp(p->size[i].name, name))
            return &p->size[i];
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

/* enum_graph.c: what the enumerator asks of one state's graph: the
 * statement each node is written in, the units (a fused computation or a
 * named statement) downstream of a collective, and which units read which
 * (the overlap candidates). The facts are gathered once per state (each
 * node's readers and statement), so that each question takes time linear
 * in the part of the graph it walks, not in the graph times its nodes. */
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_OVERLAP_UNITS = 256 }; /* nodes among the overlap candidates */

struct StateGraph {
    Program *q;
    int *first, *reader; /* the live readers of node i: reader[first[i] .. first[i+1]), in order */
    int *head;           /* the named node whose statement writes node i (statement_head) */
    int *seen, walk;     /* seen[i] == walk: node i reached in the current walk */
    int *unit_seen;      /* the same per unit key (unit_key) */
    int *reached;        /* the current walk's nodes */
    Ref *unit;           /* the overlap candidates, and who reads whom: */
    int nunit, *ufirst, *ureader;
};

/* Is input k of n the first that reads its value (a reader counts once)? */
static int reads_first_time(const Node *n, int k)
{
    for (int j = 0; j < k; j++)
        if (n->in[j] == n->in[k])
            return 0;
    return 1;
}

static void gather_readers(StateGraph *g)
{
    Program *q = g->q;
    g->first = xcalloc((size_t)q->nnode + 1, sizeof(int));
    for (int i = 0; i < q->nnode; i++)
        for (int k = 0; k < q->node[i].nin && !q->node[i].dead; k++)
            if (reads_first_time(&q->node[i], k))
                g->first[q->node[i].in[k] + 1]++;
    for (int i = 0; i < q->nnode; i++)
        g->first[i + 1] += g->first[i];
    int *fill = xmalloc(((size_t)q->nnode + 1) * sizeof(int));
    memcpy(fill, g->first, ((size_t)q->nnode + 1) * sizeof(int));
    g->reader = xmalloc(((size_t)g->first[q->nnode] + 1) * sizeof(int));
    for (int i = 0; i < q->nnode; i++)
        for (int k = 0; k < q->node[i].nin && !q->node[i].dead; k++)
            if (reads_first_time(&q->node[i], k))
                g->reader[fill[q->node[i].in[k]]++] = i;
    free(fill);
}

static int nreaders(const StateGraph *g, int id)
{
    return g->first[id + 1] - g->first[id];
}

/* statement_head of every node, from the last (a node's readers come after it) */
static void gather_heads(StateGraph *g)
{
    Program *q = g->q;
    g->head = xmalloc(((size_t)q->nnode + 1) * sizeof(int));
    for (int i = q->nnode - 1; i >= 0; i--) {
        const Node *n = &q->node[i];
        int stops = n->named || op_info(n->op)->kind == K_LEAF || nreaders(g, i) != 1;
        g->head[i] = stops ? i : g->head[g->reader[g->first[i]]];
    }
}

StateGraph *state_graph_new(Program *q)
{
    StateGraph *g = xcalloc(1, sizeof *g);
    g->q = q;
    gather_readers(g);
    gather_heads(g);
    g->seen = xcalloc((size_t)q->nnode + 1, sizeof(int));
    g->unit_seen = xcalloc((size_t)q->nnode + (size_t)q->nfusion + 1, sizeof(int));
    g->reached = xmalloc(((size_t)q->nnode + 1) * sizeof(int));
    return g;
}

void state_graph_free(StateGraph *g)
{
    if (!g)
        return;
    free(g->first);
    free(g->reader);
    free(g->head);
    free(g->seen);
    free(g->unit_seen);
    free(g->reached);
    free(g->unit);
    free(g->ufirst);
    free(g->ureader);
    free(g);
}

int state_statement_head(const StateGraph *g, int id)
{
    return g->head[id];
}

int state_sliced_after(const StateGraph *g, int id)
{
    for (int k = g->first[id]; k < g->first[id + 1] && k < g->first[id] + 8; k++)
        if (node_of(g->q, g->reader[k])->op == O_SLICE)
            return 1;
    return 0;
}

/* The unit (fused computation or statement) holding node id: the node id
 * of its statement's head, nnode + its fusion, or -1 for none. */
static int unit_key(const StateGraph *g, int id)
{
    Program *q = g->q;
    Node *n = node_of(q, id);
    if (n->fusion >= 0)
        return q->fusion[n->fusion].kind == F_ALLREDUCE ? -1 : q->nnode + n->fusion;
    if (!is_computation(n) && n->op != O_SEND)
        return -1;
    return node_of(q, g->head[id])->named ? g->head[id] : -1;
}

static const char *unit_name(const StateGraph *g, int key)
{
    Program *q = g->q;
    return key >= q->nnode ? q->fusion[key - q->nnode].name : node_of(q, key)->name;
}

const char *state_unit_of(const StateGraph *g, int id)
{
    int key = unit_key(g, id);
    return key < 0 ? NULL : unit_name(g, key);
}

static int by_id(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The nodes reachable from node from through readers that pass(g, node),
 * in program order; their count (in g->reached). */
static int walk_readers(StateGraph *g, int from, int (*pass)(const StateGraph *, int))
{
    int n = 0, next = 0;
    g->walk++;
    g->seen[from] = g->walk;
    g->reached[n++] = from;
    while (next < n) {
        int r = g->reached[next++];
        for (int k = g->first[r]; k < g->first[r + 1]; k++) {
            int u = g->reader[k];
            if (g->seen[u] != g->walk && pass(g, u)) {
                g->seen[u] = g->walk;
                g->reached[n++] = u;
            }
        }
    }
    qsort(g->reached, (size_t)n, sizeof(int), by_id);
    return n; /* reached[0] is from: every other node comes after it */
}

static int in_a_unit(const StateGraph *g, int id)
{
    return unit_key(g, id) >= 0;
}

int state_downstream_units(StateGraph *g, int from, const char **units)
{
    int n = walk_readers(g, from, in_a_unit), c = 0;
    for (int i = 1; i < n; i++) {
        int key = unit_key(g, g->reached[i]);
        if (g->unit_seen[key] != g->walk) {
            g->unit_seen[key] = g->walk;
            units[c++] = unit_name(g, key);
        }
    }
    return c;
}

static int computation_or_gather(const StateGraph *g, int id)
{
    const Node *d = node_of(g->q, id);
    return is_computation(d) || d->op == O_ALLGATHER || d->op == O_ALLREDUCE;
}

static int listed(const char **names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name))
            return 1;
    return 0;
}

/* A reduction along a dimension the ReduceScatter cuts: no FusedAllReduce
 * holds one (xform_fuse.c, check_whole_rows). */
static int cut_reduction(const Node *d)
{
    return d->op == O_PARTIAL_REDUCE && d->axis >= 0;
}

/* after[id]: reached node id computes from a cut reduction (reached[] is
 * in program order, so a node's inputs come before it). */
static void mark_after_cuts(StateGraph *g, int n, char *after)
{
    for (int i = 1; i < n; i++) {
        const Node *d = node_of(g->q, g->reached[i]);
        int a = cut_reduction(d);
        for (int k = 0; !a && k < d->nin; k++)
            a = after[d->in[k]];
        after[g->reached[i]] = (char)a;
    }
}

int state_gathers_after(StateGraph *g, int rs, const char **names)
{
    int n = walk_readers(g, rs, computation_or_gather), c = 0;
    char *after = xcalloc((size_t)g->q->nnode + 1, 1);
    mark_after_cuts(g, n, after);
    names[c++] = node_of(g->q, rs)->name;
    for (int i = 1; i < n; i++) {
        const Node *d = node_of(g->q, g->reached[i]);
        if (d->op == O_ALLGATHER && d->fusion < 0 && !after[d->id] && !listed(names, c, d->name))
            names[c++] = d->name;
    }
    free(after);
    return c;
}

/* ---- the overlap candidates and which read which ---- */

static void list_fusion_units(StateGraph *g, int *fusion_unit)
{
    Program *q = g->q;
    for (int f = 0; f < q->nfusion; f++) {
        fusion_unit[f] = -1;
        if (!q->fusion[f].dead && q->fusion[f].kind != F_COMPUTATION) {
            fusion_unit[f] = g->nunit;
            g->unit[g->nunit++] = REF_FUSION(f);
        }
    }
}

/* The node candidate i is named by: i, or for a MatMul written inline in a
 * computation's statement ('Var h = MatMul(x, w) + b;') that statement,
 * which stands for it in an overlap (overlap_operation). */
static int unit_node(const StateGraph *g, int i)
{
    Program *q = g->q;
    int h = g->head[i];
    if (q->node[i].op == O_MATMUL && h != i && is_computation(&q->node[h]) &&
        overlap_operation(q, h) == i)
        return h;
    return i;
}

/* An AllReduce of a PartialReduce: part of a reduction's computation
 * (reorder's, over a sliced dimension), which is no overlap candidate. */
static int partial_sum(Program *q, const Node *d)
{
    return d->op == O_ALLREDUCE && node_of(q, d->in[0])->op == O_PARTIAL_REDUCE;
}

/* Fused collectives and Sends (not computations), then unfused MatMuls and
 * communications (but a reduction's sum across ranks) while there are fewer
 * than MAX_OVERLAP_UNITS candidates;
 * node_unit and fusion_unit give each one's index (-1: none). */
static void list_units(StateGraph *g, int *node_unit, int *fusion_unit)
{
    Program *q = g->q;
    g->unit = xmalloc(((size_t)q->nfusion + MAX_OVERLAP_UNITS + 1) * sizeof(Ref));
    list_fusion_units(g, fusion_unit);
    for (int i = 0; i < q->nnode; i++)
        node_unit[i] = -1;
    for (int i = 0; i < q->nnode; i++) {
        Node *d = &q->node[i];
        if (d->fusion < 0 && (d->op == O_MATMUL || op_is_comm(d->op)) && !partial_sum(q, d) &&
            g->nunit < MAX_OVERLAP_UNITS) {
            int u = unit_node(g, i);
            node_unit[u] = g->nunit;
            g->unit[g->nunit++] = u;
        }
    }
}

/* The candidates whose reference holds node id (ref_uses's rule: a fusion
 * its members, a node itself and the unnamed parts its statement writes). */
static int units_holding(const StateGraph *g, const int *node_unit, const int *fusion_unit,
                         int id, int *out)
{
    const Node *n = node_of(g->q, id);
    int c = 0, h = g->head[id];
    if (n->fusion >= 0 && fusion_unit[n->fusion] >= 0)
        out[c++] = fusion_unit[n->fusion];
    if (node_unit[id] >= 0)
        out[c++] = node_unit[id];
    if (!n->named && n->fusion < 0 && h != id && node_unit[h] >= 0)
        out[c++] = node_unit[h];
    return c;
}

static int has(const int *set, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (set[i] == x)
            return 1;
    return 0;
}

typedef struct {
    int from, to;
} Edge;

static int by_edge(const void *a, const void *b)
{
    const Edge *x = a, *y = b;
    return x->from != y->from ? (x->from > y->from) - (x->from < y->from)
                              : (x->to > y->to) - (x->to < y->to);
}

/* Every (a, b) with candidate b reading a value of candidate a (ref_uses),
 * sorted, each once; their count. */
static int unit_edges(const StateGraph *g, const int *node_unit, const int *fusion_unit,
                      Edge **out)
{
    Program *q = g->q;
    Edge *e = xmalloc(((size_t)q->nnode * MAXIN * 9 + 1) * sizeof(Edge));
    int n = 0;
    for (int i = 0; i < q->nnode; i++) {
        int hb[3], nb = q->node[i].dead ? 0 : units_holding(g, node_unit, fusion_unit, i, hb);
        for (int k = 0; k < q->node[i].nin && nb; k++) {
            int hx[3], nx = units_holding(g, node_unit, fusion_unit, q->node[i].in[k], hx);
            for (int a = 0; a < nx; a++)
                for (int b = 0; b < nb; b++)
                    if (!has(hx, nx, hb[b]))
                        e[n++] = (Edge){hx[a], hb[b]};
        }
    }
    qsort(e, (size_t)n, sizeof(Edge), by_edge);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!m || by_edge(&e[m - 1], &e[i]))
            e[m++] = e[i];
    *out = e;
    return m;
}

int state_overlap_units(StateGraph *g)
{
    Program *q = g->q;
    int *node_unit = xmalloc(((size_t)q->nnode + 1) * sizeof(int));
    int *fusion_unit = xmalloc(((size_t)q->nfusion + 1) * sizeof(int));
    list_units(g, node_unit, fusion_unit);
    Edge *e;
    int n = unit_edges(g, node_unit, fusion_unit, &e);
    g->ufirst = xcalloc((size_t)g->nunit + 1, sizeof(int));
    g->ureader = xmalloc(((size_t)n + 1) * sizeof(int));
    for (int i = 0; i < n; i++) {
        g->ufirst[e[i].from + 1]++;
        g->ureader[i] = e[i].to; /* sorted by from, then to */
    }
    for (int u = 0; u < g->nunit; u++)
        g->ufirst[u + 1] += g->ufirst[u];
    free(e);
    free(fusion_unit);
    free(node_unit);
    return g->nunit;
}

Ref state_unit(const StateGraph *g, int u)
{
    return g->unit[u];
}

int state_unit_readers(const StateGraph *g, int u, const int **readers)
{
    *readers = g->ureader + g->ufirst[u];
    return g->ufirst[u + 1] - g->ufirst[u];
}

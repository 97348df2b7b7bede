/* footprint.c: the memory a run of the CPU executor will hold, told before
 * running it. It walks the nodes as exec_run does, with the same liveness
 * (exec_last_uses, exec_may_free, exec_reusable_input): the inputs are
 * drawn first, each node's value is allocated rank after rank (none when it
 * is written over an input's buffers), with the scratch of a MatMul or a
 * Conv2D on top while that rank is computed, and values are freed after
 * their last reader. Sizes are exec_alloc's (at least one element) and
 * eval_scratch_bytes'; the executor counts the same bytes as it goes
 * (Exec.held_peak, rank_peak), which tests/unit/test_footprint.c compares. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

double value_bytes(const Program *p, const Node *n, int rank)
{
    long c = local_count(p, n, rank);
    return (double)(c > 0 ? c : 1) * sizeof(double);
}

typedef struct {
    const Program *p;
    Footprint *f;
    double held, *rank_held;
    char *live; /* live[id]: the value of node id is held */
    int nlive;
} Walk;

static void note_peak(Walk *w, double bytes, int at)
{
    if (bytes <= w->f->peak)
        return;
    w->f->peak = bytes;
    w->f->at = at;
    w->f->values = w->nlive;
    w->f->largest = -1;
    w->f->largest_bytes = 0;
    for (int i = 0; i < w->p->nnode; i++) {
        double b = 0;
        for (int r = 0; w->live[i] && r < w->p->nranks; r++)
            b += value_bytes(w->p, &w->p->node[i], r);
        if (w->live[i] && b > w->f->largest_bytes) {
            w->f->largest = i;
            w->f->largest_bytes = b;
        }
    }
}

static void note_rank(Walk *w, int rank, double extra)
{
    if (w->rank_held[rank] + extra > w->f->rank_peak)
        w->f->rank_peak = w->rank_held[rank] + extra;
}

/* Node n's value is made on every rank (with its scratch on top). */
static int is_tensor(const Node *n)
{
    return n->op != O_CONST && n->op != O_SCALAR;
}

static void allocate(Walk *w, const Node *n, int at)
{
    w->live[n->id] = 1;
    w->nlive += is_tensor(n);
    for (int r = 0; r < w->p->nranks; r++) {
        double b = value_bytes(w->p, n, r), s = eval_scratch_bytes(w->p, n, r);
        w->held += b;
        w->rank_held[r] += b;
        note_peak(w, w->held + s, at);
        note_rank(w, r, s);
    }
}

static void release(Walk *w, int id)
{
    if (!w->live[id])
        return;
    w->live[id] = 0;
    w->nlive -= is_tensor(&w->p->node[id]);
    for (int r = 0; r < w->p->nranks; r++) {
        double b = value_bytes(w->p, &w->p->node[id], r);
        w->held -= b;
        w->rank_held[r] -= b;
    }
}

static int is_leaf_input(const Node *n)
{
    return n->op == O_INPUT || n->op == O_SCALAR;
}

/* Node i is evaluated, then what it read last is freed (exec_run). */
static void evaluate(Walk *w, int keep_all, const int *last, int i)
{
    const Program *p = w->p;
    const Node *n = &p->node[i];
    int x = exec_reusable_input(p, keep_all, last, n);
    if (x >= 0) { /* x's buffers become n's */
        w->live[x] = 0;
        w->live[i] = 1;
        w->nlive += is_tensor(n) - is_tensor(&p->node[x]);
    } else if (!is_leaf_input(n)) {
        allocate(w, n, i);
    }
    for (int k = 0; k <= n->nin; k++) {
        int id = k < n->nin ? n->in[k] : i;
        if (last[id] == i && exec_may_free(p, keep_all, &p->node[id]))
            release(w, id);
    }
}

void exec_footprint(const Program *p, int keep_all, Footprint *f)
{
    memset(f, 0, sizeof *f);
    f->at = -1;
    f->largest = -1;
    int *last = exec_last_uses(p);
    Walk w = {p, f, 0, xcalloc(p->nranks > 0 ? (size_t)p->nranks : 1, sizeof(double)),
              xcalloc(p->nnode > 0 ? (size_t)p->nnode : 1, 1), 0};
    for (int i = 0; i < p->nnode; i++) /* exec_fill_inputs */
        if (!p->node[i].dead && is_leaf_input(&p->node[i]))
            allocate(&w, &p->node[i], -1);
    for (int i = 0; i < p->nnode; i++)
        if (!p->node[i].dead)
            evaluate(&w, keep_all, last, i);
    f->kept = w.held;
    f->kept_values = w.nlive;
    free(last);
    free(w.rank_held);
    free(w.live);
}

/* footprint.c: the memory a run of the CPU executor will hold, told before
 * running it. It walks the nodes as exec_run does, with the same liveness
 * (exec_last_uses, exec_may_free, exec_reusable_input): the inputs are
 * drawn first, each node's value is allocated rank after rank (none when it
 * is written over an input's buffers), with the scratch of a MatMul or a
 * Conv2D on top while that rank is computed, and values are freed after
 * their last reader. Sizes are exec_alloc's (at least one element) and
 * eval_scratch_bytes'; the executor counts the same bytes as it goes
 * (Exec.held_peak, rank_peak), which tests/unit/test_footprint.c compares.
 * The walk takes time linear in the nodes times the ranks. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

double value_bytes(const Program *p, const Node *n, int rank)
{
    long c = local_count(p, n, rank);
    return (double)(c > 0 ? c : 1) * sizeof(double);
}

/* The walk; a second walk (replay) follows the liveness alone up to the
 * allocation that last raised the peak, to find the largest value held
 * then: looking over every value at each new peak would take time
 * quadratic in the values and in the ranks. */
typedef struct {
    const Program *p;
    Footprint *f;
    double held, *rank_held;
    char *live; /* live[id]: the value of node id is held */
    int nlive;
    long made;      /* allocations so far */
    long peak_made; /* the allocation during which the peak was last raised */
    int replay;     /* liveness only, up to allocation peak_made */
    int stopped;    /* the replay has reached it */
} Walk;

static void note_peak(Walk *w, double bytes, int at)
{
    if (bytes <= w->f->peak)
        return;
    w->f->peak = bytes;
    w->f->at = at;
    w->f->values = w->nlive;
    w->peak_made = w->made;
}

/* The largest value held (all ranks together) at the peak; the first of
 * the largest in program order. */
static void note_largest(Walk *w)
{
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
    w->made++;
    if (w->replay) {
        w->stopped = w->made == w->peak_made;
        return;
    }
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
    if (!w->live[id] || w->stopped)
        return;
    w->live[id] = 0;
    w->nlive -= is_tensor(&w->p->node[id]);
    for (int r = 0; !w->replay && r < w->p->nranks; r++) {
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

/* Inputs first (exec_fill_inputs), then each node, until a replay stops. */
static void walk(Walk *w, int keep_all, const int *last)
{
    const Program *p = w->p;
    for (int i = 0; i < p->nnode && !w->stopped; i++)
        if (!p->node[i].dead && is_leaf_input(&p->node[i]))
            allocate(w, &p->node[i], -1);
    for (int i = 0; i < p->nnode && !w->stopped; i++)
        if (!p->node[i].dead)
            evaluate(w, keep_all, last, i);
}

void exec_footprint(const Program *p, int keep_all, Footprint *f)
{
    memset(f, 0, sizeof *f);
    f->at = -1;
    f->largest = -1;
    int *last = exec_last_uses(p);
    size_t nlive = p->nnode > 0 ? (size_t)p->nnode : 1;
    Walk w = {.p = p, .f = f, .live = xcalloc(nlive, 1),
              .rank_held = xcalloc(p->nranks > 0 ? (size_t)p->nranks : 1, sizeof(double))};
    walk(&w, keep_all, last);
    f->kept = w.held;
    f->kept_values = w.nlive;
    if (w.peak_made > 0) {
        Walk again = {.p = p, .f = f, .live = w.live, .peak_made = w.peak_made, .replay = 1};
        memset(again.live, 0, nlive);
        walk(&again, keep_all, last);
        note_largest(&again);
    }
    free(last);
    free(w.rank_held);
    free(w.live);
}

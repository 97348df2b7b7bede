/* exec.c: the CPU reference executor, driving the evaluation of a graph.
 *
 * Every live node is evaluated in id order (ids are a topological order) on
 * all simulated ranks; the per-rank computations live in exec_ops.c, the
 * collectives in exec_comm.c and the values' buffers in buffers.c.  Values are doubles holding numbers
 * representable in the node's type.  An intermediate value is freed as soon
 * as its last live user has been evaluated, except inputs, scalars,
 * program outputs, O_UPDATE results, and everything when e->keep_all is set.
 * A pointwise node that is the last reader of an input of its own shape and
 * layout writes its value over that input's buffer (element i of the result
 * reads element i of the input): fewer buffers made and touched.
 * exec_footprint (footprint.c) follows the same liveness (exec_last_uses,
 * exec_may_free, exec_reusable_input) to tell the memory a run will hold.
 * An allocation that fails longjmps back here (e->on_oom): the run returns
 * -1, every value made so far still owned by e. */
#include <pthread.h>
#include <stdlib.h>

#include "cpu/cpu.h"

int exec_fill_inputs(Exec *e)
{
    Program *p = e->prog;
    jmp_buf jb;
    e->on_oom = e->recover ? &jb : NULL;
    if (setjmp(jb)) {
        e->on_oom = NULL;
        return -1;
    }
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (!n->dead && (n->op == O_INPUT || n->op == O_SCALAR))
            fill_input(e, n);
    }
    e->on_oom = NULL;
    return 0;
}

/* ---- evaluation ---- */

static void eval_const(Exec *e, const Node *n)
{
    for (int r = 0; r < e->prog->nranks; r++)
        exec_alloc(e, n->id, r, 1)[0] = type_round(n->type, n->value);
}

static void eval_on_ranks(Exec *e, const Node *n, void (*fn)(Exec *, const Node *, int))
{
    for (int r = 0; r < e->prog->nranks; r++)
        fn(e, n, r);
}

/* Ranks of a reduction node computed by up to nthreads
 * threads, rank r by thread r % nthreads: each rank writes only its own
 * value, so the result is the same whatever the thread count. (MatMul and
 * Conv2D use the threads inside each rank instead.) */
typedef struct {
    Exec *e;
    const Node *n;
    void (*fn)(Exec *, const Node *, int);
    int first, step;
} RankTask;

static void *rank_task(void *arg)
{
    RankTask *t = arg;
    for (int r = t->first; r < t->e->prog->nranks; r += t->step)
        t->fn(t->e, t->n, r);
    return NULL;
}

static void eval_on_ranks_parallel(Exec *e, const Node *n, void (*fn)(Exec *, const Node *, int))
{
    int nt = e->nthreads < e->prog->nranks ? e->nthreads : e->prog->nranks;
    if (nt <= 1 || local_count(e->prog, n, 0) < 65536) {
        eval_on_ranks(e, n, fn);
        return;
    }
    /* the values are made here, where a failure may end the run: fn
     * finds them of the right size and allocates nothing */
    for (int r = 0; r < e->prog->nranks; r++)
        exec_alloc(e, n->id, r, local_count(e->prog, n, r));
    RankTask *task = xcalloc((size_t)nt, sizeof *task);
    pthread_t *tid = xcalloc((size_t)nt, sizeof *tid);
    int *started = xcalloc((size_t)nt, sizeof *started);
    for (int t = 0; t < nt; t++) {
        task[t] = (RankTask){e, n, fn, t, nt};
        started[t] = t > 0 && pthread_create(&tid[t], NULL, rank_task, &task[t]) == 0;
    }
    rank_task(&task[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            rank_task(&task[t]); /* no thread: do its ranks here */
    }
    free(task);
    free(tid);
    free(started);
}

static void eval_node(Exec *e, const Node *n)
{
    if (n->op == O_MEMBER_NORM) { /* a fold across the ranks of a Sliced x */
        eval_member_norm(e, n);
        return;
    }
    switch (op_info(n->op)->kind) {
    case K_LEAF:
        if (n->op == O_CONST)
            eval_const(e, n);
        break; /* inputs and scalars are filled beforehand */
    case K_UNARY:
    case K_BINARY:
    case K_TERNARY: eval_on_ranks(e, n, eval_pointwise); break; /* threads inside */
    case K_LAYER:
        if (n->op == O_MATMUL)
            eval_on_ranks(e, n, eval_matmul);
        else if (n->op == O_CONV2D)
            eval_on_ranks(e, n, eval_conv2d);
        else
            BUG("unknown layer op %d", (int)n->op);
        break;
    case K_REDUCTION: eval_on_ranks_parallel(e, n, eval_reduction); break;
    case K_UPDATE: eval_on_ranks(e, n, eval_pointwise); break; /* see exec_ops.c */
    case K_COMM: eval_comm(e, n); break;
    default: BUG("bad op kind for %s", n->name ? n->name : "?");
    }
}

/* is_output() is in src/core/graph.c */
int exec_may_free(const Program *p, int keep_all, const Node *n)
{
    if (keep_all || n->op == O_INPUT || n->op == O_SCALAR || n->op == O_UPDATE)
        return 0;
    /* the gather of a sliced Update is the tensor's new value */
    if (n->op == O_ALLGATHER && p->node[n->in[0]].op == O_UPDATE)
        return 0;
    return !is_output(p, n->id);
}

static int may_free(const Exec *e, const Node *n)
{
    return exec_may_free(e->prog, e->keep_all, n);
}

/* last_use[i]: the largest id of a live node reading i, or i itself. */
int *exec_last_uses(const Program *p)
{
    int *last = xmalloc((size_t)(p->nnode > 0 ? p->nnode : 1) * sizeof *last);
    for (int i = 0; i < p->nnode; i++)
        last[i] = i;
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->nin; k++) {
            ASSERT(n->in[k] >= 0 && n->in[k] < i);
            last[n->in[k]] = i;
        }
    }
    return last;
}

/* Free every value whose last use is node i (node i itself included). */
static void release_after(Exec *e, const int *last, int i)
{
    const Program *p = e->prog;
    const Node *n = &p->node[i];
    for (int k = 0; k <= n->nin; k++) {
        int id = k < n->nin ? n->in[k] : i;
        if (last[id] == i && may_free(e, &p->node[id]))
            exec_release(e, id);
    }
}

/* An input of pointwise node n whose buffers n may write its value over
 * (n is its last reader, it may be freed, and it has n's shape and layout,
 * so that element i of n reads element i of it), or -1. */
int exec_reusable_input(const Program *p, int keep_all, const int *last, const Node *n)
{
    if (!op_info(n->op)->elementwise)
        return -1;
    for (int i = 0; i < n->nin; i++) {
        const Node *x = &p->node[n->in[i]];
        if (last[x->id] == n->id && exec_may_free(p, keep_all, x) && same_place(x, n))
            return x->id;
    }
    return -1;
}

/* Node n's value will be written over input x's buffers: n's slots get
 * them (x's still name them until n is evaluated; exec_alloc keeps them). */
static void lend_buffers(Exec *e, int x, int n)
{
    for (int r = 0; r < e->prog->nranks; r++) {
        size_t kx = (size_t)x * (size_t)e->prog->nranks + (size_t)r;
        size_t kn = (size_t)n * (size_t)e->prog->nranks + (size_t)r;
        ASSERT(e->count[kx] == local_count(e->prog, &e->prog->node[n], r));
        exec_drop(e, n, r);
        e->val[kn] = e->val[kx];
        e->count[kn] = e->count[kx];
    }
}

/* After n's evaluation: x no longer owns the buffers it lent. */
static void forget_buffers(Exec *e, int x)
{
    for (int r = 0; r < e->prog->nranks; r++) {
        size_t k = (size_t)x * (size_t)e->prog->nranks + (size_t)r;
        e->val[k] = NULL;
        e->count[k] = 0;
    }
}

/* After a failed allocation: the lent buffers belong to the borrower
 * alone, scratch is freed. */
static int run_failed(Exec *e, int *last, int lent)
{
    if (lent >= 0)
        forget_buffers(e, lent);
    exec_scratch_free_all(e);
    free(last);
    e->on_oom = NULL;
    return -1;
}

int exec_run(Exec *e)
{
    Program *p = e->prog;
    int *last = exec_last_uses(p);
    volatile int lent = -1;
    jmp_buf jb;
    e->on_oom = e->recover ? &jb : NULL;
    if (setjmp(jb))
        return run_failed(e, last, lent);
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (n->dead)
            continue;
        ASSERT(n->id == i);
        int x = exec_reusable_input(p, e->keep_all, last, n);
        if (x >= 0)
            lend_buffers(e, x, i);
        lent = x;
        eval_node(e, n);
        lent = -1;
        if (x >= 0)
            forget_buffers(e, x);
        release_after(e, last, i);
    }
    free(last);
    e->on_oom = NULL;
    e->ran = 1;
    return 0;
}

/* knobs.c: the knob sets the autotuner crosses with each variant, and
 * which apply to which variant.
 *
 * The knobs are the fused collectives' (doc/gpu.md, "Fused-collective
 * knobs"), read by each rank's process from its environment when it starts
 * (rt/cuda_child.c, read_knobs): one launch of the ranks runs under one
 * knob set. The tuner explores COCONET_FUSED, the algorithm, whose choice
 * matters most; the rest (blocks, threads, vectors...) keep the runtime's
 * defaults, or whatever the user's environment sets for every launch.
 *
 *   a variant with no FusedAllReduce and no fused Send: default only (the
 *     knobs change nothing in it);
 *   with a FusedAllReduce, P > 1: twoshot, nccl, and oneshot and push where
 *     some FusedAllReduce of it can take them (the kernels' own rules,
 *     src/cuda/emit_lsa.c: one-shot needs no Dropout, no cross-rank
 *     reduction and no tensor operand as large as the reduced one; push
 *     needs contiguous operands or no cross-rank reduction). `default` (auto)
 *     is not a set of its own: it picks one of these by size;
 *   with fused Sends only, P > 1: default (peers' memory) and nccl;
 *   P = 1: default only. One rank's fused kernels are one instance whatever
 *     the algorithm (doc/gpu.md), and nccl is a copy. */
#define _DEFAULT_SOURCE /* setenv */
#include "tune/tune.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[NKNOB] = {"default", "oneshot", "twoshot", "push", "nccl"};
static const char *const envs[NKNOB] = {"", "COCONET_FUSED=oneshot", "COCONET_FUSED=twoshot",
                                        "COCONET_FUSED=push", "COCONET_FUSED=nccl"};

const char *knob_name(int k)
{
    return k >= 0 && k < NKNOB ? names[k] : "?";
}

const char *knob_env(int k)
{
    return k >= 0 && k < NKNOB ? envs[k] : "";
}

int knob_parse(const char *name)
{
    for (int k = 0; k < NKNOB; k++)
        if (!strcmp(name, names[k]))
            return k;
    return -1;
}

void knob_setenv(int k)
{
    if (k == KNOB_DEFAULT)
        unsetenv("COCONET_FUSED");
    else
        setenv("COCONET_FUSED", names[k], 1);
}

/* ---- what a variant's fusions allow ---- */

static int is_member(const Program *p, const Node *n, int f)
{
    return !n->dead && n->fusion == f;
}

/* The ReduceScatter of fusion f, or NULL */
static const Node *fusion_rs(const Program *p, int f)
{
    for (int i = 0; i < p->nnode; i++)
        if (is_member(p, &p->node[i], f) && p->node[i].op == O_REDUCESCATTER)
            return &p->node[i];
    return NULL;
}

static int cross_rank_reduction(const Node *n)
{
    return n->op == O_NORM || n->op == O_REDUCE_TENSOR || n->op == O_PARTIAL_REDUCE;
}

/* One-shot: no Dropout, no cross-rank reduction, and every tensor operand
 * from outside the fusion (but the reduced one) of fewer dimensions than it */
static int oneshot_allowed(const Program *p, int f)
{
    const Node *rs = fusion_rs(p, f);
    if (!rs)
        return 0;
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (!is_member(p, n, f))
            continue;
        if (n->op == O_DROPOUT || cross_rank_reduction(n))
            return 0;
        for (int k = 0; k < n->nin; k++) {
            const Node *x = &p->node[n->in[k]];
            if (x->fusion != f && x->op != O_SCALAR && x->op != O_CONST && x->id != rs->in[0] &&
                x->ndim >= rs->ndim)
                return 0;
        }
    }
    return 1;
}

/* Push: contiguous operands, or no cross-rank reduction */
static int push_allowed(const Program *p, int f)
{
    int red = 0, scattered = 0;
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (!is_member(p, n, f))
            continue;
        red |= cross_rank_reduction(n);
        for (int k = 0; k < n->nin; k++)
            scattered |= p->node[n->in[k]].nmember > 0;
    }
    return !red || !scattered;
}

typedef struct {
    int allreduce, send, oneshot, push;
} Fused;

static Fused fused_of(const Program *v)
{
    Fused u = {0, 0, 0, 0};
    for (int f = 0; f < v->nfusion; f++) {
        if (v->fusion[f].dead)
            continue;
        int live = 0;
        for (int i = 0; i < v->nnode && !live; i++)
            live = is_member(v, &v->node[i], f);
        if (!live)
            continue;
        if (v->fusion[f].kind == F_ALLREDUCE) {
            u.allreduce = 1;
            u.oneshot |= oneshot_allowed(v, f);
            u.push |= push_allowed(v, f);
        } else if (v->fusion[f].kind == F_SEND) {
            u.send = 1;
        }
    }
    return u;
}

int knob_sets(const Program *v, int *sets)
{
    Fused u = fused_of(v);
    int n = 0;
    if (v->nranks == 1 || (!u.allreduce && !u.send)) {
        sets[n++] = KNOB_DEFAULT;
        return n;
    }
    if (!u.allreduce) {
        sets[n++] = KNOB_DEFAULT;
        sets[n++] = KNOB_NCCL;
        return n;
    }
    if (u.oneshot)
        sets[n++] = KNOB_ONESHOT;
    sets[n++] = KNOB_TWOSHOT;
    if (u.push)
        sets[n++] = KNOB_PUSH;
    sets[n++] = KNOB_NCCL;
    return n;
}

int knob_runs_in(const Program *v, int k, int launch)
{
    if (k == launch)
        return 1;
    if (k != KNOB_DEFAULT)
        return 0;
    Fused u = fused_of(v);
    if (v->nranks == 1 || (!u.allreduce && !u.send))
        return 1;             /* the knobs change nothing in it */
    return !u.allreduce && launch != KNOB_NCCL; /* fused Sends: every algorithm but nccl
                                                   takes the peers' memory */
}

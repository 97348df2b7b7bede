/* knobs.c: the knob sets the autotuner crosses with each variant, and
 * which apply to which variant.
 *
 * The knobs are the runtime's (doc/gpu.md, "Fused-collective knobs"). A
 * rank reads them from its environment when it starts, as the default of
 * every variant it runs; a variant may carry its own (CocoRtVariant,
 * include/coconet_rt.h), for its runs alone, which is how the tuner times
 * every knob set of every variant of a size point in one launch of the
 * ranks. A set changes one knob: the fused collectives' algorithm
 * (COCONET_FUSED's values), or the chunks of an overlapped MatMul
 * (COCONET_OVERLAP_CHUNKS'); the other keeps its default.
 * The rest (blocks, threads, vectors, SMs...) keep the runtime's defaults,
 * or what the user's environment sets for every launch.
 *
 * A variant is judged as the CUDA backend runs it: after
 * lower_collectives (src/cuda), which makes FP16 AllReduces and those over
 * scattered tensors FusedAllReduces (the callers pass that form).
 *   no FusedAllReduce and no fused Send: default only (the algorithms
 *     change nothing in it);
 *   a FusedAllReduce, P > 1: twoshot, nccl, and oneshot and push where some
 *     FusedAllReduce of it can take them (the kernels' own rules,
 *     src/gen/emit_lsa.c: one-shot needs no Dropout, no cross-rank
 *     reduction and no tensor operand as large as the reduced one; push
 *     needs contiguous operands or no cross-rank reduction).
 *     `default` (auto) is not a set of its own: it picks one of the
 *     algorithms by size (the tuner times the program under it too, as the
 *     baseline: search.c);
 *   fused Sends only, P > 1: default (the peers' memory) and nccl;
 *   P = 1: default, and twoshot where some FusedAllReduce of it is one
 *     kernel over contiguous operands (no cross-rank reduction, no
 *     scattered operand) with a computation besides its ReduceScatter and
 *     AllGathers (a bare one is a copy or no kernel on one rank): default
 *     runs it as its elementwise form, an algorithm asked for as the fused
 *     kernel's one-rank instance (doc/gpu.md, "One rank"; each is the
 *     faster on some programs). One rank's fused
 *     kernels are one instance whatever the algorithm, so twoshot stands for
 *     them all; nccl is a copy.
 * And at P > 1, beside those, chunks1 (no chunks: in order) and chunks4
 * where an overlap runs a MatMul in chunks: with a FusedAllReduce
 * (src/gen/emit_overlap.c; `default` chunks by the MatMul's FLOPs per
 * collective byte and rows, 1 or 4: include/coconet_cuda.h), or with an
 * AllGather or a ReduceScatter by the collective's blocks
 * (src/gen/emit_overlap_blocks.c; `default` one chunk a rank's block,
 * chunks4 four). */
#define _DEFAULT_SOURCE /* setenv */
#include "tune/tune.h"

#include "coconet_cuda.h" /* COCO_FUSED_ALGOS */

#include <stdlib.h>
#include <string.h>

/* Each set: its name and environment (NULL: its algorithm's spelling and
 * COCONET_FUSED=spelling), the algorithm it asks (COCO_FUSED_*) and the
 * overlap's chunks (0: the default) */
typedef struct {
    const char *name, *env;
    int algo, chunks;
} KnobSet;

static const KnobSet knob_table[NKNOB] = {
    [KNOB_DEFAULT] = {"default", "", COCO_FUSED_AUTO, 0},
    [KNOB_ONESHOT] = {NULL, NULL, COCO_FUSED_ONESHOT, 0},
    [KNOB_TWOSHOT] = {NULL, NULL, COCO_FUSED_TWOSHOT, 0},
    [KNOB_PUSH] = {NULL, NULL, COCO_FUSED_PUSH, 0},
    [KNOB_NCCL] = {NULL, NULL, COCO_FUSED_NCCL, 0},
    [KNOB_CHUNKS1] = {"chunks1", "COCONET_OVERLAP_CHUNKS=1", COCO_FUSED_AUTO, 1},
    [KNOB_CHUNKS4] = {"chunks4", "COCONET_OVERLAP_CHUNKS=4", COCO_FUSED_AUTO, 4},
};

#define FUSED_ENV(name, spelling) "COCONET_FUSED=" spelling,
static const char *const algo_names[] = {COCO_FUSED_ALGOS(COCO_FUSED_SPELLING)};
static const char *const algo_envs[] = {COCO_FUSED_ALGOS(FUSED_ENV)};

const char *knob_name(int k)
{
    if (k < 0 || k >= NKNOB)
        return "?";
    return knob_table[k].name ? knob_table[k].name : algo_names[knob_table[k].algo];
}

const char *knob_env(int k)
{
    if (k < 0 || k >= NKNOB)
        return "";
    return knob_table[k].env ? knob_table[k].env : algo_envs[knob_table[k].algo];
}

int knob_parse(const char *name)
{
    for (int k = 0; k < NKNOB; k++)
        if (!strcmp(name, knob_name(k)))
            return k;
    return -1;
}

int knob_chunks(int k)
{
    return k == KNOB_CHUNKS4 ? 4 : 1;
}

void knob_values(int k, int *fused_algo, int *overlap_chunks)
{
    const KnobSet *set = &knob_table[k >= 0 && k < NKNOB ? k : KNOB_DEFAULT];
    *fused_algo = set->algo;
    *overlap_chunks = set->chunks;
}

void knob_clear_env(void)
{
    unsetenv("COCONET_FUSED");
    unsetenv("COCONET_OVERLAP_CHUNKS");
    unsetenv("COCONET_ONE_RANK_FUSED"); /* at P = 1 `default` is the elementwise form */
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

enum { CROSS_RANK_REDUCTION = 1, SCATTERED_OPERAND = 2 };

/* What fusion f holds of CROSS_RANK_REDUCTION and SCATTERED_OPERAND */
static int fusion_kind(const Program *p, int f)
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
    return (red ? CROSS_RANK_REDUCTION : 0) | (scattered ? SCATTERED_OPERAND : 0);
}

/* Push: contiguous operands, or no cross-rank reduction */
static int push_allowed(const Program *p, int f)
{
    return fusion_kind(p, f) != (CROSS_RANK_REDUCTION | SCATTERED_OPERAND);
}

/* Does fusion f compute something besides its ReduceScatter and
 * AllGathers? (On one rank a bare one is a copy, or no kernel.) */
static int computes(const Program *p, int f)
{
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (is_member(p, n, f) && n->op != O_REDUCESCATTER && n->op != O_ALLGATHER)
            return 1;
    }
    return 0;
}

/* The one-rank elementwise form, which differs from the fused kernel's
 * one-rank instance in how it runs a computation: one kernel over
 * contiguous operands that computes something */
static int one_rank_form(const Program *p, int f)
{
    return fusion_kind(p, f) == 0 && computes(p, f);
}

static int live_fusion(const Program *p, int f)
{
    if (p->fusion[f].dead)
        return 0;
    for (int i = 0; i < p->nnode; i++)
        if (is_member(p, &p->node[i], f))
            return 1;
    return 0;
}

/* Does overlap o of v overlap a MatMul with the FusedAllReduce right after
 * it (what src/gen/emit_overlap.c chunks)? */
static int fused_overlap(const Program *v, int o)
{
    for (int i = 1; i < v->overlap[o].nitem; i++) {
        Ref a = v->overlap[o].item[i - 1], b = v->overlap[o].item[i];
        if (!REF_IS_FUSION(a) && REF_IS_FUSION(b) && v->node[a].op == O_MATMUL &&
            !v->node[a].dead && v->fusion[REF_FUSION_INDEX(b)].kind == F_ALLREDUCE &&
            live_fusion(v, REF_FUSION_INDEX(b)))
            return 1;
    }
    return 0;
}

int knob_block_overlap(const Program *v, int o)
{
    for (int i = 1; i < v->overlap[o].nitem; i++)
        if (overlap_block_pair(v, v->overlap[o].item[i - 1], v->overlap[o].item[i]))
            return 1;
    return 0;
}

int knob_chunked_overlap(const Program *v, int o)
{
    return fused_overlap(v, o) || knob_block_overlap(v, o);
}

typedef struct {
    int allreduce, send, oneshot, push, chunks, form;
} Fused;

static Fused fused_of(const Program *v)
{
    Fused u = {0, 0, 0, 0, 0, 0};
    for (int f = 0; f < v->nfusion; f++) {
        if (!live_fusion(v, f))
            continue;
        if (v->fusion[f].kind == F_ALLREDUCE) {
            u.allreduce = 1;
            u.oneshot |= oneshot_allowed(v, f);
            u.push |= push_allowed(v, f);
            u.form |= one_rank_form(v, f);
        } else if (v->fusion[f].kind == F_SEND) {
            u.send = 1;
        }
    }
    for (int o = 0; o < v->noverlap; o++)
        u.chunks |= knob_chunked_overlap(v, o);
    return u;
}

int knob_sets(const Program *v, int *sets)
{
    Fused u = fused_of(v);
    int n = 0;
    if (v->nranks == 1 || (!u.allreduce && !u.send)) {
        sets[n++] = KNOB_DEFAULT;
        if (v->nranks == 1 && u.form)
            sets[n++] = KNOB_TWOSHOT;
    } else if (!u.allreduce) {
        sets[n++] = KNOB_DEFAULT;
        sets[n++] = KNOB_NCCL;
    } else {
        if (u.oneshot)
            sets[n++] = KNOB_ONESHOT;
        sets[n++] = KNOB_TWOSHOT;
        if (u.push)
            sets[n++] = KNOB_PUSH;
        sets[n++] = KNOB_NCCL;
    }
    if (v->nranks > 1 && u.chunks) {
        sets[n++] = KNOB_CHUNKS1;
        sets[n++] = KNOB_CHUNKS4;
    }
    return n;
}

/* cost.c: the autotuner's cost model: a variant's predicted time on the
 * machine's measured limits, to order the candidates and prune those far
 * slower than the best measured (search.c). It only has to rank well; the
 * search calibrates it against the times it measures.
 *
 * A variant is a sequence of steps, each one kernel or library call: a
 * fusion (one step, two when it holds a cross-rank reduction), or a live
 * node that is not an input, a Scalar, a constant, an Update (stored by the
 * step computing its value; an Update's target is not read) or a value without dimensions (computed with
 * the kernels that read it). Per rank, a step
 *   reads  each operand from outside it once (the rank's part, in its
 *          element type; Scalars and constants are free; an operand only
 *          sliced inside the step counts its slice),
 *   writes each value it computes that a node outside it reads, or that is
 *          an output or an Updated input's new value (an Update whose value
 *          is gathered stores nothing of its own: the AllGather writes),
 *   sends  what its collectives send (roofline_link, src/front/roofline.c),
 *   and does the GEMM FLOPs of its MatMuls and Conv2Ds (elementwise FLOPs
 *   are not counted: they hide under the memory traffic).
 * A FusedAllReduce under the knob sets (knobs.c): twoshot and default as
 * counted; oneshot sends (P-1) times its reduced input instead, with one
 * barrier; push reads its staging buffer (the reduced input) once more;
 * nccl is three calls (ReduceScatter, kernel, AllGather) whose
 * intermediate slice is written and read back.
 * The step's time is its slowest of memory / copy bandwidth, link / peer
 * bandwidth, GEMM FLOPs / GEMM rate, plus its latencies: a kernel launch
 * LAUNCH_US, an NCCL call NCCL_US (at P > 1), a barrier of the fused kernels
 * BARRIER_US. The steps of an overlap of a MatMul and a FusedAllReduce
 * run in chunks (src/gen/emit_overlap.c: 4 under chunks4; under the other
 * kernel knob sets the runtime's default for the MatMul's shape,
 * coco_overlap_default_chunks of include/coconet_cuda.h; none under
 * chunks1 and nccl), and so do those of a MatMul and an AllGather or a
 * ReduceScatter run by the collective's blocks (src/gen/emit_overlap_blocks.c:
 * P chunks, one a rank's block, 4 P under chunks4, none under chunks1 and by
 * default on one rank): they take the slowest of their bandwidth times and their
 * latencies once a chunk; every other overlap runs in order. The
 * variant's time: the sum of its steps on the slowest rank. A variant is costed as the backend
 * runs it (lower_collectives applied: the callers pass that form). */
#include "tune/tune.h"

#include "coconet_cuda.h" /* coco_overlap_default_chunks, coco_overlap_block_count */

#include <stdlib.h>
#include <string.h>

#define LAUNCH_US 4.0
#define NCCL_US 12.0
#define BARRIER_US 3.0

void tune_limits_default(TuneLimits *l)
{
    /* about an H100 SXM's (doc/gpu.md's roofline example), used until a
     * timed launch reports the measured ones */
    l->copy_gbs = 3000;
    l->peer_gbs = 350;
    l->gemm_tflops = 800;
    l->known = 0;
}

static double part_bytes(const Program *p, const Node *n, int rank)
{
    return (double)local_count(p, n, rank) * (double)type_size(n->type);
}

static int free_value(const Node *n)
{
    return n->op == O_SCALAR || n->op == O_CONST || n->ndim == 0;
}

/* Is node n a step of its own (outside any fusion)? */
static int single_step(const Node *n)
{
    return !n->dead && n->fusion < 0 && n->op != O_INPUT && n->op != O_SCALAR &&
           n->op != O_CONST && n->op != O_UPDATE && n->ndim > 0;
}

/* Is node id inside the step (fusion f, or the single node `one`)? */
static int inside(const Program *p, int id, int f, int one)
{
    return f >= 0 ? p->node[id].fusion == f && !p->node[id].dead : id == one;
}

/* Does a live node outside the step read id, or is id an output? */
static int escapes(const Program *p, int id, int f, int one)
{
    if (is_output(p, id))
        return 1;
    for (int i = 0; i < p->nnode; i++) {
        const Node *u = &p->node[i];
        if (u->dead || inside(p, i, f, one))
            continue;
        for (int k = 0; k < u->nin; k++)
            if (u->in[k] == id)
                return 1;
    }
    return 0;
}

/* Is node id an Updated input's new value (written into its buffer)? */
static int new_value(const Program *p, int id)
{
    for (int i = 0; i < p->nexec_in; i++)
        if (p->node[p->exec_in[i]].op == O_INPUT && p->node[p->exec_in[i]].updated_by == id)
            return 1;
    return 0;
}

/* The bytes the step reads of operand x: its slice when every reader of x
 * in the step is a Slice, else its part */
static double operand_bytes(const Program *p, const Node *x, int f, int one, int rank)
{
    double sliced = 0;
    for (int i = 0; i < p->nnode; i++) {
        const Node *u = &p->node[i];
        if (!inside(p, i, f, one))
            continue;
        for (int k = u->op == O_UPDATE; k < u->nin; k++) {
            if (u->in[k] != x->id)
                continue;
            if (u->op != O_SLICE)
                return part_bytes(p, x, rank);
            sliced += part_bytes(p, u, rank);
        }
    }
    return sliced;
}

typedef struct {
    double mem, link, gemm; /* bytes, bytes, FLOPs */
    int launches, nccl, barriers;
    double reduced;         /* a FusedAllReduce's reduced input, on this rank */
    double rs_out;          /* its ReduceScatter's output */
    int cross;              /* it holds a cross-rank reduction */
} Step;

static void step_count(const Program *p, int f, int one, int rank, Step *s)
{
    memset(s, 0, sizeof *s);
    char *seen = xcalloc((size_t)p->nnode, 1);
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        if (!inside(p, i, f, one))
            continue;
        for (int k = n->op == O_UPDATE; k < n->nin; k++) { /* an Update's target: not read */
            const Node *x = &p->node[n->in[k]];
            if (inside(p, x->id, f, one) || free_value(x) || seen[x->id])
                continue;
            seen[x->id] = 1;
            s->mem += operand_bytes(p, x, f, one, rank);
        }
        if (n->op == O_UPDATE ? p->node[n->target].updated_by == i
                              : escapes(p, i, f, one) || new_value(p, i))
            s->mem += part_bytes(p, n, rank);
        if (op_is_comm(n->op))
            s->link += roofline_link(p, n, rank);
        if (n->op == O_MATMUL || n->op == O_CONV2D)
            s->gemm += roofline_flops(p, n, rank);
        if (n->op == O_REDUCESCATTER) {
            s->reduced += part_bytes(p, &p->node[n->in[0]], rank);
            s->rs_out += part_bytes(p, n, rank);
        }
        s->cross |= n->op == O_NORM || n->op == O_REDUCE_TENSOR || n->op == O_PARTIAL_REDUCE;
    }
    free(seen);
}

/* A FusedAllReduce's step under knob set k */
static void fused_allreduce(const Program *p, int k, Step *s)
{
    long P = p->nranks;
    s->launches = s->cross ? 2 : 1;
    s->barriers = s->cross ? 3 : 2;
    if (P == 1)
        return;
    if (k == KNOB_ONESHOT) {
        s->link = (double)(P - 1) * s->reduced;
        s->barriers = 1;
    } else if (k == KNOB_PUSH) {
        s->mem += s->reduced;
    } else if (k == KNOB_NCCL) {
        s->launches += 2;
        s->nccl = 2;
        s->barriers = 0;
        s->mem += 2 * s->rs_out;
    }
}

static void add_step(TuneCost *c, const Step *s)
{
    c->mem_bytes += s->mem;
    c->link_bytes += s->link;
    c->gemm_flops += s->gemm;
    c->launches += s->launches;
    c->nccl_calls += s->nccl;
    c->barriers += s->barriers;
}

/* One step as a cost, its kind's launches and calls set */
static void one_step(const Program *p, int f, int one, int k, int rank, Step *s)
{
    step_count(p, f, one, rank, s);
    if (f >= 0 && p->fusion[f].kind == F_ALLREDUCE) {
        fused_allreduce(p, k, s);
    } else if (f >= 0 && p->fusion[f].kind == F_SEND) {
        s->launches = 1;
        s->barriers = p->nranks > 1 && k != KNOB_NCCL ? 1 : 0;
        s->nccl = p->nranks > 1 && k == KNOB_NCCL ? 1 : 0;
        s->launches += s->nccl;
    } else {
        s->launches = 1;
        s->nccl = one >= 0 && op_is_comm(p->node[one].op) ? 1 : 0;
    }
}

static int live_fusion(const Program *p, int f)
{
    if (p->fusion[f].dead)
        return 0;
    for (int i = 0; i < p->nnode; i++)
        if (!p->node[i].dead && p->node[i].fusion == f)
            return 1;
    return 0;
}

void tune_cost(const Program *v, int k, int rank, TuneCost *c)
{
    memset(c, 0, sizeof *c);
    Step s;
    for (int f = 0; f < v->nfusion; f++)
        if (live_fusion(v, f)) {
            one_step(v, f, -1, k, rank, &s);
            add_step(c, &s);
        }
    for (int i = 0; i < v->nnode; i++)
        if (single_step(&v->node[i])) {
            one_step(v, -1, i, k, rank, &s);
            add_step(c, &s);
        }
}

static double larger(double a, double b)
{
    return a > b ? a : b;
}

/* The bandwidth time of a cost, in ms */
static double bandwidth_ms(const TuneCost *c, int nranks, const TuneLimits *l)
{
    double mem = c->mem_bytes / (l->copy_gbs * 1e9);
    double link = nranks > 1 && l->peer_gbs > 0 ? c->link_bytes / (l->peer_gbs * 1e9) : 0;
    double gemm = c->gemm_flops / (l->gemm_tflops * 1e12);
    return larger(mem, larger(link, gemm)) * 1e3;
}

static double latency_ms(const TuneCost *c, int nranks)
{
    return (c->launches * LAUNCH_US + (nranks > 1 ? c->nccl_calls * NCCL_US : 0) +
            c->barriers * BARRIER_US) * 1e-3;
}

double tune_cost_ms(const TuneCost *c, int nranks, const TuneLimits *l)
{
    return bandwidth_ms(c, nranks, l) + latency_ms(c, nranks);
}

/* The overlap holding a step (fusion f or node one), or -1 */
static int overlap_of(const Program *p, int f, int one)
{
    Ref r = f >= 0 ? REF_FUSION(f) : one;
    for (int o = 0; o < p->noverlap; o++)
        for (int i = 0; i < p->overlap[o].nitem; i++)
            if (p->overlap[o].item[i] == r)
                return o;
    return -1;
}

/* The runtime's default chunks of overlap o on `rank` (its MatMul's rows M,
 * columns N and depth K there: coco_overlap_chunks,
 * rt/kernels/coco_overlap.cuh); 1 where its rows do not part evenly over
 * the ranks. */
static int default_chunks(const Program *v, int o, int rank)
{
    for (int i = 0; i < v->overlap[o].nitem; i++) {
        Ref r = v->overlap[o].item[i];
        if (REF_IS_FUSION(r) || v->node[r].op != O_MATMUL)
            continue;
        const Node *mm = &v->node[r], *a = &v->node[mm->in[0]], *b = &v->node[mm->in[1]];
        long shape[MAXDIM], offset[MAXDIM];
        local_shape(v, a, rank, shape, offset);
        long K = a->ndim ? shape[a->ndim - 1] : 0, M = K ? local_count(v, a, rank) / K : 0;
        local_shape(v, b, rank, shape, offset);
        long N = b->ndim == 2 ? shape[1] : 0;
        if (M <= 0 || N <= 0 || M % v->nranks)
            return 1;
        return (int)coco_overlap_default_chunks(M, N, K, v->nranks, (long)type_size(mm->type));
    }
    return 1;
}

/* The chunks of an overlap by a collective's blocks under knob set k, all
 * blocks' (coco_overlap_block_count, include/coconet_cuda.h, for blocks of
 * many rows): P, one a block, by default (1, in order, on one rank); 4 P
 * under chunks4; 1 under chunks1. The fused collectives' algorithms leave
 * it as it is. */
static int block_chunks(const Program *v, int k)
{
    long knob = k == KNOB_CHUNKS1 || k == KNOB_CHUNKS4 ? knob_chunks(k) : 0;
    int sub = coco_overlap_block_count(knob, v->nranks, 1L << 40, 1, 1);
    return sub ? v->nranks * sub : 1;
}

/* The chunks overlap o runs in under knob set k (1: in order) */
static int overlap_chunks(const Program *v, int o, int k, int rank)
{
    if (o >= 0 && knob_block_overlap(v, o))
        return block_chunks(v, k);
    if (o < 0 || !knob_chunked_overlap(v, o) || k == KNOB_CHUNKS1 || k == KNOB_NCCL)
        return 1;
    return k == KNOB_CHUNKS4 ? knob_chunks(k) : default_chunks(v, o, rank);
}

/* One rank's time: steps summed; those of a chunked overlap by their
 * slowest, plus each chunk's launches and barrier */
static double rank_ms(const Program *v, int k, int rank, const TuneLimits *l)
{
    double total = 0, *over = xcalloc((size_t)v->noverlap + 1, sizeof *over);
    int n = v->nfusion + v->nnode;
    for (int i = 0; i < n; i++) {
        int f = i < v->nfusion ? i : -1, one = i < v->nfusion ? -1 : i - v->nfusion;
        if (f >= 0 ? !live_fusion(v, f) : !single_step(&v->node[one]))
            continue;
        Step s;
        one_step(v, f, one, k, rank, &s);
        TuneCost c;
        memset(&c, 0, sizeof c);
        add_step(&c, &s);
        int o = overlap_of(v, f, one), chunks = overlap_chunks(v, o, k, rank);
        if (chunks == 1)
            o = -1; /* in order, on one stream */
        total += latency_ms(&c, v->nranks) * (o >= 0 ? chunks : 1);
        if (o >= 0)
            over[o] = larger(over[o], bandwidth_ms(&c, v->nranks, l));
        else
            total += bandwidth_ms(&c, v->nranks, l);
    }
    for (int o = 0; o < v->noverlap; o++)
        total += over[o];
    free(over);
    return total;
}

double tune_predict_ms(const Program *v, int k, const TuneLimits *l)
{
    double most = 0;
    for (int rank = 0; rank < v->nranks; rank++)
        most = larger(most, rank_ms(v, k, rank, l));
    return most;
}

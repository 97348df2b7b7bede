/* xform_reorder.c: reorder(computations..., ag, [AGReorder]) moves AllGather
 * ag after the computations (named values, fused computations or a fused
 * Send) so that they run on slices:
 *   - ag's output is replaced by ag's Sliced input;
 *   - every other Replicated input spanning the sliced dimension r becomes
 *     Slice(r, d); a Local input cannot be sliced and is refused;
 *   - Update(t, e) becomes a sliced Update computing each rank's slice of t;
 *   - Norm / ReduceTensor over the sliced dimension become a PartialReduce
 *     of each rank's slice plus an AllReduce (and Sqrt for Norm); a 16-bit
 *     sum, product or Norm folds in FP32 and is cast back at the end;
 *   - MatMul, Conv2D and collectives other than Send cannot be sliced;
 *   - a new AllGather gathers each result still needed whole: program
 *     outputs, values read outside the reordered set, and Updated tensors.
 * Names given: one per computation argument (its sliced version), then one
 * per new AllGather (program outputs first, then in program order). */
#include "sched/sched.h"

#include <string.h>

typedef struct {
    const Xform *x;
    Program *p;
    int ag;       /* the AllGather moved */
    int nold;     /* nodes before the transformation */
    char *in_set; /* in_set[id]: id is reordered */
    int *map;     /* map[old]: its sliced version (or itself when kept) */
    int *fusion;  /* fusion[old]: new fusion its version joins, or -1 */
} Reorder;

static void add_set(Reorder *r, int id, int fusion)
{
    r->in_set[id] = 1;
    r->fusion[id] = fusion;
}

/* Finds the AllGather among the arguments and marks the reordered nodes. */
static void collect(Reorder *r, Ref *refs, int *newfus)
{
    const Xform *x = r->x;
    Program *p = r->p;
    r->ag = -1;
    int *ids = arena_alloc(p->arena, (size_t)p->nnode * sizeof(int));
    for (int i = 0; i < x->st->narg; i++) {
        Ref ref = refs[i];
        if (!REF_IS_FUSION(ref) && node_of(p, ref)->op == O_ALLGATHER &&
            node_of(p, ref)->fusion < 0) {
            if (r->ag >= 0)
                refuse(x, "it moves one AllGather, but %s and %s are both AllGathers",
                       value_desc(p, r->ag), value_desc(p, ref));
            r->ag = ref;
            continue;
        }
        int f = -1, n;
        if (REF_IS_FUSION(ref)) {
            FuseKind k = p->fusion[REF_FUSION_INDEX(ref)].kind;
            if (k == F_ALLREDUCE)
                refuse(x, "'%s' is a FusedAllReduce: only computations and Sends are reordered",
                       ref_name(p, ref));
            f = newfus[i] = fusion_new(p, ref_name(p, ref), k);
            n = ref_members(p, ref, ids, p->nnode);
        } else {
            if (node_of(p, ref)->fusion >= 0)
                refuse(x, "%s is inside fused operation '%s': reorder the fused operation",
                       value_desc(p, ref), p->fusion[node_of(p, ref)->fusion].name);
            n = statement_nodes(p, ref, ids, p->nnode);
        }
        for (int k = 0; k < n; k++)
            add_set(r, ids[k], f);
    }
    if (r->ag < 0)
        refuse(x, "none of its arguments is an AllGather to move");
}

static int sliceable(Program *p, const Node *n)
{
    OpKind k = op_info(n->op)->kind;
    return k == K_UNARY || k == K_BINARY || k == K_TERNARY || k == K_UPDATE || k == K_REDUCTION ||
           n->op == O_SEND || n->op == O_MATMUL;
}

/* A MatMul reading the gathered value runs on slices when the slices cut
 * the rows of its first operand or the columns of its second. */
static int matmul_sliceable(Reorder *r, const Node *n)
{
    Node *src = node_of(r->p, node_of(r->p, r->ag)->in[0]);
    int d = src->layout.dim;
    if (n->in[0] == r->ag && n->in[1] != r->ag)
        return d < src->ndim - 1;
    if (n->in[1] == r->ag && n->in[0] != r->ag)
        return d == src->ndim - 1;
    return 0;
}

static void check_set(Reorder *r)
{
    Program *p = r->p;
    int reads_ag = 0;
    for (int i = 0; i < r->nold; i++) {
        if (!r->in_set[i])
            continue;
        Node *n = node_of(p, i);
        if (n->op == O_MATMUL && !matmul_sliceable(r, n))
            refuse(r->x, "MatMul %s cannot run on slices of %s: it would contract the "
                   "sliced dimension", value_desc(p, i), value_desc(p, r->ag));
        if (!sliceable(p, n))
            refuse(r->x, "%s %s cannot run on slices", op_info(n->op)->name, value_desc(p, i));
        for (int k = 0; k < n->nin; k++)
            reads_ag |= n->in[k] == r->ag;
    }
    if (!reads_ag)
        refuse(r->x, "none of the computations reads %s", value_desc(p, r->ag));
}

/* Dimension d of n's output as a dimension of n's input, or the reverse:
 * the same, but for the last two of a Transpose. */
static int swapped_dim(const Node *n, int d)
{
    return n->op == O_TRANSPOSE && d >= n->ndim - 2 ? 2 * n->ndim - 3 - d : d;
}

/* The dimension of n's output that its sliced inputs (already mapped) cut. */
static int sliced_dim(Reorder *r, const Node *n, const int *in)
{
    if (op_info(n->op)->kind == K_REDUCTION) { /* the input's dimension */
        Node *y = node_of(r->p, in[0]);
        return y->layout.kind == L_SLICED ? y->layout.dim : -1;
    }
    for (int k = 0; k < n->nin; k++) {
        Node *y = node_of(r->p, in[k]);
        if (y->layout.kind == L_SLICED && !(n->op == O_UPDATE && k == 0))
            return swapped_dim(n, y->layout.dim + (n->ndim - y->ndim));
    }
    return -1;
}

/* For a computation reading no sliced value (such as m * beta1): the
 * dimension that lines up with the gathered one, or -1 for a single value. */
static int gathered_dim(Reorder *r, const Node *n)
{
    Node *src = node_of(r->p, node_of(r->p, r->ag)->in[0]);
    int sd = src->layout.dim, d = sd + (n->ndim - src->ndim);
    if (n->ndim == 0 || d < 0 || d >= n->ndim || n->dim[d].n != src->dim[sd].n)
        return -1;
    return d;
}

/* Slice(v, d) for an outside Replicated input that spans dimension d of
 * node user's output. (Nodes are addressed by id: making a node may move
 * them all.) */
static int slice_input(Reorder *r, int v, int d, int user, int fusion)
{
    Program *p = r->p;
    Node *y = node_of(p, v), *u = node_of(p, user);
    if (y->ndim == 0 || (y->layout.kind != L_REPLICATED && y->layout.kind != L_LOCAL))
        return v;
    int yd = d - (u->ndim - y->ndim);
    /* extent 1 broadcasts, unless the sliced dimension itself has extent 1
     * (then y spans it: slicing it keeps asSlice possible) */
    if (yd < 0 || (y->dim[yd].n == 1 && u->dim[d].n != 1))
        return v;
    if (y->layout.kind == L_LOCAL)
        refuse(r->x, "%s reads Local %s, which cannot be sliced", value_desc(p, user),
               value_desc(p, v));
    double seq = u->seq - 0.3;
    Node *s = node_new(p, O_SLICE, u->pos);
    s->nin = 1;
    s->in[0] = v;
    s->axis = yd;
    s->seq = seq;
    s->fusion = fusion;
    int sid = s->id;
    check_node(r->x, s);
    return sid;
}

/* A node op(a) at the position and with the type of node like. */
static int new_node(Reorder *r, Op op, int like, int a, int fusion, double seq)
{
    Pos pos = node_of(r->p, like)->pos;
    Type type = node_of(r->p, like)->type;
    Node *n = node_new(r->p, op, pos);
    n->nin = op_info(op)->nin;
    n->in[0] = a;
    n->seq = seq;
    n->fusion = fusion;
    n->type = type;
    return n->id;
}

/* Cast(a, to) at the position of node like */
static int new_cast(Reorder *r, int like, int a, Type to, int fusion, double seq)
{
    int c = new_node(r, O_CAST, like, a, fusion, seq);
    node_of(r->p, c)->to = to;
    check_node(r->x, node_of(r->p, c));
    return c;
}

/* Does reduction n fold in FP32 when sliced? A 16-bit sum, product or Norm:
 * in its own type each rank's partial and the AllReduce would each round
 * where the program rounds once (its double accumulator, doc/language.md
 * 8.6): at BF16 far outside the tolerance
 * (tests/fuzz/regressions/bf16_norm_sliced.coco).
 * A max or min is exact in any type. */
static int folds_wide(const Node *n)
{
    return (n->type == T_FP16 || n->type == T_BF16) &&
           (n->op == O_NORM || n->redop == R_SUM || n->redop == R_PROD);
}

/* Norm / ReduceTensor over the sliced dimension: partial + AllReduce (+ Sqrt),
 * the last of them named as the reduction was. */
static int rewrite_reduction(Reorder *r, int old, int xin, int fusion)
{
    Node n = *node_of(r->p, old); /* a copy: making nodes may move them */
    Node *x = node_of(r->p, xin);
    int over = n.axis < 0 || n.axis == x->layout.dim;
    if (!over)
        return -1;
    int wide = folds_wide(&n);
    if (wide)
        xin = new_cast(r, old, xin, T_FP32, fusion, n.seq - 0.3);
    int pr = new_node(r, O_PARTIAL_REDUCE, old, xin, fusion, n.seq - 0.2);
    node_of(r->p, pr)->redop = n.op == O_NORM ? R_SUMSQ : n.redop;
    node_of(r->p, pr)->axis = n.axis;
    node_of(r->p, pr)->keepdim = n.keepdim;
    check_node(r->x, node_of(r->p, pr));
    int ar = new_node(r, O_ALLREDUCE, old, pr, fusion, n.seq - 0.1);
    node_of(r->p, ar)->redop = n.op == O_NORM ? R_SUM : n.redop;
    check_node(r->x, node_of(r->p, ar));
    int last = ar;
    if (n.op == O_NORM) {
        last = new_node(r, O_SQRT, old, ar, fusion, n.seq - (wide ? 0.05 : 0));
        check_node(r->x, node_of(r->p, last));
    }
    if (wide)
        last = new_cast(r, old, last, n.type, fusion, n.seq);
    if (n.named) /* the same Replicated value: it keeps its name (an output read by name) */
        node_set_name(r->p, node_of(r->p, last), n.name);
    return last;
}

/* Makes the sliced version of node old. */
static void slice_node(Reorder *r, int old)
{
    Program *p = r->p;
    int in[MAXIN];
    Node n = *node_of(p, old); /* a copy: making nodes may move them */
    int fusion = r->fusion[old];
    for (int k = 0; k < n.nin; k++) {
        int v = n.in[k];
        in[k] = v == r->ag ? node_of(p, r->ag)->in[0] : r->in_set[v] ? r->map[v] : v;
    }
    int d = sliced_dim(r, &n, in);
    if (d < 0)
        d = gathered_dim(r, &n);
    if (d < 0) { /* a single value reading nothing sliced: it stays as it is */
        r->map[old] = old;
        return;
    }
    for (int k = 0; k < n.nin; k++)
        if (!(n.op == O_UPDATE && k == 0) && in[k] == n.in[k] && !r->in_set[n.in[k]])
            in[k] = slice_input(r, in[k], swapped_dim(&n, d), old, fusion);
    if (op_info(n.op)->kind == K_REDUCTION) {
        int rw = rewrite_reduction(r, old, in[0], fusion);
        if (rw >= 0) {
            r->map[old] = rw;
            return;
        }
    }
    Node *c = node_copy(p, old, n.seq);
    int cid = c->id;
    if (n.named) { /* the sliced version of a named value: sc_<name> */
        const char *sc = arena_printf(p->arena, "sc_%s", n.name);
        if (program_find(p, sc) < 0)
            node_set_name(p, c, sc);
        else
            c->name = sc;
    }
    memcpy(c->in, in, sizeof in);
    c->fusion = fusion;
    if (c->op == O_UPDATE)
        node_of(p, c->target)->updated_by = cid;
    check_node(r->x, c);
    r->map[old] = cid;
}

static int needs_gather(Reorder *r, int old)
{
    Program *p = r->p;
    if (r->map[old] == old || node_of(p, r->map[old])->layout.kind != L_SLICED)
        return 0;
    if (node_of(p, old)->op == O_UPDATE || is_output(p, old))
        return 1;
    for (int i = 0; i < r->nold; i++) {
        Node *u = node_of(p, i);
        if (u->dead || r->in_set[i])
            continue;
        for (int k = 0; k < u->nin; k++)
            if (u->in[k] == old)
                return 1;
    }
    return 0;
}

static int gather(Reorder *r, int old)
{
    Program *p = r->p;
    Node n = *node_of(p, old); /* a copy: making a node may move them */
    Node *g = node_new(p, O_ALLGATHER, n.pos);
    g->nin = 1;
    g->in[0] = r->map[old];
    g->seq = n.seq + 0.5;
    int gid = g->id;
    check_node(r->x, g);
    if (n.op == O_UPDATE)
        node_of(p, n.target)->updated_by = gid;
    return gid;
}

/* Gathers what is needed whole: outputs first, then in program order. */
static int make_gathers(Reorder *r, int *gathers)
{
    Program *p = r->p;
    int ng = 0;
    char *done = arena_alloc(p->arena, (size_t)r->nold);
    for (int i = 0; i < p->nexec_out; i++) {
        int o = p->exec_out[i];
        if (o < r->nold && r->in_set[o] && !done[o] && needs_gather(r, o)) {
            done[o] = 1;
            gathers[ng++] = o;
        }
    }
    for (int i = 0; i < r->nold; i++)
        if (r->in_set[i] && !done[i] && needs_gather(r, i))
            gathers[ng++] = i;
    return ng;
}

static void rewire(Reorder *r, const int *olds, const int *news, int n)
{
    Program *p = r->p;
    for (int i = 0; i < r->nold; i++)
        if (r->in_set[i] && r->map[i] != i)
            node_of(p, i)->dead = 1;
    for (int i = 0; i < n; i++)
        replace_uses(p, olds[i], news[i], -1);
    for (int i = 0; i < r->nold; i++)
        if (r->in_set[i] && r->map[i] != i)
            replace_uses(p, i, r->map[i], -1);
    for (int i = 0; i < r->nold; i++)
        if (r->in_set[i] && r->map[i] == i && r->fusion[i] >= 0)
            node_of(p, i)->fusion = r->fusion[i];
    int users[1];
    if (node_users(p, r->ag, users, 1) == 0 && !is_output(p, r->ag))
        node_of(p, r->ag)->dead = 1;
}

static void name_results(Reorder *r, Ref *refs, const int *newfus, const int *olds,
                         const int *gathers, int ng)
{
    const Xform *x = r->x;
    Program *p = r->p;
    int nargs = x->st->narg - 1, k = 0;
    const char *what = arena_printf(p->arena, "%d sliced computation%s and %d AllGather%s", nargs,
                                    nargs == 1 ? "" : "s", ng, ng == 1 ? "" : "s");
    xform_outs(x, nargs + ng, what);
    for (int i = 0; i < x->st->narg; i++) {
        if (refs[i] == r->ag)
            continue;
        if (REF_IS_FUSION(refs[i])) {
            p->fusion[REF_FUSION_INDEX(refs[i])].dead = 1;
            const char *old = p->fusion[REF_FUSION_INDEX(refs[i])].name;
            p->fusion[newfus[i]].name = "";
            xform_name(x, k++, REF_FUSION(newfus[i]), arena_printf(p->arena, "sc_%s", old));
        } else {
            xform_name(x, k++, r->map[refs[i]],
                       arena_printf(p->arena, "sc_%s", x->st->arg[i]));
        }
    }
    for (int i = 0; i < ng; i++)
        xform_name(x, k++, gathers[i],
                   arena_printf(p->arena, "ag_%s", node_of(p, olds[i])->name));
}

void xform_reorder(const Xform *x)
{
    Program *p = x->p;
    if (x->st->policy != P_NONE && x->st->policy != P_AG_REORDER)
        refuse(x, "unknown policy %s (reorder takes AGReorder)", policy_word(x->st->policy));
    if (x->st->narg < 2)
        refuse(x, "it needs an AllGather and the computations to move before it");
    Reorder r = {x, p, -1, p->nnode, NULL, NULL, NULL};
    r.in_set = arena_alloc(p->arena, (size_t)p->nnode);
    r.map = arena_alloc(p->arena, (size_t)p->nnode * sizeof(int));
    r.fusion = arena_alloc(p->arena, (size_t)p->nnode * sizeof(int));
    Ref *refs = arena_alloc(p->arena, (size_t)x->st->narg * sizeof(Ref));
    int *newfus = arena_alloc(p->arena, (size_t)x->st->narg * sizeof(int));
    int *gathers = arena_alloc(p->arena, (size_t)p->nnode * sizeof(int));
    int *news = arena_alloc(p->arena, (size_t)p->nnode * sizeof(int));
    for (int i = 0; i < x->st->narg; i++)
        refs[i] = xform_arg(x, i);
    collect(&r, refs, newfus);
    check_set(&r);
    for (int i = 0; i < r.nold; i++)
        if (r.in_set[i])
            slice_node(&r, i);
    int ng = make_gathers(&r, gathers);
    for (int i = 0; i < ng; i++)
        news[i] = gather(&r, gathers[i]);
    rewire(&r, gathers, news, ng);
    name_results(&r, refs, newfus, gathers, news, ng);
}

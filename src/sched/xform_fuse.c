/* xform_fuse.c: fuse.
 *
 * fuse(..., ComputationFuse): computations (values with their inline parts,
 *   or fused computations) become one operation.
 * fuse(..., AllReduceFuse | ARFuse): a ReduceScatter, the sliced
 *   computations on its result and the AllGathers of their results become
 *   one FusedAllReduce; computations on the paths between them are included
 *   even when not named, with the Slices and single values they read. What
 *   the ReduceScatter's statement computes inline before it stays outside.
 *   Update(t, AllGather(v)) among them (the RS-C-AG form written by hand)
 *   becomes the sliced Update(t, v) followed by the AllGather of t's new
 *   value, the graph reorder makes of an Update: the AllGather ends the
 *   fused operation.
 * fuse(..., SendFuse): computations and the Send of their result become one
 *   fused Send.
 * Valid only when dependencies are preserved: no value outside the fused
 *   set both reads from it and is read by it. (overlap: xform_overlap.c) */
#include "sched/sched.h"

#include <string.h>

typedef struct {
    const Xform *x;
    Program *p;
    char *in; /* in[id]: member */
    int n;    /* nodes when it started */
} Members;

static void add_ref(Members *m, Ref r)
{
    Program *p = m->p;
    int *ids = arena_alloc(p->arena, (size_t)p->nnode * sizeof(int));
    int c;
    if (REF_IS_FUSION(r)) {
        c = ref_members(p, r, ids, p->nnode);
    } else {
        Node *n = node_of(p, r);
        if (n->fusion >= 0)
            refuse(m->x, "%s is already part of fused operation '%s'", value_desc(p, r),
                   p->fusion[n->fusion].name);
        if (op_info(n->op)->kind == K_LEAF)
            refuse(m->x, "%s is an input, not an operation", value_desc(p, r));
        c = statement_nodes(p, r, ids, p->nnode);
    }
    for (int i = 0; i < c; i++)
        m->in[ids[i]] = 1;
}

/* What a ReduceScatter's statement writes inline before it (the expression
 * of its input, as the Cast in ReduceScatter("+", Cast(g, FP32), 0)) runs
 * before a FusedAllReduce, as it would written in a Var of its own: the
 * fused operation starts at the ReduceScatter. */
static void leave_out_inline_input(Members *m)
{
    Program *p = m->p;
    int *ids = arena_alloc(p->arena, (size_t)p->nnode * sizeof(int));
    for (int i = 0; i < m->n; i++) {
        if (!m->in[i] || node_of(p, i)->op != O_REDUCESCATTER)
            continue;
        int c = statement_nodes(p, i, ids, p->nnode);
        for (int k = 1; k < c; k++) /* ids[0] is the ReduceScatter */
            m->in[ids[k]] = 0;
    }
}

/* A value computed outside the set from a member and read by a member. */
static void check_convex(Members *m)
{
    Program *p = m->p;
    char *down = arena_alloc(p->arena, (size_t)m->n);
    for (int i = 0; i < m->n; i++) {
        Node *n = node_of(p, i);
        if (n->dead)
            continue;
        for (int k = 0; k < n->nin; k++) {
            int v = n->in[k];
            if (m->in[i] && down[v]) {
                const char *name = value_desc(p, v);
                refuse(m->x, "%s is computed from the fused operations and also needed by them: "
                       "fusing would break that dependency", name);
            }
            if (!m->in[i] && (m->in[v] || down[v]))
                down[i] = 1;
        }
    }
}

static int count_ops(Members *m, Op op, int *first)
{
    int c = 0;
    for (int i = 0; i < m->n; i++)
        if (m->in[i] && node_of(m->p, i)->op == op) {
            if (!c && first)
                *first = i;
            c++;
        }
    return c;
}

/* Adds the nodes on paths from node `from` to any member. */
static void add_paths(Members *m, int from)
{
    Program *p = m->p;
    char *reach = arena_alloc(p->arena, (size_t)m->n);
    reach[from] = 1;
    for (int i = from + 1; i < m->n; i++)
        for (int k = 0; !node_of(p, i)->dead && k < node_of(p, i)->nin; k++)
            reach[i] |= reach[node_of(p, i)->in[k]];
    for (int i = m->n - 1; i > from; i--) {
        if (!m->in[i])
            continue;
        Node *n = node_of(p, i);
        for (int k = 0; k < n->nin; k++)
            if (reach[n->in[k]])
                m->in[n->in[k]] = 1;
    }
}

/* Adds the Slices and single values that only members read. */
static void add_helpers(Members *m)
{
    Program *p = m->p;
    int users[64];
    for (int i = m->n - 1; i >= 0; i--) {
        Node *n = node_of(p, i);
        if (m->in[i] || n->dead || op_info(n->op)->kind == K_LEAF || n->fusion >= 0)
            continue;
        if (n->op != O_SLICE && n->ndim != 0)
            continue;
        int nu = node_users(p, i, users, 64), all = nu > 0 && nu <= 64;
        for (int k = 0; all && k < nu; k++)
            all = m->in[users[k]];
        if (all && !is_output(p, i))
            m->in[i] = 1;
    }
}

static void check_computations(Members *m, int allow_comm)
{
    for (int i = 0; i < m->n; i++) {
        Node *n = node_of(m->p, i);
        if (!m->in[i] || is_computation(n))
            continue;
        int partial_sum = n->op == O_ALLREDUCE && node_of(m->p, n->in[0])->op == O_PARTIAL_REDUCE;
        if (allow_comm && (n->op == O_REDUCESCATTER || n->op == O_ALLGATHER || partial_sum))
            continue;
        refuse(m->x, "%s %s is not a computation that can be fused", op_info(n->op)->name,
               value_desc(m->p, i));
    }
}

/* Is n a per-row value of rows shaped as s: s's shape with a last extent
 * of 1 (a row reduction with Keep, or a value computed from those)? */
static int per_row(const Node *n, const Node *s)
{
    if (n->ndim != s->ndim || n->ndim < 2 || n->dim[n->ndim - 1].n != 1)
        return 0;
    for (int d = 0; d < n->ndim - 1; d++)
        if (n->dim[d].n != s->dim[d].n)
            return 0;
    return 1;
}

/* One loop over the elements: every member with dimensions has the count
 * of the largest, or is a per-row value of it (the statistics of a
 * LayerNorm, RMSNorm or softmax: the row kernel computes them once a row,
 * emit_rows.c). */
static void check_shapes(Members *m)
{
    int big = -1;
    for (int i = 0; i < m->n; i++) {
        Node *n = node_of(m->p, i);
        if (m->in[i] && n->ndim > 0 && n->op != O_PARTIAL_REDUCE &&
            (big < 0 || dim_count(n) > dim_count(node_of(m->p, big))))
            big = i;
    }
    for (int i = 0; i < m->n; i++) {
        Node *n = node_of(m->p, i);
        if (!m->in[i] || n->ndim == 0 || n->op == O_PARTIAL_REDUCE || i == big)
            continue;
        const Node *b = node_of(m->p, big);
        if (dim_count(n) != dim_count(b) && !per_row(n, b))
            refuse(m->x, "%s and %s have different numbers of elements (%ld and %ld), and %s is "
                   "not a per-row value of %s (its shape with a last extent of 1): a fused "
                   "computation is one loop over the elements", value_desc(m->p, big),
                   value_desc(m->p, i), dim_count(b), dim_count(n), value_desc(m->p, i),
                   value_desc(m->p, big));
    }
}

/* Each rank's slice holds whole rows of every reduction of a FusedAllReduce:
 * none reduces along the dimension the ReduceScatter cuts (a PartialReduce
 * along a dimension, which reorder makes of such a reduction). Reductions
 * of every element (a Norm's sum across ranks, as LAMB's) are taken. */
static void check_whole_rows(Members *m, int rs)
{
    Program *p = m->p;
    for (int i = 0; i < m->n; i++) {
        Node *n = node_of(p, i);
        if (!m->in[i] || n->op != O_PARTIAL_REDUCE || n->axis < 0)
            continue;
        Node *y = node_of(p, n->in[0]);
        int head = statement_head(p, i);
        refuse(m->x, "%s reduces along dimension %d of %s, the dimension ReduceScatter %s cuts "
               "(%s): each rank's slice holds only part of every row it reduces, but a "
               "FusedAllReduce reduces whole rows (reduce along another dimension, or leave %s "
               "out of the fused operation)", value_desc(p, head), n->axis, value_desc(p, y->id),
               value_desc(p, rs), layout_str(p->arena, y->layout), value_desc(p, head));
    }
}

static void check_allreduce_fuse(Members *m)
{
    int rs = -1, ag = -1;
    int nrs = count_ops(m, O_REDUCESCATTER, &rs);
    if (nrs != 1)
        refuse(m->x, "a FusedAllReduce has one ReduceScatter, but %d are given", nrs);
    if (!count_ops(m, O_ALLGATHER, &ag))
        refuse(m->x, "a FusedAllReduce ends with AllGathers of its results; none is given");
    add_paths(m, rs);
    add_helpers(m);
    check_whole_rows(m, rs);
    for (int i = 0; i < m->n; i++) {
        Node *n = node_of(m->p, i);
        if (!m->in[i] || i == rs || n->ndim == 0 || n->op == O_SLICE)
            continue;
        if (n->op == O_ALLGATHER || n->layout.kind == L_SLICED)
            continue;
        refuse(m->x, "%s is %s: inside a FusedAllReduce computations run on the slices of "
               "%s (reorder the AllGather first)",
               value_desc(m->p, statement_head(m->p, i)), layout_str(m->p->arena, n->layout),
               value_desc(m->p, rs));
    }
    check_computations(m, 1);
}

static void check_send_fuse(Members *m)
{
    int send = -1;
    int ns = count_ops(m, O_SEND, &send);
    if (ns != 1)
        refuse(m->x, "a fused Send has one Send, but %d are given", ns);
    if (!m->in[node_of(m->p, send)->in[0]])
        refuse(m->x, "Send %s does not send a fused computation", value_desc(m->p, send));
    m->in[send] = 0;
    check_computations(m, 0);
    check_shapes(m);
    m->in[send] = 1;
}

/* Is node u an Update whose new value is an AllGather written inline in
 * it, read by nothing else? */
static int update_of_gather(Program *p, int u)
{
    Node *n = node_of(p, u);
    if (n->op != O_UPDATE || n->fusion >= 0 || n->layout.kind != L_REPLICATED)
        return 0;
    Node *g = node_of(p, n->in[1]);
    int users[2];
    return g->op == O_ALLGATHER && !g->named && g->fusion < 0 &&
           node_users(p, g->id, users, 2) == 1;
}

/* Update(t, AllGather(v)) -> sc = Update(t, v) (sliced); AllGather(sc),
 * which takes the Update's name and place as t's new value. */
static void gather_after_update(const Xform *x, int u)
{
    Program *p = x->p;
    int old_gather = node_of(p, u)->in[1];
    node_of(p, u)->in[1] = node_of(p, old_gather)->in[0];
    node_of(p, old_gather)->dead = 1;
    check_node(x, node_of(p, u));
    Node *g = node_new(p, O_ALLGATHER, node_of(p, old_gather)->pos);
    int gid = g->id;
    g->nin = 1;
    g->in[0] = u;
    g->seq = node_of(p, u)->seq + 0.5;
    check_node(x, g);
    replace_uses(p, u, gid, -1);
    Node *un = node_of(p, u);
    node_of(p, un->target)->updated_by = gid;
    if (un->named) {
        g->name = un->name;
        g->named = 1;
        un->name = schedule_fresh_name(p, arena_printf(p->arena, "sc_%s", g->name));
    }
}

static void fuse_gathers_after_updates(const Xform *x)
{
    Program *p = x->p;
    int ids[256], changed = 0;
    for (int i = 0; i < x->st->narg; i++) {
        Ref r = xform_arg(x, i);
        if (REF_IS_FUSION(r))
            continue;
        int c = statement_nodes(p, r, ids, 256);
        for (int k = 0; k < c && k < 256; k++)
            if (update_of_gather(p, ids[k])) {
                gather_after_update(x, ids[k]);
                changed = 1;
            }
    }
    if (changed)
        program_resort(p);
}

/* ComputationFuse of an AllReduce: say how to fuse it with its computations. */
static void refuse_allreduce_computation(const Xform *x)
{
    Ref r = xform_arg(x, 0);
    if (!REF_IS_FUSION(r) && node_of(x->p, r)->op == O_ALLREDUCE)
        refuse(x, "AllReduce '%s' is not a computation: fuse(%s, ..., AllReduceFuse) fuses it "
               "with the computations after it (split, reorder and fuse)", x->st->arg[0],
               x->st->arg[0]);
}

void xform_fuse(const Xform *x)
{
    Program *p = x->p;
    if (x->st->policy == P_NONE)
        refuse(x, "it needs a policy: ComputationFuse, AllReduceFuse or SendFuse");
    if (policy_fuse_kind(x->st->policy) < 0)
        refuse(x, "unknown policy %s (fuse takes ComputationFuse, AllReduceFuse or SendFuse)",
               policy_word(x->st->policy));
    FuseKind kind = (FuseKind)policy_fuse_kind(x->st->policy);
    if (x->st->narg < 1)
        refuse(x, "there is nothing to fuse");
    if (kind == F_COMPUTATION)
        refuse_allreduce_computation(x);
    xform_outs(x, 1, "the fused operation");
    if (kind == F_ALLREDUCE)
        fuse_gathers_after_updates(x);
    Members m = {x, p, arena_alloc(p->arena, (size_t)p->nnode), p->nnode};
    for (int i = 0; i < x->st->narg; i++)
        add_ref(&m, xform_arg(x, i));
    if (kind == F_COMPUTATION) {
        check_computations(&m, 0);
        check_shapes(&m);
    } else if (kind == F_ALLREDUCE) {
        leave_out_inline_input(&m);
        check_allreduce_fuse(&m);
    } else {
        check_send_fuse(&m);
    }
    check_convex(&m);
    int f = fusion_new(p, "", kind);
    for (int i = 0; i < m.n; i++) /* a fused operation joins whole */
        if (m.in[i] && node_of(p, i)->fusion >= 0)
            p->fusion[node_of(p, i)->fusion].dead = 1;
    for (int i = 0; i < m.n; i++) {
        Node *n = node_of(p, i);
        if (m.in[i] || (n->fusion >= 0 && n->fusion != f && p->fusion[n->fusion].dead))
            n->fusion = f;
    }
    xform_name(x, 0, REF_FUSION(f), arena_printf(p->arena, "fused_%s", x->st->arg[0]));
}

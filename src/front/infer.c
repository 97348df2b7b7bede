/* infer.c: the type, shape and layout of a node from those of its inputs,
 * and the refusal, at the node's position, of every combination that has
 * no meaning. The rules are those of doc/language.md, section "Operations".
 * infer_node is also what the verifier re-runs after every transformation. */
#include "front/front.h"

#include <string.h>

static Node *input(Program *p, Node *n, int i)
{
    return node_of(p, n->in[i]);
}

static const char *shape_str(Program *p, const Node *n)
{
    char buf[512];
    size_t u = 0;
    buf[u++] = '[';
    for (int i = 0; i < n->ndim && u < sizeof buf - 64; i++)
        u += (size_t)snprintf(buf + u, sizeof buf - u, "%s%s", i ? "," : "", n->dim[i].text);
    snprintf(buf + u, sizeof buf - u, "]");
    return arena_strdup(p->arena, buf);
}

/* 'name' (type shape layout), or for an unnamed value its text and where
 * it is written. */
static const char *desc(Program *p, const Node *n)
{
    const char *facts = arena_printf(p->arena, "%s %s %s", type_name(n->type), shape_str(p, n),
                                     layout_str(p->arena, n->layout));
    if (n->op == O_CONST && !n->named)
        return arena_printf(p->arena, "%g (%s)", n->value, facts);
    if (n->named || !n->pos.line)
        return arena_printf(p->arena, "'%s' (%s)", value_text(p, n->id), facts);
    return arena_printf(p->arena, "'%s' (%s, line %d, column %d)", value_text(p, n->id), facts,
                        n->pos.line, n->pos.col);
}

static void copy_facts(Node *dst, const Node *src)
{
    dst->type = src->type;
    dst->ndim = src->ndim;
    memcpy(dst->dim, src->dim, sizeof dst->dim);
    dst->layout = src->layout;
    dst->group = src->group;
}

/* A constant or Scalar: available everywhere, it never widens a tensor's type
 * (a literal, FP64 and exact, never widens anything). */
static int is_weak(const Node *n)
{
    return n->op == O_CONST || n->op == O_SCALAR;
}

/* A value that is the same on every rank of WORLD, hence within any GROUP. */
static int world_uniform(const Node *n)
{
    return n->group == G_WORLD && n->layout.kind == L_REPLICATED;
}

static Type binary_type(const Node *a, const Node *b)
{
    if (a->op == O_CONST && b->op != O_CONST)
        return b->type;
    if (b->op == O_CONST && a->op != O_CONST)
        return a->type;
    if (a->ndim && !b->ndim)
        return a->type;
    if (b->ndim && !a->ndim)
        return b->type;
    if (is_weak(a) && !is_weak(b))
        return b->type;
    if (is_weak(b) && !is_weak(a))
        return a->type;
    return type_promote(a->type, b->type);
}

/* The group of a value computed from operands x[0..k): theirs, where the
 * operands that are Replicated on WORLD (the same everywhere) adopt the
 * group of the others. */
static GroupKind operands_group(Program *p, Node *n, Node *const *x, int k)
{
    const Node *first = NULL;
    for (int i = 0; i < k; i++) {
        if (world_uniform(x[i]))
            continue;
        if (!first)
            first = x[i];
        else if (x[i]->group != first->group)
            error_at(n->pos, "operands belong to different process groups: %s is on %s, %s on %s",
                     desc(p, first), group_name(first->group), desc(p, x[i]),
                     group_name(x[i]->group));
    }
    return first ? first->group : G_WORLD;
}

static GroupKind binary_group(Program *p, Node *n, Node *a, Node *b)
{
    Node *x[2] = {a, b};
    return operands_group(p, n, x, 2);
}

/* PyTorch broadcasting of the logical shapes. */
static void broadcast_shape(Program *p, Node *n, const Node *a, const Node *b)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        const Dim *da = ia >= 0 ? &a->dim[ia] : NULL, *db = ib >= 0 ? &b->dim[ib] : NULL;
        if (da && db && da->n != db->n && da->n != 1 && db->n != 1)
            error_at(n->pos, "shapes %s and %s cannot be broadcast together: %s is %ld, %s is %ld",
                     shape_str(p, a), shape_str(p, b), da->text, da->n, db->text, db->n);
        n->dim[i] = !da || (db && da->n == 1) ? *db : *da;
    }
    n->ndim = nd;
}

/* The output dimension that operand x's sliced dimension lands on. */
static int sliced_out_dim(const Node *x, int out_ndim)
{
    return x->layout.dim + (out_ndim - x->ndim);
}

/* Does operand x have extent > 1 along output dimension d? */
static int spans(const Node *x, int d, int out_ndim)
{
    int i = d - (out_ndim - x->ndim);
    return i >= 0 && x->dim[i].n > 1;
}

/* The layout of an elementwise value computed from operands x[0..k): see
 * the table of doc/language.md, section 8.1, which holds for every pair. */
static Layout elementwise_layout(Program *p, Node *n, Node *const *x, int k)
{
    const Node *s = NULL; /* the first sliced operand */
    int local = 0;
    for (int i = 0; i < k; i++) {
        local |= x[i]->layout.kind == L_LOCAL;
        if (x[i]->layout.kind != L_SLICED)
            continue;
        if (!s)
            s = x[i];
        else if (sliced_out_dim(x[i], n->ndim) != sliced_out_dim(s, n->ndim))
            error_at(n->pos, "operands are sliced along different dimensions: %s and %s",
                     desc(p, s), desc(p, x[i]));
    }
    Layout l = {local ? L_LOCAL : L_REPLICATED, 0};
    if (!s)
        return l;
    int d = sliced_out_dim(s, n->ndim);
    for (int i = 0; i < k; i++) {
        const Node *o = x[i];
        if (o->layout.kind == L_SLICED)
            continue;
        if (o->layout.kind == L_LOCAL)
            error_at(n->pos, "cannot combine Sliced %s with Local %s: a Local value is a different "
                     "whole tensor on each rank", desc(p, s), desc(p, o));
        if (spans(o, d, n->ndim))
            error_at(n->pos, "Replicated %s spans dimension %d, along which %s is sliced: "
                     "write Slice(%s, %d) to take each rank's part",
                     desc(p, o), d - (n->ndim - o->ndim), desc(p, s),
                     value_text(p, o->id), d - (n->ndim - o->ndim));
    }
    if (n->dim[d].n != s->dim[s->layout.dim].n)
        error_at(n->pos, "a sliced dimension cannot be broadcast");
    l.kind = L_SLICED;
    l.dim = d;
    return l;
}

static void infer_binary(Program *p, Node *n)
{
    Node *x[2] = {input(p, n, 0), input(p, n, 1)};
    broadcast_shape(p, n, x[0], x[1]);
    n->type = binary_type(x[0], x[1]);
    n->group = operands_group(p, n, x, 2);
    n->layout = elementwise_layout(p, n, x, 2);
}

/* Ite(cond, a, b): broadcast like the binary operations over all three
 * operands, the type of a and b as a binary operation's (cond's type does
 * not matter: only whether it is zero). */
static void infer_ternary(Program *p, Node *n)
{
    Node *x[3] = {input(p, n, 0), input(p, n, 1), input(p, n, 2)};
    Node ab = *n;
    broadcast_shape(p, &ab, x[1], x[2]);
    broadcast_shape(p, n, x[0], &ab);
    n->type = binary_type(x[1], x[2]);
    n->group = operands_group(p, n, x, 3);
    n->layout = elementwise_layout(p, n, x, 3);
}

static _Noreturn void no_such_dim(Program *p, Pos pos, const Node *x, int written,
                                  const char *what)
{
    error_at(pos, "%s: dimension %d does not exist in %s, which has %d dimension%s", what,
             written, desc(p, x), x->ndim, x->ndim == 1 ? "" : "s");
}

int infer_dim_argument(Program *p, Pos pos, const Node *x, int written, const char *what)
{
    int d = written < 0 ? written + x->ndim : written;
    if (d < 0 || d >= x->ndim)
        no_such_dim(p, pos, x, written, what);
    return d;
}

static void check_axis(Program *p, Node *n, const Node *x, int axis, const char *what)
{
    if (axis < 0 || axis >= x->ndim)
        no_such_dim(p, n->pos, x, axis, what);
}

/* Transpose: the last two dimensions swapped, and a slicing along one of
 * them moved to the other. */
static void infer_transpose(Program *p, Node *n, const Node *x)
{
    if (x->ndim < 2)
        error_at(n->pos, "Transpose swaps the last two dimensions, but %s has only %d "
                 "dimension%s", desc(p, x), x->ndim, x->ndim == 1 ? "" : "s");
    int last = x->ndim - 1;
    n->dim[last - 1] = x->dim[last];
    n->dim[last] = x->dim[last - 1];
    if (x->layout.kind == L_SLICED && x->layout.dim >= last - 1)
        n->layout.dim = 2 * last - 1 - x->layout.dim;
}

/* The members that partition 1-D value x (a scattered tensor's, or those
 * x inherited), or NULL. */
static const Dim *partition_of(const Node *x, int *count)
{
    *count = x->nmember ? x->nmember : x->npart;
    return x->ndim != 1 ? NULL : x->nmember ? x->member : x->part;
}

/* Norm(x, Members): x's shape, type and layout; x must be partitioned. */
static void infer_member_norm(Program *p, Node *n, const Node *x)
{
    int count;
    if (!partition_of(x, &count))
        error_at(n->pos, "Norm(..., Members) takes the norm of each member of a scattered "
                 "tensor, but %s is not read from one (a 1-D value of a scattered tensor, or "
                 "computed elementwise from one)", desc(p, x));
}

static void infer_unary(Program *p, Node *n)
{
    Node *x = input(p, n, 0);
    copy_facts(n, x);
    if (n->op == O_CAST)
        n->type = n->to;
    if (n->op == O_MEMBER_NORM)
        infer_member_norm(p, n, x);
    if (n->op == O_TRANSPOSE)
        infer_transpose(p, n, x);
    if (n->op == O_SLICE) {
        check_axis(p, n, x, n->axis, "Slice");
        if (x->layout.kind != L_REPLICATED)
            error_at(n->pos, "Slice takes each rank's part of a Replicated tensor, but %s is not "
                     "Replicated", desc(p, x));
        n->layout.kind = L_SLICED;
        n->layout.dim = n->axis;
    }
}

/* MatMul of [..., M, K] and [..., K, N]: see the layout table in the docs. */
static Layout matmul_layout(Program *p, Node *n, const Node *a, const Node *b)
{
    int ka = a->ndim - 1, kb = b->ndim - 2, nb = b->ndim - 1;
    LayoutKind la = a->layout.kind, lb = b->layout.kind;
    int a_on_k = la == L_SLICED && a->layout.dim == ka;
    int b_on_k = lb == L_SLICED && b->layout.dim == kb;
    Layout l = {L_REPLICATED, 0};
    if (a_on_k != b_on_k)
        error_at(n->pos, "MatMul: %s is sliced along the contraction dimension but %s is not "
                 "(both must be, giving a Local partial result)",
                 desc(p, a_on_k ? a : b), desc(p, a_on_k ? b : a));
    if (a_on_k) {
        l.kind = L_LOCAL;
        return l;
    }
    if (lb == L_SLICED && b->layout.dim != nb)
        error_at(n->pos, "MatMul: %s is sliced along a batch dimension; only its last (N) or "
                 "contraction (K) dimension may be sliced", desc(p, b));
    if (la == L_SLICED && lb == L_SLICED)
        error_at(n->pos, "MatMul: %s and %s are both sliced on non-contraction dimensions",
                 desc(p, a), desc(p, b));
    if ((la == L_SLICED && lb == L_LOCAL) || (la == L_LOCAL && lb == L_SLICED))
        error_at(n->pos, "MatMul: cannot combine Sliced and Local operands %s and %s", desc(p, a),
                 desc(p, b));
    if (la == L_SLICED)
        return a->layout;
    if (lb == L_SLICED) {
        l.kind = L_SLICED;
        l.dim = n->ndim - 1;
    } else if (la == L_LOCAL || lb == L_LOCAL) {
        l.kind = L_LOCAL;
    }
    return l;
}

static void infer_matmul(Program *p, Node *n)
{
    Node *a = input(p, n, 0), *b = input(p, n, 1);
    if (a->ndim < 2 || b->ndim < 2)
        error_at(n->pos, "MatMul needs operands with at least 2 dimensions, not %s and %s",
                 desc(p, a), desc(p, b));
    if (b->ndim > a->ndim)
        error_at(n->pos, "MatMul: the second operand %s has more dimensions than the first %s",
                 desc(p, b), desc(p, a));
    Dim k1 = a->dim[a->ndim - 1], k2 = b->dim[b->ndim - 2];
    if (k1.n != k2.n)
        error_at(n->pos, "MatMul: contraction dimensions differ: %s of %s is %ld, %s of %s is %ld",
                 k1.text, desc(p, a), k1.n, k2.text, desc(p, b), k2.n);
    int off = a->ndim - b->ndim;
    for (int i = 0; i < b->ndim - 2; i++)
        if (b->dim[i].n != 1 && b->dim[i].n != a->dim[i + off].n)
            error_at(n->pos, "MatMul: batch dimension %d of %s does not match %s", i, desc(p, b),
                     desc(p, a));
    copy_facts(n, a);
    n->dim[n->ndim - 1] = b->dim[b->ndim - 1];
    n->type = type_promote(a->type, b->type);
    n->group = binary_group(p, n, a, b);
    n->layout = matmul_layout(p, n, a, b);
}

/* Conv2D of x [N,C,H,W] with w [K,C,R,S]. */
static Layout conv_layout(Program *p, Node *n, const Node *x, const Node *w)
{
    Layout lx = x->layout, lw = w->layout, l = {L_REPLICATED, 0};
    if (lx.kind == L_SLICED && lx.dim == 1 && lw.kind == L_SLICED && lw.dim == 1) {
        l.kind = L_LOCAL;
    } else if (lx.kind == L_SLICED && lx.dim == 0 && lw.kind == L_REPLICATED) {
        l = lx;
    } else if (lx.kind == L_REPLICATED && lw.kind == L_SLICED && lw.dim == 0) {
        l.kind = L_SLICED;
        l.dim = 1;
    } else if (lx.kind != L_SLICED && lw.kind != L_SLICED) {
        l.kind = lx.kind == L_LOCAL || lw.kind == L_LOCAL ? L_LOCAL : L_REPLICATED;
    } else {
        error_at(n->pos, "Conv2D: layouts %s and %s do not combine (allowed: both Sliced(1) "
                 "(channels), input Sliced(0) with Replicated weights, Replicated input with "
                 "weights Sliced(0), or no slicing)", desc(p, x), desc(p, w));
    }
    return l;
}

static Dim conv_out_dim(Program *p, Node *n, Dim in, Dim k)
{
    if (n->pad > 1 << 20)
        error_at(n->pos, "Conv2D padding %d is too large", n->pad);
    long span = in.n + 2L * n->pad - k.n;
    if (span < 0)
        error_at(n->pos, "Conv2D: the kernel (%ld) is larger than the padded input (%ld)", k.n,
                 in.n + 2L * n->pad);
    Dim d;
    d.n = span / n->stride + 1;
    if (n->stride == 1 && n->pad * 2 == (int)k.n - 1)
        d.text = in.text;
    else
        d.text = arena_printf(p->arena, "%ld", d.n);
    return d;
}

static void infer_conv(Program *p, Node *n)
{
    Node *x = input(p, n, 0), *w = input(p, n, 1);
    if (x->ndim != 4 || w->ndim != 4)
        error_at(n->pos, "Conv2D needs an input [N,C,H,W] and weights [K,C,R,S], not %s and %s",
                 desc(p, x), desc(p, w));
    if (x->dim[1].n != w->dim[1].n)
        error_at(n->pos, "Conv2D: input channels %s (%ld) and weight channels %s (%ld) differ",
                 x->dim[1].text, x->dim[1].n, w->dim[1].text, w->dim[1].n);
    copy_facts(n, x);
    n->dim[1] = w->dim[0];
    n->dim[2] = conv_out_dim(p, n, x->dim[2], w->dim[2]);
    n->dim[3] = conv_out_dim(p, n, x->dim[3], w->dim[3]);
    n->type = type_promote(x->type, w->type);
    n->group = binary_group(p, n, x, w);
    n->layout = conv_layout(p, n, x, w);
}

static void infer_reduction(Program *p, Node *n)
{
    Node *x = input(p, n, 0);
    const char *what = op_info(n->op)->name;
    copy_facts(n, x);
    if (n->axis >= 0)
        check_axis(p, n, x, n->axis, what);
    int over_slice = x->layout.kind == L_SLICED && (n->axis < 0 || n->axis == x->layout.dim);
    if (n->op == O_PARTIAL_REDUCE) {
        if (!over_slice)
            error_at(n->pos, "PartialReduce reduces each rank's part of a sliced dimension, but "
                     "%s is not sliced there", desc(p, x));
        n->layout.kind = L_LOCAL;
    } else if (over_slice)
        error_at(n->pos, "%s over the sliced dimension of %s needs communication: AllGather it "
                 "first (a schedule's reorder does this rewrite itself)", what, desc(p, x));
    if (n->axis < 0) {
        ASSERT(!n->keepdim);
        n->ndim = 0;
        return;
    }
    if (n->keepdim) { /* extent 1 in place: the layout is x's (or Local, above) */
        n->dim[n->axis] = (Dim){1, "1"};
        return;
    }
    for (int i = n->axis; i + 1 < x->ndim; i++)
        n->dim[i] = x->dim[i + 1];
    n->ndim = x->ndim - 1;
    if (x->layout.kind == L_SLICED && x->layout.dim > n->axis)
        n->layout.dim--;
}

static void infer_update(Program *p, Node *n)
{
    Node *t = input(p, n, 0), *v = input(p, n, 1);
    int other = t->updated_by;
    if (other >= 0 && node_of(p, other)->op == O_ALLGATHER)
        other = node_of(p, other)->in[0]; /* the gather of a sliced update */
    if (other >= 0 && other != n->id && !node_of(p, other)->dead)
        error_at(n->pos, "'%s' is already updated at line %d", t->name,
                 node_of(p, other)->pos.line);
    Node tmp = *n;
    broadcast_shape(p, &tmp, t, v);
    if (tmp.ndim != t->ndim || memcmp(tmp.dim, t->dim, sizeof(Dim) * (size_t)t->ndim) != 0) {
        int same = tmp.ndim == t->ndim;
        for (int i = 0; same && i < t->ndim; i++)
            same = tmp.dim[i].n == t->dim[i].n;
        if (!same)
            error_at(n->pos, "Update of %s with %s: the new value must have the tensor's shape",
                     desc(p, t), desc(p, v));
    }
    int uniform = v->ndim == 0 && v->layout.kind == L_REPLICATED;
    /* a sliced update: each rank computes its slice of a Replicated tensor */
    int sliced = t->layout.kind == L_REPLICATED && v->layout.kind == L_SLICED;
    if (!uniform && !sliced && !layout_equal(t->layout, v->layout))
        error_at(n->pos, "Update of %s with %s: the new value must have the tensor's layout",
                 desc(p, t), desc(p, v));
    if (!uniform && v->group != t->group && !world_uniform(v))
        error_at(n->pos, "Update of %s with a value of group %s", desc(p, t),
                 group_name(v->group));
    copy_facts(n, t);
    if (sliced)
        n->layout = v->layout;
}

static void infer_comm(Program *p, Node *n)
{
    Node *x = input(p, n, 0);
    const char *what = op_info(n->op)->name;
    copy_facts(n, x);
    LayoutKind k = x->layout.kind;
    long gsize = group_size_of(p, x->group);
    switch (n->op) {
    case O_ALLREDUCE:
    case O_REDUCESCATTER:
    case O_REDUCE:
    case O_BROADCAST:
        if (k == L_SLICED)
            error_at(n->pos, "%s of Sliced %s: each rank holds a different part of one tensor, "
                     "so there is nothing to combine; use AllGather", what, desc(p, x));
        if (k == L_REPLICATED)
            error_at(n->pos, "%s of Replicated %s: every rank already holds the same value", what,
                     desc(p, x));
        break;
    case O_ALLGATHER:
        if (k != L_SLICED)
            error_at(n->pos, "AllGather needs a Sliced tensor, but %s is %s", desc(p, x),
                     layout_str(p->arena, x->layout));
        break;
    case O_SEND:
        if (x->group != G_GROUP)
            error_at(n->pos, "%s GroupRank(GROUP%+d, RANK%s) needs a value of GROUP, but %s is "
                     "on WORLD", n->is_recv ? "Recv from" : "Send to",
                     n->is_recv ? -n->shift : n->shift, n->linear ? ", Linear" : "", desc(p, x));
        break;
    default:
        BUG("not a collective");
    }
    if (n->op == O_ALLREDUCE || n->op == O_ALLGATHER || n->op == O_BROADCAST)
        n->layout.kind = L_REPLICATED;
    if (n->op == O_REDUCESCATTER) {
        check_axis(p, n, x, n->axis, "ReduceScatter");
        n->layout.kind = L_SLICED;
        n->layout.dim = n->axis;
    }
    if ((n->op == O_REDUCE || n->op == O_BROADCAST) && (n->root < 0 || n->root >= gsize))
        error_at(n->pos, "%s root %d is not a rank of %s, which has %ld rank%s", what, n->root,
                 group_name(x->group), gsize, gsize == 1 ? "" : "s");
}

int same_members(const Node *a, const Node *b)
{
    if (a->nmember != b->nmember)
        return 0;
    for (int i = 0; i < a->nmember; i++)
        if (a->member[i].n != b->member[i].n || strcmp(a->member[i].text, b->member[i].text))
            return 0;
    return 1;
}

/* A scattered tensor is read only where its members can be addressed one
 * by one: elementwise operations, Slice, Update, AllReduce and
 * ReduceScatter; two scattered operands of one operation have the same
 * members. */
static void check_scattered(Program *p, Node *n)
{
    OpKind k = op_info(n->op)->kind;
    int ok = k == K_UNARY || k == K_BINARY || k == K_TERNARY || k == K_UPDATE || n->op == O_ALLREDUCE ||
             n->op == O_REDUCESCATTER;
    for (int i = 0; i < n->nin; i++) {
        Node *x = input(p, n, i);
        if (!x->nmember)
            continue;
        if (!ok)
            error_at(n->pos, "%s cannot read scattered tensor '%s' (line %d): a scattered tensor "
                     "is read only by elementwise operations, Slice, Update, AllReduce and "
                     "ReduceScatter", op_info(n->op)->name, x->name, x->pos.line);
        for (int j = 0; j < i; j++) {
            Node *y = input(p, n, j);
            if (y->nmember && !same_members(x, y))
                error_at(n->pos, "scattered tensors '%s' and '%s' have different members",
                         y->name, x->name);
        }
    }
}

/* A 1-D value computed elementwise (or moved by a collective, a Slice, a
 * per-member Norm) from a partitioned one of its extent is partitioned by
 * the same members. */
static void inherit_partition(Program *p, Node *n)
{
    const OpInfo *info = op_info(n->op);
    n->npart = 0;
    n->part = NULL;
    if (n->ndim != 1 || !(info->elementwise || info->kind == K_COMM || n->op == O_SLICE ||
                          n->op == O_MEMBER_NORM))
        return;
    for (int i = 0; i < n->nin; i++) {
        Node *x = input(p, n, i);
        int count;
        const Dim *part = partition_of(x, &count);
        if (part && x->dim[0].n == n->dim[0].n) {
            n->npart = count;
            n->part = part;
            return;
        }
    }
}

static void infer_kind(Program *p, Node *n)
{
    switch (op_info(n->op)->kind) {
    case K_LEAF:
        return;
    case K_UNARY:
        infer_unary(p, n);
        return;
    case K_BINARY:
        infer_binary(p, n);
        return;
    case K_TERNARY:
        infer_ternary(p, n);
        return;
    case K_LAYER:
        if (n->op == O_MATMUL)
            infer_matmul(p, n);
        else
            infer_conv(p, n);
        return;
    case K_REDUCTION:
        infer_reduction(p, n);
        return;
    case K_UPDATE:
        infer_update(p, n);
        return;
    case K_COMM:
        infer_comm(p, n);
        return;
    }
}

void infer_node(Program *p, Node *n)
{
    for (int i = 0; i < n->nin; i++)
        ASSERT(n->in[i] < n->id);
    check_scattered(p, n);
    infer_kind(p, n);
    inherit_partition(p, n);
}

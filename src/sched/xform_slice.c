/* xform_slice.c: asSlice(t) stores an Updated Replicated tensor (optimizer
 * state) Sliced from then on: valid only after a reorder made its Update
 * sliced and when nothing reads the whole tensor any more (every read is a
 * Slice along the Update's dimension); a scattered tensor's slice is one
 * contiguous buffer. dead(x) removes a value nothing
 * reads; refused for program outputs, tensors' new values and used values. */
#include "sched/sched.h"

static Node *sliced_update_of(const Xform *x, Node *t)
{
    Program *p = x->p;
    if (t->updated_by < 0)
        refuse(x, "%s is never updated: only optimizer state written by an Update can be "
               "stored sliced", value_desc(p, t->id));
    Node *g = node_of(p, t->updated_by);
    if (g->op != O_ALLGATHER)
        refuse(x, "the Update of %s is not sliced: reorder it with the AllGather first",
               value_desc(p, t->id));
    return node_of(p, g->in[0]);
}

void xform_asslice(const Xform *x)
{
    Program *p = x->p;
    if (x->st->narg != 1 || x->st->policy != P_NONE)
        refuse(x, "it takes one tensor");
    xform_outs(x, 0, "nothing");
    Ref r = xform_arg(x, 0);
    Node *t = REF_IS_FUSION(r) ? NULL : node_of(p, r);
    if (!t || t->op != O_INPUT)
        refuse(x, "%s is not a Tensor of the program", ref_desc(p, r));
    if (t->layout.kind != L_REPLICATED)
        refuse(x, "%s is %s: only a Replicated tensor can be stored sliced", value_desc(p, r),
               layout_str(p->arena, t->layout));
    Node *u = sliced_update_of(x, t);
    int d = u->layout.dim, uid = u->id, tid = t->id;
    for (int i = tid + 1; i < p->nnode; i++) {
        Node *n = &p->node[i];
        for (int k = 0; !n->dead && k < n->nin; k++) {
            if (n->in[k] != tid || (i == uid && k == 0))
                continue;
            if (n->op != O_SLICE || n->axis != d)
                refuse(x, "%s still reads the whole of %s", value_desc(p, i),
                       value_desc(p, tid));
        }
    }
    t = node_of(p, tid);
    t->layout.kind = L_SLICED;
    t->layout.dim = d;
    t->has_rank = 1;
    t->nmember = 0; /* a scattered tensor's slice is stored as one buffer */
    t->member = NULL;
    for (int i = tid + 1; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (!n->dead && n->op == O_SLICE && n->in[0] == tid) {
            replace_uses(p, i, tid, -1);
            n->dead = 1;
        }
    }
    t->updated_by = uid;
}

void xform_dead(const Xform *x)
{
    Program *p = x->p;
    if (x->st->narg != 1 || x->st->policy != P_NONE)
        refuse(x, "it takes one value");
    xform_outs(x, 0, "nothing");
    Ref r = xform_arg(x, 0);
    if (REF_IS_FUSION(r))
        refuse(x, "'%s' is a fused operation, not a value", ref_name(p, r));
    Node *n = node_of(p, r);
    int users[4];
    int nu = node_users(p, r, users, 4);
    if (nu)
        refuse(x, "%s is still read by %s", value_desc(p, r), value_desc(p, users[0]));
    if (is_output(p, r))
        refuse(x, "%s is an output of the program", value_desc(p, r));
    if (op_info(n->op)->kind == K_LEAF)
        refuse(x, "%s is an input of the program", value_desc(p, r));
    for (int i = 0; i < p->nnode; i++)
        if (p->node[i].op == O_INPUT && p->node[i].updated_by == r)
            refuse(x, "%s is the new value of tensor %s (asSlice it first)",
                   value_desc(p, r), value_desc(p, i));
    if (n->op == O_UPDATE)
        refuse(x, "%s writes tensor %s", value_desc(p, r), value_desc(p, n->target));
    n->dead = 1;
}

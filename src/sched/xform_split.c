/* xform_split.c: split(x, ARSplitRSAG) turns AllReduce x (or the one
 * AllReduce written inline in x's statement) into ReduceScatter
 * (Sliced along dimension 0) + AllGather; split(x, ARSliceAG) keeps the
 * AllReduce and follows it with Slice + AllGather, so that a reorder can
 * then move the AllGather (the schedule AR-C-P2P-AG). Always valid on an
 * AllReduce of at least one dimension: slices may be uneven (shape.c). */
#include "sched/sched.h"

static void check_splittable(const Xform *x, Node *ar)
{
    if (ar->op != O_ALLREDUCE)
        refuse(x, "%s is %s, not an AllReduce", value_desc(x->p, ar->id),
               op_phrase(x->p->arena, ar->op));
    if (ar->fusion >= 0)
        refuse(x, "%s is part of fused operation '%s'", value_desc(x->p, ar->id),
               x->p->fusion[ar->fusion].name);
    if (ar->ndim == 0)
        refuse(x, "%s is a single value: there is nothing to scatter",
               value_desc(x->p, ar->id));
}

/* A statement such as 'Var avg = AllReduce("+", g) / n;' names its one
 * inline AllReduce; any other value stands for itself. */
int split_target(Program *p, int id)
{
    if (node_of(p, id)->op == O_ALLREDUCE)
        return id;
    int ids[256], n = statement_nodes(p, id, ids, 256), found = -1, count = 0;
    for (int i = 0; i < n && i < 256; i++)
        if (node_of(p, ids[i])->op == O_ALLREDUCE) {
            found = ids[i];
            count++;
        }
    return count == 1 ? found : id;
}

void xform_split(const Xform *x)
{
    Program *p = x->p;
    Policy policy = x->st->policy == P_NONE ? P_AR_SPLIT_RS_AG : x->st->policy;
    if (policy != P_AR_SPLIT_RS_AG && policy != P_AR_SLICE_AG)
        refuse(x, "unknown policy %s (split takes ARSplitRSAG or ARSliceAG)", policy_word(policy));
    int rs = policy == P_AR_SPLIT_RS_AG;
    if (x->st->narg != 1)
        refuse(x, "it takes one AllReduce, not %d values", x->st->narg);
    xform_outs(x, 2, rs ? "the ReduceScatter and the AllGather" : "the Slice and the AllGather");
    Ref r = xform_arg(x, 0);
    if (REF_IS_FUSION(r))
        refuse(x, "'%s' is a fused operation, not an AllReduce", ref_name(p, r));
    r = split_target(p, r);
    check_splittable(x, node_of(p, r));
    int ar = r;
    double seq = node_of(p, ar)->seq;
    Node *first = node_copy(p, ar, seq + 0.25);
    int fid = first->id;
    if (rs) {
        first->op = O_REDUCESCATTER;
        first->axis = 0;
    } else {
        first->op = O_SLICE;
        first->axis = 0;
        first->in[0] = ar;
    }
    check_node(x, first);
    Node *ag = node_new(p, O_ALLGATHER, node_of(p, ar)->pos);
    ag->nin = 1;
    ag->in[0] = fid;
    ag->seq = seq + 0.5;
    int gid = ag->id;
    check_node(x, ag);
    replace_uses(p, ar, gid, fid);
    if (rs)
        node_of(p, ar)->dead = 1;
    const char *arname = node_of(p, ar)->name;
    xform_name(x, 0, fid, arena_printf(p->arena, "%s_%s", rs ? "rs" : "sl", arname));
    xform_name(x, 1, gid, arena_printf(p->arena, "ag_%s", arname));
}

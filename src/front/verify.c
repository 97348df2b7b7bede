/* verify.c: checks that a whole graph is consistent: ids in topological
 * order, inputs alive, every node's facts equal to what infer.c derives
 * from its inputs, Updates paired with their tensors, outputs alive, names
 * found by program_find.
 * Run after parsing and after every transformation; a failure is a bug in
 * coconet (not in the user's program), so it aborts. */
#include "front/front.h"

#include <string.h>

static void verify_facts(Program *p, Node *n)
{
    if (op_info(n->op)->kind == K_LEAF)
        return;
    Node copy = *n;
    char msg[1024];
    ErrorCtx ctx;
    error_push(&ctx, msg, sizeof msg, p->file, p->src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        BUG("node %d (%s) no longer checks: %s", n->id, n->name, msg);
    }
    infer_node(p, &copy);
    error_pop(&ctx);
    int same = copy.type == n->type && copy.ndim == n->ndim && copy.group == n->group &&
               layout_equal(copy.layout, n->layout);
    for (int i = 0; same && i < n->ndim; i++)
        same = copy.dim[i].n == n->dim[i].n;
    if (!same)
        BUG("node %d (%s): stored facts differ from inferred ones", n->id, n->name);
}

static void verify_node(Program *p, Node *n)
{
    ASSERT(n->nin == op_info(n->op)->nin);
    for (int i = 0; i < n->nin; i++) {
        ASSERT(n->in[i] >= 0 && n->in[i] < n->id);
        if (node_of(p, n->in[i])->dead)
            BUG("node %d (%s) uses dead node %d", n->id, n->name, n->in[i]);
    }
    if (n->op == O_UPDATE)
        ASSERT(n->target == n->in[0]);
    if (n->op == O_INPUT && n->updated_by >= 0) {
        /* the new value: the Update, or the AllGather of a sliced Update */
        Node *u = node_of(p, n->updated_by);
        if (u->op == O_ALLGATHER)
            u = node_of(p, u->in[0]);
        ASSERT(u->op == O_UPDATE && u->target == n->id && !u->dead);
    }
    verify_facts(p, n);
    /* a name given without node_set_name would not be found */
    if (n->named && program_find(p, n->name) < n->id)
        BUG("node %d (%s) is named but its name is not in the name index", n->id, n->name);
}

void verify_program(Program *p)
{
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        ASSERT(n->id == i);
        if (!n->dead)
            verify_node(p, n);
    }
    for (int i = 0; i < p->nexec_out; i++)
        ASSERT(!node_of(p, p->exec_out[i])->dead);
}

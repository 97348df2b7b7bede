/* ops.c: the facts of each operation (made from core/ops.def), and names of
 * reduction operators, layouts and groups. Every pass asks here instead of
 * switching on names. */
#include "coco.h"

#include <string.h>

static const OpInfo ops[NOP] = {
#define OP(id, name, kind, nin, elementwise, keyword, paper) \
    [id] = {name, kind, nin, elementwise, keyword, paper},
#include "core/ops.def"
#undef OP
};

const OpInfo *op_info(Op op)
{
    ASSERT(op >= 0 && op < NOP);
    return &ops[op];
}

int op_is_comm(Op op)
{
    return op_info(op)->kind == K_COMM;
}

static const char *const redops[] = {"+", "*", "max", "min", "sumsq"};

const char *redop_name(RedOp r)
{
    return redops[r];
}

int redop_parse(const char *s, RedOp *r)
{
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, redops[i])) {
            *r = (RedOp)i;
            return 1;
        }
    return 0;
}

int layout_equal(Layout a, Layout b)
{
    return a.kind == b.kind && (a.kind != L_SLICED || a.dim == b.dim);
}

const char *layout_str(Arena *a, Layout l)
{
    switch (l.kind) {
    case L_REPLICATED:
        return "Replicated";
    case L_LOCAL:
        return "Local";
    case L_SLICED:
        return arena_printf(a, "Sliced(%d)", l.dim);
    }
    BUG("bad layout");
}

const char *group_name(GroupKind g)
{
    return g == G_WORLD ? "WORLD" : "GROUP";
}

/* ops.c: the facts of each operation (made from src/ops.def), and names of
 * reduction operators, layouts and groups. Every pass asks here instead of
 * switching on names. */
#include "coco.h"

#include <ctype.h>
#include <string.h>

static const OpInfo ops[NOP] = {
#define OP(id, name, kind, nin, elementwise, keyword, paper) \
    [id] = {name, kind, nin, elementwise, keyword, paper},
#include "ops.def"
#undef OP
};

/* "an" before a word said with a vowel first (an Update, an AllReduce),
 * else "a" (a MatMul, a Send). */
const char *article(const char *word)
{
    return word[0] && strchr("AEIOUaeiou", word[0]) ? "an" : "a";
}

/* The operation with its article, for messages: "an Update", "a MatMul";
 * an operator by what it does: "an addition". */
const char *op_phrase(Arena *a, Op op)
{
    switch (op) {
    case O_ADD: return "an addition";
    case O_SUB: return "a subtraction";
    case O_MUL: return "a multiplication";
    case O_DIV: return "a division";
    case O_NEG: return "a negation";
    case O_CONST: return "a constant";
    default: break;
    }
    const char *name = op_info(op)->name;
    if (!isalpha((unsigned char)name[0]))
        return arena_printf(a, "an operation '%s'", name);
    return arena_printf(a, "%s %s", article(name), name);
}

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

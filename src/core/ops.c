/* ops.c: the table of operation facts, and names of reduction operators,
 * layouts and groups. Every pass asks here instead of switching on names. */
#include "coco.h"

#include <string.h>

static const OpInfo ops[NOP] = {
    [O_INPUT] = {"Tensor", K_LEAF, 0},
    [O_SCALAR] = {"Scalar", K_LEAF, 0},
    [O_CONST] = {"const", K_LEAF, 0},
    [O_NEG] = {"-", K_UNARY, 1},
    [O_SQRT] = {"Sqrt", K_UNARY, 1},
    [O_TANH] = {"Tanh", K_UNARY, 1},
    [O_RELU] = {"ReLU", K_UNARY, 1},
    [O_DROPOUT] = {"Dropout", K_UNARY, 1},
    [O_CAST] = {"Cast", K_UNARY, 1},
    [O_SLICE] = {"Slice", K_UNARY, 1},
    [O_ADD] = {"+", K_BINARY, 2},
    [O_SUB] = {"-", K_BINARY, 2},
    [O_MUL] = {"*", K_BINARY, 2},
    [O_DIV] = {"/", K_BINARY, 2},
    [O_POW] = {"Pow", K_BINARY, 2},
    [O_MATMUL] = {"MatMul", K_LAYER, 2},
    [O_CONV2D] = {"Conv2D", K_LAYER, 2},
    [O_NORM] = {"Norm", K_REDUCTION, 1},
    [O_REDUCE_TENSOR] = {"ReduceTensor", K_REDUCTION, 1},
    [O_PARTIAL_REDUCE] = {"PartialReduce", K_REDUCTION, 1},
    [O_UPDATE] = {"Update", K_UPDATE, 2},
    [O_ALLREDUCE] = {"AllReduce", K_COMM, 1},
    [O_REDUCESCATTER] = {"ReduceScatter", K_COMM, 1},
    [O_ALLGATHER] = {"AllGather", K_COMM, 1},
    [O_REDUCE] = {"Reduce", K_COMM, 1},
    [O_BROADCAST] = {"Broadcast", K_COMM, 1},
    [O_SEND] = {"Send", K_COMM, 1},
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

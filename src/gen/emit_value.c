/* emit_value.c: the arithmetic of one element in generated kernels. The CPU
 * executor computes every operation in double and rounds it to the result's
 * type; generated code gives the same bits in one of two ways:
 *   - FP32 arithmetic (__fmul_rn, ...) where that is the same rounding:
 *     +, -, *, / and sqrt of operands that are floats, rounded to FP32, and
 *     of FP16 operands rounded to FP16 (the double rounding through double,
 *     or through float, of an operation on p-bit operands is innocuous when
 *     the wider format has at least 2p + 2 bits: 53 >= 2 * 24 + 2 and
 *     24 >= 2 * 11 + 2; tests/unit/test_float_rule.c checks it), and the
 *     exact operations (Neg, ReLU, Abs, Cast, Update, the comparisons, Max,
 *     Min, Ite) of floats; the intrinsics are never contracted into fused
 *     multiply-adds;
 *   - double arithmetic rounded to the type (coco_round, coco_narrow)
 *     otherwise: mixed FP32/FP16 operands rounded to FP16, BF16 results,
 *     FP64, Pow, Tanh, Exp, Log, Erf, Dropout, constants that are not
 *     floats; but Tanh, Exp, Log and Erf of a float rounded to FP16 or
 *     BF16 take the float function where its value is far enough from a
 *     rounding boundary to decide it, else the double one (coco_fn16:
 *     the same bits, float instructions for nearly every element). A comparison or an Ite's condition compares the operands'
 *     values exactly, each in its own register type (a condition 1e-300 is
 *     not zero). CUDA's double Pow, Tanh, Exp, Log and Erf are within an
 *     ulp or two of the C library's: their FP64 results may differ from
 *     the CPU's in the last bit, narrower ones very rarely.
 * Values of FP16, BF16 and FP32 type live in float registers (they are
 * floats exactly), FP64 ones in double registers; in a row kernel
 * (emit_rows.c) FP16 and BF16 ones in registers of their own type, where
 * +, - and * of two values of that type are one correctly rounded 16-bit
 * instruction that is never contracted (__hadd_rn, ...: the same double
 * rounding argument as FP32's, 53 >= 2 * 11 + 2 and 2 * 8 + 2), and every
 * other use converts them to float, exactly. So a fused optimizer step
 * is FP32 instructions, not conversions between float and double and FP64
 * divisions: the GPU converts to and from 64-bit types at an eighth of its
 * FP32 rate. */
#include "gen/emit_cuda.h"

#include <math.h>

const char *emit_register_type(Type t)
{
    return t == T_FP64 ? "double" : "float";
}

/* Does a value of type t live in a 16-bit register (a row kernel's)? */
static int raw_register(const Emitter *e, Type t)
{
    return e->rowrole && (t == T_FP16 || t == T_BF16);
}

const char *emit_value_type(const Emitter *e, Type t)
{
    if (raw_register(e, t))
        return t == T_FP16 ? "__half" : "__nv_bfloat16";
    return emit_register_type(t);
}

/* Is operand x's value a float (an FP16, BF16 or FP32 value, or a finite
 * literal a float holds exactly)? */
static int is_float_value(const Node *x)
{
    if (x->op == O_CONST)
        return isfinite(x->value) && type_round(T_FP32, x->value) == x->value;
    return x->type != T_FP64;
}

/* Is it an FP16 value (an FP16 tensor or Scalar, or a literal FP16 holds)? */
static int is_half_value(const Node *x)
{
    if (x->op == O_CONST)
        return isfinite(x->value) && type_round(T_FP16, x->value) == x->value;
    return x->type == T_FP16;
}

/* Is n Exp, Log, Erf or Tanh of a float value rounded to FP16 or BF16:
 * the float function where it decides the rounding (coco_fn16)? */
static int fn16(Emitter *e, const Node *n)
{
    int fn = n->op == O_EXP || n->op == O_LOG || n->op == O_ERF || n->op == O_TANH;
    return fn && (n->type == T_FP16 || n->type == T_BF16) &&
           is_float_value(node_of(e->p, n->in[0]));
}

/* Does FP32 arithmetic give node n's value with the CPU's bits? */
static int float_arithmetic(Emitter *e, const Node *n)
{
    if (n->type == T_FP64)
        return 0;
    if (fn16(e, n))
        return 1;
    switch (n->op) {
    case O_NEG: case O_RELU: case O_CAST: case O_ABS: /* exact, then one rounding to n's type */
        return is_float_value(node_of(e->p, n->in[0]));
    case O_UPDATE:
        return is_float_value(node_of(e->p, n->in[1]));
    case O_LT: case O_LE: case O_GT: case O_GE: case O_EQ: case O_NE:
    case O_MAX: case O_MIN: /* a comparison, then a selection of an operand */
        return is_float_value(node_of(e->p, n->in[0])) &&
               is_float_value(node_of(e->p, n->in[1]));
    case O_ITE: /* a selection; the condition is read in its own type */
        return is_float_value(node_of(e->p, n->in[1])) &&
               is_float_value(node_of(e->p, n->in[2]));
    case O_ADD: case O_SUB: case O_MUL: case O_DIV: case O_SQRT:
        break;
    default:
        return 0;
    }
    if (n->type != T_FP32 && n->type != T_FP16)
        return 0;
    for (int k = 0; k < n->nin; k++) {
        const Node *x = node_of(e->p, n->in[k]);
        if (n->type == T_FP32 ? !is_float_value(x) : !is_half_value(x))
            return 0;
    }
    return 1;
}

/* Operand x of a member of segment seg, as a float (in_float) or a double
 * expression. Float registers widen to double by themselves; the functions
 * double arithmetic calls take only doubles (no float overloads). */
static void emit_operand(Emitter *e, int seg, int x, int in_float)
{
    Node *n = node_of(e->p, x);
    const char *ld = in_float ? "coco_ldf" : "coco_ld";
    if (n->op == O_CONST)
        fprintf(e->o, in_float ? "(float)%.17g" : "%.17g", n->value);
    else if (e->segment[x] == seg && raw_register(e, n->type))
        fprintf(e->o, in_float ? "coco_f32(r%d)" : "coco_f64(r%d)", x);
    else if (e->segment[x] == seg)
        fprintf(e->o, "r%d", x);
    else if (n->op == O_SCALAR)
        fprintf(e->o, in_float ? "(float)s%d" : "s%d", x);
    else if (e->flat[x])
        fprintf(e->o, "%s(l%d, v, %s)", ld, x, emit_tname[n->type]);
    else if (n->ndim == 0) /* also before a kernel's loop, where c is not defined */
        fprintf(e->o, "%s(x%d, 0, %s)", ld, x, emit_tname[n->type]);
    else if (e->rowrole && e->rowrole[x] == RR_COL) /* its vector at the column (emit_rows.c) */
        fprintf(e->o, "%s(lb%d, v, %s)", ld, x, emit_tname[n->type]);
    else if (e->rowrole && e->rowrole[x] == RR_ROWIN) /* the row's element */
        fprintf(e->o, "%s(x%d, rrow, %s)", ld, x, emit_tname[n->type]);
    else if (e->lin) /* under LIN its vector's elements, lb<x> (emit_lin_first) */
        fprintf(e->o, "(LIN ? %s(lb%d, v, %s) : %s(x%d, coco_bidx(h%d, it, c), %s))", ld, x,
                emit_tname[n->type], ld, x, x, emit_tname[n->type]);
    else
        fprintf(e->o, "%s(x%d, coco_bidx(h%d, it, c), %s)", ld, x, x, emit_tname[n->type]);
}

void emit_operand_value(Emitter *e, int seg, int x, int in_float)
{
    emit_operand(e, seg, x, in_float);
}

/* A comparison, 1 or 0, in float or double. */
static void emit_comparison(Emitter *e, int seg, const Node *n, int in_float)
{
    int exact = is_float_value(node_of(e->p, n->in[0])) &&
                is_float_value(node_of(e->p, n->in[1]));
    fputs("((", e->o);
    emit_operand(e, seg, n->in[0], exact);
    fprintf(e->o, ") %s (", op_info(n->op)->name);
    emit_operand(e, seg, n->in[1], exact);
    fputs(in_float ? ") ? 1.0f : 0.0f)" : ") ? 1.0 : 0.0)", e->o);
}

/* Ite(c, a, b): c is compared with zero in its own register type. */
static void emit_ite(Emitter *e, int seg, const Node *n, int in_float)
{
    fputs("((", e->o);
    emit_operand(e, seg, n->in[0], is_float_value(node_of(e->p, n->in[0])));
    fputs(") != 0 ? (", e->o);
    emit_operand(e, seg, n->in[1], in_float);
    fputs(") : (", e->o);
    emit_operand(e, seg, n->in[2], in_float);
    fputs("))", e->o);
}

static void emit_value(Emitter *e, int seg, const Node *n, int in_float)
{
    FILE *o = e->o;
    static const char *const dbl[] = {[O_ADD] = "__dadd_rn", [O_SUB] = "__dsub_rn",
                                      [O_MUL] = "__dmul_rn", [O_DIV] = "__ddiv_rn",
                                      [O_POW] = "coco_pow", [O_MAX] = "coco_max",
                                      [O_MIN] = "coco_min"};
    static const char *const flt[] = {[O_ADD] = "__fadd_rn", [O_SUB] = "__fsub_rn",
                                      [O_MUL] = "__fmul_rn", [O_DIV] = "__fdiv_rn",
                                      [O_MAX] = "coco_maxf", [O_MIN] = "coco_minf"};
    switch (n->op) {
    case O_ADD: case O_SUB: case O_MUL: case O_DIV: case O_POW: case O_MAX: case O_MIN:
        fprintf(o, "%s(", in_float ? flt[n->op] : dbl[n->op]);
        emit_operand(e, seg, n->in[0], in_float);
        fputs(", ", o);
        emit_operand(e, seg, n->in[1], in_float);
        fputc(')', o);
        return;
    case O_UPDATE:
        emit_operand(e, seg, n->in[1], in_float);
        return;
    case O_LT: case O_LE: case O_GT: case O_GE: case O_EQ: case O_NE:
        emit_comparison(e, seg, n, in_float);
        return;
    case O_ITE:
        emit_ite(e, seg, n, in_float);
        return;
    case O_NEG: fputs("-", o); break;
    case O_SQRT: fputs(in_float ? "__fsqrt_rn" : "__dsqrt_rn", o); break;
    case O_TANH: case O_EXP: case O_LOG: case O_ERF:
        if (in_float) { /* fn16: rounded to n's type already */
            fprintf(o, "coco_fn16<%d>(", n->op == O_EXP ? 0 : n->op == O_LOG ? 1 : n->op == O_ERF ? 2 : 3);
            emit_operand(e, seg, n->in[0], 1);
            fprintf(o, ", %s)", emit_tname[n->type]);
            return;
        }
        fputs(n->op == O_TANH ? "coco_tanh" : n->op == O_EXP ? "coco_exp" : n->op == O_LOG ? "coco_log"
                                                                                    : "coco_erf", o);
        break;
    case O_ABS: fputs(in_float ? "fabsf" : "fabs", o); break;
    case O_RELU: fputs(in_float ? "coco_reluf" : "coco_relu", o); break;
    case O_CAST: break;
    case O_DROPOUT:
        fputs("coco_dropout(", o);
        emit_operand(e, seg, n->in[0], 0);
        fprintf(o, ", %.17g, seed, %d, %s)", n->value, n->dropout_id,
                !n->ndim ? "0"
                : e->rowrole ? arena_printf(e->p->arena, "lg%d + i", n->id) /* emit_rows.c */
                : e->lin ? arena_printf(e->p->arena, "LIN ? lg%d + i : coco_gidx(h%d, c)", n->id, n->id)
                         : arena_printf(e->p->arena, "coco_gidx(h%d, c)", n->id));
        return;
    default:
        BUG("not elementwise: %s", op_info(n->op)->name);
    }
    fputc('(', o);
    emit_operand(e, seg, n->in[0], in_float);
    fputc(')', o);
}

/* Is operand x of n a value of n's 16-bit type (a literal it holds)? */
static int raw_operand(Emitter *e, const Node *n, int x)
{
    const Node *v = node_of(e->p, x);
    if (v->op == O_CONST)
        return isfinite(v->value) && type_round(n->type, v->value) == v->value;
    return v->type == n->type;
}

/* Is n +, - or * (or the negation) of values of its 16-bit type, in a row
 * kernel: one 16-bit instruction? */
static int raw_arithmetic(Emitter *e, const Node *n)
{
    if (!raw_register(e, n->type) ||
        (n->op != O_ADD && n->op != O_SUB && n->op != O_MUL && n->op != O_NEG))
        return 0;
    for (int k = 0; k < n->nin; k++)
        if (!raw_operand(e, n, n->in[k]))
            return 0;
    return 1;
}

/* Operand x of such an n, as a value of its 16-bit type */
static void emit_raw_operand(Emitter *e, int seg, const Node *n, int x)
{
    Node *v = node_of(e->p, x);
    const char *t = emit_tname[n->type];
    if (v->op == O_CONST)
        fprintf(e->o, "coco_raw16<%s>((float)%.17g)", t, v->value);
    else if (e->segment[x] == seg)
        fprintf(e->o, "r%d", x);
    else if (v->op == O_SCALAR)
        fprintf(e->o, "coco_raw16<%s>((float)s%d)", t, x);
    else if (e->flat[x])
        fprintf(e->o, "l%d[v]", x);
    else if (e->rowrole[x] == RR_COL)
        fprintf(e->o, "lb%d[v]", x);
    else if (v->ndim == 0 || e->rowrole[x] == RR_ROWIN) /* once, or the row's */
        fprintf(e->o, "((const CocoRaw<%s> *)x%d)[%s]", t, x, v->ndim == 0 ? "0" : "rrow");
    else
        BUG("a row kernel's operand read neither by element, column nor row");
}

/* r<id> = n's value in one 16-bit instruction (raw_arithmetic) */
static void emit_raw_statement(Emitter *e, int seg, const Node *n)
{
    static const char *const fn[] = {[O_ADD] = "__hadd_rn", [O_SUB] = "__hsub_rn",
                                     [O_MUL] = "__hmul_rn", [O_NEG] = "__hneg"};
    fprintf(e->o, "            %s r%d = %s(", emit_value_type(e, n->type), n->id, fn[n->op]);
    for (int k = 0; k < n->nin; k++) {
        fputs(k ? ", " : "", e->o);
        emit_raw_operand(e, seg, n, n->in[k]);
    }
    fputs(");\n", e->o);
}

void emit_value_statement(Emitter *e, int seg, const Node *n)
{
    FILE *o = e->o;
    if (raw_arithmetic(e, n)) {
        emit_raw_statement(e, seg, n);
        return;
    }
    int in_float = float_arithmetic(e, n);
    if (raw_register(e, n->type)) { /* one rounding, float or double to its type */
        fprintf(o, "            %s r%d = %s<%s>(", emit_value_type(e, n->type), n->id,
                in_float ? "coco_raw16" : "coco_rows_raw", emit_tname[n->type]);
        emit_value(e, seg, n, in_float);
        fputs(");\n", o);
        return;
    }
    fprintf(o, "            %s r%d = ", emit_register_type(n->type), n->id);
    if (in_float && (n->type == T_FP32 || fn16(e, n))) { /* fn16: rounded already */
        emit_value(e, seg, n, 1);
        fputs(";\n", o);
        return;
    }
    fputs(in_float ? "coco_roundf(" : n->type == T_FP64 ? "coco_round(" : "coco_narrow(", o);
    emit_value(e, seg, n, in_float);
    fprintf(o, ", %s);\n", emit_tname[n->type]);
}

void emit_register_load(Emitter *e, const char *indent, const Node *n, const char *from)
{
    int wide = n->type == T_FP64;
    if (raw_register(e, n->type))
        fprintf(e->o, "%s%s r%d = (%s)[v];\n", indent, emit_value_type(e, n->type), n->id, from);
    else
        fprintf(e->o, "%s%s r%d = %s(%s, v, %s);\n", indent, emit_register_type(n->type), n->id,
                wide ? "coco_ld" : "coco_ldf", from, emit_tname[n->type]);
}

void emit_register_round(Emitter *e, const char *indent, const Node *n, const char *from)
{
    int wide = n->type == T_FP64;
    if (raw_register(e, n->type))
        fprintf(e->o, "%s%s r%d = coco_rows_raw<%s>(%s);\n", indent, emit_value_type(e, n->type),
                n->id, emit_tname[n->type], from);
    else
        fprintf(e->o, "%s%s r%d = %s(%s, %s);\n", indent, emit_register_type(n->type), n->id,
                wide ? "coco_round" : "coco_narrow", from, emit_tname[n->type]);
}

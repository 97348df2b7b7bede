/* print.c: writes a graph back as a .coco program that parses to the same
 * graph. Named values become statements; unnamed ones used once are written
 * inline, others get a statement of their own. Each statement ends with a
 * comment giving the value's inferred type, shape, layout and group. */
#include "front/front.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    Program *p;
    FILE *out;
    int *uses; /* live users of each node; NULL: a message's text (below) */
    int depth; /* of print_expr calls, for a message's text */
} Printer;

enum { MESSAGE_DEPTH = 6, MESSAGE_TEXT = 80 }; /* deeper or longer: "..." */

static void print_expr(Printer *pr, int id, int prec);

/* The shortest decimal text that reads back as exactly v once rounded to t. */
static void print_number(FILE *out, double v, Type t)
{
    char buf[64];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (type_round(t, strtod(buf, NULL)) == v)
            break;
    }
    if (v < 0)
        fprintf(out, "(0%s)", buf);
    else
        fputs(buf, out);
}

/* Updates and communication always get a statement of their own. */
static int is_statement(Printer *pr, const Node *n)
{
    if (n->op == O_CONST || !pr->uses)
        return n->named;
    OpKind k = op_info(n->op)->kind;
    return n->named || pr->uses[n->id] != 1 || k == K_LEAF || k == K_UPDATE || k == K_COMM;
}

/* The precedence of an operator (that of C): a call or a name is PREC_CALL. */
enum { PREC_NEG = 5, PREC_CALL = 6 };

static int prec_of(const Node *n)
{
    switch (n->op) {
    case O_EQ:
    case O_NE:
        return 1;
    case O_LT:
    case O_LE:
    case O_GT:
    case O_GE:
        return 2;
    case O_ADD:
    case O_SUB:
        return 3;
    case O_MUL:
    case O_DIV:
        return 4;
    case O_NEG:
        return PREC_NEG;
    default:
        return PREC_CALL;
    }
}

static void print_call(Printer *pr, const Node *n)
{
    FILE *o = pr->out;
    const char *name = n->op == O_SEND && n->is_recv ? "Recv" : op_info(n->op)->name;
    fprintf(o, "%s(", name);
    if (n->op == O_ALLREDUCE || n->op == O_REDUCESCATTER || n->op == O_REDUCE ||
        n->op == O_REDUCE_TENSOR || n->op == O_PARTIAL_REDUCE)
        fprintf(o, "\"%s\", ", redop_name(n->redop));
    for (int i = 0; i < n->nin; i++) {
        if (i)
            fputs(", ", o);
        print_expr(pr, n->in[i], 0);
    }
    switch (n->op) {
    case O_REDUCESCATTER:
    case O_SLICE:
        fprintf(o, ", %d", n->axis);
        break;
    case O_MEMBER_NORM:
        fputs(", Members", o);
        break;
    case O_NORM:
    case O_REDUCE_TENSOR:
    case O_PARTIAL_REDUCE:
        if (n->axis >= 0)
            fprintf(o, ", %d%s", n->axis, n->keepdim ? ", Keep" : "");
        break;
    case O_REDUCE:
    case O_BROADCAST:
        fprintf(o, ", %d", n->root);
        break;
    case O_SEND: {
        int k = n->is_recv ? -n->shift : n->shift;
        fprintf(o, ", GroupRank(GROUP%c%d, RANK%s)", k < 0 ? '-' : '+', abs(k),
                n->linear ? ", Linear" : "");
        break;
    }
    case O_DROPOUT:
        fputs(", ", o);
        print_number(o, n->value, T_FP64);
        break;
    case O_CAST:
        fprintf(o, ", %s", type_name(n->to));
        break;
    case O_CONV2D:
        if (n->stride != 1 || n->pad != 0)
            fprintf(o, ", %d, %d", n->stride, n->pad);
        break;
    default:
        break;
    }
    fputc(')', o);
}

/* The left operand of n written inline at n's own precedence (the next
 * link of a chain a + b - c ...)? */
static int chain_link(Printer *pr, const Node *l, int prec)
{
    if (l->op == O_NEG || prec_of(l) != prec || (l->op == O_CONST && !l->named))
        return 0;
    return !is_statement(pr, l);
}

/* A binary operator and the chain of left operands of its precedence, in a
 * loop rather than by recursion: a sum of 200000 terms is one chain. */
static void print_operator(Printer *pr, const Node *n)
{
    int prec = prec_of(n);
    if (n->op == O_NEG) {
        fputc('-', pr->out);
        print_expr(pr, n->in[0], PREC_NEG);
        return;
    }
    int len = 0, cap = 0;
    const Node **chain = NULL;
    for (const Node *s = n;; s = node_of(pr->p, s->in[0])) {
        chain = xgrow(chain, len, &cap, 16, sizeof *chain);
        chain[len++] = s;
        if (!chain_link(pr, node_of(pr->p, s->in[0]), prec))
            break;
    }
    print_expr(pr, chain[len - 1]->in[0], prec);
    for (int i = len - 1; i >= 0; i--) {
        fprintf(pr->out, " %s ", op_info(chain[i]->op)->name);
        print_expr(pr, chain[i]->in[1], prec + 1); /* left associative */
    }
    free(chain);
}

/* Writes node id as an expression needing at least precedence prec. */
static void print_expr(Printer *pr, int id, int prec)
{
    Node *n = node_of(pr->p, id);
    if (n->op == O_CONST && !n->named) {
        print_number(pr->out, n->value, T_FP64);
        return;
    }
    if (is_statement(pr, n)) {
        fputs(n->name, pr->out);
        return;
    }
    if (!pr->uses && pr->depth >= MESSAGE_DEPTH) {
        fputs("...", pr->out);
        return;
    }
    int mine = prec_of(n);
    int paren = mine < prec;
    if (paren)
        fputc('(', pr->out);
    pr->depth++;
    if (mine < PREC_CALL)
        print_operator(pr, n);
    else
        print_call(pr, n);
    pr->depth--;
    if (paren)
        fputc(')', pr->out);
}

/* The text of value id as the user wrote it (as `coconet print` writes it,
 * every unnamed part inline): its name, or its expression, shortened. */
const char *value_text(Program *p, int id)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        BUG("open_memstream failed");
    Printer pr = {p, f, NULL, 0};
    print_expr(&pr, id, 0);
    fclose(f);
    if (len > MESSAGE_TEXT)
        strcpy(buf + MESSAGE_TEXT - 3, "...");
    char *text = arena_strdup(p->arena, buf);
    free(buf);
    return text;
}

/* A value or a fused operation in a message (a fusion by its name). */
const char *ref_desc(Program *p, Ref r)
{
    if (REF_IS_FUSION(r))
        return arena_printf(p->arena, "'%s'", ref_name(p, r));
    return value_desc(p, r);
}

/* A value in a message: 'name' for a named one; for a part of an
 * expression, 'text' (line L, column C). */
const char *value_desc(Program *p, int id)
{
    Pos pos = node_of(p, id)->pos;
    if (!pos.line || node_of(p, id)->named)
        return arena_printf(p->arena, "'%s'", value_text(p, id));
    return arena_printf(p->arena, "'%s' (line %d, column %d)", value_text(p, id), pos.line,
                        pos.col);
}

static void print_facts(Printer *pr, const Node *n)
{
    FILE *o = pr->out;
    fprintf(o, "  // %s [", type_name(n->type));
    for (int i = 0; i < n->ndim; i++)
        fprintf(o, "%s%s", i ? "," : "", n->dim[i].text);
    fprintf(o, "] %s %s", layout_str(pr->p->arena, n->layout), group_name(n->group));
    if (n->fusion >= 0)
        fprintf(o, ", in %s", pr->p->fusion[n->fusion].name);
    fputc('\n', o);
}

/* The fused operations and overlaps a schedule made, as comments. */
static void print_schedule_facts(Printer *pr)
{
    Program *p = pr->p;
    FILE *o = pr->out;
    if (p->applied)
        fprintf(o, "// as scheduled by '%s':\n", p->applied);
    for (int f = 0; f < p->nfusion; f++) {
        if (p->fusion[f].dead)
            continue;
        fprintf(o, "//   %s = fuse(", p->fusion[f].name);
        int first = 1;
        for (int i = 0; i < p->nnode; i++)
            if (!p->node[i].dead && p->node[i].fusion == f && is_statement(pr, &p->node[i])) {
                fprintf(o, "%s%s", first ? "" : ", ", p->node[i].name);
                first = 0;
            }
        fprintf(o, ", %s)\n", policy_word(fuse_kind_policy(p->fusion[f].kind)));
    }
    for (int v = 0; v < p->noverlap; v++) {
        fprintf(o, "//   %s = overlap(", p->overlap[v].name);
        for (int k = 0; k < p->overlap[v].nitem; k++)
            fprintf(o, "%s%s", k ? ", " : "", ref_name(p, p->overlap[v].item[k]));
        fputs(")\n", o);
    }
}

static void print_dims(FILE *o, const Node *n)
{
    fputc('[', o);
    for (int i = 0; i < n->ndim; i++)
        fprintf(o, "%s%s", i ? "," : "", n->dim[i].text);
    fputc(']', o);
}

static void print_decl(Printer *pr, const Node *n)
{
    FILE *o = pr->out;
    if (n->op == O_SCALAR) {
        fprintf(o, "Scalar %s(%s", n->name, type_name(n->type));
        if (n->has_value) {
            fputs(n->value < 0 ? ", -" : ", ", o); /* the grammar's ["-"] NUMBER */
            print_number(o, n->value < 0 ? -n->value : n->value, n->type);
        }
        fputs(");\n", o);
        return;
    }
    fprintf(o, "Tensor %s(%s, ", n->name, type_name(n->type));
    if (n->nmember) {
        fputs("Scattered[", o);
        for (int i = 0; i < n->nmember; i++)
            fprintf(o, "%s%s", i ? "," : "", n->member[i].text);
        fputc(']', o);
    } else {
        print_dims(o, n);
    }
    fprintf(o, ", %s, %s%s);\n", layout_str(pr->p->arena, n->layout), group_name(n->group),
            n->has_rank ? ", RANK" : "");
}

static void print_list(Printer *pr, const int *ids, int n)
{
    fputc('{', pr->out);
    for (int i = 0; i < n; i++)
        fprintf(pr->out, "%s%s", i ? ", " : "", node_of(pr->p, ids[i])->name);
    fputc('}', pr->out);
}

static void print_header(Printer *pr)
{
    Program *p = pr->p;
    FILE *o = pr->out;
    fprintf(o, "// %s, as checked by coconet %s for %d rank%s\n", p->exec_name, COCONET_VERSION,
            p->nranks, p->nranks == 1 ? "" : "s");
    if (p->nsize) {
        fputs("Size ", o);
        for (int i = 0; i < p->nsize; i++)
            fprintf(o, "%s%s = %ld", i ? ", " : "", p->size[i].name, p->size[i].value);
        fputs(";\n", o);
    }
    if (p->group_size && (p->uses_group || p->group_text))
        fprintf(o, "Group GROUP(%ld);\n", p->group_size);
}

void print_program(Program *p, FILE *out)
{
    Printer pr = {p, out, xcalloc((size_t)p->nnode, sizeof(int)), 0};
    for (int i = 0; i < p->nnode; i++)
        if (!p->node[i].dead)
            for (int j = 0; j < p->node[i].nin; j++)
                pr.uses[p->node[i].in[j]]++;
    print_header(&pr);
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (n->dead || !is_statement(&pr, n))
            continue;
        if (n->op == O_CONST) {
            fprintf(out, "Var %s = ", n->name);
            print_number(out, n->value, T_FP64);
            fputc(';', out);
            print_facts(&pr, n);
            continue;
        }
        if (op_info(n->op)->kind == K_LEAF) {
            print_decl(&pr, n);
            continue;
        }
        fprintf(out, "Var %s = ", n->name);
        if (prec_of(n) < PREC_CALL)
            print_operator(&pr, n);
        else
            print_call(&pr, n);
        fputc(';', out);
        print_facts(&pr, n);
    }
    fprintf(out, "Execute %s(", p->exec_name);
    print_list(&pr, p->exec_in, p->nexec_in);
    fputs(", ", out);
    print_list(&pr, p->exec_out, p->nexec_out);
    fputs(");\n", out);
    print_schedule_facts(&pr);
    for (int i = 0; !p->applied && i < p->nsched; i++)
        if (!p->sched[i].generated) {
            fputc('\n', out);
            print_schedule(&p->sched[i], out);
        }
    free(pr.uses);
}

static void print_names(FILE *out, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%s", i ? ", " : "", names[i]);
}

/* A schedule as text that can be pasted into a .coco file. */
void print_schedule(const Schedule *s, FILE *out)
{
    fprintf(out, "Schedule %s {", s->name);
    if (s->note)
        fprintf(out, "  // %s", s->note);
    fputc('\n', out);
    for (int i = 0; i < s->nstmt; i++) {
        const SchedStmt *st = &s->stmt[i];
        fputs("  ", out);
        if (st->nout == 1)
            fprintf(out, "%s = ", st->out[0]);
        if (st->nout > 1) {
            fputc('(', out);
            print_names(out, st->out, st->nout);
            fputs(") = ", out);
        }
        fprintf(out, "%s(", stmt_verb_word(st));
        print_names(out, st->arg, st->narg);
        if (st->policy != P_NONE)
            fprintf(out, "%s%s", st->narg ? ", " : "", policy_word(st->policy));
        fputs(");\n", out);
    }
    fputs("}\n", out);
}

/* parse.c: recursive-descent parser from .coco text to the program graph.
 *
 * One function per grammar rule, the rule in a comment above it. Each node
 * is checked (type, shape, layout: infer.c) as soon as it is made, so every
 * error points at the text that caused it. Sizes are bound as they are
 * parsed: -D bindings first, then the file's defaults. */
#include "front/front.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAXDEPTH = 200, MAX_MEMBERS = 65536 };

typedef struct {
    Program *p;
    Lexer lx;
    Token tok;
    const Binding *bind;
    int nbind;
    int *bind_used;
    long cli_group_size;
    int depth;
    int executed;
    const char *file; /* of a schedule file; NULL: the program's */
} Parser;

/* The words of the language that are not operations; the operations'
 * keywords (src/ops.def) and Recv are reserved too. */
static const char *const reserved[] = {
    "Tensor", "Var", "Scalar", "Size", "Group", "Execute", "Schedule", "WORLD", "GROUP",
    "RANK", "GroupRank", "FP16", "BF16", "FP32", "FP64", "Sliced", "Replicated", "Local",
    "Scattered", NULL};

/* The receiving side of a Send: a call of O_SEND by another keyword. */
static const char recv_keyword[] = "Recv";

/* ---- tokens ---- */

static void advance(Parser *ps)
{
    ps->tok = lex_next(&ps->lx);
}

static int is_punct(Parser *ps, char c)
{
    return ps->tok.kind == TK_PUNCT && ps->tok.len == 1 && ps->tok.start[0] == c;
}

static int is_word(Parser *ps, const char *w)
{
    return ps->tok.kind == TK_IDENT && (int)strlen(w) == ps->tok.len &&
           !strncmp(ps->tok.start, w, (size_t)ps->tok.len);
}

static const char *tok_text(Parser *ps)
{
    if (ps->tok.kind == TK_EOF)
        return "end of file";
    if (ps->tok.kind == TK_STR)
        return arena_printf(ps->p->arena, "the string \"%.*s\"",
                            ps->tok.len > 40 ? 40 : ps->tok.len, ps->tok.start);
    return arena_printf(ps->p->arena, "'%.*s'", ps->tok.len > 40 ? 40 : ps->tok.len,
                        ps->tok.start);
}

static _Noreturn void expected(Parser *ps, const char *what)
{
    error_at(ps->tok.pos, "expected %s, found %s", what, tok_text(ps));
}

static void expect_punct(Parser *ps, char c)
{
    if (!is_punct(ps, c)) {
        char what[8] = {'\'', c, '\'', 0};
        expected(ps, what);
    }
    advance(ps);
}

static void expect_word(Parser *ps, const char *w)
{
    if (!is_word(ps, w))
        expected(ps, arena_printf(ps->p->arena, "'%s'", w));
    advance(ps);
}

/* Is the token after the current one a '(' (blanks and comments between)? */
static int next_is_lparen(Parser *ps)
{
    Lexer ahead = ps->lx;
    Token t = lex_next(&ahead);
    return t.kind == TK_PUNCT && t.start[0] == '(';
}

/* The operation whose keyword s is (Recv: O_SEND), or NOP. */
static Op op_of_keyword(const char *s, size_t len)
{
    if (strlen(recv_keyword) == len && !strncmp(s, recv_keyword, len))
        return O_SEND;
    for (int op = 0; op < NOP; op++) {
        const char *k = op_info((Op)op)->keyword;
        if (k && strlen(k) == len && !strncmp(s, k, len))
            return (Op)op;
    }
    return NOP;
}

int is_reserved(const char *s)
{
    for (int i = 0; reserved[i]; i++)
        if (!strcmp(s, reserved[i]))
            return 1;
    return op_of_keyword(s, strlen(s)) != NOP;
}

/* NAME, which must not be a keyword */
static const char *expect_name(Parser *ps, const char *what)
{
    if (ps->tok.kind != TK_IDENT)
        expected(ps, what);
    char *s = arena_strndup(ps->p->arena, ps->tok.start, (size_t)ps->tok.len);
    if (is_reserved(s))
        error_at(ps->tok.pos, "'%s' is a keyword and cannot be used as %s", s, what);
    advance(ps);
    return s;
}

/* INT: a non-negative integer literal that fits an int */
static int expect_int(Parser *ps, const char *what)
{
    if (ps->tok.kind != TK_NUM || !ps->tok.is_int)
        expected(ps, what);
    if (ps->tok.num > 1e9)
        error_at(ps->tok.pos, "%s %.*s is too large", what, ps->tok.len, ps->tok.start);
    int v = (int)ps->tok.num;
    advance(ps);
    return v;
}

/* ["-"] NUMBER */
static double expect_number(Parser *ps, const char *what)
{
    int neg = 0;
    if (is_punct(ps, '-')) {
        neg = 1;
        advance(ps);
    }
    if (ps->tok.kind != TK_NUM)
        expected(ps, what);
    double v = ps->tok.num;
    advance(ps);
    return neg ? -v : v;
}

static Type expect_type(Parser *ps)
{
    Type t;
    char name[MAXNAME];
    if (ps->tok.kind == TK_IDENT) {
        snprintf(name, sizeof name, "%.*s", ps->tok.len, ps->tok.start);
        if (type_parse(name, &t)) {
            advance(ps);
            return t;
        }
    }
    expected(ps, "an element type (FP16, BF16, FP32 or FP64)");
}

/* ---- bindings and sizes ---- */

static const char *binding_value(Parser *ps, const char *name)
{
    for (int i = 0; i < ps->nbind; i++)
        if (!strcmp(ps->bind[i].name, name)) {
            ps->bind_used[i] = 1;
            return ps->bind[i].value;
        }
    return NULL;
}

/* -D NAME=TEXT of a size: as every size the command line gives */
static long parse_size_binding(const char *name, const char *text)
{
    long v;
    const char *wrong = size_text_read(text, strlen(text), &v);
    if (wrong)
        error_plain("-D %s=%s: %s", name, text, wrong);
    return v;
}

static SizeDecl *size_add(Parser *ps, const char *name, Pos pos)
{
    Program *p = ps->p;
    if (p->nsize == p->capsize) {
        p->capsize = p->capsize ? 2 * p->capsize : 16;
        SizeDecl *grown = xcalloc((size_t)p->capsize, sizeof(SizeDecl));
        if (p->nsize)
            copy_bytes(grown, p->size, (size_t)p->nsize * sizeof(SizeDecl));
        free(p->size);
        p->size = grown;
    }
    SizeDecl *s = &p->size[p->nsize++];
    s->name = name;
    s->pos = pos;
    size_named(p, p->nsize - 1);
    const char *b = binding_value(ps, name);
    if (b) {
        s->value = parse_size_binding(name, b);
        s->bound = 1;
    }
    return s;
}

/* The value of a size name used at pos; undeclared names are sizes too. */
static long size_value(Parser *ps, const char *name, Pos pos)
{
    if (program_find(ps->p, name) >= 0)
        error_at(pos, "'%s' is a tensor or value, not a size", name);
    SizeDecl *s = size_find(ps->p, name);
    if (!s)
        s = size_add(ps, name, pos);
    if (!s->bound)
        error_at(pos, "size %s is not bound: pass -D %s=VALUE or declare 'Size %s = VALUE;'",
                 name, name, name);
    return s->value;
}

typedef struct {
    long v;
    const char *text;
    int prec; /* 0: sum, 1: product, 2: atom */
} SizeVal;

static SizeVal size_expr(Parser *ps);

static const char *size_paren(Parser *ps, SizeVal x, int prec)
{
    return x.prec < prec ? arena_printf(ps->p->arena, "(%s)", x.text) : x.text;
}

static void check_size_range(Pos pos, double v)
{
    if (v > (double)MAX_SIZE || v < -(double)MAX_SIZE)
        error_at(pos, "size expression is too large");
}

/* size_atom = INT | NAME | "(" size_expr ")" */
static SizeVal size_atom(Parser *ps)
{
    SizeVal r = {0, NULL, 2};
    Pos pos = ps->tok.pos;
    if (ps->tok.kind == TK_NUM) {
        if (!ps->tok.is_int)
            error_at(pos, "a size must be an integer, found %s", tok_text(ps));
        check_size_range(pos, ps->tok.num);
        r.v = (long)ps->tok.num;
        r.text = arena_printf(ps->p->arena, "%ld", r.v);
        advance(ps);
    } else if (ps->tok.kind == TK_IDENT) {
        const char *name = expect_name(ps, "a size name");
        r.v = size_value(ps, name, pos);
        r.text = name;
    } else if (is_punct(ps, '(')) {
        advance(ps);
        if (++ps->depth > MAXDEPTH)
            error_at(pos, "expression is nested too deeply (more than %d levels)", MAXDEPTH);
        r = size_expr(ps);
        ps->depth--;
        r.text = size_paren(ps, r, 2);
        r.prec = 2;
        expect_punct(ps, ')');
    } else {
        expected(ps, "a size (a number or a name)");
    }
    return r;
}

/* l op r for a size operator, with its range and divisibility checks. */
static long size_apply(Pos pos, char op, long l, long r)
{
    switch (op) {
    case '*':
        check_size_range(pos, (double)l * (double)r);
        return l * r;
    case '/':
        if (r == 0 || l % r)
            error_at(pos, "size %ld is not divisible by %ld", l, r);
        return l / r;
    default:
        check_size_range(pos, op == '+' ? (double)l + (double)r : (double)l - (double)r);
        return op == '+' ? l + r : l - r;
    }
}

/* One level of left-associative size operators c1 and c2 over operand,
 * printed at precedence prec (0: + -, 1: * /). */
static SizeVal size_level(Parser *ps, SizeVal (*operand)(Parser *), char c1, char c2, int prec)
{
    SizeVal l = operand(ps);
    while (is_punct(ps, c1) || is_punct(ps, c2)) {
        char op = ps->tok.start[0];
        Pos pos = ps->tok.pos;
        advance(ps);
        SizeVal r = operand(ps);
        l.v = size_apply(pos, op, l.v, r.v);
        l.text = arena_printf(ps->p->arena, "%s%c%s", size_paren(ps, l, prec), op,
                              size_paren(ps, r, prec + 1));
        l.prec = prec;
    }
    return l;
}

/* size_term = size_atom { ("*" | "/") size_atom } */
static SizeVal size_term(Parser *ps)
{
    return size_level(ps, size_atom, '*', '/', 1);
}

/* size_expr = size_term { ("+" | "-") size_term } */
static SizeVal size_expr(Parser *ps)
{
    return size_level(ps, size_term, '+', '-', 0);
}

/* A size that must be positive: a dimension or a group size. */
static SizeVal positive_size(Parser *ps, const char *what)
{
    Pos pos = ps->tok.pos;
    SizeVal s = size_expr(ps);
    char value[32];
    snprintf(value, sizeof value, "%ld", s.v);
    if (s.v <= 0 && strcmp(s.text, value) == 0) /* a literal: no expression to show */
        error_at(pos, "%s is %ld: sizes must be positive", what, s.v);
    if (s.v <= 0)
        error_at(pos, "%s %s is %ld: sizes must be positive", what, s.text, s.v);
    return s;
}

/* size_decl = "Size" size_item { "," size_item } ";"
 * size_item = NAME [ "=" size_expr ] */
static void size_decl(Parser *ps)
{
    advance(ps);
    do {
        Pos pos = ps->tok.pos;
        const char *name = expect_name(ps, "a size name");
        if (size_find(ps->p, name) || program_find(ps->p, name) >= 0)
            error_at(pos, "'%s' is already defined", name);
        SizeDecl *s = size_add(ps, name, pos);
        if (is_punct(ps, '=')) {
            advance(ps);
            SizeVal v = positive_size(ps, "size");
            s->default_text = v.text;
            if (!s->bound) {
                s->value = v.v;
                s->bound = 1;
            }
        }
        if (!is_punct(ps, ','))
            break;
        advance(ps);
    } while (1);
    expect_punct(ps, ';');
}

/* group_decl = "Group" "GROUP" "(" size_expr ")" ";" */
static void group_decl(Parser *ps)
{
    Program *p = ps->p;
    Pos pos = ps->tok.pos;
    advance(ps);
    if (p->group_text)
        error_at(pos, "GROUP is already declared");
    expect_word(ps, "GROUP");
    expect_punct(ps, '(');
    SizeVal s = positive_size(ps, "group size");
    expect_punct(ps, ')');
    expect_punct(ps, ';');
    p->group_text = s.text;
    p->group_pos = pos;
    if (!ps->cli_group_size)
        p->group_size = s.v;
}

/* The size of GROUP, checked at its first use. */
static void need_group(Parser *ps, Pos pos)
{
    Program *p = ps->p;
    if (p->uses_group)
        return;
    if (!p->group_size)
        error_at(pos, "the size of GROUP is not set: declare 'Group GROUP(n);' or pass --group-size N");
    if (p->nranks % p->group_size)
        error_at(pos, "GROUP has %ld ranks, which does not divide the %d ranks of WORLD",
                 p->group_size, p->nranks);
    p->uses_group = 1;
}

/* group_name = "WORLD" | "GROUP" */
static GroupKind group_ref(Parser *ps)
{
    if (is_word(ps, "WORLD")) {
        advance(ps);
        return G_WORLD;
    }
    if (is_word(ps, "GROUP")) {
        need_group(ps, ps->tok.pos);
        advance(ps);
        return G_GROUP;
    }
    expected(ps, "a process group (WORLD or GROUP)");
}

/* layout = "Sliced" "(" INT ")" | "Replicated" | "Local" */
static Layout layout(Parser *ps)
{
    Layout l = {L_REPLICATED, 0};
    if (is_word(ps, "Replicated")) {
        advance(ps);
    } else if (is_word(ps, "Local")) {
        l.kind = L_LOCAL;
        advance(ps);
    } else if (is_word(ps, "Sliced")) {
        advance(ps);
        expect_punct(ps, '(');
        l.kind = L_SLICED;
        l.dim = expect_int(ps, "a dimension");
        expect_punct(ps, ')');
    } else {
        expected(ps, "a layout (Sliced(d), Replicated or Local)");
    }
    return l;
}

static void define_name(Parser *ps, const char *name, Pos pos)
{
    int prev = program_find(ps->p, name);
    if (prev >= 0)
        error_at(pos, "'%s' is already defined at line %d", name, node_of(ps->p, prev)->pos.line);
    if (size_find(ps->p, name))
        error_at(pos, "'%s' is already defined as a size", name);
}

static void check_declared_slices(Parser *ps, Node *n, Pos lpos)
{
    if (n->layout.kind != L_SLICED)
        return;
    if (n->layout.dim >= n->ndim)
        error_at(lpos, "Sliced(%d) of a tensor with %d dimension%s", n->layout.dim, n->ndim,
                 n->ndim == 1 ? "" : "s");
    long g = group_size_of(ps->p, n->group);
    Dim d = n->dim[n->layout.dim];
    if (d.n % g)
        error_at(lpos, "dimension %d of %s (%s = %ld) is not divisible by the %ld ranks of %s",
                 n->layout.dim, n->name, d.text, d.n, g, group_name(n->group));
}

/* scattered = "Scattered" "[" size_expr { "," size_expr } "]": the members
 * of a scattered tensor; *total gets the 1-D shape of their concatenation
 * (its text the sum of the members', or the number when all are numbers). */
static Dim *scattered(Parser *ps, int *nmember, Dim *total)
{
    Program *p = ps->p;
    Pos pos = ps->tok.pos;
    advance(ps);
    expect_punct(ps, '[');
    int cap = 16, n = 0, literal = 1;
    Dim *m = arena_alloc(p->arena, (size_t)cap * sizeof *m);
    double sum = 0;
    do {
        if (n == MAX_MEMBERS)
            error_at(ps->tok.pos, "a scattered tensor has at most %d members", MAX_MEMBERS);
        if (n == cap) {
            Dim *grown = arena_alloc(p->arena, (size_t)(cap *= 2) * sizeof *m);
            copy_bytes(grown, m, (size_t)n * sizeof *m);
            m = grown;
        }
        literal = literal && ps->tok.kind == TK_NUM;
        SizeVal s = positive_size(ps, "member size");
        m[n].n = s.v;
        m[n++].text = s.text;
        sum += (double)s.v;
        if (!is_punct(ps, ','))
            break;
        advance(ps);
    } while (1);
    expect_punct(ps, ']');
    if (sum > (double)MAX_ELEMENTS)
        error_at(pos, "a scattered tensor of %.3g elements: too large (at most 2^40)", sum);
    total->n = (long)sum;
    if (literal || n == 1) {
        total->text = literal ? arena_printf(p->arena, "%ld", total->n) : m[0].text;
    } else {
        size_t len = 3;
        for (int i = 0; i < n; i++)
            len += strlen(m[i].text) + 3;
        char *t = arena_alloc(p->arena, len), *at = t;
        *at++ = '(';
        for (int i = 0; i < n; i++)
            at += sprintf(at, "%s%s", i ? "+" : "", m[i].text); /* + and - associate left */
        strcpy(at, ")");
        total->text = t;
    }
    *nmember = n;
    return m;
}

/* tensor_decl = "Tensor" NAME "(" type "," shape "," layout "," group_name
 *               [ "," "RANK" ] ")" ";"
 * shape = "[" [ size_expr { "," size_expr } ] "]" | scattered */
static void tensor_decl(Parser *ps)
{
    Program *p = ps->p;
    advance(ps);
    Pos pos = ps->tok.pos;
    const char *name = expect_name(ps, "a tensor name");
    define_name(ps, name, pos);
    Node *n = node_new(p, O_INPUT, pos);
    int id = n->id;
    node_set_name(p, n, name);
    expect_punct(ps, '(');
    Type t = expect_type(ps);
    expect_punct(ps, ',');
    Dim dims[MAXDIM];
    int nd = 0, nmember = 0;
    const Dim *member = NULL;
    if (is_word(ps, "Scattered")) {
        member = scattered(ps, &nmember, &dims[0]);
        nd = 1;
    } else {
        expect_punct(ps, '[');
    }
    while (!member && !is_punct(ps, ']')) {
        if (nd == MAXDIM)
            error_at(ps->tok.pos, "a tensor has at most %d dimensions", MAXDIM);
        SizeVal s = positive_size(ps, "dimension");
        dims[nd].n = s.v;
        dims[nd++].text = s.text;
        if (!is_punct(ps, ','))
            break;
        advance(ps);
    }
    if (!member)
        expect_punct(ps, ']');
    expect_punct(ps, ',');
    Pos lpos = ps->tok.pos;
    Layout l = layout(ps);
    expect_punct(ps, ',');
    GroupKind g = group_ref(ps);
    int has_rank = 0;
    Pos rpos = ps->tok.pos;
    if (is_punct(ps, ',')) {
        advance(ps);
        rpos = ps->tok.pos;
        expect_word(ps, "RANK");
        has_rank = 1;
    }
    expect_punct(ps, ')');
    expect_punct(ps, ';');
    double elements = 1;
    for (int i = 0; i < nd; i++)
        elements *= (double)dims[i].n;
    if (elements > (double)MAX_ELEMENTS)
        error_at(pos, "tensor %s has %.3g elements: too large (at most 2^40)", name, elements);
    n = node_of(p, id);
    n->type = t;
    n->ndim = nd;
    memcpy(n->dim, dims, sizeof dims);
    n->layout = l;
    n->group = g;
    n->has_rank = has_rank;
    n->nmember = nmember;
    n->member = member;
    n->input_index = p->ninput++;
    if (member && l.kind == L_SLICED)
        error_at(lpos, "scattered tensor %s is Sliced: a scattered tensor is Replicated or "
                 "Local (its whole value on each rank)", name);
    if (l.kind != L_REPLICATED && !has_rank)
        error_at(rpos, "a %s tensor is different on each rank: declare it with RANK",
                 l.kind == L_LOCAL ? "Local" : "Sliced");
    if (l.kind == L_REPLICATED && has_rank)
        error_at(rpos, "a Replicated tensor is the same on every rank: it takes no RANK");
    check_declared_slices(ps, n, lpos);
}

/* scalar_decl = "Scalar" NAME "(" type [ "," ["-"] NUMBER ] ")" ";" */
static void scalar_decl(Parser *ps)
{
    Program *p = ps->p;
    advance(ps);
    Pos pos = ps->tok.pos;
    const char *name = expect_name(ps, "a scalar name");
    define_name(ps, name, pos);
    expect_punct(ps, '(');
    Type t = expect_type(ps);
    int has_value = 0;
    double v = 0;
    if (is_punct(ps, ',')) {
        advance(ps);
        v = expect_number(ps, "a number");
        has_value = 1;
    }
    expect_punct(ps, ')');
    expect_punct(ps, ';');
    const char *b = binding_value(ps, name);
    if (b) { /* as the file writes a scalar's value: ["-"] NUMBER */
        int is_int;
        if (!lex_number_text(b, 1, &v, &is_int))
            error_plain("-D %s=%s: the value of a scalar must be a number", name, b);
        has_value = 1;
    }
    if (isinf(type_round(t, v)) && !isinf(v))
        error_at(pos, "the value %g of scalar %s is too large for %s", v, name, type_name(t));
    Node *n = node_new(p, O_SCALAR, pos);
    node_set_name(p, n, name);
    n->type = t;
    n->layout.kind = L_REPLICATED;
    n->group = G_WORLD;
    n->value = type_round(t, v);
    n->has_value = has_value;
    n->input_index = p->ninput++;
}

/* ---- expressions ---- */

static int expr(Parser *ps);

static int make_node(Parser *ps, Op op, Pos pos, int a, int b)
{
    Node *n = node_new(ps->p, op, pos);
    n->nin = op_info(op)->nin;
    n->in[0] = a;
    n->in[1] = b;
    int id = n->id;
    infer_node(ps->p, n);
    return id;
}

/* A reference to a named value; an Updated tensor may not be read again. */
static int name_ref(Parser *ps)
{
    Pos pos = ps->tok.pos;
    char name[MAXNAME];
    snprintf(name, sizeof name, "%.*s", ps->tok.len, ps->tok.start);
    int id = program_find(ps->p, name);
    if (id < 0) {
        if (size_find(ps->p, name))
            error_at(pos, "'%s' is a size, not a tensor", name);
        error_at(pos, "unknown name '%s'", name);
    }
    Node *n = node_of(ps->p, id);
    if (n->updated_by >= 0)
        error_at(pos, "'%s' is overwritten by the Update at line %d: use that Update's result",
                 name, node_of(ps->p, n->updated_by)->pos.line);
    advance(ps);
    return id;
}

static RedOp expect_redop(Parser *ps, int sumsq_ok)
{
    if (ps->tok.kind != TK_STR)
        expected(ps, "a reduction operator (\"+\", \"*\", \"max\" or \"min\")");
    char s[MAXNAME];
    snprintf(s, sizeof s, "%.*s", ps->tok.len, ps->tok.start);
    RedOp r;
    if (!redop_parse(s, &r))
        error_at(ps->tok.pos, "unknown reduction operator \"%s\": use \"+\", \"*\", \"max\" or \"min\"", s);
    if (r == R_SUMSQ && !sumsq_ok)
        error_at(ps->tok.pos, "\"sumsq\" is only for PartialReduce");
    advance(ps);
    return r;
}

/* group_rank = "GroupRank" "(" "GROUP" ("+" | "-") INT "," "RANK" [ "," "Linear" ] ")";
 * gives the shift, and in *linear whether it is Linear (no wrap-around) */
static int group_rank_ref(Parser *ps, int *linear)
{
    expect_word(ps, "GroupRank");
    expect_punct(ps, '(');
    Pos gpos = ps->tok.pos;
    if (!is_word(ps, "GROUP"))
        expected(ps, "GROUP");
    need_group(ps, gpos);
    advance(ps);
    int sign = 0;
    if (is_punct(ps, '+'))
        sign = 1;
    else if (is_punct(ps, '-'))
        sign = -1;
    else
        expected(ps, "'+' or '-' (as in GROUP+1)");
    advance(ps);
    int k = expect_int(ps, "a group offset");
    expect_punct(ps, ',');
    expect_word(ps, "RANK");
    *linear = 0;
    if (is_punct(ps, ',')) {
        advance(ps);
        if (!is_word(ps, "Linear"))
            expected(ps, "'Linear' (the next group if there is one, without wrapping around)");
        advance(ps);
        *linear = 1;
    }
    expect_punct(ps, ')');
    return sign * k;
}

/* An optional ", INT" argument. */
static int opt_int(Parser *ps, int dflt, const char *what)
{
    if (!is_punct(ps, ','))
        return dflt;
    advance(ps);
    return expect_int(ps, what);
}

static int call_collective(Parser *ps, Op op, Pos pos, int is_recv)
{
    Node tmp = {0};
    if (op == O_ALLREDUCE || op == O_REDUCESCATTER || op == O_REDUCE) {
        tmp.redop = expect_redop(ps, 0);
        expect_punct(ps, ',');
    }
    int x = expr(ps);
    if (op == O_REDUCESCATTER)
        tmp.axis = opt_int(ps, 0, "a dimension");
    if (op == O_REDUCE || op == O_BROADCAST) {
        expect_punct(ps, ',');
        tmp.root = expect_int(ps, "a root rank");
    }
    if (op == O_SEND) {
        expect_punct(ps, ',');
        tmp.shift = group_rank_ref(ps, &tmp.linear);
    }
    expect_punct(ps, ')');
    Node *n = node_new(ps->p, op, pos);
    n->nin = 1;
    n->in[0] = x;
    n->redop = tmp.redop;
    n->axis = tmp.axis;
    n->root = tmp.root;
    n->shift = is_recv ? -tmp.shift : tmp.shift;
    n->is_recv = is_recv;
    n->linear = tmp.linear;
    int id = n->id;
    infer_node(ps->p, n);
    return id;
}

/* Update "(" NAME "," expr ")" */
static int call_update(Parser *ps, Pos pos)
{
    Pos tpos = ps->tok.pos;
    if (ps->tok.kind != TK_IDENT)
        expected(ps, "the name of the tensor to update");
    int t = name_ref(ps);
    if (node_of(ps->p, t)->op != O_INPUT)
        error_at(tpos, "Update needs a declared Tensor, but '%s' is a %s",
                 node_of(ps->p, t)->name,
                 node_of(ps->p, t)->op == O_SCALAR ? "Scalar" : "computed value");
    expect_punct(ps, ',');
    int v = expr(ps);
    expect_punct(ps, ')');
    int id = make_node(ps, O_UPDATE, pos, t, v);
    node_of(ps->p, id)->target = t;
    node_of(ps->p, t)->updated_by = id;
    return id;
}

static int call_with_attr(Parser *ps, Op op, Pos pos)
{
    int x = expr(ps);
    Node tmp = {0};
    tmp.axis = -1;
    tmp.stride = 1;
    switch (op) {
    case O_DROPOUT:
        expect_punct(ps, ',');
        {
            Pos vpos = ps->tok.pos;
            tmp.value = expect_number(ps, "a dropout probability");
            if (!(tmp.value >= 0 && tmp.value < 1))
                error_at(vpos, "dropout probability must be in [0, 1), not %g", tmp.value);
        }
        break;
    case O_CAST:
        expect_punct(ps, ',');
        tmp.to = expect_type(ps);
        break;
    case O_SLICE:
        expect_punct(ps, ',');
        tmp.axis = expect_int(ps, "a dimension");
        break;
    default:
        BUG("op %d has no attributes", op);
    }
    expect_punct(ps, ')');
    Node *n = node_new(ps->p, op, pos);
    n->nin = 1;
    n->in[0] = x;
    n->value = tmp.value;
    n->to = tmp.to;
    n->axis = tmp.axis;
    if (op == O_DROPOUT)
        n->dropout_id = ps->p->ndropout++;
    int id = n->id;
    infer_node(ps->p, n);
    return id;
}

/* The comma after argument k of Ite; a ')' there is too few arguments. */
static void ite_comma(Parser *ps, int k)
{
    if (is_punct(ps, ')'))
        error_at(ps->tok.pos, "Ite takes 3 arguments (a condition, the value where it is "
                 "nonzero, the value where it is zero), not %d", k);
    expect_punct(ps, ',');
}

/* Ite "(" expr "," expr "," expr ")" */
static int call_ite(Parser *ps, Pos pos)
{
    int in[3];
    for (int k = 0; k < 3; k++) {
        if (k)
            ite_comma(ps, k);
        in[k] = expr(ps);
    }
    if (is_punct(ps, ','))
        error_at(ps->tok.pos, "Ite takes 3 arguments (a condition, the value where it is "
                 "nonzero, the value where it is zero), not more");
    expect_punct(ps, ')');
    Node *n = node_new(ps->p, O_ITE, pos);
    n->nin = 3;
    memcpy(n->in, in, sizeof in);
    int id = n->id;
    infer_node(ps->p, n);
    return id;
}

/* Conv2D "(" expr "," expr [ "," INT [ "," INT ] ] ")" */
static int call_conv(Parser *ps, Pos pos)
{
    int x = expr(ps);
    expect_punct(ps, ',');
    int w = expr(ps);
    int stride = opt_int(ps, 1, "a stride");
    int pad = opt_int(ps, 0, "a padding");
    expect_punct(ps, ')');
    if (stride < 1)
        error_at(pos, "Conv2D stride must be at least 1");
    Node *n = node_new(ps->p, O_CONV2D, pos);
    n->nin = 2;
    n->in[0] = x;
    n->in[1] = w;
    n->stride = stride;
    n->pad = pad;
    int id = n->id;
    infer_node(ps->p, n);
    return id;
}

/* The keep flag of a reduction: Keep, the word written after its dimension. */
static const char keep_word[] = "Keep";
/* Norm(x, Members): a norm per member of x's scattered partition */
static const char members_word[] = "Members";

/* [ "," ( ["-"] INT [ "," "Keep" ] | "Members" ) ] after the reduced value
 * x of reduction op: the dimension as an index of x (-1: all of them),
 * whether Keep keeps it with extent 1, and whether Members asks a norm per
 * member (-1 then) */
static int reduction_dim(Parser *ps, Op op, Pos pos, int x, int *keep, int *members)
{
    *keep = *members = 0;
    if (!is_punct(ps, ','))
        return -1;
    advance(ps);
    if (is_word(ps, members_word)) {
        if (op != O_NORM)
            error_at(ps->tok.pos, "Members: only Norm reduces each member of a scattered value "
                     "(Norm(x, Members))");
        advance(ps);
        *members = 1;
        return -1;
    }
    if (is_word(ps, keep_word))
        error_at(ps->tok.pos, "Keep follows the reduced dimension: write %s(..., d, Keep)",
                 op_info(op)->name);
    int neg = is_punct(ps, '-');
    if (neg)
        advance(ps);
    int written = expect_int(ps, "a dimension");
    if (is_punct(ps, ',')) {
        advance(ps);
        if (!is_word(ps, keep_word))
            expected(ps, "'Keep' (the reduced dimension kept, with extent 1)");
        advance(ps);
        *keep = 1;
    }
    return infer_dim_argument(ps->p, pos, node_of(ps->p, x), neg ? -written : written,
                              op_info(op)->name);
}

/* ReduceTensor "(" STR "," expr [ "," ["-"] INT [ "," "Keep" ] ] ")"
 * (PartialReduce likewise; Norm without the STR, or "Norm" "(" expr ","
 * "Members" ")") */
static int call_reduction(Parser *ps, Op op, Pos pos)
{
    RedOp r = R_SUM;
    if (op != O_NORM) {
        r = expect_redop(ps, op == O_PARTIAL_REDUCE);
        expect_punct(ps, ',');
    }
    int x = expr(ps), keep, members;
    int axis = reduction_dim(ps, op, pos, x, &keep, &members);
    expect_punct(ps, ')');
    if (members)
        return make_node(ps, O_MEMBER_NORM, pos, x, 0);
    Node *n = node_new(ps->p, op, pos);
    n->nin = 1;
    n->in[0] = x;
    n->redop = r;
    n->axis = axis;
    n->keepdim = keep;
    int id = n->id;
    infer_node(ps->p, n);
    return id;
}

/* The operation the current token calls by its keyword, or NOP. */
static Op call_op(Parser *ps)
{
    return ps->tok.kind == TK_IDENT ? op_of_keyword(ps->tok.start, (size_t)ps->tok.len) : NOP;
}

/* call = OPNAME "(" arguments ")"  (arguments per operation, see doc/language.md) */
static int call(Parser *ps)
{
    Pos pos = ps->tok.pos;
    Op op = call_op(ps);
    ASSERT(op != NOP);
    int is_recv = is_word(ps, recv_keyword);
    advance(ps);
    expect_punct(ps, '(');
    int id;
    switch (op) {
    case O_ALLREDUCE: case O_REDUCESCATTER: case O_ALLGATHER: case O_REDUCE:
    case O_BROADCAST: case O_SEND:
        id = call_collective(ps, op, pos, is_recv);
        break;
    case O_UPDATE:
        return call_update(ps, pos);
    case O_CONV2D:
        return call_conv(ps, pos);
    case O_ITE:
        return call_ite(ps, pos);
    case O_REDUCE_TENSOR: case O_PARTIAL_REDUCE: case O_NORM:
        return call_reduction(ps, op, pos);
    case O_DROPOUT: case O_CAST: case O_SLICE:
        return call_with_attr(ps, op, pos);
    case O_MATMUL: case O_POW: case O_MAX: case O_MIN: {
        int a = expr(ps);
        expect_punct(ps, ',');
        int b = expr(ps);
        expect_punct(ps, ')');
        return make_node(ps, op, pos, a, b);
    }
    default: {
        int a = expr(ps);
        expect_punct(ps, ')');
        return make_node(ps, op, pos, a, 0);
    }
    }
    return id;
}

static int is_call_name(Parser *ps)
{
    return call_op(ps) != NOP;
}

static int constant(Parser *ps, double v, Pos pos)
{
    Node *n = node_new(ps->p, O_CONST, pos);
    n->type = T_FP64;
    n->layout.kind = L_REPLICATED;
    n->group = G_WORLD;
    n->value = v;
    return n->id;
}

/* primary = NUMBER | call | NAME | "(" expr ")" */
static int primary(Parser *ps)
{
    Pos pos = ps->tok.pos;
    if (ps->tok.kind == TK_NUM) {
        double v = ps->tok.num;
        advance(ps);
        return constant(ps, v, pos);
    }
    if (ps->tok.kind == TK_IDENT) {
        if (is_call_name(ps))
            return call(ps);
        if (next_is_lparen(ps)) {
            char name[MAXNAME];
            snprintf(name, sizeof name, "%.*s", ps->tok.len, ps->tok.start);
            error_at(pos, "unknown operation '%s'", name);
        }
        return name_ref(ps);
    }
    if (is_punct(ps, '(')) {
        advance(ps);
        int id = expr(ps);
        expect_punct(ps, ')');
        return id;
    }
    expected(ps, "an expression");
}

/* unary = "-" unary | primary
 * Each level of parentheses, call or minus enters unary once more; the
 * outermost entry is no nesting (MAXDEPTH levels are allowed). */
static int unary(Parser *ps)
{
    Pos pos = ps->tok.pos;
    if (++ps->depth > MAXDEPTH + 1)
        error_at(pos, "expression is nested too deeply (more than %d levels)", MAXDEPTH);
    int id;
    if (is_punct(ps, '-')) {
        advance(ps);
        int x = unary(ps);
        id = make_node(ps, O_NEG, pos, x, 0);
    } else {
        id = primary(ps);
    }
    ps->depth--;
    return id;
}

/* One level of left-associative binary operators:
 * operand { (c1 | c2) operand }, c1 making op1 and c2 op2. */
static int binary_level(Parser *ps, int (*operand)(Parser *), char c1, Op op1, char c2, Op op2)
{
    int l = operand(ps);
    while (is_punct(ps, c1) || is_punct(ps, c2)) {
        Op op = is_punct(ps, c1) ? op1 : op2;
        Pos pos = ps->tok.pos;
        advance(ps);
        int r = operand(ps);
        l = make_node(ps, op, pos, l, r);
    }
    return l;
}

/* term = unary { ("*" | "/") unary } */
static int term(Parser *ps)
{
    return binary_level(ps, unary, '*', O_MUL, '/', O_DIV);
}

/* additive = term { ("+" | "-") term } */
static int additive(Parser *ps)
{
    return binary_level(ps, term, '+', O_ADD, '-', O_SUB);
}

/* The comparison operator (of ops, ending at NOP) that the current token
 * is, or NOP. */
static Op comparison_at(Parser *ps, const Op *ops)
{
    for (int i = 0; ops[i] != NOP; i++) {
        const char *text = op_info(ops[i])->name;
        if (ps->tok.kind == TK_PUNCT && ps->tok.len == (int)strlen(text) &&
            !strncmp(ps->tok.start, text, strlen(text)))
            return ops[i];
    }
    return NOP;
}

/* One level of left-associative comparisons: operand { OP operand }, OP
 * one of ops. */
static int comparison_level(Parser *ps, int (*operand)(Parser *), const Op *ops)
{
    int l = operand(ps);
    for (Op op; (op = comparison_at(ps, ops)) != NOP;) {
        Pos pos = ps->tok.pos;
        advance(ps);
        int r = operand(ps);
        l = make_node(ps, op, pos, l, r);
    }
    return l;
}

/* relational = additive { ("<" | "<=" | ">" | ">=") additive } */
static int relational(Parser *ps)
{
    static const Op ops[] = {O_LT, O_LE, O_GT, O_GE, NOP};
    return comparison_level(ps, additive, ops);
}

/* expr = relational { ("==" | "!=") relational } */
static int expr(Parser *ps)
{
    static const Op ops[] = {O_EQ, O_NE, NOP};
    return comparison_level(ps, relational, ops);
}

/* var_stmt = "Var" NAME "=" expr ";" */
static void var_stmt(Parser *ps)
{
    advance(ps);
    Pos pos = ps->tok.pos;
    const char *name = expect_name(ps, "a variable name");
    define_name(ps, name, pos);
    expect_punct(ps, '=');
    Pos epos = ps->tok.pos;
    int first = ps->p->nnode;
    int id = expr(ps);
    expect_punct(ps, ';');
    Node *n = node_of(ps->p, id);
    if (id < first)
        error_at(epos, "'Var %s = %s;' only renames a value: use %s directly", name, n->name,
                 n->name);
    node_set_name(ps->p, n, name);
}

/* names = "{" [ NAME { "," NAME } ] "}" */
static int *name_list(Parser *ps, int *count, int inputs)
{
    int cap = 8, n = 0;
    int *ids = arena_alloc(ps->p->arena, (size_t)cap * sizeof(int));
    char *seen = arena_alloc(ps->p->arena, (size_t)ps->p->nnode + 1); /* listed ids */
    expect_punct(ps, '{');
    while (!is_punct(ps, '}')) {
        Pos pos = ps->tok.pos;
        if (ps->tok.kind != TK_IDENT)
            expected(ps, "a name");
        char name[MAXNAME];
        snprintf(name, sizeof name, "%.*s", ps->tok.len, ps->tok.start);
        int id = program_find(ps->p, name);
        if (id < 0)
            error_at(pos, "unknown name '%s'", name);
        Op op = node_of(ps->p, id)->op;
        int upd = node_of(ps->p, id)->updated_by;
        if (!inputs && op == O_INPUT && upd >= 0)
            error_at(pos, "'%s' is overwritten by the Update at line %d: use that Update's result",
                     name, node_of(ps->p, upd)->pos.line);
        if (inputs && op != O_INPUT && op != O_SCALAR)
            error_at(pos, "'%s' is computed by the program: only Tensors and Scalars are inputs",
                     name);
        if (seen[id])
            error_at(pos, "'%s' is listed twice", name);
        seen[id] = 1;
        if (n == cap) {
            int *grown = arena_alloc(ps->p->arena, (size_t)cap * 2 * sizeof(int));
            memcpy(grown, ids, (size_t)cap * sizeof(int));
            ids = grown;
            cap *= 2;
        }
        ids[n++] = id;
        advance(ps);
        if (!is_punct(ps, ','))
            break;
        advance(ps);
    }
    expect_punct(ps, '}');
    *count = n;
    return ids;
}

/* Every Tensor and every Scalar without a value must be an input. */
static void check_inputs_listed(Parser *ps, Pos pos)
{
    Program *p = ps->p;
    char *listed = arena_alloc(p->arena, (size_t)p->nnode + 1);
    for (int i = 0; i < p->nexec_in; i++)
        listed[p->exec_in[i]] = 1;
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        int needs = n->op == O_INPUT || (n->op == O_SCALAR && !n->has_value);
        if (needs && !listed[i])
            error_at(pos, "%s '%s' (line %d) is not among the inputs of Execute",
                     n->op == O_INPUT ? "tensor" : "scalar", n->name, n->pos.line);
    }
}

/* execute = "Execute" NAME "(" names "," names ")" ";" */
static void execute(Parser *ps)
{
    Program *p = ps->p;
    Pos pos = ps->tok.pos;
    if (ps->executed)
        error_at(pos, "a file holds one program: a second Execute");
    advance(ps);
    p->exec_name = expect_name(ps, "a program name");
    expect_punct(ps, '(');
    p->exec_in = name_list(ps, &p->nexec_in, 1);
    expect_punct(ps, ',');
    Pos opos = ps->tok.pos;
    p->exec_out = name_list(ps, &p->nexec_out, 0);
    expect_punct(ps, ')');
    expect_punct(ps, ';');
    if (!p->nexec_out)
        error_at(opos, "a program needs at least one output");
    check_inputs_listed(ps, pos);
    ps->executed = 1;
}

/* A list of NAMEs into an arena array. */
static const char **sched_names(Parser *ps, int *count, Pos **pos, char close)
{
    const char **names = arena_alloc(ps->p->arena, 64 * sizeof(char *));
    Pos *where = arena_alloc(ps->p->arena, 64 * sizeof(Pos));
    int n = 0;
    while (!is_punct(ps, close)) {
        if (n == 64)
            error_at(ps->tok.pos, "too many names (at most 64)");
        if (ps->tok.kind != TK_IDENT)
            expected(ps, "a name");
        where[n] = ps->tok.pos;
        names[n++] = arena_strndup(ps->p->arena, ps->tok.start, (size_t)ps->tok.len);
        advance(ps);
        if (!is_punct(ps, ','))
            break;
        advance(ps);
    }
    expect_punct(ps, close);
    *count = n;
    if (pos)
        *pos = where;
    return names;
}

/* sched_stmt = [ NAME "=" | "(" NAME { "," NAME } ")" "=" ] VERB "(" NAME { "," NAME } ")" ";" */
static void sched_stmt(Parser *ps, SchedStmt *st)
{
    memset(st, 0, sizeof *st);
    st->pos = ps->tok.pos;
    if (is_punct(ps, '(')) {
        advance(ps);
        st->out = sched_names(ps, &st->nout, NULL, ')');
        expect_punct(ps, '=');
        st->pos = ps->tok.pos;
    } else if (ps->tok.kind == TK_IDENT && !next_is_lparen(ps)) {
        Lexer save = ps->lx;
        Token name = ps->tok;
        advance(ps);
        if (!is_punct(ps, '=')) {
            ps->lx = save;
            ps->tok = name;
            expected(ps, "a schedule statement such as 'x = fuse(a, b, ComputationFuse);'");
        }
        advance(ps);
        st->out = arena_alloc(ps->p->arena, sizeof(char *));
        st->out[0] = arena_strndup(ps->p->arena, name.start, (size_t)name.len);
        st->nout = 1;
        st->pos = ps->tok.pos;
    }
    if (ps->tok.kind != TK_IDENT)
        expected(ps, "a transformation (split, reorder, fuse, overlap, asSlice or dead)");
    const char *word = arena_strndup(ps->p->arena, ps->tok.start, (size_t)ps->tok.len);
    st->verb = verb_parse(word);
    if (st->verb == V_UNKNOWN)
        st->unknown = word; /* refused when the schedule is applied */
    advance(ps);
    expect_punct(ps, '(');
    st->arg = sched_names(ps, &st->narg, &st->argpos, ')');
    expect_punct(ps, ';');
    if (st->narg && (st->policy = policy_parse(st->arg[st->narg - 1])) != P_NONE)
        st->narg--;
}

/* schedule = "Schedule" NAME "{" { sched_stmt } "}" */
static void schedule(Parser *ps)
{
    Program *p = ps->p;
    advance(ps);
    Pos pos = ps->tok.pos;
    const char *name = expect_name(ps, "a schedule name");
    for (int i = 0; i < p->nsched; i++)
        if (!strcmp(p->sched[i].name, name))
            error_at(pos, "schedule '%s' is already defined at line %d", name, p->sched[i].pos.line);
    expect_punct(ps, '{');
    Schedule *grown = arena_alloc(p->arena, (size_t)(p->nsched + 1) * sizeof(Schedule));
    copy_bytes(grown, p->sched, (size_t)p->nsched * sizeof(Schedule));
    p->sched = grown;
    Schedule *sc = &p->sched[p->nsched++];
    sc->name = name;
    sc->pos = pos;
    sc->file = ps->file ? ps->file : p->file;
    sc->src = ps->lx.src;
    int cap = 0;
    while (!is_punct(ps, '}')) {
        if (ps->tok.kind == TK_EOF)
            error_at(pos, "schedule '%s' has no closing '}'", name);
        if (sc->nstmt == cap) {
            cap = cap ? 2 * cap : 8;
            SchedStmt *more = arena_alloc(p->arena, (size_t)cap * sizeof(SchedStmt));
            copy_bytes(more, sc->stmt, (size_t)sc->nstmt * sizeof(SchedStmt));
            sc->stmt = more;
        }
        sched_stmt(ps, &sc->stmt[sc->nstmt++]);
    }
    advance(ps);
}

/* statement = size_decl | group_decl | tensor_decl | scalar_decl | var_stmt | execute
 *           | schedule */
static void statement(Parser *ps)
{
    if (is_word(ps, "Schedule")) {
        if (!ps->executed)
            error_at(ps->tok.pos, "a Schedule comes after the program's Execute");
        schedule(ps);
        return;
    }
    if (ps->executed && !is_word(ps, "Execute"))
        error_at(ps->tok.pos, "statements after Execute: the program ends with its Execute");
    if (is_word(ps, "Size"))
        size_decl(ps);
    else if (is_word(ps, "Group"))
        group_decl(ps);
    else if (is_word(ps, "Tensor"))
        tensor_decl(ps);
    else if (is_word(ps, "Scalar"))
        scalar_decl(ps);
    else if (is_word(ps, "Var"))
        var_stmt(ps);
    else if (is_word(ps, "Execute"))
        execute(ps);
    else
        expected(ps, "a statement (Size, Group, Tensor, Scalar, Var or Execute)");
}

static void check_bindings_used(Parser *ps)
{
    for (int i = 0; i < ps->nbind; i++)
        if (!ps->bind_used[i])
            error_plain("-D %s: the program has no size or scalar named %s", ps->bind[i].name,
                        ps->bind[i].name);
}

/* program = { statement } EOF */
void parse_program(Program *p, const Binding *b, int nb, int nranks, long group_size)
{
    Parser ps;
    memset(&ps, 0, sizeof ps);
    ps.p = p;
    ps.bind = b;
    ps.nbind = nb;
    ps.bind_used = arena_alloc(p->arena, (size_t)(nb + 1) * sizeof(int));
    ps.cli_group_size = group_size;
    p->nranks = nranks;
    p->group_size = group_size;
    lex_init(&ps.lx, p->src);
    advance(&ps);
    while (ps.tok.kind != TK_EOF)
        statement(&ps);
    if (!ps.executed)
        error_at(ps.tok.pos, "the program has no Execute statement");
    check_bindings_used(&ps);
}

/* A file of schedules only: { schedule } EOF, for a program already parsed. */
void parse_schedules(Program *p, const char *file, const char *src)
{
    Parser ps;
    memset(&ps, 0, sizeof ps);
    ps.p = p;
    ps.file = file;
    ps.executed = 1;
    lex_init(&ps.lx, src);
    advance(&ps);
    while (ps.tok.kind != TK_EOF) {
        if (!is_word(&ps, "Schedule"))
            expected(&ps, "'Schedule'");
        schedule(&ps);
    }
}

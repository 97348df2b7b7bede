/* lex.c: turns .coco text into tokens: identifiers, numbers, "strings" and
 * punctuation (one character, or one of <= >= == !=); skips white space and
 * line and block comments. Positions are 1-based line and column. Bad
 * characters are user errors. */
#include "front/front.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void lex_init(Lexer *lx, const char *src)
{
    lx->src = src;
    lx->p = src;
    lx->line = 1;
    lx->line_start = src;
}

static Pos here(Lexer *lx)
{
    Pos pos = {lx->line, (int)(lx->p - lx->line_start) + 1};
    return pos;
}

static void newline(Lexer *lx)
{
    lx->line++;
    lx->line_start = lx->p + 1;
}

/* Skips blanks and comments. */
static void skip_space(Lexer *lx)
{
    for (;;) {
        char c = *lx->p;
        if (c == '\n') {
            newline(lx);
            lx->p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            lx->p++;
        } else if (c == '/' && lx->p[1] == '/') {
            while (*lx->p && *lx->p != '\n')
                lx->p++;
        } else if (c == '/' && lx->p[1] == '*') {
            Pos start = here(lx);
            lx->p += 2;
            while (*lx->p && !(lx->p[0] == '*' && lx->p[1] == '/')) {
                if (*lx->p == '\n')
                    newline(lx);
                lx->p++;
            }
            if (!*lx->p)
                error_at(start, "unterminated /* comment");
            lx->p += 2;
        } else {
            return;
        }
    }
}

static Token lex_number(Lexer *lx, Token t)
{
    const char *s = lx->p;
    int is_int = 1;
    while (isdigit((unsigned char)*lx->p))
        lx->p++;
    if (*lx->p == '.') {
        is_int = 0;
        lx->p++;
        while (isdigit((unsigned char)*lx->p))
            lx->p++;
    }
    if (*lx->p == 'e' || *lx->p == 'E') {
        const char *e = lx->p + 1;
        if (*e == '+' || *e == '-')
            e++;
        if (isdigit((unsigned char)*e)) {
            is_int = 0;
            lx->p = e;
            while (isdigit((unsigned char)*lx->p))
                lx->p++;
        }
    }
    if (isalpha((unsigned char)*lx->p) || *lx->p == '_')
        error_at(t.pos, "malformed number '%.*s'", (int)(lx->p - s + 1), s);
    errno = 0;
    t.num = strtod(s, NULL);
    if (errno == ERANGE && isinf(t.num))
        error_at(t.pos, "number '%.*s' is too large", (int)(lx->p - s), s);
    t.kind = TK_NUM;
    t.is_int = is_int;
    t.len = (int)(lx->p - s);
    return t;
}

static Token lex_string(Lexer *lx, Token t)
{
    lx->p++;
    while (*lx->p && *lx->p != '"' && *lx->p != '\n')
        lx->p++;
    if (*lx->p != '"')
        error_at(t.pos, "unterminated string");
    lx->p++;
    t.kind = TK_STR;
    t.start++; /* without the quotes */
    t.len = (int)(lx->p - t.start) - 1;
    return t;
}

Token lex_next(Lexer *lx)
{
    skip_space(lx);
    Token t;
    memset(&t, 0, sizeof t);
    t.pos = here(lx);
    t.start = lx->p;
    char c = *lx->p;
    if (!c) { /* at the end of the last line, not on the empty line after it */
        t.kind = TK_EOF;
        if (lx->p > lx->src && lx->p[-1] == '\n' && lx->line > 1) {
            const char *start = lx->p - 1;
            while (start > lx->src && start[-1] != '\n')
                start--;
            t.pos.line = lx->line - 1;
            t.pos.col = (int)(lx->p - 1 - start) + 1;
        }
        return t;
    }
    if (isalpha((unsigned char)c) || c == '_') {
        while (isalnum((unsigned char)*lx->p) || *lx->p == '_')
            lx->p++;
        t.kind = TK_IDENT;
        t.len = (int)(lx->p - t.start);
        if (t.len >= MAXNAME)
            error_at(t.pos, "name is too long (%d characters, at most %d)", t.len, MAXNAME - 1);
        return t;
    }
    if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)lx->p[1])))
        return lex_number(lx, t);
    if (c == '"')
        return lex_string(lx, t);
    if (strchr("<>=!", c) && lx->p[1] == '=') { /* <= >= == != */
        lx->p += 2;
        t.kind = TK_PUNCT;
        t.len = 2;
        return t;
    }
    if (strchr("()[]{},;=+-*/<>", c)) {
        lx->p++;
        t.kind = TK_PUNCT;
        t.len = 1;
        return t;
    }
    if (isprint((unsigned char)c))
        error_at(t.pos, "unexpected character '%c'", c);
    error_at(t.pos, "unexpected byte 0x%02x (is this a text file?)", (unsigned char)c);
}

/* s lexed as one NUMBER token into *t; 0 when malformed or too large. */
static int lex_one_number(const char *s, Token *t)
{
    char msg[256];
    ErrorCtx ctx;
    error_push(&ctx, msg, sizeof msg, NULL, NULL);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        return 0;
    }
    Lexer lx;
    lex_init(&lx, s);
    *t = lex_number(&lx, (Token){TK_NUM, s, 0, 0, 0, {1, 1}});
    error_pop(&ctx);
    return *lx.p == 0;
}

/* Reads text as the program's grammar reads a number: NUMBER, or with
 * sign_ok ["-"] NUMBER, and nothing else (no spaces, "+", hexadecimal or
 * trailing characters). The one reader of numbers given on the command line
 * (-D), so that they mean what they would in the file. 1 on success. */
int lex_number_text(const char *text, int sign_ok, double *v, int *is_int)
{
    int neg = sign_ok && text[0] == '-';
    const char *s = text + neg;
    Token t;
    if (!isdigit((unsigned char)s[0]) && !(s[0] == '.' && isdigit((unsigned char)s[1])))
        return 0;
    if (!lex_one_number(s, &t))
        return 0;
    *v = neg ? -t.num : t.num;
    *is_int = t.is_int;
    return 1;
}

/* [s, s + len) as decimal digits, at most MAX_SIZE + 1 (a larger value is
 * too large either way); -1 when not digits alone */
static double digits_value(const char *s, size_t len)
{
    double v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
        if (v > (double)MAX_SIZE)
            v = (double)MAX_SIZE + 1;
    }
    return len ? v : -1;
}

/* The one grammar of sizes written outside the file: the file's own
 * integers (decimal digits), or a power of two 2^k; the file's limit. */
const char *size_text_read(const char *text, size_t len, long *v)
{
    int power = len > 2 && text[0] == '2' && text[1] == '^';
    int minus = len > 1 && text[0] == '-';
    size_t skip = power ? 2 : minus ? 1 : 0;
    double x = digits_value(text + skip, len - skip);
    if (x < 0)
        return "a size must be a positive integer or 2^k";
    if (power)
        x = x < 64 ? ldexp(1, (int)x) : (double)MAX_SIZE + 1;
    if (minus || x < 1)
        return "a size must be positive";
    if (x > (double)MAX_SIZE)
        return "a size is at most 10^13";
    *v = (long)x;
    return NULL;
}

/* util.c: memory arenas, user errors with source carets, internal errors.
 *
 * A user error (bad program, bad flag) formats "file:line:col: error: ..."
 * followed by the source line and a caret into the buffer of the innermost
 * ErrorCtx and longjmps there; nothing is printed. An internal error is a
 * bug in coconet: it prints file and line and aborts. */
#include "coco.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Chunk {
    struct Chunk *next;
    size_t used, cap;
    max_align_t data[];
} Chunk;

struct Arena {
    Chunk *head;
};

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "coconet: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "coconet: out of memory (%zu x %zu bytes)\n", n, size);
        abort();
    }
    return p;
}

void *xgrow(void *a, int n, int *cap, int first, size_t size)
{
    if (n < *cap)
        return a;
    *cap = *cap ? 2 * *cap : first;
    void *grown = xcalloc((size_t)*cap, size);
    if (n)
        memcpy(grown, a, (size_t)n * size);
    free(a);
    return grown;
}

void copy_bytes(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

Arena *arena_new(void)
{
    return xcalloc(1, sizeof(Arena));
}

void arena_free(Arena *a)
{
    if (!a)
        return;
    for (Chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(a);
}

void *arena_alloc(Arena *a, size_t n)
{
    size_t align = sizeof(max_align_t);
    n = (n + align - 1) / align * align;
    Chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = xmalloc(sizeof(Chunk) + cap);
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *d = arena_alloc(a, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* Makes every line end of text one '\n': "\r\n" (Windows) and a lone "\r"
 * (old Mac) become "\n", so that the lexer, the positions of messages and
 * their carets count lines alike. In place (the text only shrinks). */
void text_unify_line_ends(char *text)
{
    char *out = text;
    for (const char *in = text; *in; in++) {
        if (in[0] == '\r') {
            *out++ = '\n';
            in += in[1] == '\n';
        } else {
            *out++ = *in;
        }
    }
    *out = 0;
}

char *arena_strdup(Arena *a, const char *s)
{
    return arena_strndup(a, s, strlen(s));
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static ErrorCtx *error_top;

void error_push(ErrorCtx *ctx, char *buf, size_t len, const char *file, const char *src)
{
    ctx->buf = buf;
    ctx->len = len;
    ctx->file = file;
    ctx->src = src;
    ctx->config = 0;
    ctx->prev = error_top;
    error_top = ctx;
    if (len)
        buf[0] = 0;
}

void error_pop(ErrorCtx *ctx)
{
    ASSERT(error_top == ctx);
    error_top = ctx->prev;
}

/* Appends the source line of pos and a caret under its column. */
static size_t format_caret(char *out, size_t len, const char *src, Pos pos)
{
    const char *line = src;
    for (int l = 1; l < pos.line && line; l++) {
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    if (!line)
        return 0;
    int n = 0;
    while (line[n] && line[n] != '\n' && line[n] != '\r')
        n++;
    if (n > 200)
        n = 200;
    size_t used = (size_t)snprintf(out, len, "  %.*s\n  ", n, line);
    for (int c = 1; c < pos.col && used + 2 < len; c++)
        out[used++] = line[c - 1] == '\t' ? '\t' : ' ';
    if (used + 2 < len) {
        out[used++] = '^';
        out[used++] = '\n';
        out[used] = 0;
    }
    return used;
}

static _Noreturn void error_vformat(Pos pos, const char *fmt, va_list ap)
{
    ErrorCtx *ctx = error_top;
    if (!ctx) {
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        BUG("user error raised outside any error context");
    }
    char *b = ctx->buf;
    size_t len = ctx->len, used = 0;
    if (pos.line > 0)
        used = (size_t)snprintf(b, len, "%s:%d:%d: error: ", ctx->file, pos.line, pos.col);
    else if (ctx->file)
        used = (size_t)snprintf(b, len, "%s: error: ", ctx->file);
    else
        used = (size_t)snprintf(b, len, "error: ");
    if (used < len)
        used += (size_t)vsnprintf(b + used, len - used, fmt, ap);
    if (used + 1 < len) {
        b[used++] = '\n';
        b[used] = 0;
    }
    if (pos.line > 0 && ctx->src && used < len)
        format_caret(b + used, len - used, ctx->src, pos);
    longjmp(ctx->jb, 1);
}

/* Raises msg, an error caught (and formatted) by a nested context, again in
 * the enclosing one: a nested context frees what its code holds first. */
_Noreturn void error_again(const char *msg)
{
    ErrorCtx *ctx = error_top;
    if (!ctx)
        BUG("user error raised outside any error context: %s", msg);
    snprintf(ctx->buf, ctx->len, "%s", msg);
    longjmp(ctx->jb, 1);
}

_Noreturn void error_at(Pos pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vformat(pos, fmt, ap);
}

_Noreturn void error_plain(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    Pos none = {0, 0};
    if (error_top)
        error_top->config = 1;
    error_vformat(none, fmt, ap);
}

_Noreturn void internal_error(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "coconet: internal error at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* What a file that is not regular is, for a message. */
static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

FILE *open_regular_file(const char *path, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO waits for a writer otherwise */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(err, errlen, "%s: error: cannot open: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: error: cannot read %s: a regular file is expected\n", path,
                 file_kind(st.st_mode));
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: error: cannot open: %s\n", path, strerror(errno));
        close(fd);
    }
    return f;
}

/* api.c: the public API of include/coconet.h on top of the internal passes:
 * loading (read, parse, check, verify), facts about a program, and running
 * it on the CPU reference executor. User errors come back as messages;
 * nothing here prints. */
#define _DEFAULT_SOURCE /* sysconf(_SC_PHYS_PAGES) */
#include "api.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

enum { MAX_SOURCE = 64 << 20, MAX_RANKS = 4096 };

static void set_err(char *err, size_t len, const char *fmt, const char *a, const char *b)
{
    if (len)
        snprintf(err, len, fmt, a, b);
}

/* The whole text file, malloc'd; NULL with a message when it cannot be read,
 * is over 64 MiB, or holds a NUL byte. */
char *read_source_file(const char *path, char *err, size_t errlen)
{
    FILE *f = open_regular_file(path, err, errlen);
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= MAX_SOURCE) {
                set_err(err, errlen, "%s: error: file is larger than 64 MiB%s\n", path, "");
                free(buf);
                fclose(f);
                return NULL;
            }
            cap *= 2;
            char *grown = realloc(buf, cap);
            if (!grown)
                BUG("out of memory reading %s", path);
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int failed = ferror(f);
    fclose(f);
    buf[n] = 0;
    if (failed) {
        set_err(err, errlen, "%s: error: cannot read: %s\n", path, strerror(errno));
        free(buf);
        return NULL;
    }
    if (strlen(buf) != n) {
        set_err(err, errlen, "%s: error: the file contains a NUL byte: it is not a .coco text%s\n",
                path, "");
        free(buf);
        return NULL;
    }
    text_unify_line_ends(buf);
    return buf;
}

static Binding *parse_defines(Program *p, const coco_config *cfg)
{
    Binding *b = arena_alloc(p->arena, (size_t)(cfg->ndefines + 1) * sizeof(Binding));
    for (int i = 0; i < cfg->ndefines; i++) {
        const char *d = cfg->defines[i];
        const char *eq = strchr(d, '=');
        if (!eq || eq == d || !eq[1])
            error_plain("-D %s: expected NAME=VALUE", d);
        b[i].name = arena_strndup(p->arena, d, (size_t)(eq - d));
        b[i].value = arena_strdup(p->arena, eq + 1);
        for (int j = 0; j < i; j++)
            if (!strcmp(b[j].name, b[i].name))
                error_plain("-D %s is given twice", b[i].name);
    }
    return b;
}

/* coco_load_string, with whose fault a failure is in *status */
static Program *load_text(const char *name, const char *text, const coco_config *cfg,
                          int *status, char *err, size_t errlen)
{
    Program *p = program_new(name, text);
    ErrorCtx ctx;
    error_push(&ctx, err, errlen, p->file, p->src);
    if (setjmp(ctx.jb)) {
        *status = ctx.config ? COCO_LOAD_BAD_CONFIG : COCO_LOAD_BAD_PROGRAM;
        error_pop(&ctx);
        program_free(p);
        return NULL;
    }
    if (cfg->nranks < 1 || cfg->nranks > MAX_RANKS)
        error_plain("the number of ranks must be between 1 and %d, not %d", MAX_RANKS,
                    cfg->nranks);
    if (cfg->group_size < 0)
        error_plain("the group size must be positive, not %ld", cfg->group_size);
    Binding *b = parse_defines(p, cfg);
    parse_program(p, b, cfg->ndefines, cfg->nranks, cfg->group_size);
    error_pop(&ctx);
    verify_program(p);
    *status = COCO_LOAD_OK;
    return p;
}

coco_program *coco_load_string(const char *name, const char *text, const coco_config *cfg,
                               char *err, size_t errlen)
{
    int status;
    return load_text(name, text, cfg, &status, err, errlen);
}

coco_program *coco_load_file_status(const char *path, const coco_config *cfg, int *status,
                                    char *err, size_t errlen)
{
    int ignored;
    status = status ? status : &ignored;
    *status = COCO_LOAD_BAD_PROGRAM;
    char *text = read_source_file(path, err, errlen);
    if (!text)
        return NULL;
    coco_program *p = load_text(path, text, cfg, status, err, errlen);
    free(text);
    return p;
}

coco_program *coco_load_file(const char *path, const coco_config *cfg, char *err, size_t errlen)
{
    return coco_load_file_status(path, cfg, NULL, err, errlen);
}

void coco_program_free(coco_program *p)
{
    program_free(p);
}

void coco_print(coco_program *p, FILE *out)
{
    print_program(p, out);
}

const char *coco_program_name(const coco_program *p)
{
    return p->exec_name;
}

int coco_num_ranks(const coco_program *p)
{
    return p->nranks;
}

int coco_num_inputs(const coco_program *p)
{
    return p->nexec_in;
}

const char *coco_input_name(const coco_program *p, int i)
{
    return i >= 0 && i < p->nexec_in ? p->node[p->exec_in[i]].name : NULL;
}

int coco_input_is_scalar(const coco_program *p, int i)
{
    return i >= 0 && i < p->nexec_in && p->node[p->exec_in[i]].op == O_SCALAR;
}

int coco_input_constant(const coco_program *p, int i, double *value)
{
    if (!coco_input_is_scalar(p, i) || !p->node[p->exec_in[i]].has_value)
        return 0;
    const Node *n = &p->node[p->exec_in[i]];
    *value = type_round(n->type, n->value);
    return 1;
}

int coco_input_members(const coco_program *p, int i, long *count, int max)
{
    if (i < 0 || i >= p->nexec_in)
        return -1;
    const Node *n = &p->node[p->exec_in[i]];
    for (int m = 0; m < n->nmember && m < max; m++)
        count[m] = n->member[m].n;
    return n->nmember;
}

int coco_program_group_size(const coco_program *p)
{
    return p->uses_group ? (int)p->group_size : 0;
}

int coco_num_sizes(const coco_program *p)
{
    return p->nsize;
}

const char *coco_size_name(const coco_program *p, int i)
{
    return i >= 0 && i < p->nsize ? p->size[i].name : NULL;
}

long coco_size_value(const coco_program *p, int i)
{
    return i >= 0 && i < p->nsize ? p->size[i].value : -1;
}

int coco_num_outputs(const coco_program *p)
{
    return p->nexec_out;
}

const char *coco_output_name(const coco_program *p, int i)
{
    return i >= 0 && i < p->nexec_out ? p->node[p->exec_out[i]].name : NULL;
}

int coco_program_roofline(const coco_program *p, int rank, coco_roofline *r)
{
    if (rank < -1 || rank >= p->nranks)
        return -1;
    Roofline x;
    if (rank < 0)
        roofline_busiest(p, &x);
    else
        roofline_rank(p, rank, &x);
    *r = (coco_roofline){.read_bytes = x.read_bytes, .write_bytes = x.write_bytes,
                         .link_bytes = x.link_bytes, .flops = x.flops};
    return 0;
}

/* coco_run_fits is in api_mem.c */

/* The run could not get memory: FILE:LINE:COL of the value it was making,
 * and the run is unusable from now on. */
static void run_failed(coco_run *r, int earlier, char *err, size_t errlen)
{
    Exec *e = r->exec;
    const Node *n = &r->prog->node[e->oom_node];
    char msg[512];
    exec_oom_message(e, msg, sizeof msg);
    if (errlen && !earlier)
        snprintf(err, errlen, "%s:%d:%d: error: %s\n", r->prog->file, n->pos.line, n->pos.col,
                 msg);
    else if (errlen)
        snprintf(err, errlen, "%s: error: this run failed earlier (%s)\n", r->prog->file, msg);
}

coco_run *coco_run_create(coco_program *p, uint64_t seed, int nthreads, char *err, size_t errlen)
{
    if (coco_run_fits(p, err, errlen))
        return NULL;
    coco_run *r = xcalloc(1, sizeof *r);
    r->prog = p;
    r->exec = exec_new(p, seed, nthreads < 1 ? 1 : nthreads);
    r->exec->recover = 1;
    if (exec_fill_inputs(r->exec)) {
        run_failed(r, 0, err, errlen);
        coco_run_free(r);
        return NULL;
    }
    return r;
}

coco_run *coco_run_new(coco_program *p, uint64_t seed, int nthreads)
{
    char err[16];
    return coco_run_create(p, seed, nthreads, err, sizeof err);
}

/* Node id as one rank holds it, without data */
static void describe_node(Program *p, int id, int rank, coco_tensor *t)
{
    Node *n = node_of(p, id);
    memset(t, 0, sizeof *t);
    t->name = n->name;
    t->type = type_name(n->type);
    t->layout = layout_str(p->arena, n->layout);
    t->ndim = n->ndim;
    t->group_ranks = (int)group_size_of(p, n->group);
    long off[MAXDIM];
    local_shape(p, n, rank, t->local_shape, off);
    t->count = 1;
    for (int i = 0; i < n->ndim; i++) {
        t->global_shape[i] = n->dim[i].n;
        t->count *= t->local_shape[i];
    }
}

int coco_describe(coco_program *p, const char *name, int rank, coco_tensor *t)
{
    int id = program_find(p, name);
    if (id < 0 || rank < 0 || rank >= p->nranks)
        return -1;
    describe_node(p, id, rank, t);
    return 0;
}

int coco_run_tensor(coco_run *r, const char *name, int rank, coco_tensor *t)
{
    long count;
    if (r->exec->failed || coco_describe(r->prog, name, rank, t))
        return -1;
    double *data = exec_data(r->exec, program_find(r->prog, name), rank, &count);
    if (!data)
        return -1;
    t->count = count;
    t->data = data;
    return 0;
}

/* The Execute input named so, or -1 */
static int find_input(Program *p, const char *name)
{
    for (int i = 0; i < p->nexec_in; i++)
        if (!strcmp(p->node[p->exec_in[i]].name, name))
            return p->exec_in[i];
    return -1;
}

int coco_run_write(coco_run *r, const char *name, int rank, const double *data, long count,
                   char *err, size_t errlen)
{
    Program *p = r->prog;
    int id = find_input(p, name);
    if (errlen)
        err[0] = 0;
    if (id < 0) {
        snprintf(err, errlen, "'%s' is not an input of program '%s'", name, coco_program_name(p));
        return -1;
    }
    if (rank < 0 || rank >= p->nranks) {
        snprintf(err, errlen, "rank %d of input '%s': the program has ranks 0 to %d", rank, name,
                 p->nranks - 1);
        return -1;
    }
    long have;
    double *to = exec_data(r->exec, id, rank, &have);
    if (!to || have != count) {
        snprintf(err, errlen, "input '%s' on rank %d holds %ld elements, %ld were given", name,
                 rank, to ? have : 0L, count);
        return -1;
    }
    const Node *n = node_of(p, id);
    /* a Scalar with a value is a constant: the generated code holds it */
    if (n->op == O_SCALAR && n->has_value &&
        type_round(n->type, data[0]) != type_round(n->type, n->value)) {
        snprintf(err, errlen,
                 "scalar '%s' is the constant %.17g in program '%s', and %.17g was given: "
                 "declare it without a value to make it an input",
                 name, n->value, coco_program_name(p), data[0]);
        return -1;
    }
    for (long i = 0; i < count; i++)
        to[i] = type_round(n->type, data[i]);
    return 0;
}

int coco_run_updated(coco_run *r, const char *name, int rank, coco_tensor *t)
{
    Program *p = r->prog;
    int id = find_input(p, name);
    if (id < 0 || rank < 0 || rank >= p->nranks)
        return -1;
    int by = node_of(p, id)->updated_by, at = by >= 0 ? by : id;
    long count;
    double *data = exec_data(r->exec, at, rank, &count);
    if (!data)
        return -1;
    describe_node(p, at, rank, t);
    t->name = node_of(p, id)->name;
    t->count = count;
    t->data = data;
    return 0;
}

int coco_run_execute(coco_run *r, char *err, size_t errlen)
{
    if (errlen)
        err[0] = 0;
    int earlier = r->exec->failed;
    if (earlier || exec_run(r->exec)) {
        run_failed(r, earlier, err, errlen);
        return -1;
    }
    return 0;
}

void coco_run_free(coco_run *r)
{
    if (!r)
        return;
    exec_free(r->exec);
    coco_run_free(r->directed[0]);
    coco_run_free(r->directed[1]);
    free(r);
}

static void summary_add(coco_summary *s, Type t, double x)
{
    uint64_t bits = type_bits(t, x);
    for (size_t i = 0; i < type_size(t); i++) {
        s->hash ^= (bits >> (8 * i)) & 0xff;
        s->hash *= 1099511628211ULL;
    }
    s->sum += x;
    s->norm += x * x;
    s->count++;
}

static int replicas_agree(coco_run *r, Node *n, int rank0, int rank)
{
    long c0, c;
    double *a = exec_data(r->exec, n->id, rank0, &c0);
    double *b = exec_data(r->exec, n->id, rank, &c);
    return c0 == c && !memcmp(a, b, (size_t)c * sizeof(double));
}

int coco_run_summary(coco_run *r, const char *name, coco_summary *s)
{
    Program *p = r->prog;
    int id = program_find(p, name);
    if (r->exec->failed || id < 0 || !exec_data(r->exec, id, 0, &(long){0}))
        return -1;
    Node *n = node_of(p, id);
    memset(s, 0, sizeof *s);
    s->hash = 14695981039346656037ULL;
    s->replicas_agree = 1;
    int ngroups = ngroups_of(p, n->group);
    long gsize = group_size_of(p, n->group);
    for (int g = 0; g < ngroups; g++) {
        int first = rank_of(p, n->group, g, 0);
        if (n->layout.kind == L_SLICED) {
            for (long i = 0, c = dim_count(n); i < c; i++)
                summary_add(s, n->type, exec_value_at(r->exec, n, first, i));
            continue;
        }
        int nr = n->layout.kind == L_LOCAL ? (int)gsize : 1;
        for (int k = 0; k < nr; k++) {
            long c;
            double *d = exec_data(r->exec, id, first + k, &c);
            for (long i = 0; i < c; i++)
                summary_add(s, n->type, d[i]);
        }
        for (int k = 1; n->layout.kind == L_REPLICATED && k < gsize; k++)
            s->replicas_agree &= replicas_agree(r, n, first, first + k);
    }
    s->norm = sqrt(s->norm);
    return 0;
}

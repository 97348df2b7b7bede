/* record.c: the tuning record: what `coconet tune` chose, per size, for one
 * program on one machine; read by `run` and `gen --schedule tuned`.
 *
 * The key is the text of these lines:
 *   program HASH   FNV-1a of the program's text and of the text of each
 *                  file its schedules were added from (-D values are not in
 *                  it: they are sizes, below, or scalars, which change no time)
 *   ranks P        group G (0: no GROUP)
 *   gpu MODEL      the GPU models (nvidia-smi, else the driver's files)
 *   nccl VERSION   NCCL_VERSION_CODE the code is built against
 *   coconet V      coconet's version
 * It is kept in CACHE/tune-KEYHASH.txt (CACHE: the build cache), a text file:
 *   # a comment
 *   key LINE       each line of the key, in order
 *   entry sizes=N=1048576,B=8 tuned=N schedule=NAME knobs=KNOBSET ms=T program_ms=T
 * one entry per size point tuned: every size of the program, the names tuned
 * (--sizes), the pick, its time and the program's. A file whose key lines
 * differ from the key asked (a collision, an edit) is never served. A run
 * uses the entry whose untuned sizes all equal its own and whose tuned
 * sizes are the nearest to its own (the sum of |log2| of the ratios). */
#include "tune/tune.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* The program's text and its schedule files' (each once) */
static uint64_t text_hash(const Program *p)
{
    uint64_t h = fnv1a(FNV_INIT, p->src, strlen(p->src) + 1);
    for (int i = 0; i < p->nsched; i++) {
        const Schedule *s = &p->sched[i];
        int again = s->generated || !s->src || s->src == p->src;
        for (int j = 0; j < i && !again; j++)
            again = p->sched[j].src == s->src;
        if (!again)
            h = fnv1a(h, s->src, strlen(s->src) + 1);
    }
    return h;
}

/* One line: newlines of the GPU list become "; " */
static void one_line(char *dst, size_t len, const char *src)
{
    size_t u = 0;
    for (const char *s = src; *s && u + 3 < len; s++) {
        if (*s != '\n') {
            dst[u++] = *s;
        } else if (s[1]) {
            dst[u++] = ';';
            dst[u++] = ' ';
        }
    }
    dst[u] = 0;
}

int record_key(Program *p, const char *gpu, int nccl, Record *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    char model[512];
    one_line(model, sizeof model, gpu);
    snprintf(r->key, sizeof r->key,
             "program %016llx\nranks %d\ngroup %ld\ngpu %s\nnccl %d\ncoconet %s\n",
             (unsigned long long)text_hash(p), p->nranks, p->uses_group ? p->group_size : 0,
             model, nccl, COCONET_VERSION);
    char dir[CUDA_PATH_MAX];
    if (cuda_cache_dir(dir, sizeof dir)) {
        snprintf(err, errlen, "coconet: no cache directory for the tuning record: set "
                 "COCONET_CACHE or HOME\n");
        return -1;
    }
    pathf(r->path, sizeof r->path, "%s/tune-%016llx.txt", dir,
          (unsigned long long)fnv1a(FNV_INIT, r->key, strlen(r->key)));
    return 0;
}

void record_sizes(Program *p, char *buf, size_t len)
{
    buf[0] = 0;
    for (int i = 0; i < p->nsize; i++)
        append(buf, len, "%s%s=%ld", i ? "," : "", p->size[i].name, p->size[i].value);
}

/* ---- the file ---- */

static const char *field(const char *line, const char *name, char *out, size_t len)
{
    char pat[32];
    snprintf(pat, sizeof pat, " %s=", name);
    const char *s = strstr(line, pat);
    if (!s)
        return NULL;
    s += strlen(pat);
    size_t n = strcspn(s, " \n");
    snprintf(out, len, "%.*s", (int)n, s);
    return out;
}

/* 0, or -1 for a malformed line, or -2 for a knob set this coconet does
 * not know (its name in `knob`: a record of another version) */
static int parse_entry(const char *line, RecordEntry *e, char *knob, size_t knob_len)
{
    char ms[64], pms[64];
    memset(e, 0, sizeof *e);
    if (!field(line, "sizes", e->sizes, sizeof e->sizes) ||
        !field(line, "tuned", e->tuned, sizeof e->tuned) ||
        !field(line, "schedule", e->schedule, sizeof e->schedule) ||
        !field(line, "knobs", knob, knob_len) || !field(line, "ms", ms, sizeof ms) ||
        !field(line, "program_ms", pms, sizeof pms))
        return -1;
    if (!strcmp(e->sizes, "-"))
        e->sizes[0] = 0;
    if (!strcmp(e->tuned, "-"))
        e->tuned[0] = 0;
    e->knob = knob_parse(knob);
    e->ms = atof(ms);
    e->program_ms = atof(pms);
    if (!e->schedule[0])
        return -1;
    return e->knob < 0 ? -2 : 0;
}

void record_put(Record *r, const RecordEntry *e)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->e[i].sizes, e->sizes)) {
            r->e[i] = *e;
            return;
        }
    r->e = xgrow(r->e, r->n, &r->cap, 8, sizeof *r->e);
    r->e[r->n++] = *e;
}

int record_read(Record *r, char *err, size_t errlen)
{
    FILE *f = fopen(r->path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 1;
        snprintf(err, errlen, "coconet: cannot read the tuning record %s: %s\n", r->path,
                 strerror(errno));
        return -1;
    }
    char line[2048], key[RECORD_TEXT] = "", knob[32], unknown[32] = "";
    int bad = 0;
    r->n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "key ", 4)) {
            append(key, sizeof key, "%s", line + 4);
        } else if (!strncmp(line, "entry ", 6)) {
            RecordEntry e;
            int got = parse_entry(line + 5, &e, knob, sizeof knob);
            if (got == -2 && !unknown[0])
                snprintf(unknown, sizeof unknown, "%s", knob);
            if (got == -1)
                bad = 1;
            else if (got == 0)
                record_put(r, &e);
        }
    }
    fclose(f);
    if (strcmp(key, r->key)) {
        r->n = 0;
        return 2;
    }
    if (bad) {
        snprintf(err, errlen, "coconet: the tuning record %s has a malformed entry line (remove "
                 "the file, or run coconet tune again)\n", r->path);
        return -1;
    }
    if (unknown[0]) {
        char sets[256] = "";
        for (int k = 0; k < NKNOB; k++)
            append(sets, sizeof sets, "%s%s", k ? ", " : "", knob_name(k));
        snprintf(err, errlen, "coconet: the tuning record %s names the knob set '%s', which this "
                 "coconet does not have (its sets: %s): it was tuned by another version; run "
                 "coconet tune again\n", r->path, unknown, sets);
        return -1;
    }
    return 0;
}

static void mkdir_if_missing(const char *dir)
{
    mkdir(dir, 0777); /* an error shows when the file cannot be written */
}

int record_write(const Record *r, char *err, size_t errlen)
{
    char dir[CUDA_PATH_MAX + 64], tmp[CUDA_PATH_MAX + 128];
    snprintf(dir, sizeof dir, "%s", r->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    for (char *s = dir + 1; *s; s++) /* mkdir -p */
        if (*s == '/') {
            *s = 0;
            mkdir_if_missing(dir);
            *s = '/';
        }
    mkdir_if_missing(dir);
    pathf(tmp, sizeof tmp, "%s.tmp.%ld", r->path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (f) {
        fprintf(f, "# coconet tuning record: written by `coconet tune`, read by `coconet run` "
                   "and `coconet gen` with --schedule tuned\n");
        for (const char *s = r->key; *s;) {
            size_t n = strcspn(s, "\n");
            fprintf(f, "key %.*s\n", (int)n, s);
            s += n + (s[n] == '\n');
        }
        for (int i = 0; i < r->n; i++) {
            const RecordEntry *e = &r->e[i];
            fprintf(f, "entry sizes=%s tuned=%s schedule=%s knobs=%s ms=%.6g program_ms=%.6g\n",
                    e->sizes[0] ? e->sizes : "-", e->tuned[0] ? e->tuned : "-", e->schedule,
                    knob_name(e->knob), e->ms, e->program_ms);
        }
    }
    if (!f || fclose(f) || rename(tmp, r->path)) {
        snprintf(err, errlen, "coconet: cannot write the tuning record %s: %s\n", r->path,
                 strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

void record_free(Record *r)
{
    free(r->e);
    r->e = NULL;
    r->n = r->cap = 0;
}

/* ---- the nearest entry ---- */

/* NAME's value in "A=1,B=2", or -1 */
static long size_value(const char *sizes, const char *name)
{
    size_t n = strlen(name);
    for (const char *s = sizes; *s;) {
        if (!strncmp(s, name, n) && s[n] == '=')
            return atol(s + n + 1);
        s += strcspn(s, ",");
        s += *s == ',';
    }
    return -1;
}

static int listed(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *s = names; *s;) {
        size_t k = strcspn(s, ",");
        if (k == n && !strncmp(s, name, n))
            return 1;
        s += k + (s[k] == ',');
    }
    return 0;
}

/* The distance of entry e from p's sizes, or -1 when an untuned size differs */
static double distance(const RecordEntry *e, Program *p)
{
    double d = 0;
    for (int i = 0; i < p->nsize; i++) {
        long want = p->size[i].value, got = size_value(e->sizes, p->size[i].name);
        if (got <= 0)
            return -1;
        if (listed(e->tuned, p->size[i].name))
            d += fabs(log2((double)got / (double)want));
        else if (got != want)
            return -1;
    }
    return d;
}

const RecordEntry *record_nearest(const Record *r, Program *p, int *exact, char *why,
                                  size_t len)
{
    const RecordEntry *best = NULL;
    double bd = 0;
    for (int i = 0; i < r->n; i++) {
        double d = distance(&r->e[i], p);
        if (d >= 0 && (!best || d < bd)) {
            best = &r->e[i];
            bd = d;
        }
    }
    *exact = best && bd == 0;
    if (!best) {
        char mine[512];
        record_sizes(p, mine, sizeof mine);
        snprintf(why, len, "the record has no entry for these sizes (%s): it has", mine);
        for (int i = 0; i < r->n; i++)
            append(why, len, "%s %s (tuned: %s)", i ? ";" : "", r->e[i].sizes,
                   r->e[i].tuned[0] ? r->e[i].tuned : "none");
        if (!r->n)
            append(why, len, " none");
    }
    return best;
}

void record_print(const Record *r, FILE *out)
{
    fprintf(out, "tuning record %s\n", r->path);
    for (const char *s = r->key; *s;) {
        size_t n = strcspn(s, "\n");
        fprintf(out, "  %.*s\n", (int)n, s);
        s += n + (s[n] == '\n');
    }
    fprintf(out, "%-32s %-10s %-24s %-8s %12s %12s\n", "sizes", "tuned", "schedule", "knobs",
            "time", "program");
    for (int i = 0; i < r->n; i++) {
        const RecordEntry *e = &r->e[i];
        fprintf(out, "%-32s %-10s %-24s %-8s %9.4f ms %9.4f ms\n", e->sizes[0] ? e->sizes : "-",
                e->tuned[0] ? e->tuned : "-", e->schedule, knob_name(e->knob), e->ms,
                e->program_ms);
    }
}

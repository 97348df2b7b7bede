/* tune.c: `coconet tune` (coco_tune), the driver.
 *
 * 1. The size points: every combination of the --sizes values (each size
 *    not named keeps its -D or file value); the check point: the file's
 *    sizes (or --check-size).
 * 2. At each point the variants: the program (v[0]), its written schedules
 *    and its enumerated ones; each crossed with its knob sets (knobs.c),
 *    the candidates, each predicted by the cost model (cost.c).
 * 3. Checks: a point small enough for the CPU reference (at most
 *    INPLACE_ELEMENTS input elements over all ranks) is checked where it is
 *    timed, in the same rounds. Otherwise, before a round times a
 *    (variant, knob set), its twin at the check point is checked, once
 *    (the check point stays open beside the points, its ranks up), in a
 *    round under the same knob set; a pair that fails there is never
 *    timed. Knob sets the search prunes whole are never checked.
 * 4. The search at each point (search.c): rounds of candidates on the
 *    slot's ranks (kept from one round to the next: timer_cuda.c), pruning
 *    (with --launch-cost, none where another launch would cost more than
 *    the candidates it spares); then the candidates near the best timed
 *    again (--confirm rounds), each keeping its median time.
 * 5. A table per point, sorted by time (table.c), and the record (record.c).
 * The timer is the GPUs' (timer_cuda.c), or COCONET_TUNE_FAKE's file. */
#include "tune/tune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAXPOINTS = 256, MAXTUNED = 8, MAXDEF = 512 };
#define INPLACE_ELEMENTS (1L << 24)
/* What a candidate costs beyond its runs, seconds, when a launch is
 * weighed (--launch-cost; search_costs): CAND_COST_S of buffers and
 * copies, and where it is checked in place, CHECK_COST_S for each value its
 * rank compares with the CPU reference; both measured (doc/cli.md, coconet
 * tune). By default no launch is weighed: a slot's ranks stay up from one
 * round to the next (timer_cuda.c), so a second round costs its candidates
 * alone. */
#define CAND_COST_S 0.03
#define CHECK_COST_S 25e-9
/* The best confirmed (search_confirm): the candidates within
 * CONFIRM_MARGIN of it, or within CONFIRM_FLOOR_MS, at most CONFIRM_MOST,
 * timed CONFIRM_ROUNDS more times, since one time of a candidate can stray
 * beyond the others' spread (doc/cli.md, coconet tune): a pick on one such
 * time is made again on three. */
#define CONFIRM_MARGIN 0.05
#define CONFIRM_FLOOR_MS 0.002
enum { CONFIRM_MOST = 6 };

/* ---- options: --sizes and --check-size ---- */

typedef struct {
    char name[MAXNAME];
    long value[64];
    int n;
} SizeList;

/* [text, text + n) is a size's name */
static int is_name(const char *text, size_t n)
{
    int bad = n == 0 || n >= MAXNAME;
    for (size_t i = 0; i < n && !bad; i++)
        bad = !(text[i] == '_' || (text[i] >= 'A' && text[i] <= 'Z') ||
                (text[i] >= 'a' && text[i] <= 'z') || (i && text[i] >= '0' && text[i] <= '9'));
    return !bad;
}

/* The values after "NAME=" (every one read whole, as -D reads a size) into
 * l; NULL, or what is wrong with the first bad one (in its text, in why) */
static const char *parse_values(const char *s, SizeList *l, char *why, size_t len)
{
    for (;;) {
        size_t n = strcspn(s, ",");
        const char *wrong = l->n == (int)(sizeof l->value / sizeof *l->value)
                                ? "one value more than 64"
                                : size_text_read(s, n, &l->value[l->n++]);
        if (wrong) {
            snprintf(why, len, "'%.*s': %s", (int)n, s, wrong);
            return why;
        }
        if (!s[n])
            return NULL;
        s += n + 1;
    }
}

/* "NAME=v1,v2,..." (many), or "NAME=v", into l; -1 with a message */
static int parse_sizes(const char *opt, const char *text, SizeList *l, int many, char *err,
                       size_t errlen)
{
    const char *eq = strchr(text, '=');
    char why[256] = "";
    memset(l, 0, sizeof *l);
    int bad = !eq || !is_name(text, (size_t)(eq - text)) || !eq[1];
    if (!bad) {
        memcpy(l->name, text, (size_t)(eq - text));
        bad = parse_values(eq + 1, l, why, sizeof why) || (!many && l->n != 1);
    }
    if (bad)
        snprintf(err, errlen, "coconet: %s '%s': expected NAME=%s, each an integer or 2^k from 1 "
                 "to 10^13%s%s\n", opt, text, many ? "v1,v2,... (at most 64 values)" : "v",
                 why[0] ? ": " : "", why);
    return bad ? -1 : 0;
}

/* ---- loading the program at a point ---- */

typedef struct {
    const char *file;
    const coco_tune_options *o;
    SizeList *tuned;            /* --sizes */
    int ntuned;
    SizeList *check;            /* --check-size */
    int ncheck;
    Program *base;              /* the program as the options load it */
} Setup;

static int is_size(Program *p, const char *name)
{
    for (int i = 0; i < p->nsize; i++)
        if (!strcmp(p->size[i].name, name))
            return 1;
    return 0;
}

static int defines_name(const char *def, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(def, name, n) && def[n] == '=';
}

/* Loads the program with the user's -D, less those `drop` says, plus extra;
 * whose fault a failure is in *status (COCO_LOAD_*) */
static Program *load_with(const Setup *s, const char *const *extra, int nextra,
                          int (*drop)(const Setup *, const char *), int *status, char *err,
                          size_t errlen)
{
    const char *defs[MAXDEF];
    int n = 0;
    for (int i = 0; i < s->o->ndefines && n < MAXDEF; i++)
        if (!drop(s, s->o->defines[i]))
            defs[n++] = s->o->defines[i];
    for (int i = 0; i < nextra && n < MAXDEF; i++)
        defs[n++] = extra[i];
    coco_config cfg = {.defines = defs, .ndefines = n, .nranks = s->o->nranks,
                       .group_size = s->o->group_size};
    Program *p = coco_load_file_status(s->file, &cfg, status, err, errlen);
    if (p && s->o->sched_file && coco_add_schedules(p, s->o->sched_file, err, errlen)) {
        coco_program_free(p);
        return NULL;
    }
    return p;
}

static int drop_none(const Setup *s, const char *def)
{
    return 0;
}

static int drop_tuned(const Setup *s, const char *def)
{
    for (int i = 0; i < s->ntuned; i++)
        if (defines_name(def, s->tuned[i].name))
            return 1;
    return 0;
}

/* the check point: the file's defaults for every size that has one */
static int drop_sized(const Setup *s, const char *def)
{
    for (int i = 0; i < s->base->nsize; i++)
        if (defines_name(def, s->base->size[i].name) && s->base->size[i].default_text)
            return 1;
    for (int i = 0; i < s->ncheck; i++)
        if (defines_name(def, s->check[i].name))
            return 1;
    return 0;
}

/* The variants of p: the program, then each schedule (written, then
 * enumerated) applied, as `run --schedule tuned` builds them (the same
 * source: one object in the build cache); NULL with a message */
static Program **variants(Program *p, int *nv, char *err, size_t errlen)
{
    return cuda_all_variants(p, nv, err, errlen);
}

static void free_variants(Program **v, int nv)
{
    for (int k = 1; k < nv; k++)
        program_free(v[k]);
    free(v);
}

/* The variants as the CUDA backend runs them (lower_collectives), which the
 * knob sets and the cost model judge; the same program where nothing lowers */
static Program **as_run(Program **v, int nv)
{
    Program **lv = xcalloc((size_t)nv, sizeof *lv);
    for (int i = 0; i < nv; i++) {
        lv[i] = lower_collectives(v[i]);
        if (!lv[i])
            lv[i] = v[i];
    }
    return lv;
}

static void free_as_run(Program **lv, Program **v, int nv)
{
    for (int i = 0; lv && i < nv; i++)
        if (lv[i] != v[i])
            program_free(lv[i]);
    free(lv);
}

/* The values the busiest rank checks against the CPU reference: its
 * outputs and the new values of its Updated inputs */
static double checked_elements(Program *p)
{
    double most = 0;
    for (int r = 0; r < p->nranks; r++) {
        double e = 0;
        for (int i = 0; i < p->nexec_out; i++)
            e += (double)local_count(p, &p->node[p->exec_out[i]], r);
        for (int i = 0; i < p->nexec_in; i++) {
            const Node *n = &p->node[p->exec_in[i]];
            if (n->op == O_INPUT && n->updated_by >= 0)
                e += (double)local_count(p, n, r);
        }
        most = e > most ? e : most;
    }
    return most;
}

/* Input elements over all ranks: the CPU reference's scale */
static double input_elements(Program *p)
{
    double e = 0;
    for (int i = 0; i < p->nexec_in; i++) {
        const Node *n = &p->node[p->exec_in[i]];
        for (int r = 0; n->op == O_INPUT && r < p->nranks; r++)
            e += (double)local_count(p, n, r);
    }
    return e;
}


/* ---- the run ---- */

/* The check point: its variants, open in the timer's check slot while any
 * size point is too large to check in place, and its candidates, each
 * checked the first time a launch needs it (state TODO, then TIMED when it
 * passed or FAILED) */
typedef struct {
    int open;
    Program *p, **v, **lv;
    int nv;
    Search s;
    char sizes[512];
} CheckPoint;

typedef struct {
    Setup s;
    TuneTimer *t;
    Progress pg;
    int done_before;   /* candidates of earlier points */
    CheckPoint check;
    int limits_known;
    Program **v;       /* the point's variants */
    Program **lv;      /* as the backend runs them (as_run) */
    int inplace;       /* the point is checked where it is timed */
    FILE *out;
} Tune;

static int check_batch(Tune *tu, Search *s, const int *which, int n, int *kept, char *err,
                       size_t errlen);

static int launch_point(void *ctx, Search *s, const int *batch, int nbatch, char *err,
                        size_t errlen)
{
    Tune *tu = ctx;
    int *which = xcalloc((size_t)nbatch, sizeof *which), n = 0;
    int rc = tu->inplace ? 0 : check_batch(tu, s, batch, nbatch, which, err, errlen);
    if (tu->inplace)
        memcpy(which, batch, (size_t)nbatch * sizeof *which);
    n = tu->inplace ? nbatch : rc;
    if (rc < 0 || n == 0) {
        free(which);
        return rc < 0 ? -1 : 0;
    }
    int *vi = xcalloc((size_t)n, sizeof *vi), *knob = xcalloc((size_t)n, sizeof *knob);
    Measured *m = xcalloc((size_t)n, sizeof *m);
    for (int i = 0; i < n; i++) {
        vi[i] = s->c[which[i]].variant;
        knob[i] = s->c[which[i]].knob;
    }
    rc = tu->t->measure(tu->t, SLOT_POINT, vi, knob, n, s->confirming, m, err, errlen);
    int resolved = 0;
    for (int i = 0; !rc && i < n; i++)
        resolved += !m[i].not_run;
    for (int i = 0; !rc && i < n; i++) {
        Cand *c = &s->c[which[i]];
        if (m[i].not_run && resolved) /* launched again; if none ran, all fail */
            continue;
        c->state = m[i].passed && m[i].ms >= 0 ? CAND_TIMED : CAND_FAILED;
        c->ms = m[i].ms;
        if (m[i].verdict[0]) /* a retimed pass keeps its checked verdict */
            snprintf(c->verdict, sizeof c->verdict, "%s", m[i].verdict);
        snprintf(c->why, sizeof c->why, "%s", m[i].why);
    }
    if (!rc && tu->t->limits.known && !tu->limits_known) {
        tu->limits_known = 1;
        search_repredict(s, tu->lv, &tu->t->limits);
    }
    free(vi);
    free(knob);
    free(m);
    free(which);
    return rc;
}

static void show_progress(void *ctx, const Search *s)
{
    Tune *tu = ctx;
    int done = 0;
    for (int i = 0; i < s->n; i++)
        done += s->c[i].state != CAND_TODO;
    progress_show(&tu->pg, tu->done_before + done, "");
}

/* ---- the check at the check point ---- */

/* Opens the check point (the file's sizes, or --check-size) in the check slot */
static int check_open(Tune *tu, char *err, size_t errlen)
{
    CheckPoint *cp = &tu->check;
    const char *extra[MAXTUNED];
    char buf[MAXTUNED][96];
    for (int i = 0; i < tu->s.ncheck; i++) {
        snprintf(buf[i], sizeof buf[i], "%s=%ld", tu->s.check[i].name, tu->s.check[i].value[0]);
        extra[i] = buf[i];
    }
    cp->p = load_with(&tu->s, extra, tu->s.ncheck, drop_sized, NULL, err, errlen);
    if (!cp->p || !(cp->v = variants(cp->p, &cp->nv, err, errlen)))
        return -1;
    record_sizes(cp->p, cp->sizes, sizeof cp->sizes);
    cp->lv = as_run(cp->v, cp->nv);
    search_init(&cp->s, cp->lv, cp->nv, &tu->t->limits, 1, 1);
    if (tu->t->open(tu->t, SLOT_CHECK, cp->v, cp->nv, MEASURE_CHECK, err, errlen))
        return -1;
    cp->open = 1;
    return 0;
}

static void check_close(Tune *tu)
{
    CheckPoint *cp = &tu->check;
    if (cp->open)
        tu->t->close(tu->t, SLOT_CHECK);
    search_free(&cp->s);
    free_as_run(cp->lv, cp->v, cp->nv);
    if (cp->v)
        free_variants(cp->v, cp->nv);
    coco_program_free(cp->p);
    memset(cp, 0, sizeof *cp);
}

/* The check point's candidate of the same variant and knob set, or -1 */
static int check_twin(const Tune *tu, const Cand *c)
{
    const CheckPoint *cp = &tu->check;
    const char *name = vname(tu->v[c->variant]);
    for (int j = 0; j < cp->s.n; j++)
        if (cp->s.c[j].knob == c->knob && !strcmp(vname(cp->v[cp->s.c[j].variant]), name))
            return j;
    return -1;
}

/* Checks at the check point the twins not yet checked of candidates
 * which[0..n), each under its knob set, launch by launch until each ran */
static int check_twins(Tune *tu, const Search *s, const int *which, int n, char *err,
                       size_t errlen)
{
    CheckPoint *cp = &tu->check;
    int *twin = xcalloc((size_t)n, sizeof *twin), *vi = xcalloc((size_t)n, sizeof *vi);
    int *knob = xcalloc((size_t)n, sizeof *knob);
    Measured *m = xcalloc((size_t)n, sizeof *m);
    int rc = 0;
    for (;;) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            int j = check_twin(tu, &s->c[which[i]]);
            if (j >= 0 && cp->s.c[j].state == CAND_TODO) {
                twin[k] = j;
                vi[k] = cp->s.c[j].variant;
                knob[k++] = cp->s.c[j].knob;
            }
        }
        if (!k || (rc = tu->t->measure(tu->t, SLOT_CHECK, vi, knob, k, 0, m, err, errlen)))
            break;
        int resolved = 0;
        for (int i = 0; i < k; i++)
            resolved += !m[i].not_run;
        for (int i = 0; i < k; i++) {
            Cand *c = &cp->s.c[twin[i]];
            if (m[i].not_run && resolved)
                continue; /* in the next launch */
            c->state = m[i].passed ? CAND_TIMED : CAND_FAILED;
            snprintf(c->verdict, sizeof c->verdict, "%s", m[i].verdict);
        }
    }
    free(twin);
    free(vi);
    free(knob);
    free(m);
    return rc;
}

/* The candidates of a launch that passed their check at the check point
 * into kept (how many: the return value); the others FAILED; -1 on error */
static int check_batch(Tune *tu, Search *s, const int *which, int n, int *kept, char *err,
                       size_t errlen)
{
    if (check_twins(tu, s, which, n, err, errlen))
        return -1;
    int nkept = 0;
    for (int i = 0; i < n; i++) {
        Cand *c = &s->c[which[i]];
        int j = check_twin(tu, c);
        if (j >= 0 && tu->check.s.c[j].state == CAND_TIMED) {
            kept[nkept++] = which[i];
            continue;
        }
        c->state = CAND_FAILED;
        snprintf(c->verdict, sizeof c->verdict, "%s", j < 0 ? "UNCHECKED"
                                                             : tu->check.s.c[j].verdict);
        snprintf(c->why, sizeof c->why, "%s %.200s", j < 0 ? "no such variant at the check point"
                                                           : "at the check point",
                 tu->check.sizes);
    }
    return nkept;
}

/* ---- one point ---- */

static void tuned_names(const Setup *s, char *buf, size_t len)
{
    buf[0] = 0;
    for (int i = 0; i < s->ntuned; i++) {
        size_t u = strlen(buf);
        snprintf(buf + u, len - u, "%s%s", i ? "," : "", s->tuned[i].name);
    }
}

static int tune_point(Tune *tu, Program *p, Record *rec, int *ok, char *err, size_t errlen)
{
    int nv;
    Program **v = variants(p, &nv, err, errlen);
    if (!v)
        return -1;
    tu->v = v;
    tu->lv = as_run(v, nv);
    const coco_tune_options *o = tu->s.o;
    double factor = o->prune > 0 ? o->prune : 1.5;
    char sizes[512];
    record_sizes(p, sizes, sizeof sizes);
    tu->inplace = input_elements(p) <= (double)INPLACE_ELEMENTS;
    Search s;
    search_init(&s, tu->lv, nv, &tu->t->limits, factor, o->exhaustive);
    /* checked and repeat runs, 3 warm-up and the timed ones; a launch at the
     * check point too when the point is not checked in place */
    double launch_s = o->launch_s > 0 ? o->launch_s : 0;
    double cand_s = CAND_COST_S + (tu->inplace ? CHECK_COST_S * checked_elements(p) : 0);
    search_costs(&s, (tu->inplace ? 1 : 2) * launch_s, cand_s,
                 2 + 3 + (o->iters > 0 ? o->iters : 20));
    int rc = !tu->inplace && !tu->check.open ? check_open(tu, err, errlen) : 0;
    if (!rc)
        rc = tu->t->open(tu->t, SLOT_POINT, v, nv,
                         tu->inplace ? MEASURE_BOTH : MEASURE_TIME, err, errlen);
    if (!rc) {
        rc = search_run(&s, launch_point, tu, show_progress, err, errlen);
        ConfirmRule rule = {.rounds = o->confirm, .margin = CONFIRM_MARGIN,
                            .floor_ms = CONFIRM_FLOOR_MS, .most = CONFIRM_MOST};
        if (!rc)
            rc = search_confirm(&s, launch_point, tu, &rule, err, errlen);
        tu->t->close(tu->t, SLOT_POINT);
    }
    tu->done_before += s.n;
    if (!rc) {
        progress_end(&tu->pg);
        table_point(tu->out, v, &s, sizes);
        if (o->exhaustive)
            table_replay(tu->out, v, &s, factor);
        int best = search_best(&s), prog = search_program(&s);
        *ok = best >= 0;
        if (best >= 0) {
            RecordEntry e;
            memset(&e, 0, sizeof e);
            snprintf(e.sizes, sizeof e.sizes, "%s", sizes);
            tuned_names(&tu->s, e.tuned, sizeof e.tuned);
            snprintf(e.schedule, sizeof e.schedule, "%s", vname(v[s.c[best].variant]));
            e.knob = s.c[best].knob;
            e.ms = s.c[best].ms;
            e.program_ms = prog >= 0 ? s.c[prog].ms : -1;
            record_put(rec, &e);
        }
    }
    search_free(&s);
    free_as_run(tu->lv, v, nv);
    free_variants(v, nv);
    tu->v = tu->lv = NULL;
    return rc;
}

/* ---- the points ---- */

/* The defines of point k (mixed radix over the tuned lists) into buf */
static void point_defines(const Setup *s, int k, char buf[][96], const char **defs)
{
    for (int i = s->ntuned - 1; i >= 0; i--) {
        snprintf(buf[i], sizeof buf[i], "%s=%ld", s->tuned[i].name,
                 s->tuned[i].value[k % s->tuned[i].n]);
        defs[i] = buf[i];
        k /= s->tuned[i].n;
    }
}

static int npoints(const Setup *s)
{
    long n = 1;
    for (int i = 0; i < s->ntuned; i++)
        n *= s->tuned[i].n;
    return n > MAXPOINTS ? -1 : (int)n;
}

/* Every option refers to a size of the program; 2 with a message if not */
static int check_names(const Setup *s, Program *p, char *err, size_t errlen)
{
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < (k ? s->ncheck : s->ntuned); i++) {
            const char *name = k ? s->check[i].name : s->tuned[i].name;
            if (!is_size(p, name)) {
                snprintf(err, errlen, "coconet: %s %s: %s has no size named %s\n",
                         k ? "--check-size" : "--sizes", name, s->file, name);
                return 2;
            }
            for (int j = 0; j < i; j++)
                if (!strcmp(name, k ? s->check[j].name : s->tuned[j].name)) {
                    snprintf(err, errlen, "coconet: %s names %s twice\n",
                             k ? "--check-size" : "--sizes", name);
                    return 2;
                }
        }
    return 0;
}

/* ---- plan: the candidates and their predictions, nothing timed ---- */

static int plan_point(Tune *tu, Program *p, char *err, size_t errlen)
{
    int nv;
    Program **v = variants(p, &nv, err, errlen);
    if (!v)
        return -1;
    TuneLimits l;
    tune_limits_default(&l);
    Program **lv = as_run(v, nv);
    Search s;
    search_init(&s, lv, nv, &l, 1.5, 1);
    char sizes[512];
    record_sizes(p, sizes, sizeof sizes);
    table_plan(tu->out, v, lv, &s, sizes,
               input_elements(p) <= (double)INPLACE_ELEMENTS ? "in place" : "at the check point");
    search_free(&s);
    free_as_run(lv, v, nv);
    free_variants(v, nv);
    return 0;
}

/* ---- the entry point ---- */

static int parse_options(const coco_tune_options *o, SizeList *tuned, SizeList *check,
                         Setup *s, char *err, size_t errlen)
{
    if (o->nsizes > MAXTUNED) {
        snprintf(err, errlen, "coconet: at most %d --sizes options\n", MAXTUNED);
        return 2;
    }
    for (int i = 0; i < o->nsizes; i++)
        if (parse_sizes("--sizes", o->sizes[i], &tuned[i], 1, err, errlen))
            return 2;
    s->ntuned = o->nsizes;
    s->ncheck = 0;
    for (const char *c = o->check_size; c && *c;) {
        if (s->ncheck == MAXTUNED) {
            snprintf(err, errlen, "coconet: --check-size: at most %d sizes\n", MAXTUNED);
            return 2;
        }
        size_t n = strcspn(c, ",");
        char *one = strndup(c, n);
        int bad = parse_sizes("--check-size", one, &check[s->ncheck++], 0, err, errlen);
        free(one);
        if (bad)
            return 2;
        c += n + (c[n] == ',');
    }
    if (o->prune != 0 && o->prune < 1) {
        snprintf(err, errlen, "coconet: --prune %g: the factor must be at least 1\n", o->prune);
        return 2;
    }
    if (npoints(s) < 0) {
        snprintf(err, errlen, "coconet: --sizes: more than %d size points\n", MAXPOINTS);
        return 2;
    }
    return 0;
}

static TuneTimer *make_timer(const coco_tune_options *o, FILE *log, char *err, size_t errlen)
{
    const char *fake = getenv("COCONET_TUNE_FAKE");
    if (fake && *fake)
        return timer_fake_new(fake, err, errlen);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    TimerConfig c = {.nranks = o->nranks,
                     .iters = o->iters > 0 ? o->iters : 20,
                     .threads = o->threads > 0 ? o->threads : (cores > 0 ? (int)cores : 1),
                     .timeout_s = o->timeout_s > 0 ? o->timeout_s : 300,
                     .seed = o->seed ? o->seed : 1,
                     .log = log};
    return timer_cuda_new(&c, err, errlen);
}

/* Times every point and writes the record; 0, or 1 */
static int tune_points(Tune *tu, Program *base, char *err, size_t errlen)
{
    Record rec;
    if (record_key(base, tu->t->gpu, tu->t->nccl, &rec, err, errlen))
        return 1;
    int rr = record_read(&rec, err, errlen);
    if (rr < 0) {
        record_free(&rec);
        return 1;
    }
    int n = npoints(&tu->s), rc = 0, all_ok = 1;
    char buf[MAXTUNED][96];
    const char *defs[MAXTUNED];
    for (int k = 0; k < n && !rc; k++) {
        point_defines(&tu->s, k, buf, defs);
        Program *p = load_with(&tu->s, defs, tu->s.ntuned, drop_tuned, NULL, err, errlen);
        int ok = 0;
        rc = !p || tune_point(tu, p, &rec, &ok, err, errlen);
        all_ok &= ok;
        coco_program_free(p);
    }
    if (!rc && record_write(&rec, err, errlen))
        rc = 1;
    if (!rc)
        fprintf(tu->out, "\nrecord: %s (%d size point%s); `coconet run %s --ranks %d "
                "--schedule tuned` uses it\n", rec.path, rec.n, rec.n == 1 ? "" : "s", tu->s.file,
                base->nranks);
    record_free(&rec);
    return rc ? 1 : !all_ok;
}

static int run_tune(Tune *tu, Program *base, char *err, size_t errlen)
{
    const coco_tune_options *o = tu->s.o;
    char buf[MAXTUNED][96];
    const char *defs[MAXTUNED];
    if (o->plan) {
        for (int k = 0; k < npoints(&tu->s); k++) {
            point_defines(&tu->s, k, buf, defs);
            Program *p = load_with(&tu->s, defs, tu->s.ntuned, drop_tuned, NULL, err, errlen);
            int rc = !p || plan_point(tu, p, err, errlen);
            coco_program_free(p);
            if (rc)
                return 1;
        }
        return 0;
    }
    int total = 0;
    for (int k = 0; k < npoints(&tu->s); k++) { /* the progress bar's total */
        point_defines(&tu->s, k, buf, defs);
        Program *p = load_with(&tu->s, defs, tu->s.ntuned, drop_tuned, NULL, err, errlen);
        int nv;
        Program **v = p ? variants(p, &nv, err, errlen) : NULL;
        Program **lv = v ? as_run(v, nv) : NULL;
        for (int i = 0; v && i < nv; i++) {
            int sets[NKNOB];
            total += knob_sets(lv[i], sets);
        }
        free_as_run(lv, v, nv);
        if (v)
            free_variants(v, nv);
        coco_program_free(p);
        if (!v)
            return 1;
    }
    progress_start(&tu->pg, total, isatty(2));
    int rc = tune_points(tu, base, err, errlen);
    check_close(tu);
    return rc;
}

static const char *launches(int n)
{
    return n == 1 ? "launch" : "launches";
}

/* The last line: the time, the launches, and where the time went (close_s:
 * the ranks' exit, waited for at the end) */
static void print_summary(FILE *out, const TuneTimer *t, double total_s, double close_s)
{
    double rest = total_s - t->build_s - t->prepare_s - t->launch_s[SLOT_CHECK] -
                  t->launch_s[SLOT_POINT] - close_s;
    char built[64];
    snprintf(built, sizeof built, t->built ? "%d by nvcc" : "from the cache", t->built);
    fprintf(out, "tune: %.1f s, %d %s of the ranks: building %.1f s (%s), CPU reference and "
            "inputs %.1f s, checking %.1f s (%d %s), timing %.1f s (%d %s), closing the ranks "
            "%.1f s, the rest %.1f s\n",
            total_s, t->launches, launches(t->launches), t->build_s, built, t->prepare_s,
            t->launch_s[SLOT_CHECK], t->slot_launches[SLOT_CHECK],
            launches(t->slot_launches[SLOT_CHECK]), t->launch_s[SLOT_POINT],
            t->slot_launches[SLOT_POINT], launches(t->slot_launches[SLOT_POINT]), close_s,
            rest > 0 ? rest : 0);
}

int coco_tune(const char *file, const coco_tune_options *o, FILE *out, char *err,
              size_t errlen)
{
    SizeList tuned[MAXTUNED], check[MAXTUNED];
    Tune tu;
    memset(&tu, 0, sizeof tu);
    tu.s = (Setup){file, o, tuned, 0, check, 0, NULL};
    tu.out = out;
    err[0] = 0;
    int rc = parse_options(o, tuned, check, &tu.s, err, errlen);
    if (rc)
        return rc;
    int status;
    Program *base = tu.s.base = load_with(&tu.s, NULL, 0, drop_none, &status, err, errlen);
    if (!base) /* a bad -D is the command line's error */
        return status == COCO_LOAD_BAD_CONFIG ? 2 : 1;
    rc = check_names(&tu.s, base, err, errlen);
    FILE *log = NULL;
    if (!rc && o->log && !(log = fopen(o->log, "a"))) {
        snprintf(err, errlen, "coconet: --log %s: %s\n", o->log, strerror(errno));
        rc = 1;
    }
    if (!rc && !o->plan && !(tu.t = make_timer(o, log, err, errlen)))
        rc = 1;
    if (tu.t && tu.t->cold_l2)
        fprintf(out, "timed runs start with the L2 emptied of their inputs (COCONET_COLD_L2=1; "
                "=0 leaves them there)\n");
    double t0 = tune_now_s();
    if (!rc)
        rc = run_tune(&tu, base, err, errlen);
    if (tu.t) { /* the ranks gone first: their exit is part of the time */
        TuneTimer spent = *tu.t;
        double c0 = tune_now_s();
        tu.t->free(tu.t);
        double now = tune_now_s();
        print_summary(out, &spent, now - t0, now - c0);
    }
    if (log)
        fclose(log);
    coco_program_free(base);
    return rc;
}

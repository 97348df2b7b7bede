/* timer_fake.c: a timer that replays recorded times from a file instead of
 * running on GPUs, for the tests of the tuner (COCONET_TUNE_FAKE=FILE).
 *
 * The file, a line each ('#' starts a comment):
 *   gpu TEXT                         the machine it describes (the record's key)
 *   nccl VERSION
 *   limits COPY_GBS PEER_GBS GEMM_TFLOPS   (the cost model's; else its defaults)
 *   time SIZES KNOBS VARIANT MS      a variant's time at a size point under a knob set;
 *                                    MS,MS,...: one for each time it is measured
 *                                    there, the last for the later ones
 *   fail SIZES KNOBS VARIANT VERDICT the variant fails its check there; CRASH:
 *                                    a rank dies in it, the launch's later
 *                                    variants never run
 * SIZES is every size of the program as the record writes them
 * ("N=1048576,B=8"), KNOBS a knob set's name (the candidate's: default for
 * a variant the knobs do not change), VARIANT "program" or a
 * schedule's name; any of the three may be '*'. The first line that
 * matches counts. A variant asked for with no time is an error (the file
 * does not cover the program). */
#include "tune/tune.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char kind[8], sizes[512], knob[32], variant[MAXNAME + 8], value[64];
    int taken; /* times its value was measured */
} FakeLine;

typedef struct {               /* an open point */
    char sizes[512];
    const char **names;
    int n;
    MeasureMode mode;
    int up;                    /* its ranks run (as the GPU timer's, kept between rounds) */
} FakeSlot;

typedef struct {
    TuneTimer t;
    char path[1024];
    FakeLine *line;
    int nline, cap;
    FakeSlot slot[NSLOT];
} FakeTimer;

static int matches(const char *pattern, const char *s)
{
    return !strcmp(pattern, "*") || !strcmp(pattern, s);
}

static FakeLine *find(FakeTimer *f, const FakeSlot *sl, const char *kind, const char *name,
                      int knob)
{
    for (int i = 0; i < f->nline; i++) {
        FakeLine *l = &f->line[i];
        if (!strcmp(l->kind, kind) && matches(l->sizes, sl->sizes) &&
            matches(l->knob, knob_name(knob)) && matches(l->variant, name))
            return l;
    }
    return NULL;
}

/* The k-th of a time line's comma-separated values, the last past its end */
static double nth_time(const char *value, int k)
{
    const char *at = value;
    for (const char *comma; k > 0 && (comma = strchr(at, ',')); k--)
        at = comma + 1;
    return atof(at);
}

static int fake_open(TuneTimer *t, int slot, Program **v, int n, MeasureMode mode, char *err,
                     size_t errlen)
{
    FakeSlot *sl = &((FakeTimer *)t)->slot[slot];
    record_sizes(v[0], sl->sizes, sizeof sl->sizes);
    free(sl->names);
    sl->names = xcalloc((size_t)n, sizeof *sl->names);
    for (int i = 0; i < n; i++)
        sl->names[i] = vname(v[i]);
    sl->n = n;
    sl->mode = mode;
    sl->up = 1; /* started as it opens: a launch */
    t->launches++;
    t->slot_launches[slot]++;
    return 0;
}

static int fake_measure(TuneTimer *t, int slot, const int *which, const int *knob, int n,
                        int retime, Measured *out, char *err, size_t errlen)
{
    FakeTimer *f = (FakeTimer *)t;
    FakeSlot *sl = &f->slot[slot];
    ASSERT(sl->names);
    if (!sl->up) { /* a crash stopped them: started again */
        sl->up = 1;
        t->launches++;
        t->slot_launches[slot]++;
    }
    int crashed = 0;
    for (int i = 0; i < n; i++) {
        const char *name = sl->names[which[i]];
        int own = knob[i];
        Measured *m = &out[i];
        memset(m, 0, sizeof *m);
        m->ms = -1;
        if (crashed) { /* the ranks were stopped before it */
            snprintf(m->verdict, sizeof m->verdict, "FAILED");
            m->not_run = 1;
            continue;
        }
        const FakeLine *bad = find(f, sl, "fail", name, own);
        crashed = bad && !strcmp(bad->value, "CRASH");
        sl->up &= !crashed;
        if (bad) {
            snprintf(m->verdict, sizeof m->verdict, "%.15s", bad->value);
            snprintf(m->why, sizeof m->why, "%.200s: recorded as failing", f->path);
            continue;
        }
        m->passed = 1;
        if (!retime) /* timed alone: the verdict of its checked run stands */
            snprintf(m->verdict, sizeof m->verdict, "%s",
                     sl->mode == MEASURE_TIME ? "unchecked" : "bitwise");
        if (sl->mode == MEASURE_CHECK)
            continue;
        FakeLine *l = find(f, sl, "time", name, own);
        if (!l) {
            snprintf(err, errlen, "coconet: %s: no recorded time for %s under knobs %s at %s\n",
                     f->path, name, knob_name(own), sl->sizes);
            return -1;
        }
        m->ms = nth_time(l->value, l->taken++);
    }
    return 0;
}

static void fake_close(TuneTimer *t, int slot)
{
    FakeSlot *sl = &((FakeTimer *)t)->slot[slot];
    free(sl->names);
    sl->names = NULL;
}

static void fake_free(TuneTimer *t)
{
    FakeTimer *f = (FakeTimer *)t;
    for (int slot = 0; slot < NSLOT; slot++)
        fake_close(t, slot);
    free(f->line);
    free(f);
}

/* Reads the file into f; -1 with a message naming the line */
static int read_file(FakeTimer *f, char *err, size_t errlen)
{
    FILE *in = fopen(f->path, "r");
    if (!in) {
        snprintf(err, errlen, "coconet: COCONET_TUNE_FAKE: cannot open %s\n", f->path);
        return -1;
    }
    char buf[2048];
    int lineno = 0, bad = 0;
    while (!bad && fgets(buf, sizeof buf, in)) {
        lineno++;
        buf[strcspn(buf, "\r\n")] = 0;
        char *s = buf + strspn(buf, " \t");
        if (!*s || *s == '#')
            continue;
        if (!strncmp(s, "gpu ", 4)) {
            snprintf(f->t.gpu, sizeof f->t.gpu, "%s", s + 4);
        } else if (!strncmp(s, "nccl ", 5)) {
            f->t.nccl = atoi(s + 5);
        } else if (!strncmp(s, "limits ", 7)) {
            TuneLimits *l = &f->t.limits;
            bad = sscanf(s + 7, "%lf %lf %lf", &l->copy_gbs, &l->peer_gbs, &l->gemm_tflops) != 3;
            l->known = 1;
        } else {
            f->line = xgrow(f->line, f->nline, &f->cap, 32, sizeof *f->line);
            FakeLine *l = &f->line[f->nline++];
            bad = sscanf(s, "%7s %511s %31s %71s %63s", l->kind, l->sizes, l->knob, l->variant,
                         l->value) != 5 ||
                  (strcmp(l->kind, "time") && strcmp(l->kind, "fail"));
        }
    }
    fclose(in);
    if (bad)
        snprintf(err, errlen, "coconet: %s:%d: expected 'gpu TEXT', 'nccl N', 'limits COPY PEER "
                 "GEMM', 'time SIZES KNOBS VARIANT MS' or 'fail SIZES KNOBS VARIANT VERDICT'\n",
                 f->path, lineno);
    return bad ? -1 : 0;
}

TuneTimer *timer_fake_new(const char *path, char *err, size_t errlen)
{
    FakeTimer *f = xcalloc(1, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    tune_limits_default(&f->t.limits);
    snprintf(f->t.gpu, sizeof f->t.gpu, "fake GPU");
    if (read_file(f, err, errlen)) {
        fake_free(&f->t);
        return NULL;
    }
    f->t.open = fake_open;
    f->t.measure = fake_measure;
    f->t.close = fake_close;
    f->t.free = fake_free;
    return &f->t;
}

int timer_fake_machine(const char *path, char *gpu, size_t len, int *nccl, char *err,
                       size_t errlen)
{
    TuneTimer *t = timer_fake_new(path, err, errlen);
    if (!t)
        return -1;
    snprintf(gpu, len, "%s", t->gpu);
    *nccl = t->nccl;
    t->free(t);
    return 0;
}

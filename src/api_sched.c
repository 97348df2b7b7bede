/* api_sched.c: the public API for schedules: adding schedule files,
 * applying a schedule to get a scheduled program, and comparing the values
 * two runs computed (the check that a schedule preserves the program). */
#include "api.h"

#include <fenv.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int coco_add_schedules(coco_program *p, const char *path, char *err, size_t errlen)
{
    char *text = read_source_file(path, err, errlen);
    if (!text)
        return -1;
    const char *src = arena_strdup(p->arena, text);
    free(text);
    ErrorCtx ctx;
    const char *file = arena_strdup(p->arena, path);
    error_push(&ctx, err, errlen, file, src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        return -1;
    }
    parse_schedules(p, file, src);
    error_pop(&ctx);
    return 0;
}

int coco_num_schedules(const coco_program *p)
{
    return p->nsched;
}

const char *coco_schedule_name(const coco_program *p, int i)
{
    return i >= 0 && i < p->nsched ? p->sched[i].name : NULL;
}

enum { NAMES_LISTED = 16 }; /* the schedules an unknown name's message lists */

/* "its schedules: a, b, ... and N more" into buf */
static void schedule_list(const Program *p, char *buf, size_t len)
{
    size_t u = (size_t)snprintf(buf, len, p->nsched ? "its schedules: " : "it has no schedules");
    for (int i = 0; i < p->nsched && i < NAMES_LISTED && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%s", i ? ", " : "", p->sched[i].name);
    if (p->nsched > NAMES_LISTED && u < len)
        snprintf(buf + u, len - u, " and %d more", p->nsched - NAMES_LISTED);
}

void schedule_unknown(const Program *p, const char *name, char *err, size_t errlen)
{
    int enumerated = 0;
    for (int i = 0; i < p->nsched; i++)
        enumerated |= p->sched[i].generated;
    char list[1024];
    schedule_list(p, list, sizeof list);
    snprintf(err, errlen, "%s: error: no schedule named '%s' (%s%s)\n", p->file, name, list,
             enumerated ? "" : "; --all-schedules adds those `coconet schedules` lists");
}

int coco_find_schedule(const coco_program *p, const char *name, char *err, size_t errlen)
{
    for (int i = 0; i < p->nsched; i++)
        if (!strcmp(p->sched[i].name, name))
            return i;
    schedule_unknown(p, name, err, errlen);
    return -1;
}

coco_program *coco_schedule(coco_program *p, const char *name, char *err, size_t errlen)
{
    int i = coco_find_schedule(p, name, err, errlen);
    return i < 0 ? NULL : schedule_applied(p, &p->sched[i], err, errlen);
}

coco_program *coco_program_exact(coco_program *p)
{
    return program_exact(p);
}

/* x64's program run again with every operation rounded in `mode` (its
 * inputs filled as x64's, in the default rounding; worker threads inherit
 * the mode from this one); NULL where it cannot run. */
static coco_run *directed_run(coco_run *x64, int mode)
{
    char err[256];
    coco_run *d = coco_run_create(x64->prog, x64->exec->seed, x64->exec->nthreads, err,
                                  sizeof err);
    if (!d)
        return NULL;
    int before = fegetround();
    int rc = fesetround(mode) || coco_run_execute(d, err, sizeof err);
    fesetround(before);
    if (rc) {
        coco_run_free(d);
        return NULL;
    }
    return d;
}

/* The exact value of node na at (rank, gidx) rounded upward and downward,
 * the runs made at the first call; 0 where they could not run. */
static int directed_values(coco_run *x64, int na, int rank, long gidx, double *up,
                           double *down)
{
    if (!x64->directed_tried) {
        x64->directed_tried = 1;
        x64->directed[0] = directed_run(x64, FE_UPWARD);
        x64->directed[1] = x64->directed[0] ? directed_run(x64, FE_DOWNWARD) : NULL;
    }
    if (!x64->directed[1])
        return 0;
    const Node *n = node_of(x64->prog, na);
    *up = exec_value_at(x64->directed[0]->exec, n, rank, gidx);
    *down = exec_value_at(x64->directed[1]->exec, n, rank, gidx);
    return 1;
}

/* Is v, differing from the program's u, right (x64: the exact run)? */
static int right(coco_run *x64, int na, const Node *y, int rank, long gidx, double u, double v,
                 const Tolerance *tol)
{
    double exact = exec_value_at(x64->exec, node_of(x64->prog, na), rank, gidx);
    double up = NAN, down = NAN;
    if (within_tolerance(y->type, u, v, exact, tol))
        return 1;
    return directed_values(x64, na, rank, gidx, &up, &down) &&
           within_directed(v, exact, up, down);
}

static void compare_value(coco_run *a, int na, coco_run *b, int nb, coco_run *x64,
                          coco_comparison *c)
{
    Node *x = node_of(a->prog, na), *y = node_of(b->prog, nb);
    ASSERT(dim_count(x) == dim_count(y));
    double before = c->max_abs;
    Tolerance tol = {0, 0, 0, a->prog->nranks};
    if (x64)
        tol.worst = value_error(a->exec, na, x64->exec, na, &tol.scale);
    for (int rank = 0; rank < b->prog->nranks; rank++) {
        GlobalIter it;
        long count;
        double *data = exec_data(b->exec, nb, rank, &count);
        global_iter_start(&it, b->prog, y, rank);
        for (long i = 0; i < count; i++, global_iter_next(&it)) {
            double u = exec_value_at(a->exec, x, rank, it.gidx), v = data[i];
            int same = type_bits(x->type, u) == type_bits(y->type, v);
            double diff = fabs(u - v);
            if (!same && (isnan(u) || isnan(v)))
                diff = INFINITY;
            c->elements++;
            c->differing += !same;
            if (!same && (!x64 || !right(x64, na, y, rank, it.gidx, u, v, &tol)))
                c->outside++;
            if (diff > c->max_abs)
                c->max_abs = diff;
            double rel = diff / fmax(fabs(u), 1e-30);
            if (!same && rel > c->max_rel)
                c->max_rel = rel;
        }
    }
    if (c->max_abs > before || !c->worst[0])
        snprintf(c->worst, sizeof c->worst, "%s", x->name);
    c->compared++;
}

int coco_run_compare(coco_run *a, coco_run *b, coco_run *x64, coco_comparison *c)
{
    Program *pa = a->prog, *pb = b->prog;
    memset(c, 0, sizeof *c);
    if (!a->exec->ran || !b->exec->ran || (x64 && !x64->exec->ran))
        return -1;
    if (pa->nexec_out != pb->nexec_out || pa->nranks != pb->nranks)
        return -1;
    for (int i = 0; i < pa->nexec_out; i++)
        compare_value(a, pa->exec_out[i], b, pb->exec_out[i], x64, c);
    for (int i = 0; i < pa->nnode; i++) {
        Node *t = &pa->node[i];
        if (t->op != O_INPUT || t->updated_by < 0)
            continue;
        int tb = program_input(pb, t->name);
        if (tb < 0 || pb->node[tb].updated_by < 0)
            return -1;
        compare_value(a, t->updated_by, b, pb->node[tb].updated_by, x64, c);
    }
    return 0;
}

int coco_enumerate_schedules(coco_program *p)
{
    return enumerate_schedules(p);
}

const char *coco_schedule_note(const coco_program *p, int i)
{
    return i >= 0 && i < p->nsched ? p->sched[i].note : NULL;
}

void coco_print_schedule(const coco_program *p, int i, FILE *out)
{
    if (i >= 0 && i < p->nsched)
        print_schedule(&p->sched[i], out);
}

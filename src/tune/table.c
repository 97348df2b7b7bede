/* table.c: what `coconet tune` prints: a table per size point, its
 * candidates best first (timed by time, then pruned by prediction, then
 * failed, with their verdicts), with each time's ratio to the best and to
 * the program's; what pruning would have picked from an exhaustive search's
 * times; and --plan's list of the candidates with the cost model's figures. */
#include "tune/tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *vname(const Program *v)
{
    return v->applied ? v->applied : "program";
}

static int by_time(const void *a, const void *b)
{
    const Cand *x = *(const Cand *const *)a, *y = *(const Cand *const *)b;
    int rx = x->state == CAND_TIMED ? 0 : x->state == CAND_PRUNED ? 1 : 2;
    int ry = y->state == CAND_TIMED ? 0 : y->state == CAND_PRUNED ? 1 : 2;
    if (rx != ry)
        return rx - ry;
    double kx = rx ? x->pred_ms : x->ms, ky = ry ? y->pred_ms : y->ms;
    return kx < ky ? -1 : kx > ky;
}

static void print_row(FILE *out, Program **v, const Cand *c, int rank, double best,
                      double program)
{
    const Schedule *s = v[c->variant]->applied ? schedule_find(v[0], vname(v[c->variant]))
                                               : NULL;
    const char *note = s && s->note ? s->note : "";
    char r[16] = "-";
    if (c->state == CAND_TIMED) {
        snprintf(r, sizeof r, "%d", rank);
        char vs[16] = "-";
        if (program > 0)
            snprintf(vs, sizeof vs, "%.2f", c->ms / program);
        char spread[48] = "";
        if (c->hi_ms > 0)
            snprintf(spread, sizeof spread, "[%.4f, %.4f]  ", c->lo_ms, c->hi_ms);
        fprintf(out, "%4s  %-24s %-8s %10.4f ms %8.2f %10s %10.4f ms  %s%s\n", r,
                vname(v[c->variant]), knob_name(c->knob), c->ms, c->ms / best, vs, c->pred_ms,
                spread, note);
    } else if (c->state == CAND_PRUNED) {
        fprintf(out, "%4s  %-24s %-8s %13s %8s %10s %10.4f ms  %s\n", r, vname(v[c->variant]),
                knob_name(c->knob), "pruned", "", "", c->pred_ms, note);
    } else {
        fprintf(out, "%4s  %-24s %-8s %13s%s%s\n", r, vname(v[c->variant]), knob_name(c->knob),
                c->verdict, c->why[0] ? ": " : "", c->why);
    }
}

/* After the best: the confirmed candidates whose times overlap its own
 * (search_ties), at most 4 named */
static void print_ties(FILE *out, Program **v, const Search *s)
{
    int *tie = xcalloc((size_t)s->n + 1, sizeof *tie), n = search_ties(s, tie);
    for (int k = 0; k < n && k < 4; k++)
        fprintf(out, "%s%s/%s", k ? ", " : ", its times overlap those of ",
                vname(v[s->c[tie[k]].variant]), knob_name(s->c[tie[k]].knob));
    if (n > 4)
        fprintf(out, " and %d more", n - 4);
    free(tie);
}

void table_point(FILE *out, Program **v, const Search *s, const char *sizes)
{
    int best = search_best(s), prog = search_program(s);
    int timed = 0, pruned = 0, failed = 0;
    for (int i = 0; i < s->n; i++) {
        timed += s->c[i].state == CAND_TIMED;
        pruned += s->c[i].state == CAND_PRUNED;
        failed += s->c[i].state == CAND_FAILED;
    }
    fprintf(out, "\n%s at %s, %d rank%s: %d candidates (%d variants x knob sets): %d timed, %d "
            "pruned, %d failed, in %d round%s\n", v[0]->exec_name, sizes, v[0]->nranks,
            v[0]->nranks == 1 ? "" : "s", s->n, s->c[s->n - 1].variant + 1, timed, pruned,
            failed, s->launches, s->launches == 1 ? "" : "s");
    if (s->confirmed)
        fprintf(out, "confirmed: the %d candidates within %.0f %% (or %.3f ms) of the best timed "
                "%d times each, in %d more round%s; each row's time the median of its times, "
                "[the least, the most] after the prediction\n",
                s->confirmed, 100 * s->confirm_margin, s->confirm_floor_ms, s->confirm_times,
                s->confirm_rounds, s->confirm_rounds == 1 ? "" : "s");
    fprintf(out, "%4s  %-24s %-8s %13s %8s %10s %13s\n", "rank", "schedule", "knobs", "time",
            "vs-best", "vs-program", "predicted");
    const Cand **row = xcalloc((size_t)s->n, sizeof *row);
    for (int i = 0; i < s->n; i++)
        row[i] = &s->c[i];
    qsort(row, (size_t)s->n, sizeof *row, by_time);
    double program = prog >= 0 ? s->c[prog].ms : -1;
    for (int i = 0; i < s->n; i++)
        print_row(out, v, row[i], i + 1, best >= 0 ? s->c[best].ms : 1, program);
    free(row);
    if (best < 0) {
        fprintf(out, "no candidate passed its check at %s\n", sizes);
        return;
    }
    const Cand *b = &s->c[best];
    fprintf(out, "best at %s: %s with knobs %s", sizes, vname(v[b->variant]), knob_name(b->knob));
    if (program > 0)
        fprintf(out, ", %.2fx the program's speed", program / b->ms);
    print_ties(out, v, s);
    fprintf(out, "\n");
}

void table_replay(FILE *out, Program **v, const Search *s, double factor)
{
    int launches, timed, best = search_best(s);
    int pick = search_replay(s, factor, &launches, &timed);
    if (best < 0 || pick < 0)
        return;
    double loss = s->c[pick].ms / s->c[best].ms - 1;
    fprintf(out, "pruning at %.3g would pick %s with knobs %s (%s%.1f %% slower than the "
            "best), timing %d of %d candidates in %d round%s\n", factor,
            vname(v[s->c[pick].variant]), knob_name(s->c[pick].knob),
            pick == best ? "the best, " : "", 100 * loss, timed, s->n, launches,
            launches == 1 ? "" : "s");
}

void table_plan(FILE *out, Program **v, Program **lv, const Search *s, const char *sizes,
                const char *checked)
{
    const Program *p = v[0];
    fprintf(out, "\n%s at %s, %d rank%s: %d variants, %d candidates; checked %s\n",
            p->exec_name, sizes, p->nranks, p->nranks == 1 ? "" : "s",
            s->c[s->n - 1].variant + 1, s->n, checked);
    fprintf(out, "%-24s %-8s %13s %12s %12s %12s %8s %5s %8s\n", "schedule", "knobs",
            "predicted", "memory", "link", "gemm-flops", "launches", "nccl", "barriers");
    for (int i = 0; i < s->n; i++) {
        const Cand *c = &s->c[i];
        TuneCost tc, most;
        memset(&most, 0, sizeof most);
        for (int r = 0; r < p->nranks; r++) { /* each figure's most over the ranks */
            tune_cost(lv[c->variant], c->knob, r, &tc);
            most.mem_bytes = fmax(most.mem_bytes, tc.mem_bytes);
            most.link_bytes = fmax(most.link_bytes, tc.link_bytes);
            most.gemm_flops = fmax(most.gemm_flops, tc.gemm_flops);
            most.launches = tc.launches;
            most.nccl_calls = tc.nccl_calls;
            most.barriers = tc.barriers;
        }
        fprintf(out, "%-24s %-8s %10.4f ms %12.6g %12.6g %12.6g %8d %5d %8d\n",
                vname(v[c->variant]), knob_name(c->knob), c->pred_ms, most.mem_bytes,
                most.link_bytes, most.gemm_flops, most.launches, most.nccl_calls, most.barriers);
    }
}

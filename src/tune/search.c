/* search.c: timing the candidates of one size point (each variant under
 * each knob set that applies to it), with pruning.
 *
 * A round (a "launch" here: the LaunchFn) on the ranks may time any
 * candidates, each under its own knob set (the runtime takes a variant's
 * knobs with it: knobs.c). The ranks stay up from one round to the next
 * (timer_cuda.c), so another round costs its candidates; with
 * search_costs' launch_s it may cost a start of the ranks instead (seconds,
 * where a candidate at a small size costs milliseconds). The first round
 * times the program's fastest predicted
 * candidate (never pruned, so that every table has the program's time) and
 * every candidate the cost model (cost.c) puts within factor^2 of its
 * fastest prediction: those pruning at `factor` keeps when the model's
 * ratios hold, with a margin of `factor` for its errors. After each round
 * it calibrates the model: c = the least measured / predicted ratio so far,
 * so that c x prediction is the most optimistic guess the times measured
 * allow. A candidate is pruned when even that guess is more than `factor`
 * times the best time measured; the next round times every candidate left
 * (often none). --exhaustive times all in one round. Where a launch is
 * weighed (launch_s > 0) and timing the candidates beyond factor^2 would
 * cost less than it, the first round takes them all.
 *
 * Pruning can lose the true best only when the model ranks a candidate
 * more than `factor` too slow relative to the best one measured; an
 * exhaustive search can say whether it would have (search_replay).
 * A round may leave candidates untimed (a rank failed before them): they
 * are taken again by the next rounds; a round resolves at least one
 * candidate (the launch function's rule), so the search ends.
 *
 * Then search_confirm times the candidates within a margin of the best
 * again, in a few more rounds, and each keeps the median of its times: a
 * pick made on one measurement that strayed is made again on three. The
 * margin has a floor in milliseconds as well as a fraction, since at
 * microseconds a step a timer's jitter exceeds the fraction (doc/cli.md,
 * coconet tune). */
#include "tune/tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void search_init(Search *s, Program **v, int nv, const TuneLimits *l, double factor,
                 int exhaustive)
{
    memset(s, 0, sizeof *s);
    s->factor = factor;
    s->exhaustive = exhaustive;
    s->c = xcalloc((size_t)nv * NKNOB, sizeof *s->c);
    int must = -1;
    for (int i = 0; i < nv; i++) {
        int sets[NKNOB], n = knob_sets(v[i], sets);
        for (int k = 0; k < n; k++) {
            Cand *c = &s->c[s->n++];
            c->variant = i;
            c->knob = sets[k];
            c->pred_ms = tune_predict_ms(v[i], sets[k], l);
            c->ms = -1;
            if (i == 0 && (must < 0 || c->pred_ms < s->c[must].pred_ms))
                must = s->n - 1;
        }
    }
    s->c[must].must = 1; /* the program's fastest predicted: a baseline, whatever is pruned */
}

void search_costs(Search *s, double launch_s, double cand_s, int runs)
{
    s->launch_s = launch_s;
    s->cand_s = cand_s;
    s->runs = runs;
}

void search_repredict(Search *s, Program **v, const TuneLimits *l)
{
    for (int i = 0; i < s->n; i++)
        s->c[i].pred_ms = tune_predict_ms(v[s->c[i].variant], s->c[i].knob, l);
}

void search_free(Search *s)
{
    free(s->c);
    memset(s, 0, sizeof *s);
}

/* The seconds the candidates beyond `reach` (a prediction) would add to a
 * launch */
static double beyond_s(const Search *s, double reach)
{
    double t = 0;
    for (int i = 0; i < s->n; i++) {
        const Cand *c = &s->c[i];
        if (c->state == CAND_TODO && !c->must && c->pred_ms > reach)
            t += s->cand_s + s->runs * c->pred_ms * 1e-3;
    }
    return t;
}

/* The candidates of the next launch into which, the must first, then by
 * prediction: before any time is measured, the must and those within
 * factor^2 of the fastest prediction (all, where the others cost less than
 * a launch); after (pruning done), all left; when nothing within reach
 * could be timed, all left too. How many. */
static int batch(const Search *s, int *which)
{
    double fastest = -1;
    int measured = 0, n = 0;
    for (int i = 0; i < s->n; i++) {
        measured |= s->c[i].state == CAND_TIMED;
        if (fastest < 0 || s->c[i].pred_ms < fastest)
            fastest = s->c[i].pred_ms;
    }
    double reach = s->exhaustive || measured ? -1 : s->factor * s->factor * fastest;
    if (reach >= 0 && s->launch_s > 0 && beyond_s(s, reach) < s->launch_s)
        reach = -1;
    for (int pass = 0; pass < 2 && !n; pass++, reach = -1)
        for (int i = 0; i < s->n; i++) {
            const Cand *c = &s->c[i];
            if (c->state == CAND_TODO && (reach < 0 || c->must || c->pred_ms <= reach))
                which[n++] = i;
        }
    for (int i = 1; i < n; i++) /* insertion sort: the must, then by prediction */
        for (int k = i; k > 0; k--) {
            const Cand *a = &s->c[which[k - 1]], *b = &s->c[which[k]];
            if (a->must > b->must || (a->must == b->must && a->pred_ms <= b->pred_ms))
                break;
            int t = which[k];
            which[k] = which[k - 1];
            which[k - 1] = t;
        }
    return n;
}

int search_best(const Search *s)
{
    int best = -1;
    for (int i = 0; i < s->n; i++)
        if (s->c[i].state == CAND_TIMED && (best < 0 || s->c[i].ms < s->c[best].ms))
            best = i;
    return best;
}

int search_program(const Search *s)
{
    int best = -1;
    for (int i = 0; i < s->n; i++)
        if (s->c[i].variant == 0 && s->c[i].state == CAND_TIMED &&
            (best < 0 || s->c[i].ms < s->c[best].ms))
            best = i;
    return best;
}

/* Prunes what even the calibrated model says is too slow */
static void prune(Search *s)
{
    int best = search_best(s);
    if (s->exhaustive || best < 0)
        return;
    double cal = -1;
    for (int i = 0; i < s->n; i++) {
        const Cand *c = &s->c[i];
        if (c->state == CAND_TIMED && c->pred_ms > 0 && (cal < 0 || c->ms / c->pred_ms < cal))
            cal = c->ms / c->pred_ms;
    }
    for (int i = 0; i < s->n; i++) {
        Cand *c = &s->c[i];
        if (c->state == CAND_TODO && !c->must && cal > 0 &&
            cal * c->pred_ms > s->factor * s->c[best].ms)
            c->state = CAND_PRUNED;
    }
}

int search_run(Search *s, LaunchFn launch, void *ctx,
               void (*progress)(void *ctx, const Search *s), char *err, size_t errlen)
{
    int *which = xcalloc((size_t)s->n + 1, sizeof *which);
    int rc = 0;
    for (int n; !rc && (n = batch(s, which)) > 0;) {
        rc = launch(ctx, s, which, n, err, errlen);
        for (int k = 0; !rc && k < n; k++) /* a candidate left TODO never ran: again */
            s->timed += s->c[which[k]].state == CAND_TIMED;
        s->launches++;
        if (!rc)
            prune(s);
        if (progress)
            progress(ctx, s);
    }
    free(which);
    return rc;
}

/* ---- replaying an exhaustive search's times ---- */

static int replay_launch(void *ctx, Search *s, const int *which, int n, char *err,
                         size_t errlen)
{
    const Search *done = ctx;
    for (int k = 0; k < n; k++) {
        Cand *c = &s->c[which[k]];
        const Cand *d = &done->c[which[k]];
        c->state = d->state == CAND_TIMED ? CAND_TIMED : CAND_FAILED;
        c->ms = d->ms;
    }
    return 0;
}

int search_replay(const Search *done, double factor, int *launches, int *timed)
{
    Search s = *done;
    s.c = xcalloc((size_t)done->n + 1, sizeof *s.c);
    memcpy(s.c, done->c, (size_t)done->n * sizeof *s.c);
    for (int i = 0; i < s.n; i++) {
        s.c[i].state = CAND_TODO;
        s.c[i].ms = -1;
    }
    s.factor = factor;
    s.exhaustive = 0;
    s.launches = s.timed = 0;
    char err[8];
    search_run(&s, replay_launch, (void *)done, NULL, err, sizeof err);
    int best = search_best(&s);
    *launches = s.launches;
    *timed = s.timed;
    free(s.c);
    return best;
}

/* ---- confirming the best ---- */

static int by_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *x, int n)
{
    double sorted[CONFIRM_MAX_ROUNDS + 1];
    memcpy(sorted, x, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_ms);
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

/* which[0..n), candidates of s, sorted by time, the fastest first */
static void by_time(const Search *s, int *which, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort */
        for (int k = i; k > 0 && s->c[which[k - 1]].ms > s->c[which[k]].ms; k--) {
            int t = which[k];
            which[k] = which[k - 1];
            which[k - 1] = t;
        }
}

/* The timed candidates within the rule's margin of the best, fastest
 * first, at most rule->most, into which; how many */
static int contenders(const Search *s, const ConfirmRule *rule, int *which)
{
    int best = search_best(s), n = 0;
    if (best < 0)
        return 0;
    double b = s->c[best].ms;
    double within = fmax((1 + rule->margin) * b, b + rule->floor_ms);
    for (int i = 0; i < s->n; i++)
        if (s->c[i].state == CAND_TIMED && s->c[i].ms <= within)
            which[n++] = i;
    by_time(s, which, n);
    return n < rule->most ? n : rule->most;
}

int search_ties(const Search *s, int *which)
{
    int best = search_best(s), n = 0;
    if (best < 0 || s->c[best].hi_ms <= 0)
        return 0;
    const Cand *b = &s->c[best];
    for (int i = 0; i < s->n; i++) {
        const Cand *c = &s->c[i];
        if (i != best && c->state == CAND_TIMED && c->hi_ms > 0 && c->lo_ms <= b->hi_ms &&
            b->lo_ms <= c->hi_ms)
            which[n++] = i;
    }
    by_time(s, which, n);
    return n;
}

int search_confirm(Search *s, LaunchFn launch, void *ctx, const ConfirmRule *rule, char *err,
                   size_t errlen)
{
    int rounds = rule->rounds < CONFIRM_MAX_ROUNDS ? rule->rounds : CONFIRM_MAX_ROUNDS;
    int *which = xcalloc((size_t)s->n + 1, sizeof *which);
    int n = rounds > 0 ? contenders(s, rule, which) : 0;
    if (n < 2) {
        free(which);
        return 0;
    }
    int *turn = xcalloc((size_t)n, sizeof *turn), *got = xcalloc((size_t)n, sizeof *got);
    double(*times)[CONFIRM_MAX_ROUNDS + 1] = xcalloc((size_t)n, sizeof *times);
    for (int k = 0; k < n; k++)
        times[k][got[k]++] = s->c[which[k]].ms;
    int rc = 0;
    for (int r = 0; r < rounds && !rc; r++) {
        int m = 0;
        for (int j = 0; j < n; j++) { /* each round from another one first */
            Cand *c = &s->c[which[(j + r + 1) % n]];
            if (c->state != CAND_TIMED)
                continue; /* failed in an earlier round */
            c->state = CAND_TODO; /* still TODO after the round: it never ran */
            c->ms = -1;
            turn[m++] = which[(j + r + 1) % n];
        }
        if (!m)
            break;
        s->confirming = 1;
        rc = launch(ctx, s, turn, m, err, errlen);
        s->confirming = 0;
        s->confirm_rounds++;
        for (int k = 0; k < n; k++) {
            Cand *c = &s->c[which[k]];
            if (c->state == CAND_TODO)
                c->state = CAND_TIMED; /* its times so far stand */
            else if (c->state == CAND_TIMED && !rc)
                times[k][got[k]++] = c->ms;
            if (c->state == CAND_TIMED) /* a FAILED one stays failed: never picked */
                c->ms = median(times[k], got[k]);
        }
    }
    for (int k = 0; k < n; k++) {
        Cand *c = &s->c[which[k]];
        c->lo_ms = c->hi_ms = times[k][0];
        for (int j = 1; j < got[k]; j++) {
            c->lo_ms = times[k][j] < c->lo_ms ? times[k][j] : c->lo_ms;
            c->hi_ms = times[k][j] > c->hi_ms ? times[k][j] : c->hi_ms;
        }
    }
    s->confirmed = n;
    s->confirm_times = rounds + 1;
    s->confirm_margin = rule->margin;
    s->confirm_floor_ms = rule->floor_ms;
    free(turn);
    free(got);
    free(times);
    free(which);
    return rc;
}

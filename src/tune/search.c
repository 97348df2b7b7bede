/* search.c: timing the candidates of one size point (each variant under
 * each knob set that applies to it), with pruning.
 *
 * One launch of the ranks runs under one knob set (knobs.c), so the search
 * goes launch by launch: it takes the untimed candidate the cost model
 * (cost.c) predicts fastest (first the program's fastest predicted, never
 * pruned, so that every table has the program's time), and times, in one launch under its knob set,
 * every untimed candidate that can run there (one per variant). After each
 * launch it calibrates the model: c = the least measured / predicted ratio
 * so far, so that c x prediction is the most optimistic guess the times
 * measured allow. A candidate is pruned when even that guess is more than
 * `factor` times the best time measured; a knob set whose candidates are
 * all pruned is never launched. --exhaustive prunes nothing.
 *
 * Pruning can lose the true best only when the model ranks a candidate
 * more than `factor` too slow relative to the best one measured; an
 * exhaustive search can say whether it would have (search_replay).
 * A launch may leave candidates untimed (a rank failed before them): they
 * are taken again by the next launches; a launch resolves at least one
 * candidate (the launch function's rule), so the search ends. */
#include "tune/tune.h"

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

/* The untimed candidate to launch next: a must first, else the fastest
 * predicted; -1 when none is left */
static int next_candidate(const Search *s)
{
    int best = -1;
    for (int i = 0; i < s->n; i++) {
        const Cand *c = &s->c[i];
        if (c->state != CAND_TODO)
            continue;
        if (best < 0 || c->must > s->c[best].must ||
            (c->must == s->c[best].must && c->pred_ms < s->c[best].pred_ms))
            best = i;
    }
    return best;
}

/* The knob set of the launch that times candidate i: its own; for a
 * default candidate that can run under another's, the fastest predicted
 * such other, so that one launch serves both */
static int launch_knob(const Search *s, Program **v, int i)
{
    const Cand *c = &s->c[i];
    if (c->knob != KNOB_DEFAULT)
        return c->knob;
    int best = -1;
    for (int j = 0; j < s->n; j++) {
        const Cand *o = &s->c[j];
        if (o->state == CAND_TODO && o->knob != KNOB_DEFAULT &&
            knob_runs_in(v[c->variant], c->knob, o->knob) &&
            (best < 0 || o->pred_ms < s->c[best].pred_ms))
            best = j;
    }
    return best < 0 ? KNOB_DEFAULT : s->c[best].knob;
}

/* The candidates that launch `knob` times: one per variant */
static int batch(const Search *s, Program **v, int knob, int *which)
{
    int n = 0, last_variant = -1;
    for (int i = 0; i < s->n; i++) {
        const Cand *c = &s->c[i];
        if (c->state != CAND_TODO || c->variant == last_variant ||
            !knob_runs_in(v[c->variant], c->knob, knob))
            continue;
        int taken = 0;
        for (int k = 0; k < n; k++)
            taken |= s->c[which[k]].variant == c->variant;
        if (!taken) {
            which[n++] = i;
            last_variant = c->variant;
        }
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

int search_run(Search *s, Program **v, LaunchFn launch, void *ctx,
               void (*progress)(void *ctx, const Search *s), char *err, size_t errlen)
{
    int *which = xcalloc((size_t)s->n + 1, sizeof *which);
    int rc = 0;
    for (int i; !rc && (i = next_candidate(s)) >= 0;) {
        int knob = launch_knob(s, v, i), n = batch(s, v, knob, which);
        ASSERT(n > 0);
        rc = launch(ctx, s, which, n, knob, err, errlen);
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

static int replay_launch(void *ctx, Search *s, const int *which, int n, int knob, char *err,
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

int search_replay(const Search *done, Program **v, double factor, int *launches, int *timed)
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
    search_run(&s, v, replay_launch, (void *)done, NULL, err, sizeof err);
    int best = search_best(&s);
    *launches = s.launches;
    *timed = s.timed;
    free(s.c);
    return best;
}

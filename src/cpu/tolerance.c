/* tolerance.c: when is a computed value right? One rule, used by the
 * schedule comparison of the CPU backend (api_sched.c) and by the CUDA
 * backend's check of GPU results (cuda_rank.c): an element is judged by its
 * distance to an FP64 evaluation of the program (program_exact), against
 * what rounding in the value's own type can explain. value_error looks at
 * large values by element ranges over threads. within_directed is the
 * schedule comparison's last word on an element the rule refuses: how far
 * rounding anywhere in the program moves the FP64 evaluation itself. */
#include "cpu/cpu.h"

#include <math.h>
#include <stdlib.h>

double type_ulp(Type t, double v)
{
    static const int bits[NTYPE] = {[T_FP16] = 11, [T_BF16] = 8, [T_FP32] = 24, [T_FP64] = 53};
    static const int emin[NTYPE] = {[T_FP16] = -14, [T_BF16] = -126, [T_FP32] = -126,
                                    [T_FP64] = -1022};
    int e;
    frexp(fabs(v), &e);
    if (v == 0 || e - 1 < emin[t])
        e = emin[t] + 1;
    return ldexp(1.0, e - bits[t]);
}

/* value_error over one rank's elements, cut into chunks over threads; each
 * chunk's largest distance and magnitude, then the largest of those (the
 * same numbers whatever the cut). */
typedef struct {
    const Program *p;
    Exec *x64;
    const Node *n, *x;
    int rank;
    const double *data;
    const double *exact; /* x's data on rank, when laid out as n; else NULL */
    long count, nchunk;
    double *worst, *scale; /* per chunk */
} ErrorJob;

static void error_chunks(void *ctx, long lo, long hi)
{
    const ErrorJob *j = ctx;
    for (long t = lo; t < hi; t++) {
        long from = j->count * t / j->nchunk, to = j->count * (t + 1) / j->nchunk;
        double worst = 0, scale = 0;
        GlobalIter it;
        global_iter_start(&it, j->p, j->n, j->rank);
        global_iter_seek(&it, from);
        for (long i = from; i < to; i++, global_iter_next(&it)) {
            double exact = j->exact ? j->exact[i] : exec_value_at(j->x64, j->x, j->rank, it.gidx);
            double d = fabs(j->data[i] - exact);
            if (d > worst && !isnan(d))
                worst = d;
            if (fabs(exact) > scale && isfinite(exact))
                scale = fabs(exact);
        }
        j->worst[t] = worst;
        j->scale[t] = scale;
    }
}

double value_error(Exec *e, int id, Exec *x64, int xid, double *scale)
{
    Program *p = e->prog;
    Node *n = node_of(p, id), *x = node_of(x64->prog, xid);
    int direct = same_place(n, x) && p->nranks == x64->prog->nranks;
    double worst = 0;
    *scale = 0;
    for (int rank = 0; rank < p->nranks; rank++) {
        long count;
        ErrorJob j = {p, x64, n, x, rank, exec_data(e, id, rank, &count), NULL, 0, 0, NULL, NULL};
        j.exact = direct ? exec_data(x64, xid, rank, NULL) : NULL;
        j.count = count;
        j.nchunk = exec_threads(e, count);
        j.worst = xcalloc((size_t)j.nchunk, sizeof *j.worst);
        j.scale = xcalloc((size_t)j.nchunk, sizeof *j.scale);
        parallel_ranges(e->nthreads, j.nchunk, error_chunks, &j);
        for (long t = 0; t < j.nchunk; t++) {
            worst = fmax(worst, j.worst[t]);
            *scale = fmax(*scale, j.scale[t]);
        }
        free(j.worst);
        free(j.scale);
    }
    return worst;
}

/* got is right when it is no further from the exact value than the
 * reference's own element (4x), the reference's worst element (2x), 4 + 2P
 * ulps of the value's scale (a sum regrouped into P partial sums adds up to
 * P + 2 roundings relative to its largest terms; the "exact" evaluation of an
 * FP64 program is itself FP64, so this term is what bounds it), or the
 * caller's extra slack. A NaN or infinite exact value must be met exactly. */
int within_tolerance(Type t, double ref, double got, double exact, const Tolerance *tol)
{
    if (isnan(exact) || isinf(exact))
        return isnan(got) == isnan(exact) && (isnan(got) || got == exact);
    double allowed = fmax(fmax(4 * fabs(ref - exact), 2 * tol->worst),
                          (4 + 2 * tol->nranks) * type_ulp(t, tol->scale));
    return fabs(got - exact) <= fmax(allowed, tol->slack);
}

/* The FP64 evaluation of an FP64 program is the program itself: within_
 * tolerance then bounds a schedule's regrouped sums by ulps at the value's
 * scale alone, which operations after the sum can amplify (a difference
 * times 55 under a square root). Evaluated with every operation rounded
 * upward and then downward, the program shows how far rounding moves each
 * element: got is right within 4 x that spread (over exact, up and down) of
 * the exact value. Where rounding decides whether the element is NaN (one of
 * up, down and exact NaN and another not: an argument at the edge of Sqrt's
 * or Log's domain), a NaN is right, and so is a value within 4 x the
 * magnitude of the finite ones. An infinity is never met by this rule. */
int within_directed(double got, double exact, double up, double down)
{
    const double v[3] = {exact, up, down};
    int edge = isnan(up) != isnan(exact) || isnan(down) != isnan(exact);
    if (isnan(got))
        return isnan(exact) || edge;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < 3; i++)
        if (isfinite(v[i])) {
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
        }
    if (!(lo <= hi) || isinf(exact) || isinf(got))
        return 0; /* no finite evaluation to measure by, or an infinity */
    double spread = hi - lo;
    if (edge) {
        double mid = (lo + hi) / 2;
        return fabs(got - mid) <= 4 * fmax(spread, fabs(mid));
    }
    return fabs(got - exact) <= 4 * spread;
}

/* tolerance.c: when is a computed value right? One rule, used by the
 * schedule comparison of the CPU backend (api_sched.c) and by the CUDA
 * backend's check of GPU results (cuda_rank.c): an element is judged by its
 * distance to an FP64 evaluation of the program (program_exact), against
 * what rounding in the value's own type can explain. */
#include "coco.h"

#include <math.h>

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

double value_error(Exec *e, int id, Exec *x64, int xid, double *scale)
{
    Program *p = e->prog;
    Node *n = node_of(p, id), *x = node_of(x64->prog, xid);
    double worst = 0;
    *scale = 0;
    for (int rank = 0; rank < p->nranks; rank++) {
        GlobalIter it;
        long count;
        double *data = exec_data(e, id, rank, &count);
        global_iter_start(&it, p, n, rank);
        for (long i = 0; i < count; i++, global_iter_next(&it)) {
            double exact = exec_value_at(x64, x, rank, it.gidx);
            double d = fabs(data[i] - exact);
            if (d > worst && !isnan(d))
                worst = d;
            if (fabs(exact) > *scale && isfinite(exact))
                *scale = fabs(exact);
        }
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

/* exec_fast.c: the fast paths the CPU executor shares between its files.
 *
 *  - exec_round(t, x) is type_round(t, x) bit for bit, without the general
 *    field-by-field code of types.c: a normal FP16/BF16 result is the
 *    double's bits rounded to nearest-even at the format's last mantissa
 *    bit with one integer addition (a carry into the exponent is the right
 *    result); a subnormal one is (|x| + C) - C, C being the format's
 *    smallest subnormal times 2^52, where the one rounding of the addition
 *    is the rounding to a multiple of that subnormal (ties to even); |x| at
 *    or above the overflow threshold (the midpoint between the largest
 *    finite value and the next power of two) is Inf, NaN a quiet NaN of the
 *    same sign.  exec_bits16 / exec_value16 are double_to_half /
 *    half_to_double (and the BF16 pair) the same way.  tests/unit/test_fast.c
 *    compares them with types.c exhaustively over the 16-bit patterns and
 *    on many doubles.
 *  - parallel_ranges(nthreads, n, fn, ctx) runs fn over [0, n) cut into
 *    nthreads contiguous ranges, one thread each; callers compute every
 *    element in one thread, so results never depend on the thread count.
 *    exec_threads(e, n) is how many threads work on n elements: all of
 *    e->nthreads for large values, one for small ones (threads cost more
 *    than they save there).
 *  - global_iter_seek moves a GlobalIter (shape.c) to a local element, so
 *    that a range of a rank's elements can walk its logical indices.
 * Assumes IEEE-754 doubles with round-to-nearest (as types.c does). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "cpu/cpu.h"

/* ---- FP16 / BF16 ---- */

typedef struct {
    int shift;            /* double mantissa bits below the format's last one */
    uint64_t min_normal;  /* bits of the smallest normal value */
    uint64_t overflow;    /* bits of the smallest |x| that rounds to Inf */
    double magic;         /* smallest subnormal * 2^52 */
    uint64_t rebias;      /* (1023 - bias) in the 16-bit exponent field */
    uint16_t inf, quiet;  /* Inf's bits, the quiet bit of a NaN */
} Fmt16;

static const Fmt16 fmt_half = {42, UINT64_C(0x3F10000000000000) /* 2^-14 */,
                               UINT64_C(0x40EFFE0000000000) /* 65520 */, 0x1p28,
                               UINT64_C(1008) << 10, 0x7C00, 0x0200};
static const Fmt16 fmt_bf16 = {45, UINT64_C(0x3810000000000000) /* 2^-126 */,
                               UINT64_C(0x47EFF00000000000) /* 0x1.FFp127 */, 0x1p-81,
                               UINT64_C(896) << 7, 0x7F80, 0x0040};

#define SIGN_BIT (UINT64_C(1) << 63)
#define QNAN_BITS UINT64_C(0x7FF8000000000000)

/* |x|'s bits (a < f->overflow, a >= f->min_normal) rounded to nearest-even
 * at the format's last mantissa bit; the low f->shift bits are then zero. */
static uint64_t round_normal(uint64_t a, const Fmt16 *f)
{
    uint64_t half = (UINT64_C(1) << (f->shift - 1)) - 1;
    a += half + ((a >> f->shift) & 1);
    return a & ~((UINT64_C(1) << f->shift) - 1);
}

static double round16(double x, const Fmt16 *f)
{
    uint64_t u = double_bits(x), sign = u & SIGN_BIT, a = u & ~SIGN_BIT;
    if (a >= f->overflow) /* Inf, or NaN: quiet, payload dropped */
        return bits_double(sign | (a > UINT64_C(0x7FF0000000000000) ? QNAN_BITS
                                                                   : UINT64_C(0x7FF0000000000000)));
    if (a < f->min_normal)
        return bits_double(sign | double_bits((bits_double(a) + f->magic) - f->magic));
    return bits_double(sign | round_normal(a, f));
}

static uint16_t bits16(double x, const Fmt16 *f)
{
    uint64_t u = double_bits(x), a = u & ~SIGN_BIT;
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
    if (a >= f->overflow)
        return (uint16_t)(sign | f->inf | (a > UINT64_C(0x7FF0000000000000) ? f->quiet : 0));
    if (a < f->min_normal) /* the multiple of the smallest subnormal */
        return (uint16_t)(sign | (double_bits(bits_double(a) + f->magic) - double_bits(f->magic)));
    return (uint16_t)(sign | ((round_normal(a, f) >> f->shift) - f->rebias));
}

static double value16(uint16_t h, const Fmt16 *f)
{
    uint64_t sign = (uint64_t)(h & 0x8000) << 48, mant = h & (f->inf ^ 0x7FFFu);
    unsigned exp = h & f->inf;
    if (exp == f->inf) /* Inf, or a NaN made quiet */
        return bits_double(sign | UINT64_C(0x7FF0000000000000) | (mant << f->shift)
                         | (mant ? QNAN_BITS : 0));
    if (exp == 0) /* zero or subnormal: mant smallest subnormals */
        return bits_double(sign | double_bits((double)mant * (f->magic * 0x1p-52)));
    return bits_double(sign | (((uint64_t)(h & 0x7FFF) + f->rebias) << f->shift));
}

double exec_round(Type t, double x)
{
    switch (t) {
    case T_FP16: return round16(x, &fmt_half);
    case T_BF16: return round16(x, &fmt_bf16);
    case T_FP32: return (double)(float)x;
    case T_FP64: return x;
    default: BUG("bad type %d", (int)t);
    }
}

uint16_t exec_bits16(Type t, double x)
{
    ASSERT(t == T_FP16 || t == T_BF16);
    return bits16(x, t == T_FP16 ? &fmt_half : &fmt_bf16);
}

double exec_value16(Type t, uint16_t h)
{
    ASSERT(t == T_FP16 || t == T_BF16);
    return value16(h, t == T_FP16 ? &fmt_half : &fmt_bf16);
}

/* ---- threads ---- */

typedef struct {
    RangeFn fn;
    void *ctx;
    long lo, hi;
} RangeTask;

static void *range_thread(void *arg)
{
    RangeTask *t = arg;
    t->fn(t->ctx, t->lo, t->hi);
    return NULL;
}

void parallel_ranges(int nthreads, long n, RangeFn fn, void *ctx)
{
    if (nthreads > n)
        nthreads = (int)n;
    if (nthreads <= 1) {
        if (n > 0)
            fn(ctx, 0, n);
        return;
    }
    RangeTask *task = xcalloc((size_t)nthreads, sizeof *task);
    pthread_t *tid = xcalloc((size_t)nthreads, sizeof *tid);
    int *started = xcalloc((size_t)nthreads, sizeof *started);
    for (int t = 0; t < nthreads; t++) {
        task[t] = (RangeTask){fn, ctx, n * t / nthreads, n * (t + 1) / nthreads};
        if (t > 0)
            started[t] = pthread_create(&tid[t], NULL, range_thread, &task[t]) == 0;
    }
    range_thread(&task[0]);
    for (int t = 1; t < nthreads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            range_thread(&task[t]); /* no thread to spare: same result */
    }
    free(task);
    free(tid);
    free(started);
}

int exec_threads(const Exec *e, long count)
{
    return count >= (1L << 16) ? e->nthreads : 1;
}

/* ---- walking a rank's elements from the middle ---- */

/* A rank's part may be empty (an uneven slice: N = 3 over 4 ranks); its
 * only place is the start, and no extent is divided by. */
void global_iter_seek(GlobalIter *it, long local)
{
    long rest = local;
    for (int d = it->ndim - 1; d >= 0; d--) {
        long extent = it->shape[d];
        it->gidx -= it->idx[d] * it->stride[d];
        it->idx[d] = extent > 0 ? rest % extent : 0;
        it->gidx += it->idx[d] * it->stride[d];
        rest = extent > 0 ? rest / extent : 0;
    }
}

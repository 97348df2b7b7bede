/* test_float_rule.c: the rounding facts src/gen/emit_value.c relies on when it
 * computes in FP32 instead of double, checked with the host's IEEE
 * arithmetic (the GPU's __fadd_rn, ... round the same way), against the CPU
 * executor's rounding (type_round of the operation in double):
 *   - +, -, *, / and sqrt of floats, rounded to FP32: FP32 arithmetic gives
 *     the same bits;
 *   - of FP16 values, rounded to FP16: FP32 arithmetic, then the rounding to
 *     FP16, gives the same bits;
 *   - and the case it keeps in double: a float times an FP16 value rounded
 *     to FP16 through FP32 does not always (double rounding).
 * Operands are random bit patterns over every finite value, subnormals
 * included, and floats of moderate magnitude. Prints one line per group; exits non-zero on a failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu.h"

#include "unit_check.h"

enum { PAIRS = 1000000 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t next_bits(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* A random finite float, every bit pattern alike. */
static float random_float(void)
{
    for (;;) {
        uint32_t b = next_bits();
        float f;
        memcpy(&f, &b, sizeof f);
        if (isfinite(f))
            return f;
    }
}

/* A random float of magnitude 2^-20 to 2^20, either sign: the results of
 * most operations stay normal, where every bit of the rounding counts. */
static float random_moderate(void)
{
    uint32_t b = next_bits();
    uint32_t exponent = 127 - 20 + (b >> 24) % 41;
    uint32_t bits = (b & 0x80000000u) | exponent << 23 | (next_bits() & 0x7FFFFFu);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A random finite FP16 value, as a float (exactly). */
static float random_half(void)
{
    for (;;) {
        double d = half_to_double((uint16_t)next_bits());
        if (isfinite(d))
            return (float)d;
    }
}

/* Both NaN, or the same value with the same sign. */
static int same(double x, double y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    return x == y && signbit(x) == signbit(y);
}

/* Operation k (0 +, 1 -, 2 *, 3 /, 4 sqrt of a) in double and in float. */
static double in_double(int k, double a, double b)
{
    switch (k) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    default: return sqrt(fabs(a));
    }
}

static float in_float(int k, float a, float b)
{
    switch (k) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    default: return sqrtf(fabsf(a));
    }
}

static const char *const op_name[] = {"+", "-", "*", "/", "sqrt"};

/* FP32 arithmetic on floats (from), rounded to type t, against double
 * arithmetic rounded to t: the number of pairs that differ, per operation. */
static void compare(float (*from_a)(void), float (*from_b)(void), Type t, long differ[5])
{
    for (int k = 0; k < 5; k++)
        differ[k] = 0;
    for (long i = 0; i < PAIRS; i++) {
        float a = from_a(), b = from_b();
        for (int k = 0; k < 5; k++) {
            double want = type_round(t, in_double(k, a, b));
            double got = type_round(t, in_float(k, a, b));
            differ[k] += !same(want, got);
        }
    }
}

static void test_rule(const char *what, float (*from_a)(void), float (*from_b)(void), Type t)
{
    long differ[5];
    char msg[160];
    compare(from_a, from_b, t, differ);
    for (int k = 0; k < 5; k++) {
        snprintf(msg, sizeof msg, "%s, %s: %ld of %d pairs differ from double", what,
                 op_name[k], differ[k], PAIRS);
        check(differ[k] == 0, msg);
    }
}

/* Known cases, each the CPU's result computed through FP32. */
static void test_known(void)
{
    float tiny = ldexpf(1, -149), big = ldexpf(1.9999999f, 127);
    check(same(type_round(T_FP32, (double)tiny / 2), in_float(3, tiny, 2)),
          "smallest subnormal / 2 ties to 0 in both");
    check(same(type_round(T_FP32, (double)big * 2), in_float(2, big, 2)),
          "overflow to inf in both");
    check(same(type_round(T_FP32, (double)ldexpf(3, -149) / 2), in_float(3, ldexpf(3, -149), 2)),
          "3 * 2^-149 / 2 ties to even in both");
    check(same(type_round(T_FP16, 65504.0 + 16), type_round(T_FP16, in_float(0, 65504, 16))),
          "FP16 overflow at 65520 in both");
}

int main(void)
{
    test_known();
    test_rule("floats rounded to FP32", random_float, random_float, T_FP32);
    test_rule("floats of 2^-20 to 2^20 rounded to FP32", random_moderate, random_moderate, T_FP32);
    test_rule("FP16 values rounded to FP32", random_half, random_half, T_FP32);
    test_rule("a float and an FP16 value rounded to FP32", random_float, random_half, T_FP32);
    test_rule("FP16 values rounded to FP16", random_half, random_half, T_FP16);
    group_end("FP32 arithmetic where emit_value.c takes it");

    long differ[5];
    compare(random_moderate, random_half, T_FP16, differ);
    printf("  a float times an FP16 value, rounded to FP16 through FP32: %ld of %d differ\n",
           differ[2], PAIRS);
    check(differ[2] > 0, "a float times an FP16 value rounded to FP16 through FP32 can differ "
                         "(why emit_value.c keeps double there)");
    group_end("double where emit_value.c keeps it");
    return total_fail != 0;
}

/* types.c: the element types FP16, BF16, FP32, FP64.
 *
 * Values are carried as doubles everywhere; type_round() maps a double to the
 * nearest value of a type (IEEE round-to-nearest-even, overflow to Inf,
 * NaN and Inf preserved, subnormals kept).  FP16 and BF16 are converted by
 * hand, straight from the double's bits, so that there is exactly one
 * rounding (going through float first would round twice).
 * Assumes IEEE-754 binary64 doubles and binary32 floats with the default
 * round-to-nearest mode (true on every platform we build for). */
#include <math.h>
#include <string.h>

#include "coco.h"

static const char *const type_names[NTYPE] = {"FP16", "BF16", "FP32", "FP64"};
static const size_t type_sizes[NTYPE] = {2, 2, 4, 8};

const char *type_name(Type t)
{
    ASSERT(t >= 0 && t < NTYPE);
    return type_names[t];
}

int type_parse(const char *s, Type *t)
{
    for (int i = 0; i < NTYPE; i++) {
        if (strcmp(s, type_names[i]) == 0) {
            *t = (Type)i;
            return 1;
        }
    }
    return 0;
}

/* FP16 with BF16 has no common 16-bit type: FP32.  Otherwise the wider one;
 * the enum order FP16, BF16 < FP32 < FP64 is the width order. */
Type type_promote(Type a, Type b)
{
    if (a == b)
        return a;
    if ((a == T_FP16 && b == T_BF16) || (a == T_BF16 && b == T_FP16))
        return T_FP32;
    return a > b ? a : b;
}

size_t type_size(Type t)
{
    ASSERT(t >= 0 && t < NTYPE);
    return type_sizes[t];
}

/* ---- small binary floats (FP16: 5 exponent bits, BF16: 8) ---- */

typedef struct {
    int mbits; /* stored mantissa bits */
    int ebits; /* exponent bits */
} SmallFloat;

static const SmallFloat half_fmt = {10, 5};
static const SmallFloat bf16_fmt = {7, 8};

uint64_t double_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

double bits_double(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round the 53-bit significand `sig` right by `s` bits, ties to even. */
static uint64_t shift_round_even(uint64_t sig, int s)
{
    if (s > 63)
        return 0; /* sig < 2^53 is below half of one unit */
    uint64_t m = sig >> s;
    uint64_t rem = sig & ((UINT64_C(1) << s) - 1);
    uint64_t half = UINT64_C(1) << (s - 1);
    if (rem > half || (rem == half && (m & 1)))
        m++;
    return m;
}

/* Encode x in the format f: sign, then exponent and mantissa fields.
 * A value with unbiased exponent E (x in [2^E, 2^(E+1))) is a multiple of
 * 2^(max(E, emin) - mbits); that multiple m, added to the exponent field
 * shifted into place, gives the bit pattern, carries included. */
static uint16_t encode_small(double x, SmallFloat f)
{
    uint64_t u = double_bits(x);
    uint16_t sign = (uint16_t)((u >> 63) << (f.mbits + f.ebits));
    int e = (int)((u >> 52) & 0x7FF);
    uint64_t mant = u & ((UINT64_C(1) << 52) - 1);
    int bias = (1 << (f.ebits - 1)) - 1;
    int emin = 1 - bias, emax = bias;
    uint16_t inf = (uint16_t)(((1u << f.ebits) - 1) << f.mbits);

    if (e == 0x7FF) /* Inf or NaN (made quiet) */
        return (uint16_t)(sign | inf | (mant ? 1u << (f.mbits - 1) : 0));
    if (e == 0) /* zero or double subnormal: far below the smallest subnormal */
        return sign;
    int E = e - 1023;
    if (E > emax)
        return sign | inf;
    int ec = E < emin ? emin : E;
    uint64_t sig = mant | (UINT64_C(1) << 52);
    uint64_t m = shift_round_even(sig, 52 - f.mbits + (ec - E));
    uint64_t bits = ((uint64_t)(ec - emin) << f.mbits) + m;
    if (bits >= inf)
        return sign | inf;
    return (uint16_t)(sign | bits);
}

static double decode_small(uint16_t h, SmallFloat f)
{
    int bias = (1 << (f.ebits - 1)) - 1;
    uint64_t sign = (uint64_t)(h >> (f.mbits + f.ebits)) & 1;
    unsigned exp = (h >> f.mbits) & ((1u << f.ebits) - 1);
    uint64_t mant = h & ((1u << f.mbits) - 1);

    if (exp == (1u << f.ebits) - 1) { /* Inf or NaN */
        uint64_t u = (sign << 63) | (UINT64_C(0x7FF) << 52) | (mant << (52 - f.mbits));
        return bits_double(mant ? u | (UINT64_C(1) << 51) : u);
    }
    if (exp == 0) { /* zero or subnormal: mant * 2^(emin - mbits) */
        double v = ldexp((double)mant, 1 - bias - f.mbits);
        return sign ? -v : v;
    }
    uint64_t dexp = (uint64_t)((int)exp - bias + 1023);
    return bits_double((sign << 63) | (dexp << 52) | (mant << (52 - f.mbits)));
}

double half_to_double(uint16_t h) { return decode_small(h, half_fmt); }
uint16_t double_to_half(double x) { return encode_small(x, half_fmt); }
double bf16_to_double(uint16_t h) { return decode_small(h, bf16_fmt); }
uint16_t double_to_bf16(double x) { return encode_small(x, bf16_fmt); }

double type_round(Type t, double x)
{
    switch (t) {
    case T_FP16: return half_to_double(double_to_half(x));
    case T_BF16: return bf16_to_double(double_to_bf16(x));
    case T_FP32: return (double)(float)x;
    case T_FP64: return x;
    default: BUG("bad type %d", (int)t);
    }
}

uint64_t type_bits(Type t, double x)
{
    switch (t) {
    case T_FP16: return double_to_half(x);
    case T_BF16: return double_to_bf16(x);
    case T_FP32: {
        float f = (float)x;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        return u;
    }
    case T_FP64: return double_bits(x);
    default: BUG("bad type %d", (int)t);
    }
}

/* rng.c: counter-based random numbers.
 *
 * A value depends only on (seed, stream, index), so any element of any
 * tensor can be drawn independently, in any order, on any device.  The exact
 * formula (all arithmetic on unsigned 64-bit integers, modulo 2^64):
 *
 *   mix(z):  z ^= z >> 30;  z *= 0xBF58476D1CE4E5B9;
 *            z ^= z >> 27;  z *= 0x94D049BB133111EB;
 *            z ^= z >> 31;  return z;            (splitmix64 finalizer)
 *
 *   h = mix(seed * 0x9E3779B97F4A7C15 + 0x6A09E667F3BCC909)
 *   h = mix(h ^ (stream * 0xD1B54A32D192ED03))
 *   h = mix(h ^ (index  * 0x8CB92BA72F3D8DD7))
 *   rng_hash(seed, stream, index) = h
 *
 *   rng_uniform(seed, stream, index) = (double)(h >> 40) * 2^-24   in [0, 1)
 *
 * mix() is a bijection and each multiplier is odd, so for a fixed prefix the
 * hash is a bijection of the next argument; distinct tuples collide only by
 * chance.  In CUDA use unsigned long long; in numpy use np.uint64 arrays
 * (wrapping arithmetic) and (h >> 40).astype(np.float64) * 2.0**-24. */
#include "cpu/cpu.h"

static uint64_t mix(uint64_t z)
{
    z ^= z >> 30;
    z *= UINT64_C(0xBF58476D1CE4E5B9);
    z ^= z >> 27;
    z *= UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    return z;
}

uint64_t rng_hash(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t h = mix(seed * UINT64_C(0x9E3779B97F4A7C15) + UINT64_C(0x6A09E667F3BCC909));
    h = mix(h ^ (stream * UINT64_C(0xD1B54A32D192ED03)));
    h = mix(h ^ (index * UINT64_C(0x8CB92BA72F3D8DD7)));
    return h;
}

double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return (double)(rng_hash(seed, stream, index) >> 40) * 0x1p-24;
}

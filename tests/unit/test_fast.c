/* test_fast.c: the executor's fast FP16/BF16 conversions (src/cpu/exec_fast.c)
 * give the bits of the general ones of types.c: every 16-bit pattern
 * decoded and re-encoded, every midpoint between neighbours and the doubles
 * next to it, and millions of doubles drawn over every exponent, with both
 * signs, zeros, subnormals, Inf and NaN. Also global_iter_seek. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu.h"

#include "unit_check.h"

static uint16_t slow_bits(Type t, double x)
{
    return t == T_FP16 ? double_to_half(x) : double_to_bf16(x);
}

static double slow_value(Type t, uint16_t h)
{
    return t == T_FP16 ? half_to_double(h) : bf16_to_double(h);
}

/* 1 when the fast functions agree with types.c on x (and on -x). */
static int agrees(Type t, double x)
{
    for (int s = 0; s < 2; s++, x = -x)
        if (double_bits(exec_round(t, x)) != double_bits(type_round(t, x)) ||
            exec_bits16(t, x) != slow_bits(t, x))
            return 0;
    return 1;
}

static void test_patterns(Type t)
{
    int bad_dec = 0, bad_enc = 0, bad_mid = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double v = slow_value(t, (uint16_t)h);
        bad_dec += double_bits(exec_value16(t, (uint16_t)h)) != double_bits(v);
        bad_enc += !agrees(t, v);
        double w = slow_value(t, (uint16_t)(h + 1));
        if (isfinite(v) && isfinite(w) && (h & 0x7FFF) != 0x7FFF) {
            double mid = v + (w - v) / 2; /* exact in double */
            bad_mid += !agrees(t, mid) || !agrees(t, nextafter(mid, 0)) ||
                       !agrees(t, nextafter(mid, INFINITY)) || !agrees(t, nextafter(v, w)) ||
                       !agrees(t, nextafter(w, v));
        }
    }
    const char *name = type_name(t);
    char msg[96];
    snprintf(msg, sizeof msg, "%s: all 65536 patterns decode to the same bits", name);
    check(bad_dec == 0, msg);
    snprintf(msg, sizeof msg, "%s: every decoded pattern encodes and rounds the same", name);
    check(bad_enc == 0, msg);
    snprintf(msg, sizeof msg, "%s: midpoints and their neighbours the same", name);
    check(bad_mid == 0, msg);
}

static void test_doubles(Type t)
{
    int bad = 0;
    /* random mantissas with exponents over the whole double range, and
     * concentrated around the format's range */
    for (uint64_t i = 0; i < 4000000; i++) {
        uint64_t h = rng_hash(11, (uint64_t)t, i);
        uint64_t e = i % 2 ? (h >> 52) & 0x7FF : 1023 - 160 + ((h >> 52) % 300);
        double x = bits_double((e << 52) | (h & ((UINT64_C(1) << 52) - 1)));
        bad += !agrees(t, x);
    }
    /* mantissas ending in the bits that decide rounding */
    for (uint64_t i = 0; i < 1000000; i++) {
        uint64_t h = rng_hash(12, (uint64_t)t, i);
        uint64_t e = 1023 - 140 + (h >> 56) % 290, low = (h >> 20) & 0xFFFFF;
        uint64_t tail = (i % 4 == 0) ? 0 : (i % 4 == 1) ? low : (UINT64_C(1) << 52) - 1 - low;
        double x = bits_double((e << 52) | (h & (UINT64_C(0xFFFF) << 36)) | tail);
        bad += !agrees(t, x);
    }
    static const double special[] = {0.0, INFINITY, NAN, 0x1p-1074, 0x1p-1022, 0x1.fffffffffffffp1023,
                                     65504.0, 65519.999999, 65520.0, 65536.0, 0x1p-24, 0x1p-25,
                                     0x1.8p-25, 0x1p-14, 0x1.ffcp-15, 0x1p-133, 0x1p-134, 0x1p-126,
                                     0x1.FEp127, 0x1.FFp127, 0x1.FEFFFFFFFFFFFp127, 1.0, 0.1};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        bad += !agrees(t, special[i]);
    bad += !agrees(t, bits_double(UINT64_C(0x7FF0000000000001))); /* signalling NaN */
    bad += !agrees(t, bits_double(UINT64_C(0x7FF4000000000123)));
    char msg[96];
    snprintf(msg, sizeof msg, "%s: 5e6 doubles round and encode the same", type_name(t));
    check(bad == 0, msg);
}

static void test_other_types(void)
{
    int bad = 0;
    for (uint64_t i = 0; i < 1000000; i++) {
        double x = bits_double(rng_hash(13, 0, i));
        bad += double_bits(exec_round(T_FP32, x)) != double_bits(type_round(T_FP32, x));
        bad += double_bits(exec_round(T_FP64, x)) != double_bits(type_round(T_FP64, x));
    }
    check(bad == 0, "FP32, FP64: 1e6 doubles round the same");
}

/* A seek to every element of a Sliced 3-d value lands where walking does. */
static void test_seek(void)
{
    char err[512];
    coco_config cfg = {NULL, 0, 3, 0};
    Program *p = coco_load_string("seek.coco", "Tensor a(FP32, [5,12,9], Sliced(1), WORLD, RANK);\n"
                                  "Var b = a + a;\nExecute f({a}, {b});\n", &cfg, err, sizeof err);
    check(p != NULL, "seek program loads");
    if (!p)
        printf("%s", err);
    if (!p)
        return;
    int bad = 0;
    const Node *n = node_of(p, program_input(p, "a"));
    for (int rank = 0; rank < 3; rank++) {
        GlobalIter walk, jump;
        global_iter_start(&walk, p, n, rank);
        for (long i = 0; i < local_count(p, n, rank); i++, global_iter_next(&walk)) {
            global_iter_start(&jump, p, n, rank);
            global_iter_next(&jump);
            global_iter_seek(&jump, i);
            bad += jump.gidx != walk.gidx || memcmp(jump.idx, walk.idx, (size_t)n->ndim * sizeof *walk.idx);
        }
    }
    check(bad == 0, "global_iter_seek agrees with walking");
    coco_program_free(p);
    /* ranks 3 and 4 of 5 hold nothing of the [3] ReduceScatter's value: a
     * seek to their start (as the GPU checks' error walk does for every
     * rank) stays there */
    coco_config five = {NULL, 0, 5, 0};
    p = coco_load_string("empty.coco", "Size N = 3;\nTensor g(FP32, [N], Local, WORLD, RANK);\n"
                         "Var s = ReduceScatter(\"+\", g);\nExecute f({g}, {s});\n", &five, err,
                         sizeof err);
    check(p != NULL, "empty-part program loads");
    if (!p)
        return;
    n = node_of(p, program_find(p, "s"));
    GlobalIter empty;
    global_iter_start(&empty, p, n, 4);
    long start = empty.gidx;
    global_iter_seek(&empty, 0);
    check(local_count(p, n, 4) == 0 && empty.gidx == start && empty.idx[0] == 0,
          "global_iter_seek over an empty part stays at its start");
    coco_program_free(p);
}

int main(void)
{
    test_patterns(T_FP16);
    test_doubles(T_FP16);
    group_end("fast fp16");
    test_patterns(T_BF16);
    test_doubles(T_BF16);
    group_end("fast bf16");
    test_other_types();
    test_seek();
    group_end("fast other");
    return total_fail != 0;
}

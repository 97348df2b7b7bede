/* test_numeric.c: unit tests of the numeric core: FP16/BF16 conversions and
 * type rules (types.c), the counter-based RNG (rng.c), slicing (shape.c),
 * input filling (src/cpu/inputs.c), and MatMul, Conv2D, reductions and collectives
 * of the CPU executor on small programs built by hand with node_new().
 * Prints one "group: N passed, M failed" line per group; exits non-zero
 * when any check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

#include "unit_check.h"

/* ---- FP16 / BF16 ---- */

static void test_half_known(void)
{
    check(double_to_half(1.0) == 0x3C00, "half 1.0");
    check(double_to_half(-2.0) == 0xC000, "half -2.0");
    check(double_to_half(65504.0) == 0x7BFF, "half 65504");
    check(double_to_half(65519.99) == 0x7BFF, "half 65519.99 -> 65504");
    check(double_to_half(65520.0) == 0x7C00, "half 65520 -> inf");
    check(double_to_half(1e300) == 0x7C00, "half 1e300 -> inf");
    check(double_to_half(-INFINITY) == 0xFC00, "half -inf");
    check(double_to_half(-0.0) == 0x8000, "half -0");
    check(double_to_half(ldexp(1, -24)) == 0x0001, "half smallest subnormal");
    check(double_to_half(ldexp(1, -14)) == 0x0400, "half smallest normal");
    check(double_to_half(ldexp(1023, -24)) == 0x03FF, "half largest subnormal");
    check(double_to_half(ldexp(1, -25)) == 0x0000, "half 2^-25 ties to 0");
    check(double_to_half(ldexp(1, -25) * 1.0001) == 0x0001, "half just above 2^-25");
    check(double_to_half(ldexp(3, -25)) == 0x0002, "half 3*2^-25 ties to even");
    check(double_to_half(1e-30) == 0x0000, "half underflow to 0");
    check(double_to_half(1.0 + ldexp(1, -11)) == 0x3C00, "half tie 1+2^-11 -> 1");
    check(double_to_half(1.0 + ldexp(3, -11)) == 0x3C02, "half tie 1+3*2^-11 -> even");
    /* float would first round this to the tie 1 + 2^-11 and then to 1.0 */
    check(double_to_half(1.0 + ldexp(1, -11) + ldexp(1, -40)) == 0x3C01, "half no double rounding");
    uint16_t nan = double_to_half(NAN);
    check((nan & 0x7C00) == 0x7C00 && (nan & 0x03FF) != 0, "half NaN stays NaN");
    check(isnan(half_to_double(nan)), "half NaN decodes to NaN");
    check(half_to_double(0x0001) == ldexp(1, -24), "half decode subnormal");
    check(half_to_double(0x7BFF) == 65504.0, "half decode max");
    check(half_to_double(0xFC00) == -INFINITY, "half decode -inf");
    check(half_to_double(0x3555) == 0x1.554p-2, "half decode 0x3555");
}

static void test_bf16_known(void)
{
    check(double_to_bf16(1.0) == 0x3F80, "bf16 1.0");
    check(double_to_bf16(-2.0) == 0xC000, "bf16 -2.0");
    check(double_to_bf16(ldexp(1, -133)) == 0x0001, "bf16 smallest subnormal");
    check(double_to_bf16(1.0 + ldexp(1, -8)) == 0x3F80, "bf16 tie -> even");
    check(double_to_bf16(1.0 + ldexp(3, -8)) == 0x3F82, "bf16 tie -> even (up)");
    check(double_to_bf16(1.0 + ldexp(1, -8) + ldexp(1, -40)) == 0x3F81, "bf16 no double rounding");
    check(double_to_bf16(0x1.FFp127) == 0x7F80, "bf16 overflow -> inf");
    check(double_to_bf16(0x1.FEp127) == 0x7F7F, "bf16 max");
    check(isnan(bf16_to_double(double_to_bf16(NAN))), "bf16 NaN");
}

/* Every finite pattern round-trips, and values just around each midpoint
 * between neighbours round to the nearer one, ties to the even one. */
static void test_small_exhaustive(const char *what, double (*dec)(uint16_t), uint16_t (*enc)(double),
                                  uint16_t inf)
{
    int bad_trip = 0, bad_mid = 0;
    for (uint32_t h = 0; h < inf; h++) {
        double v = dec((uint16_t)h);
        bad_trip += enc(v) != h || enc(-v) != (h | 0x8000);
        if (h + 1 == inf)
            break; /* the midpoint above the largest value rounds to Inf */
        double w = dec((uint16_t)(h + 1));
        double mid = v + (w - v) / 2; /* exact in double */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (enc(mid) != even || enc(nextafter(mid, 0)) != h || enc(nextafter(mid, INFINITY)) != h + 1)
            bad_mid++;
    }
    char msg[96];
    snprintf(msg, sizeof msg, "%s: all finite patterns round-trip", what);
    check(bad_trip == 0, msg);
    snprintf(msg, sizeof msg, "%s: round-to-nearest-even at every midpoint", what);
    check(bad_mid == 0, msg);
}

static uint16_t bf16_from_float_ref(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static void test_bf16_vs_float(void)
{
    int bad = 0;
    for (uint64_t i = 0; i < 200000; i++) {
        float f = (float)((rng_uniform(7, 1, i) - 0.5) * ldexp(1, (int)(i % 200) - 100));
        if (double_to_bf16(f) != bf16_from_float_ref(f))
            bad++;
    }
    check(bad == 0, "bf16 agrees with float bit rounding on 2e5 floats");
}

static void test_types(void)
{
    static const Type want[4][4] = {
        {T_FP16, T_FP32, T_FP32, T_FP64},
        {T_FP32, T_BF16, T_FP32, T_FP64},
        {T_FP32, T_FP32, T_FP32, T_FP64},
        {T_FP64, T_FP64, T_FP64, T_FP64},
    };
    int bad = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            bad += type_promote((Type)a, (Type)b) != want[a][b];
    check(bad == 0, "type_promote table");
    Type t;
    check(type_parse("BF16", &t) && t == T_BF16, "type_parse BF16");
    check(!type_parse("FP8", &t), "type_parse rejects FP8");
    check(!strcmp(type_name(T_FP64), "FP64"), "type_name FP64");
    check(type_size(T_FP16) == 2 && type_size(T_BF16) == 2 && type_size(T_FP32) == 4
              && type_size(T_FP64) == 8, "type_size");
    check(type_round(T_FP32, 1e39) == INFINITY, "FP32 overflow -> inf");
    check(type_round(T_FP32, 0.1) == (double)0.1f, "FP32 round 0.1");
    check(type_round(T_FP64, 0.1) == 0.1, "FP64 identity");
    check(type_round(T_FP16, 0.1) == half_to_double(0x2E66), "FP16 round 0.1");
    check(type_bits(T_FP32, 1.0) == 0x3F800000, "FP32 bits of 1");
    check(type_bits(T_FP64, 1.0) == UINT64_C(0x3FF0000000000000), "FP64 bits of 1");
    check(type_bits(T_BF16, -2.0) == 0xC000, "BF16 bits of -2");
    check(type_bits(T_FP16, 65504.0) == 0x7BFF, "FP16 bits of 65504");
}

/* ---- RNG ---- */

static void test_rng(void)
{
    /* golden values from an independent Python implementation of the formula */
    check(rng_hash(0, 0, 0) == UINT64_C(0x25c3ee710b1e100c), "rng golden (0,0,0)");
    check(rng_hash(1, 2, 3) == UINT64_C(0x3848ae0cd77cd7db), "rng golden (1,2,3)");
    check(rng_hash(42, (UINT64_C(1) << 63) | 5, 123456789) == UINT64_C(0xb6529d04af6ebbeb),
          "rng golden (42,2^63|5,123456789)");
    check(rng_uniform(1, 2, 3) == 0.21985900402069092, "rng_uniform golden");
    check(rng_hash(5, 6, 7) == rng_hash(5, 6, 7), "rng deterministic");
    check(rng_hash(1, 2, 3) != rng_hash(1, 3, 2) && rng_hash(1, 2, 3) != rng_hash(2, 1, 3)
              && rng_hash(0, 1, 0) != rng_hash(0, 0, 1), "rng argument order matters");
    double sum = 0, lo = 1, hi = 0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double u = rng_uniform(123, 4, (uint64_t)i);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    check(fabs(sum / n - 0.5) < 0.01, "rng mean of 1e5 draws near 0.5");
    check(lo >= 0 && hi < 1, "rng in [0,1)");
    int buckets[10] = {0}, bad = 0;
    for (int i = 0; i < n; i++)
        buckets[(int)(rng_uniform(9, (uint64_t)i, 0) * 10)]++;
    for (int b = 0; b < 10; b++)
        bad += abs(buckets[b] - n / 10) > n / 100;
    check(bad == 0, "rng deciles even across streams");
}

/* ---- programs built by hand ---- */

static Program *new_prog(int nranks, long group_size)
{
    Program *p = program_new("test", "");
    p->nranks = nranks;
    p->group_size = group_size;
    return p;
}

static int mk(Program *p, Op op, Type t, int ndim, const long *dims, Layout l, GroupKind g)
{
    Node *n = node_new(p, op, (Pos){0, 0});
    n->type = t;
    n->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        n->dim[i].n = dims[i];
    n->layout = l;
    n->group = g;
    return n->id;
}

static int mk2(Program *p, Op op, Type t, int ndim, const long *dims, Layout l, int a, int b)
{
    int id = mk(p, op, t, ndim, dims, l, G_WORLD);
    Node *n = node_of(p, id);
    n->nin = b >= 0 ? 2 : 1;
    n->in[0] = a;
    n->in[1] = b;
    return id;
}

static const Layout REPL = {L_REPLICATED, 0}, LOCAL = {L_LOCAL, 0};

static void set_data(Exec *e, int id, int rank, const double *v, long count)
{
    memcpy(exec_alloc(e, id, rank, count), v, (size_t)count * sizeof *v);
}

static void test_slices(void)
{
    long lo, hi;
    slice_range(10, 3, 0, &lo, &hi);
    check(lo == 0 && hi == 4, "slice 10/3 part 0");
    slice_range(10, 3, 1, &lo, &hi);
    check(lo == 4 && hi == 8, "slice 10/3 part 1");
    slice_range(10, 3, 2, &lo, &hi);
    check(lo == 8 && hi == 10, "slice 10/3 part 2");
    slice_range(9, 8, 4, &lo, &hi);
    check(lo == 8 && hi == 9, "slice 9/8 part 4");
    slice_range(9, 8, 5, &lo, &hi);
    check(lo == 9 && hi == 9, "slice 9/8 part 5 empty");
    slice_range(1001, 8, 7, &lo, &hi);
    check(lo == 882 && hi == 1001, "slice 1001/8 part 7");
    slice_range(2, 4, 3, &lo, &hi);
    check(lo == 2 && hi == 2, "slice 2/4 part 3 empty");
    slice_range(2, 4, 1, &lo, &hi);
    check(lo == 1 && hi == 2, "slice 2/4 part 1");

    Program *p = new_prog(4, 2);
    long d[2] = {5, 3};
    int id = mk(p, O_INPUT, T_FP32, 2, d, (Layout){L_SLICED, 0}, G_GROUP);
    long shape[2], off[2];
    local_shape(p, node_of(p, id), 3, shape, off);
    check(shape[0] == 2 && shape[1] == 3 && off[0] == 3 && off[1] == 0, "local_shape group rank 1");
    check(local_count(p, node_of(p, id), 2) == 9, "local_count group rank 0");
    check(group_index(p, G_GROUP, 3) == 1 && group_rank(p, G_GROUP, 3) == 1
              && rank_of(p, G_GROUP, 1, 0) == 2 && ngroups_of(p, G_GROUP) == 2
              && ngroups_of(p, G_WORLD) == 1, "group arithmetic");
    node_of(p, id)->layout = (Layout){L_SLICED, 1};
    GlobalIter it;
    global_iter_start(&it, p, node_of(p, id), 1); /* columns [2,3) */
    long g[5];
    for (int i = 0; i < 5; i++, global_iter_next(&it))
        g[i] = it.gidx;
    check(g[0] == 2 && g[1] == 5 && g[2] == 8 && g[4] == 14, "global_iter over a column slice");
    program_free(p);
}

/* Replicated copies agree; Sliced parts are pieces of the same tensor;
 * Local tensors differ per rank; updated inputs are non-negative. */
static void test_fill(void)
{
    Program *p = new_prog(2, 0);
    long d[2] = {3, 4};
    int r = mk(p, O_INPUT, T_FP16, 2, d, REPL, G_WORLD);
    int s = mk(p, O_INPUT, T_FP16, 2, d, (Layout){L_SLICED, 1}, G_WORLD);
    int l = mk(p, O_INPUT, T_FP16, 2, d, LOCAL, G_WORLD);
    int c = mk(p, O_SCALAR, T_FP32, 0, d, REPL, G_WORLD);
    node_of(p, l)->updated_by = 99;
    for (int i = 0; i < 4; i++)
        node_of(p, r + i)->input_index = 0;
    Exec *e = exec_new(p, 77, 1);
    exec_fill_inputs(e);
    long n0, n1;
    double *r0 = exec_data(e, r, 0, &n0), *r1 = exec_data(e, r, 1, &n1);
    check(n0 == 12 && !memcmp(r0, r1, 12 * sizeof *r0), "replicated copies agree");
    double *s1 = exec_data(e, s, 1, &n1);
    check(n1 == 6 && s1[0] == r0[2] && s1[1] == r0[3] && s1[5] == r0[11], "sliced part of the same tensor");
    double *l0 = exec_data(e, l, 0, NULL), *l1 = exec_data(e, l, 1, NULL);
    int neg = 0;
    for (int i = 0; i < 12; i++)
        neg += l0[i] < 0 || l1[i] < 0;
    check(memcmp(l0, l1, 12 * sizeof *l0) != 0, "local tensors differ per rank");
    check(neg == 0, "updated inputs are in [0,1)");
    check(r0[0] == type_round(T_FP16, -1 + 2 * rng_uniform(77, 0, 0)), "input formula");
    double sc = exec_data(e, c, 0, NULL)[0];
    check(sc > 0 && sc <= 1 && sc == (double)(float)sc, "scalar in (0,1] as FP32");
    exec_free(e);
    program_free(p);
}

/* ---- MatMul ---- */

static void test_matmul_small(void)
{
    Program *p = new_prog(1, 0);
    long da[2] = {2, 3}, db[2] = {3, 2}, dc[2] = {2, 2};
    int a = mk(p, O_INPUT, T_FP32, 2, da, REPL, G_WORLD);
    int b = mk(p, O_INPUT, T_FP32, 2, db, REPL, G_WORLD);
    int c = mk2(p, O_MATMUL, T_FP32, 2, dc, REPL, a, b);
    Exec *e = exec_new(p, 1, 1);
    set_data(e, a, 0, (double[]){1, 2, 3, 4, 5, 6}, 6);
    set_data(e, b, 0, (double[]){7, 8, 9, 10, 11, 12}, 6);
    eval_matmul(e, node_of(p, c), 0);
    double *y = exec_data(e, c, 0, NULL);
    check(y[0] == 58 && y[1] == 64 && y[2] == 139 && y[3] == 154, "matmul 2x3 * 3x2");
    exec_free(e);
    program_free(p);
}

/* A batched FP16 matmul with a 2-D b, odd sizes, against a plain loop,
 * with 1 and 3 threads. */
static void test_matmul_batched(void)
{
    enum { B = 3, M = 37, K = 29, N = 19 };
    Program *p = new_prog(1, 0);
    long da[3] = {B, M, K}, db[2] = {K, N}, dc[3] = {B, M, N};
    int a = mk(p, O_INPUT, T_FP16, 3, da, REPL, G_WORLD);
    int b = mk(p, O_INPUT, T_FP16, 2, db, REPL, G_WORLD);
    int c = mk2(p, O_MATMUL, T_FP16, 3, dc, REPL, a, b);
    node_of(p, a)->input_index = 0;
    node_of(p, b)->input_index = 1;
    int bad1 = 0, bad3 = 0;
    for (int threads = 1; threads <= 3; threads += 2) {
        Exec *e = exec_new(p, 5, threads);
        exec_fill_inputs(e);
        eval_matmul(e, node_of(p, c), 0);
        double *x = exec_data(e, a, 0, NULL), *w = exec_data(e, b, 0, NULL);
        double *y = exec_data(e, c, 0, NULL);
        for (int t = 0; t < B; t++)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float acc = 0;
                    for (int k = 0; k < K; k++)
                        acc += (float)x[(t * M + i) * K + k] * (float)w[k * N + j];
                    int bad = y[(t * M + i) * N + j] != type_round(T_FP16, acc);
                    *(threads == 1 ? &bad1 : &bad3) += bad;
                }
        exec_free(e);
    }
    check(bad1 == 0, "batched FP16 matmul = float loop, 1 thread");
    check(bad3 == 0, "batched FP16 matmul = float loop, 3 threads");

    node_of(p, a)->type = node_of(p, b)->type = node_of(p, c)->type = T_FP64;
    Exec *e = exec_new(p, 5, 2);
    exec_fill_inputs(e);
    eval_matmul(e, node_of(p, c), 0);
    double *x = exec_data(e, a, 0, NULL), *w = exec_data(e, b, 0, NULL), *y = exec_data(e, c, 0, NULL);
    double acc = 0;
    for (int k = 0; k < K; k++)
        acc += x[(2 * M + 5) * K + k] * w[k * N + 7];
    check(y[(2 * M + 5) * N + 7] == acc, "FP64 matmul accumulates in double");
    exec_free(e);
    program_free(p);
}

/* a [2,2,2] Sliced(0) times a Replicated batched b: rank 1 uses b's batch 1. */
static void test_matmul_sliced_batch(void)
{
    Program *p = new_prog(2, 0);
    long d[3] = {2, 2, 2};
    int a = mk(p, O_INPUT, T_FP32, 3, d, (Layout){L_SLICED, 0}, G_WORLD);
    int b = mk(p, O_INPUT, T_FP32, 3, d, REPL, G_WORLD);
    int c = mk2(p, O_MATMUL, T_FP32, 3, d, (Layout){L_SLICED, 0}, a, b);
    Exec *e = exec_new(p, 1, 2);
    set_data(e, a, 1, (double[]){1, 0, 0, 1}, 4);
    set_data(e, b, 1, (double[]){1, 2, 3, 4, 5, 6, 7, 8}, 8);
    eval_matmul(e, node_of(p, c), 1);
    long n;
    double *y = exec_data(e, c, 1, &n);
    check(n == 4 && y[0] == 5 && y[1] == 6 && y[2] == 7 && y[3] == 8, "matmul batch-sliced a, replicated b");
    exec_free(e);
    program_free(p);
}

/* ---- Conv2D ---- */

static void test_conv(void)
{
    Program *p = new_prog(1, 0);
    long dx[4] = {1, 1, 3, 3}, dw[4] = {1, 1, 2, 2}, dy[4] = {1, 1, 2, 2};
    int x = mk(p, O_INPUT, T_FP32, 4, dx, REPL, G_WORLD);
    int w = mk(p, O_INPUT, T_FP32, 4, dw, REPL, G_WORLD);
    int y = mk2(p, O_CONV2D, T_FP32, 4, dy, REPL, x, w);
    Exec *e = exec_new(p, 1, 2);
    set_data(e, x, 0, (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9}, 9);
    set_data(e, w, 0, (double[]){1, 1, 1, 1}, 4);
    eval_conv2d(e, node_of(p, y), 0);
    double *v = exec_data(e, y, 0, NULL);
    check(v[0] == 12 && v[1] == 16 && v[2] == 24 && v[3] == 28, "conv 3x3 * 2x2, stride 1");
    node_of(p, y)->stride = 2;
    node_of(p, y)->pad = 1;
    eval_conv2d(e, node_of(p, y), 0);
    v = exec_data(e, y, 0, NULL);
    check(v[0] == 1 && v[1] == 5 && v[2] == 11 && v[3] == 28, "conv stride 2, pad 1");
    exec_free(e);
    program_free(p);
}

/* ---- pointwise, reductions, collectives, exec_run ---- */

static void test_pointwise_reduce(void)
{
    Program *p = new_prog(1, 0);
    long d[2] = {2, 3}, dr[1] = {3};
    int a = mk(p, O_INPUT, T_FP32, 2, d, REPL, G_WORLD);
    int b = mk(p, O_INPUT, T_FP32, 1, dr, REPL, G_WORLD);
    int s = mk2(p, O_SUB, T_FP32, 2, d, REPL, a, b);
    int m = mk2(p, O_REDUCE_TENSOR, T_FP32, 1, dr, REPL, s, -1);
    node_of(p, m)->axis = 0;
    node_of(p, m)->redop = R_MAX;
    int nr = mk2(p, O_NORM, T_FP32, 0, d, REPL, s, -1);
    Exec *e = exec_new(p, 1, 1);
    set_data(e, a, 0, (double[]){1, 2, 3, 4, 5, 6}, 6);
    set_data(e, b, 0, (double[]){1, 0, 2}, 3);
    eval_pointwise(e, node_of(p, s), 0);
    double *v = exec_data(e, s, 0, NULL);
    check(v[0] == 0 && v[1] == 2 && v[2] == 1 && v[3] == 3 && v[5] == 4, "broadcast subtract");
    eval_reduction(e, node_of(p, m), 0);
    v = exec_data(e, m, 0, NULL);
    check(v[0] == 3 && v[1] == 5 && v[2] == 4, "reduce max over axis 0");
    eval_reduction(e, node_of(p, nr), 0);
    check(exec_data(e, nr, 0, NULL)[0] == (double)(float)sqrt(55), "norm of everything");
    exec_free(e);
    program_free(p);
}

/* Max and Min: b where larger (smaller) or NaN, else a (a on a tie, +0
 * and -0 too); Exp and Erf in double, rounded once; Transpose; a
 * reduction that keeps its dimension gives the values of one that does not. */
static void test_max_min_transpose(void)
{
    Program *p = new_prog(1, 0);
    long d[1] = {5}, dm[2] = {2, 3}, dt[2] = {3, 2}, dk[2] = {2, 1};
    int a = mk(p, O_INPUT, T_FP32, 1, d, REPL, G_WORLD);
    int b = mk(p, O_INPUT, T_FP32, 1, d, REPL, G_WORLD);
    int mx = mk2(p, O_MAX, T_FP32, 1, d, REPL, a, b), mn = mk2(p, O_MIN, T_FP32, 1, d, REPL, a, b);
    int ex = mk2(p, O_EXP, T_FP16, 1, d, REPL, a, -1), ef = mk2(p, O_ERF, T_BF16, 1, d, REPL, a, -1);
    int m = mk(p, O_INPUT, T_FP32, 2, dm, REPL, G_WORLD);
    int t = mk2(p, O_TRANSPOSE, T_FP32, 2, dt, REPL, m, -1);
    int k = mk2(p, O_REDUCE_TENSOR, T_FP32, 2, dk, REPL, m, -1);
    node_of(p, k)->axis = 1;
    node_of(p, k)->keepdim = 1;
    Exec *e = exec_new(p, 1, 1);
    set_data(e, a, 0, (double[]){1, NAN, 0.0, -0.0, 0.5}, 5);
    set_data(e, b, 0, (double[]){2, 3, -0.0, 0.0, NAN}, 5);
    set_data(e, m, 0, (double[]){1, 2, 3, 4, 5, 6}, 6);
    for (int id = mx; id <= t; id++)
        if (id != m)
            eval_pointwise(e, node_of(p, id), 0);
    eval_reduction(e, node_of(p, k), 0);
    double *x = exec_data(e, mx, 0, NULL), *n = exec_data(e, mn, 0, NULL);
    check(x[0] == 2 && isnan(x[1]) && isnan(x[4]) && n[0] == 1 && isnan(n[1]) && isnan(n[4]),
          "Max/Min: the larger/smaller, NaN wins");
    check(!signbit(x[2]) && signbit(x[3]) && !signbit(n[2]) && signbit(n[3]),
          "Max/Min: a where equal (+0, -0)");
    check(exec_data(e, ex, 0, NULL)[4] == half_to_double(double_to_half(exp(0.5))), "Exp to FP16");
    check(exec_data(e, ef, 0, NULL)[4] == bf16_to_double(double_to_bf16(erf(0.5))), "Erf to BF16");
    double *tv = exec_data(e, t, 0, NULL), *kv = exec_data(e, k, 0, NULL);
    check(tv[0] == 1 && tv[1] == 4 && tv[2] == 2 && tv[3] == 5 && tv[4] == 3 && tv[5] == 6,
          "Transpose of [2,3]");
    check(kv[0] == 6 && kv[1] == 15, "ReduceTensor with Keep: [2,1] of the rows' sums");
    exec_free(e);
    program_free(p);
}

static void test_comm(void)
{
    Program *p = new_prog(4, 2);
    long d[1] = {3};
    int x = mk(p, O_INPUT, T_FP32, 1, d, LOCAL, G_WORLD);
    int ar = mk2(p, O_ALLREDUCE, T_FP32, 1, d, REPL, x, -1);
    int rs = mk2(p, O_REDUCESCATTER, T_FP32, 1, d, (Layout){L_SLICED, 0}, x, -1);
    node_of(p, rs)->group = G_GROUP;
    int ag = mk2(p, O_ALLGATHER, T_FP32, 1, d, REPL, rs, -1);
    node_of(p, ag)->group = G_GROUP;
    int sd = mk2(p, O_SEND, T_FP32, 1, d, LOCAL, x, -1);
    node_of(p, sd)->group = G_GROUP;
    node_of(p, sd)->shift = 1;
    Exec *e = exec_new(p, 1, 1);
    for (int r = 0; r < 4; r++)
        set_data(e, x, r, (double[]){r, 10 * r, 1}, 3);
    eval_comm(e, node_of(p, ar));
    double *v = exec_data(e, ar, 3, NULL);
    check(v[0] == 6 && v[1] == 60 && v[2] == 4, "allreduce over the world");
    eval_comm(e, node_of(p, rs));
    long c;
    v = exec_data(e, rs, 3, &c); /* group 1 = ranks 2,3: sums {5, 50, 2}, group rank 1 keeps [2,3) */
    check(c == 1 && v[0] == 2, "reducescatter in groups, uneven slice");
    eval_comm(e, node_of(p, ag));
    v = exec_data(e, ag, 2, &c);
    check(c == 3 && v[0] == 5 && v[1] == 50 && v[2] == 2, "allgather in groups");
    eval_comm(e, node_of(p, sd));
    v = exec_data(e, sd, 1, NULL); /* from group 0 - 1 = 1, index 1: rank 3 */
    check(v[0] == 3 && v[1] == 30, "send to the next group");
    exec_free(e);
    program_free(p);
}

/* Update with a scalar: broadcast to every element of a Sliced tensor. */
static void test_update(void)
{
    Program *p = new_prog(2, 0);
    long d[1] = {5};
    int t = mk(p, O_INPUT, T_FP16, 1, d, (Layout){L_SLICED, 0}, G_WORLD);
    int k = mk(p, O_CONST, T_FP32, 0, d, REPL, G_WORLD);
    node_of(p, k)->value = 0.1;
    int u = mk2(p, O_UPDATE, T_FP16, 1, d, (Layout){L_SLICED, 0}, t, k);
    node_of(p, t)->updated_by = u;
    node_of(p, u)->target = t;
    node_of(p, t)->input_index = 0;
    Exec *e = exec_new(p, 1, 1);
    exec_fill_inputs(e);
    exec_run(e);
    long n0, n1;
    double *u0 = exec_data(e, u, 0, &n0), *u1 = exec_data(e, u, 1, &n1);
    check(n0 == 3 && n1 == 2, "update keeps the slices");
    check(u0[2] == half_to_double(0x2E66) && u1[1] == half_to_double(0x2E66), "update broadcasts a scalar");
    exec_free(e);
    program_free(p);
}

static void test_exec_run(void)
{
    Program *p = new_prog(2, 0);
    long d[1] = {4};
    int x = mk(p, O_INPUT, T_BF16, 1, d, REPL, G_WORLD);
    int k = mk(p, O_CONST, T_BF16, 0, d, REPL, G_WORLD);
    node_of(p, k)->value = 3;
    int t = mk2(p, O_MUL, T_BF16, 1, d, REPL, x, k);
    int y = mk2(p, O_TANH, T_BF16, 1, d, REPL, t, -1);
    node_of(p, x)->input_index = 0;
    int out[1] = {y};
    p->exec_out = out;
    p->nexec_out = 1;
    Exec *e = exec_new(p, 3, 1);
    exec_fill_inputs(e);
    exec_run(e);
    double *xv = exec_data(e, x, 1, NULL), *yv = exec_data(e, y, 1, NULL);
    check(yv && yv[2] == type_round(T_BF16, tanh(type_round(T_BF16, xv[2] * 3))), "exec_run chain");
    check(exec_data(e, t, 0, NULL) == NULL && exec_data(e, k, 1, NULL) == NULL, "intermediates freed");
    check(yv && yv[0] == type_round(T_BF16, tanh(type_round(T_BF16, xv[0] * 3))), "exec_run chain, rank 1");
    e->keep_all = 1;
    exec_run(e);
    check(exec_data(e, t, 0, NULL) != NULL, "keep_all keeps intermediates");
    exec_free(e);
    p->exec_out = NULL;
    program_free(p);
}

/* ---- tolerance.c: the directed-rounding rule ---- */

static void test_within_directed(void)
{
    /* exact 1, the directed runs 1 +- 1e-14: up to 4 x their spread (2e-14) */
    check(within_directed(1 + 7e-14, 1, 1 + 1e-14, 1 - 1e-14), "within 4 x the spread");
    check(!within_directed(1 + 9e-14, 1, 1 + 1e-14, 1 - 1e-14), "beyond 4 x the spread");
    check(!within_directed(1 + 1e-15, 1, 1, 1), "no spread: only the exact value");
    /* both runs on one side: the spread counts the exact value too */
    check(within_directed(1 + 3e-14, 1, 1 + 1e-14, 1 + 1e-14), "one-sided spread");
    /* at a domain edge (Sqrt of about 0), rounding decides NaN */
    check(within_directed(NAN, 1e-8, NAN, 2e-8), "NaN where a directed run is NaN");
    check(within_directed(1.5e-8, NAN, 1e-8, NAN), "a value where exact is NaN, one run not");
    check(!within_directed(1e-6, NAN, 1e-8, NAN), "at the edge, far beyond the finite run");
    check(!within_directed(NAN, 1e-8, 2e-8, 0.5e-8), "NaN where no evaluation is");
    check(!within_directed(1.0, NAN, NAN, NAN), "a value where every evaluation is NaN");
    check(!within_directed(INFINITY, 1, 1 + 1e-14, 1 - 1e-14), "an infinity for a finite value");
    check(!within_directed(1, INFINITY, 1, 1), "a finite value for an infinity");
}

int main(void)
{
    test_half_known();
    test_small_exhaustive("fp16", half_to_double, double_to_half, 0x7C00);
    group_end("fp16");
    test_bf16_known();
    test_small_exhaustive("bf16", bf16_to_double, double_to_bf16, 0x7F80);
    test_bf16_vs_float();
    group_end("bf16");
    test_types();
    group_end("types");
    test_rng();
    group_end("rng");
    test_slices();
    test_fill();
    group_end("shape/fill");
    test_matmul_small();
    test_matmul_batched();
    test_matmul_sliced_batch();
    test_conv();
    group_end("matmul/conv");
    test_pointwise_reduce();
    test_max_min_transpose();
    test_comm();
    test_update();
    test_exec_run();
    group_end("executor");
    test_within_directed();
    group_end("tolerance");
    return total_fail != 0;
}

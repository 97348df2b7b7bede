/* test_api.c: hand-worked cases through the public API (include/coconet.h).
 *
 * Each case loads a tiny program from a string, overwrites its inputs with
 * hand-chosen values (coco_run_tensor gives writable input data), executes,
 * and compares every output of every rank with numbers worked out by hand
 * in the comments. Covers the collectives (AllReduce with each operator,
 * ReduceScatter with uneven slices, AllGather, Reduce/Broadcast roots, Send
 * and Recv between groups with wrap-around), MatMul, Conv2D with padding and
 * stride, Norm, ReduceTensor, broadcasting, type rules and rounding (FP16,
 * BF16 ties), Update, Dropout edge cases and load errors.
 * Prints one "group: N passed, M failed" line per group; exits non-zero when
 * any check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coconet.h"

#include "unit_check.h"

/* ---- helpers ---- */

static coco_program *load_cfg(const char *text, int nranks, long group_size, const char **defs,
                              int ndefs)
{
    coco_config cfg = {defs, ndefs, nranks, group_size};
    char err[2048];
    coco_program *p = coco_load_string("test.coco", text, &cfg, err, sizeof err);
    if (!p)
        printf("  FAILED: load: %s", err);
    return p;
}

static coco_program *load(const char *text, int nranks)
{
    return load_cfg(text, nranks, 0, NULL, 0);
}

/* Overwrites input `name` on `rank` with n values. */
static void set(coco_run *r, const char *name, int rank, const double *v, long n)
{
    coco_tensor t;
    char what[128];
    snprintf(what, sizeof what, "input %s rank %d has %ld elements", name, rank, n);
    if (coco_run_tensor(r, name, rank, &t) || t.count != n) {
        check(0, what);
        return;
    }
    memcpy(t.data, v, (size_t)n * sizeof(double));
}

static int same_value(double a, double b)
{
    return a == b || (isnan(a) && isnan(b));
}

/* Output `name` on `rank` holds exactly the n values `want`. */
static void expect(coco_run *r, const char *name, int rank, const double *want, long n,
                   const char *what)
{
    coco_tensor t;
    char msg[512];
    if (coco_run_tensor(r, name, rank, &t)) {
        snprintf(msg, sizeof msg, "%s: %s on rank %d has no value", what, name, rank);
        check(0, msg);
        return;
    }
    if (t.count != n) {
        snprintf(msg, sizeof msg, "%s: %s on rank %d has %ld elements, expected %ld", what, name,
                 rank, t.count, n);
        check(0, msg);
        return;
    }
    for (long i = 0; i < n; i++)
        if (!same_value(t.data[i], want[i])) {
            snprintf(msg, sizeof msg, "%s: %s on rank %d, element %ld is %.17g, expected %.17g",
                     what, name, rank, i, t.data[i], want[i]);
            check(0, msg);
            return;
        }
    check(1, what);
}

static void expect_facts(coco_run *r, const char *name, int rank, const char *type,
                         const char *layout, long local0, const char *what)
{
    coco_tensor t;
    int ok = !coco_run_tensor(r, name, rank, &t) && !strcmp(t.type, type) &&
             !strcmp(t.layout, layout) && (t.ndim == 0 || t.local_shape[0] == local0);
    if (!ok && !coco_run_tensor(r, name, rank, &t))
        printf("  (%s is %s %s, local_shape[0] %ld)\n", name, t.type, t.layout,
               t.ndim ? t.local_shape[0] : 0);
    check(ok, what);
}

static coco_run *execute(coco_program *p, coco_run *r)
{
    char err[1024];
    int rc = coco_run_execute(r, err, sizeof err);
    check(rc == 0, "execute");
    (void)p;
    return r;
}

/* ---- collectives ---- */

static void test_allreduce(void)
{
    coco_program *p = load("Tensor x(FP64, [3], Local, WORLD, RANK);\n"
                           "Var s = AllReduce(\"+\", x);\n"
                           "Var mx = AllReduce(\"max\", x);\n"
                           "Var mn = AllReduce(\"min\", x);\n"
                           "Var pr = AllReduce(\"*\", x);\n"
                           "Execute ar({x}, {s, mx, mn, pr});\n",
                           3);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    set(r, "x", 0, (double[]){1, -2, 0.5}, 3);
    set(r, "x", 1, (double[]){4, 3, -1}, 3);
    set(r, "x", 2, (double[]){-2, 5, 2}, 3);
    execute(p, r);
    for (int k = 0; k < 3; k++) {
        expect(r, "s", k, (double[]){3, 6, 1.5}, 3, "AllReduce + over 3 ranks");
        expect(r, "mx", k, (double[]){4, 5, 2}, 3, "AllReduce max over 3 ranks");
        expect(r, "mn", k, (double[]){-2, -2, -1}, 3, "AllReduce min over 3 ranks");
        expect(r, "pr", k, (double[]){-8, -30, -1}, 3, "AllReduce * over 3 ranks");
    }
    expect_facts(r, "s", 1, "FP64", "Replicated", 3, "AllReduce result is Replicated");
    coco_run_free(r);
    coco_program_free(p);

    /* FP16: the float64 sum is rounded once: 1 + 2^-11 + 2^-11 = 1 + 2^-10
     * exactly (an FP16 value), where pairwise FP16 rounding would give 1. */
    p = load("Tensor x(FP16, [2], Local, WORLD, RANK);\n"
             "Var s = AllReduce(\"+\", x);\n"
             "Execute ar16({x}, {s});\n",
             3);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    /* inputs are FP16 values: 2^-11 is one, so is 1 */
    set(r, "x", 0, (double[]){1, 65504}, 2);
    set(r, "x", 1, (double[]){ldexp(1, -11), 65504}, 2);
    set(r, "x", 2, (double[]){ldexp(1, -11), -65504}, 2);
    execute(p, r);
    /* 65504 + 65504 - 65504 in float64 is 65504: no overflow on the way */
    for (int k = 0; k < 3; k++)
        expect(r, "s", k, (double[]){1 + ldexp(1, -10), 65504}, 2,
               "AllReduce of FP16 adds in float64 and rounds once");
    coco_run_free(r);
    coco_program_free(p);
}

static void test_reducescatter_allgather(void)
{
    coco_program *p = load("Tensor x(FP64, [5], Local, WORLD, RANK);\n"
                           "Tensor y(FP32, [6], Sliced(0), WORLD, RANK);\n"
                           "Var rs = ReduceScatter(\"+\", x, 0);\n"
                           "Var back = AllGather(rs);\n"
                           "Var ag = AllGather(y);\n"
                           "Execute rsag({x, y}, {rs, back, ag});\n",
                           3);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    set(r, "x", 0, (double[]){1, 2, 3, 4, 5}, 5);
    set(r, "x", 1, (double[]){10, 20, 30, 40, 50}, 5);
    set(r, "x", 2, (double[]){100, 200, 300, 400, 500}, 5);
    set(r, "y", 0, (double[]){0.5, 1.5}, 2);
    set(r, "y", 1, (double[]){2.5, 3.5}, 2);
    set(r, "y", 2, (double[]){4.5, 5.5}, 2);
    execute(p, r);
    /* sums 111 222 333 444 555 cut in blocks of ceil(5/3) = 2: 2, 2, 1 */
    expect(r, "rs", 0, (double[]){111, 222}, 2, "ReduceScatter rank 0 block [0,2)");
    expect(r, "rs", 1, (double[]){333, 444}, 2, "ReduceScatter rank 1 block [2,4)");
    expect(r, "rs", 2, (double[]){555}, 1, "ReduceScatter rank 2 block [4,5)");
    expect_facts(r, "rs", 2, "FP64", "Sliced(0)", 1, "ReduceScatter is Sliced(0), 1 element on rank 2");
    for (int k = 0; k < 3; k++) {
        expect(r, "back", k, (double[]){111, 222, 333, 444, 555}, 5, "AllGather of uneven slices");
        expect(r, "ag", k, (double[]){0.5, 1.5, 2.5, 3.5, 4.5, 5.5}, 6, "AllGather of Sliced(0)");
    }
    coco_run_free(r);
    coco_program_free(p);

    /* ReduceScatter along dimension 1 of a [2,4] with 2 ranks */
    p = load("Tensor x(FP64, [2,4], Local, WORLD, RANK);\n"
             "Var rs = ReduceScatter(\"max\", x, 1);\n"
             "Execute rs1({x}, {rs});\n",
             2);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    set(r, "x", 0, (double[]){1, 8, 3, 4, 5, 6, 7, 0}, 8);
    set(r, "x", 1, (double[]){2, 7, 3, 9, 0, 9, 1, 1}, 8);
    execute(p, r);
    /* max: [[2,8,3,9],[5,9,7,1]]; rank 0 keeps columns 0-1, rank 1 columns 2-3 */
    expect(r, "rs", 0, (double[]){2, 8, 5, 9}, 4, "ReduceScatter max along dim 1, rank 0");
    expect(r, "rs", 1, (double[]){3, 9, 7, 1}, 4, "ReduceScatter max along dim 1, rank 1");
    coco_run_free(r);
    coco_program_free(p);
}

static void test_reduce_broadcast(void)
{
    coco_program *p = load("Tensor x(FP32, [2], Local, WORLD, RANK);\n"
                           "Var red = Reduce(\"+\", x, 1);\n"
                           "Var bc = Broadcast(x, 2);\n"
                           "Var bc0 = Broadcast(red, 1);\n"
                           "Execute rb({x}, {red, bc, bc0});\n",
                           3);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    set(r, "x", 0, (double[]){1, 2}, 2);
    set(r, "x", 1, (double[]){10, 20}, 2);
    set(r, "x", 2, (double[]){100, -200}, 2);
    execute(p, r);
    expect(r, "red", 0, (double[]){0, 0}, 2, "Reduce: a non-root rank holds zeros");
    expect(r, "red", 1, (double[]){111, -178}, 2, "Reduce: root 1 holds the sum");
    expect(r, "red", 2, (double[]){0, 0}, 2, "Reduce: a non-root rank holds zeros (2)");
    expect_facts(r, "red", 0, "FP32", "Local", 2, "Reduce result is Local");
    for (int k = 0; k < 3; k++) {
        expect(r, "bc", k, (double[]){100, -200}, 2, "Broadcast from root 2");
        expect(r, "bc0", k, (double[]){111, -178}, 2, "Broadcast of the Reduce result from its root");
    }
    coco_run_free(r);
    coco_program_free(p);

    /* Reduce within groups: GROUP(2) of 4 ranks, root 0 of each group */
    p = load("Group GROUP(2);\n"
             "Tensor x(FP64, [1], Local, GROUP, RANK);\n"
             "Var red = Reduce(\"max\", x, 0);\n"
             "Execute rg({x}, {red});\n",
             4);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    for (int k = 0; k < 4; k++)
        set(r, "x", k, (double[]){(double)(10 - 3 * k)}, 1);
    execute(p, r);
    /* x = 10 7 4 1; group 0 = ranks 0,1 -> max 10 on rank 0; group 1 -> 4 on rank 2 */
    expect(r, "red", 0, (double[]){10}, 1, "Reduce in GROUP 0 to its rank 0");
    expect(r, "red", 1, (double[]){0}, 1, "Reduce in GROUP 0, non-root");
    expect(r, "red", 2, (double[]){4}, 1, "Reduce in GROUP 1 to its rank 0 (world rank 2)");
    expect(r, "red", 3, (double[]){0}, 1, "Reduce in GROUP 1, non-root");
    coco_run_free(r);
    coco_program_free(p);
}

static void test_send(void)
{
    /* 6 ranks in 3 groups of 2: rank = 2*group + index */
    coco_program *p = load("Group GROUP(2);\n"
                           "Tensor x(FP64, [2], Local, GROUP, RANK);\n"
                           "Var fwd = Send(x, GroupRank(GROUP+1, RANK));\n"
                           "Var bwd = Send(x, GroupRank(GROUP-1, RANK));\n"
                           "Var rcv = Recv(x, GroupRank(GROUP-1, RANK));\n"
                           "Var two = Send(x, GroupRank(GROUP+2, RANK));\n"
                           "Var all = AllReduce(\"+\", fwd);\n"
                           "Execute pipe({x}, {fwd, bwd, rcv, two, all});\n",
                           6);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    for (int k = 0; k < 6; k++)
        set(r, "x", k, (double[]){(double)k, 100.0 + k}, 2);
    execute(p, r);
    /* Send to GROUP+1: group j receives group j-1's value; group 0 receives
     * from the last group (2): rank 0 gets rank 4's, rank 1 gets rank 5's. */
    static const int from_fwd[6] = {4, 5, 0, 1, 2, 3};
    static const int from_bwd[6] = {2, 3, 4, 5, 0, 1};
    static const int from_two[6] = {2, 3, 4, 5, 0, 1}; /* j - 2 = j + 1 (mod 3) */
    for (int k = 0; k < 6; k++) {
        char what[128];
        snprintf(what, sizeof what, "Send to GROUP+1: rank %d receives rank %d's data", k,
                 from_fwd[k]);
        expect(r, "fwd", k, (double[]){from_fwd[k], 100.0 + from_fwd[k]}, 2, what);
        snprintf(what, sizeof what, "Send to GROUP-1: rank %d receives rank %d's data", k,
                 from_bwd[k]);
        expect(r, "bwd", k, (double[]){from_bwd[k], 100.0 + from_bwd[k]}, 2, what);
        expect(r, "rcv", k, (double[]){from_fwd[k], 100.0 + from_fwd[k]}, 2,
               "Recv from GROUP-1 equals Send to GROUP+1");
        expect(r, "two", k, (double[]){from_two[k], 100.0 + from_two[k]}, 2, "Send to GROUP+2 (mod 3)");
    }
    /* AllReduce in each group of what it received: group 0 got ranks 4,5: 4+5, 204+205 */
    expect(r, "all", 0, (double[]){9, 209}, 2, "AllReduce within group 0 after Send");
    expect(r, "all", 3, (double[]){1, 201}, 2, "AllReduce within group 1 after Send");
    expect(r, "all", 5, (double[]){5, 205}, 2, "AllReduce within group 2 after Send");
    coco_run_free(r);
    coco_program_free(p);

    /* one group: Send goes to itself */
    p = load("Group GROUP(2);\n"
             "Tensor x(FP32, [1], Local, GROUP, RANK);\n"
             "Var y = Send(x, GroupRank(GROUP+1, RANK));\n"
             "Execute self({x}, {y});\n",
             2);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    set(r, "x", 0, (double[]){7}, 1);
    set(r, "x", 1, (double[]){8}, 1);
    execute(p, r);
    expect(r, "y", 0, (double[]){7}, 1, "Send with a single group keeps rank 0's data");
    expect(r, "y", 1, (double[]){8}, 1, "Send with a single group keeps rank 1's data");
    coco_run_free(r);
    coco_program_free(p);
}

/* ---- layers ---- */

static void test_matmul(void)
{
    coco_program *p = load("Tensor a(FP32, [2,2], Replicated, WORLD);\n"
                           "Tensor b(FP32, [2,2], Replicated, WORLD);\n"
                           "Var c = MatMul(a, b);\n"
                           "Execute mm({a, b}, {c});\n",
                           2);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    for (int k = 0; k < 2; k++) {
        set(r, "a", k, (double[]){1, 2, 3, 4}, 4);
        set(r, "b", k, (double[]){5, 6, 7, 8}, 4);
    }
    execute(p, r);
    /* [[1*5+2*7, 1*6+2*8], [3*5+4*7, 3*6+4*8]] */
    expect(r, "c", 0, (double[]){19, 22, 43, 50}, 4, "MatMul 2x2 by hand");
    expect(r, "c", 1, (double[]){19, 22, 43, 50}, 4, "MatMul 2x2 by hand, rank 1");
    coco_run_free(r);
    coco_program_free(p);

    /* both operands sliced on K: each rank multiplies its slices (Local) */
    p = load("Tensor a(FP32, [2,4], Sliced(1), WORLD, RANK);\n"
             "Tensor b(FP32, [4,1], Sliced(0), WORLD, RANK);\n"
             "Var part = MatMul(a, b);\n"
             "Var c = AllReduce(\"+\", part);\n"
             "Execute mmk({a, b}, {part, c});\n",
             2);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    /* a = [[1,2,3,4],[5,6,7,8]], b = [1,10,100,1000]^T */
    set(r, "a", 0, (double[]){1, 2, 5, 6}, 4);
    set(r, "a", 1, (double[]){3, 4, 7, 8}, 4);
    set(r, "b", 0, (double[]){1, 10}, 2);
    set(r, "b", 1, (double[]){100, 1000}, 2);
    execute(p, r);
    expect(r, "part", 0, (double[]){21, 65}, 2, "MatMul partial on rank 0 (k = 0,1)");
    expect(r, "part", 1, (double[]){4300, 8700}, 2, "MatMul partial on rank 1 (k = 2,3)");
    expect(r, "c", 0, (double[]){4321, 8765}, 2, "MatMul + AllReduce = the whole product");
    expect_facts(r, "part", 0, "FP32", "Local", 2, "MatMul sliced on K is Local");
    coco_run_free(r);
    coco_program_free(p);

    /* a sliced on M (rows), b replicated: the result is sliced on M */
    p = load("Tensor a(FP64, [4,2], Sliced(0), WORLD, RANK);\n"
             "Tensor b(FP64, [2,3], Replicated, WORLD);\n"
             "Var c = MatMul(a, b);\n"
             "Execute mmm({a, b}, {c});\n",
             2);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    set(r, "a", 0, (double[]){1, 0, 0, 1}, 4);
    set(r, "a", 1, (double[]){1, 1, 2, -1}, 4);
    for (int k = 0; k < 2; k++)
        set(r, "b", k, (double[]){1, 2, 3, 4, 5, 6}, 6);
    execute(p, r);
    expect(r, "c", 0, (double[]){1, 2, 3, 4, 5, 6}, 6, "MatMul of rows 0-1 (identity)");
    expect(r, "c", 1, (double[]){5, 7, 9, -2, -1, 0}, 6, "MatMul of rows 2-3");
    expect_facts(r, "c", 1, "FP64", "Sliced(0)", 2, "MatMul with a sliced on M is Sliced(0)");
    coco_run_free(r);
    coco_program_free(p);

    /* float32 accumulation: 1 + 2^-24 + 2^-24 in float stays 1 (each
     * addition rounds), while float64 accumulation would give 1 + 2^-23. */
    p = load("Tensor a(FP32, [1,3], Replicated, WORLD);\n"
             "Tensor b(FP32, [3,1], Replicated, WORLD);\n"
             "Tensor a8(FP64, [1,3], Replicated, WORLD);\n"
             "Tensor b8(FP64, [3,1], Replicated, WORLD);\n"
             "Var c = MatMul(a, b);\n"
             "Var c8 = MatMul(a8, b8);\n"
             "Execute acc({a, b, a8, b8}, {c, c8});\n",
             1);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    set(r, "a", 0, (double[]){1, ldexp(1, -24), ldexp(1, -24)}, 3);
    set(r, "b", 0, (double[]){1, 1, 1}, 3);
    set(r, "a8", 0, (double[]){1, ldexp(1, -24), ldexp(1, -24)}, 3);
    set(r, "b8", 0, (double[]){1, 1, 1}, 3);
    execute(p, r);
    expect(r, "c", 0, (double[]){1}, 1, "MatMul FP32 accumulates in float, in k order");
    expect(r, "c8", 0, (double[]){1 + ldexp(1, -23)}, 1, "MatMul FP64 accumulates in double");
    coco_run_free(r);
    coco_program_free(p);
}

static void test_matmul_threads(void)
{
    /* the result must not depend on the number of threads */
    const char *text = "Tensor a(FP32, [3,37,29], Replicated, WORLD);\n"
                       "Tensor b(FP32, [29,41], Replicated, WORLD);\n"
                       "Var c = MatMul(a, b);\n"
                       "Execute mmt({a, b}, {c});\n";
    coco_program *p = load(text, 1);
    if (!p)
        return;
    coco_run *r1 = coco_run_new(p, 5, 1), *r4 = coco_run_new(p, 5, 4);
    execute(p, r1);
    execute(p, r4);
    coco_tensor t1, t4;
    int ok = !coco_run_tensor(r1, "c", 0, &t1) && !coco_run_tensor(r4, "c", 0, &t4) &&
             t1.count == 3 * 37 * 41 && t4.count == t1.count &&
             !memcmp(t1.data, t4.data, (size_t)t1.count * sizeof(double));
    check(ok, "MatMul with 1 and 4 threads agree bit for bit");
    coco_run_free(r1);
    coco_run_free(r4);
    coco_program_free(p);
}

static void test_conv2d(void)
{
    coco_program *p = load("Tensor x(FP32, [1,1,3,3], Replicated, WORLD);\n"
                           "Tensor w(FP32, [2,1,3,3], Replicated, WORLD);\n"
                           "Var y = Conv2D(x, w, 1, 1);\n"
                           "Var z = Conv2D(x, w, 2, 1);\n"
                           "Var v = Conv2D(x, w);\n"
                           "Execute conv({x, w}, {y, z, v});\n",
                           1);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    /* x = 1..9 in a 3x3; kernel 0 all ones, kernel 1 only the centre */
    set(r, "x", 0, (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9}, 9);
    set(r, "w", 0, (double[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 18);
    execute(p, r);
    /* padding 1: each output is the sum of the 3x3 neighbourhood inside the image;
     * e.g. corner (0,0) = 1+2+4+5 = 12, centre = 45 */
    expect(r, "y", 0,
           (double[]){12, 21, 16, 27, 45, 33, 24, 39, 28, /* kernel 1 gives x back */
                      1, 2, 3, 4, 5, 6, 7, 8, 9},
           18, "Conv2D 3x3 with padding 1 by hand");
    /* stride 2: outputs at (0,0) (0,2) (2,0) (2,2) */
    expect(r, "z", 0, (double[]){12, 16, 24, 28, 1, 3, 7, 9}, 8, "Conv2D stride 2 padding 1");
    expect(r, "v", 0, (double[]){45, 5}, 2, "Conv2D without padding: one output");
    coco_run_free(r);
    coco_program_free(p);

    /* channels sliced over 2 ranks: Local partial sums, one per channel */
    p = load("Tensor x(FP32, [1,2,2,2], Sliced(1), WORLD, RANK);\n"
             "Tensor w(FP32, [1,2,1,1], Sliced(1), WORLD, RANK);\n"
             "Var y = Conv2D(x, w);\n"
             "Var s = AllReduce(\"+\", y);\n"
             "Execute convc({x, w}, {y, s});\n",
             2);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    set(r, "x", 0, (double[]){1, 2, 3, 4}, 4);
    set(r, "x", 1, (double[]){10, 20, 30, 40}, 4);
    set(r, "w", 0, (double[]){2}, 1);
    set(r, "w", 1, (double[]){-1}, 1);
    execute(p, r);
    expect(r, "y", 0, (double[]){2, 4, 6, 8}, 4, "Conv2D partial of channel 0");
    expect(r, "y", 1, (double[]){-10, -20, -30, -40}, 4, "Conv2D partial of channel 1");
    expect(r, "s", 1, (double[]){-8, -16, -24, -32}, 4, "Conv2D channel partials summed");
    coco_run_free(r);
    coco_program_free(p);
}

/* ---- reductions within a rank ---- */

static void test_norm(void)
{
    coco_program *p = load("Tensor x(FP64, [2,2], Replicated, WORLD);\n"
                           "Tensor y(FP32, [2,2], Replicated, WORLD);\n"
                           "Tensor s(FP64, [4], Sliced(0), WORLD, RANK);\n"
                           "Tensor q(FP64, [2,4], Sliced(1), WORLD, RANK);\n"
                           "Var all = Norm(x);\n"
                           "Var rows = Norm(x, 1);\n"
                           "Var cols = Norm(x, 0);\n"
                           "Var n32 = Norm(y);\n"
                           "Var mx = ReduceTensor(\"max\", x, 0);\n"
                           "Var sm = ReduceTensor(\"+\", x);\n"
                           "Var whole = Norm(AllGather(s));\n"
                           "Var qr = Norm(q, 0);\n"
                           "Execute norms({x, y, s, q}, {all, rows, cols, n32, mx, sm, whole, qr});\n",
                           2);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    for (int k = 0; k < 2; k++) {
        set(r, "x", k, (double[]){3, 4, 6, 8}, 4);
        set(r, "y", k, (double[]){1, 1, 1, 1}, 4);
    }
    set(r, "s", 0, (double[]){1, 2}, 2);
    set(r, "s", 1, (double[]){2, 4}, 2);
    set(r, "q", 0, (double[]){3, 0, 4, 5}, 4);   /* q = [[3,0,1,2],[4,5,2,2]] */
    set(r, "q", 1, (double[]){1, 2, 2, 2}, 4);
    execute(p, r);
    expect(r, "all", 0, (double[]){sqrt(125.0)}, 1, "Norm of everything: sqrt(9+16+36+64)");
    expect(r, "rows", 1, (double[]){5, 10}, 2, "Norm along dim 1");
    expect(r, "cols", 0, (double[]){sqrt(45.0), sqrt(80.0)}, 2, "Norm along dim 0");
    expect(r, "n32", 0, (double[]){2}, 1, "Norm of four ones in FP32");
    expect(r, "mx", 0, (double[]){6, 8}, 2, "ReduceTensor max along dim 0");
    expect(r, "sm", 1, (double[]){21}, 1, "ReduceTensor + of everything");
    expect(r, "whole", 1, (double[]){5}, 1, "Norm of an AllGather: sqrt(1+4+4+16)");
    expect(r, "qr", 0, (double[]){5, 5}, 2, "Norm along a non-sliced dim keeps the slice (rank 0)");
    expect(r, "qr", 1, (double[]){sqrt(5.0), sqrt(8.0)}, 2,
           "Norm along a non-sliced dim keeps the slice (rank 1)");
    expect_facts(r, "qr", 1, "FP64", "Sliced(0)", 2, "Norm(q, 0) of Sliced(1) is Sliced(0)");
    coco_run_free(r);
    coco_program_free(p);
}

/* ---- pointwise: broadcasting, types, rounding ---- */

static void test_broadcast(void)
{
    coco_program *p = load("Size B = 2, S = 2, H = 3;\n"
                           "Tensor x(FP64, [B,S,H], Replicated, WORLD);\n"
                           "Tensor h(FP64, [H], Replicated, WORLD);\n"
                           "Tensor c(FP64, [S,1], Replicated, WORLD);\n"
                           "Var y = x + h;\n"
                           "Var z = h - x;\n"
                           "Var u = c * h;\n"
                           "Execute bc({x, h, c}, {y, z, u});\n",
                           1);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    double x[12], want_y[12], want_z[12];
    for (int b = 0; b < 2; b++)
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 3; k++) {
                int i = (b * 2 + s) * 3 + k;
                x[i] = 100 * b + 10 * s;
                want_y[i] = 100 * b + 10 * s + (k + 1);
                want_z[i] = (k + 1) - (100 * b + 10 * s);
            }
    set(r, "x", 0, x, 12);
    set(r, "h", 0, (double[]){1, 2, 3}, 3);
    set(r, "c", 0, (double[]){2, -1}, 2);
    execute(p, r);
    expect(r, "y", 0, want_y, 12, "[B,S,H] + [H] broadcasts over B and S");
    expect(r, "z", 0, want_z, 12, "[H] - [B,S,H] broadcasts the left operand");
    expect(r, "u", 0, (double[]){2, 4, 6, -1, -2, -3}, 6, "[S,1] * [H] gives [S,H]");
    coco_run_free(r);
    coco_program_free(p);
}

static void test_types(void)
{
    coco_program *p = load("Tensor a(FP16, [4], Replicated, WORLD);\n"
                           "Tensor b(BF16, [4], Replicated, WORLD);\n"
                           "Tensor d(FP64, [4], Replicated, WORLD);\n"
                           "Scalar s(FP64, 3);\n"
                           "Var x = a * 3;\n"
                           "Var xs = a * s;\n"
                           "Var ab = a + b;\n"
                           "Var h = Cast(d, FP16);\n"
                           "Var bf = Cast(d, BF16);\n"
                           "Var f = Cast(d, FP32);\n"
                           "Var ad = a + d;\n"
                           "Execute types({a, b, d, s}, {x, xs, ab, h, bf, f, ad});\n",
                           1);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    /* 0.0999755859375 is FP16 0x2E66, the FP16 value nearest 0.1 */
    set(r, "a", 0, (double[]){0.0999755859375, 1, 2048, 65504}, 4);
    set(r, "b", 0, (double[]){0.5, ldexp(1, -11), 1, 1}, 4);
    set(r, "d", 0,
        (double[]){1 + ldexp(1, -11), 1 + 3 * ldexp(1, -11), 1 + ldexp(1, -11) + ldexp(1, -40), 65520},
        4);
    execute(p, r);
    expect_facts(r, "x", 0, "FP16", "Replicated", 4, "FP16 tensor * literal stays FP16");
    expect_facts(r, "xs", 0, "FP16", "Replicated", 4, "FP16 tensor * FP64 Scalar stays FP16");
    expect_facts(r, "ab", 0, "FP32", "Replicated", 4, "FP16 + BF16 is FP32");
    expect_facts(r, "ad", 0, "FP64", "Replicated", 4, "FP16 + FP64 is FP64");
    /* 0.0999755859375 * 3 = 0.2999267578125 = 1228.5 * 2^-12: a tie, to even
     * 1228 * 2^-12 = 0.2998046875; 2048*3 = 6144 exact; 65504*3 overflows */
    expect(r, "x", 0, (double[]){0.2998046875, 3, 6144, INFINITY}, 4,
           "FP16 multiply rounds once, ties to even, overflows to inf");
    expect(r, "xs", 0, (double[]){0.2998046875, 3, 6144, INFINITY}, 4, "same with a Scalar");
    /* a + b in FP32: 0.0999755859375 + 0.5; 1 + 2^-11 exact in FP32 */
    expect(r, "ab", 0, (double[]){0.5999755859375, 1 + ldexp(1, -11), 2049, 65505}, 4,
           "FP16 + BF16 computed and kept in FP32");
    /* FP16 ties: 1 + 2^-11 -> 1 (even); 1 + 3*2^-11 -> 1 + 2^-9 (even);
     * just above the tie -> up; 65520 -> inf */
    expect(r, "h", 0, (double[]){1, 1 + ldexp(1, -9), 1 + ldexp(1, -10), INFINITY}, 4,
           "Cast to FP16 rounds to nearest even, once, from double");
    /* BF16 has 8 significant bits: 1 + 2^-11 -> 1; 1 + 3*2^-11 -> 1 (below
     * half of 2^-7); 65520 = 0xFFF0 -> 65536 */
    expect(r, "bf", 0, (double[]){1, 1, 1, 65536}, 4, "Cast to BF16");
    expect(r, "f", 0,
           (double[]){1 + ldexp(1, -11), 1 + 3 * ldexp(1, -11), 1 + ldexp(1, -11), 65520}, 4,
           "Cast to FP32");
    coco_run_free(r);
    coco_program_free(p);

    /* BF16 ties and double rounding */
    p = load("Tensor d(FP64, [3], Replicated, WORLD);\n"
             "Var bf = Cast(d, BF16);\n"
             "Execute bft({d}, {bf});\n",
             1);
    if (!p)
        return;
    r = coco_run_new(p, 1, 1);
    set(r, "d", 0, (double[]){1 + ldexp(1, -8), 1 + 3 * ldexp(1, -8), 1 + ldexp(1, -8) + ldexp(1, -40)}, 3);
    execute(p, r);
    expect(r, "bf", 0, (double[]){1, 1 + ldexp(1, -6), 1 + ldexp(1, -7)}, 3,
           "BF16: ties to even, and no double rounding through float");
    coco_run_free(r);
    coco_program_free(p);
}

static void test_pointwise(void)
{
    coco_program *p = load("Tensor x(FP64, [4], Replicated, WORLD);\n"
                           "Var r = ReLU(x);\n"
                           "Var q = Sqrt(x * x);\n"
                           "Var w = Pow(x, 2);\n"
                           "Var t = Tanh(x * 0);\n"
                           "Var n = -x / 2;\n"
                           "Execute pw({x}, {r, q, w, t, n});\n",
                           1);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    set(r, "x", 0, (double[]){-3, 0, 2.5, -0.5}, 4);
    execute(p, r);
    expect(r, "r", 0, (double[]){0, 0, 2.5, 0}, 4, "ReLU");
    expect(r, "q", 0, (double[]){3, 0, 2.5, 0.5}, 4, "Sqrt(x*x) = |x|");
    expect(r, "w", 0, (double[]){9, 0, 6.25, 0.25}, 4, "Pow(x, 2)");
    expect(r, "t", 0, (double[]){0, 0, 0, 0}, 4, "Tanh(0) = 0");
    expect(r, "n", 0, (double[]){1.5, 0, -1.25, 0.25}, 4, "-x / 2");
    coco_run_free(r);
    coco_program_free(p);
}

static void test_dropout(void)
{
    coco_program *p = load("Tensor x(FP64, [1000], Replicated, WORLD);\n"
                           "Var keep = Dropout(x, 0);\n"
                           "Var half = Dropout(x, 0.5);\n"
                           "Var again = Dropout(x, 0.5);\n"
                           "Execute dr({x}, {keep, half, again});\n",
                           2);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 9, 1);
    double x[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = i + 1;
    set(r, "x", 0, x, 1000);
    set(r, "x", 1, x, 1000);
    execute(p, r);
    expect(r, "keep", 1, x, 1000, "Dropout with p = 0 keeps everything");
    coco_tensor h0, h1, a0;
    int ok = !coco_run_tensor(r, "half", 0, &h0) && !coco_run_tensor(r, "half", 1, &h1) &&
             !coco_run_tensor(r, "again", 0, &a0);
    int kept = 0, scaled = 1, differ = 0;
    for (int i = 0; ok && i < 1000; i++) {
        if (h0.data[i] != 0) {
            kept++;
            scaled &= h0.data[i] == 2 * x[i];
        }
        differ += (h0.data[i] != 0) != (a0.data[i] != 0);
    }
    check(ok && scaled, "Dropout(0.5) doubles what it keeps");
    check(ok && kept > 400 && kept < 600, "Dropout(0.5) keeps about half");
    check(ok && !memcmp(h0.data, h1.data, 1000 * sizeof(double)), "Dropout of a Replicated value agrees on all ranks");
    check(ok && differ > 300, "two Dropouts draw different masks");
    coco_run_free(r);
    coco_program_free(p);
}

/* ---- Update ---- */

static void test_update(void)
{
    coco_program *p = load("Tensor p(FP32, [3], Replicated, WORLD);\n"
                           "Tensor g(FP32, [3], Local, WORLD, RANK);\n"
                           "Tensor s(FP16, [4], Sliced(0), WORLD, RANK);\n"
                           "Scalar lr(FP32);\n"
                           "Var p_ = Update(p, p - lr * AllReduce(\"+\", g));\n"
                           "Var s_ = Update(s, 0.1);\n"
                           "Execute upd({p, g, s, lr}, {p_, s_});\n",
                           2);
    if (!p)
        return;
    coco_run *r = coco_run_new(p, 1, 1);
    for (int k = 0; k < 2; k++) {
        set(r, "p", k, (double[]){1, 2, 3}, 3);
        set(r, "lr", k, (double[]){0.5}, 1);
    }
    set(r, "g", 0, (double[]){1, 1, 1}, 3);
    set(r, "g", 1, (double[]){1, -3, 0.5}, 3);
    execute(p, r);
    /* p - 0.5 * (2, -2, 1.5) */
    expect(r, "p_", 0, (double[]){0, 3, 2.25}, 3, "Update with an AllReduce'd gradient");
    expect(r, "p_", 1, (double[]){0, 3, 2.25}, 3, "Update, rank 1");
    /* Update with a scalar: the FP32 literal 0.1 rounded to FP16 (0x2E66) */
    expect(r, "s_", 0, (double[]){0.0999755859375, 0.0999755859375}, 2, "Update of a slice with a scalar");
    expect(r, "s_", 1, (double[]){0.0999755859375, 0.0999755859375}, 2, "Update of a slice, rank 1");
    coco_run_free(r);
    coco_program_free(p);
}

/* ---- loading: errors, defines, facts ---- */

static void test_load(void)
{
    coco_config cfg = {NULL, 0, 2, 0};
    char err[1024];
    coco_program *p = coco_load_string("bad.coco", "Tensor x(FP32, [4], Replicated, WORLD);\nVar y = x +;\n",
                                       &cfg, err, sizeof err);
    check(p == NULL, "a bad program does not load");
    check(strstr(err, "bad.coco:2:12: error: expected an expression") != NULL,
          "the message names file, line and column");
    coco_program_free(p);

    const char *defs[] = {"N=6", "lr=0.25"};
    coco_config c2 = {defs, 2, 3, 0};
    p = coco_load_string("ok.coco",
                         "Size N = 4;\nTensor x(FP64, [N], Sliced(0), WORLD, RANK);\n"
                         "Scalar lr(FP64, 1);\nVar y = x * lr;\nExecute scaled({x, lr}, {y});\n",
                         &c2, err, sizeof err);
    check(p != NULL, "-D binds a size and a scalar");
    if (!p)
        return;
    check(!strcmp(coco_program_name(p), "scaled") && coco_num_ranks(p) == 3 &&
              coco_num_inputs(p) == 2 && coco_num_outputs(p) == 1 &&
              !strcmp(coco_input_name(p, 1), "lr") && !strcmp(coco_output_name(p, 0), "y") &&
              coco_input_name(p, 2) == NULL,
          "program facts");
    coco_run *r = coco_run_new(p, 1, 1);
    coco_tensor t;
    check(!coco_run_tensor(r, "x", 2, &t) && t.global_shape[0] == 6 && t.local_shape[0] == 2,
          "-D N=6 gives 2 elements per rank on 3 ranks");
    check(coco_run_tensor(r, "x", 3, &t) != 0 && coco_run_tensor(r, "nope", 0, &t) != 0,
          "no tensor for a bad rank or name");
    check(!coco_run_tensor(r, "lr", 0, &t) && t.count == 1 && t.data[0] == 0.25,
          "-D lr=0.25 overrides the scalar's value");
    set(r, "x", 0, (double[]){1, 2}, 2);
    set(r, "x", 1, (double[]){3, 4}, 2);
    set(r, "x", 2, (double[]){5, 6}, 2);
    execute(p, r);
    expect(r, "y", 2, (double[]){1.25, 1.5}, 2, "y = x * lr on rank 2");
    coco_summary s;
    check(!coco_run_summary(r, "y", &s) && s.count == 6 && s.sum == 5.25 && s.replicas_agree,
          "summary of a Sliced output covers the logical tensor");
    coco_run_free(r);
    coco_program_free(p);
}

int main(void)
{
    test_allreduce();
    test_reducescatter_allgather();
    test_reduce_broadcast();
    test_send();
    group_end("collectives");
    test_matmul();
    test_matmul_threads();
    test_conv2d();
    group_end("layers");
    test_norm();
    group_end("reductions");
    test_broadcast();
    test_types();
    test_pointwise();
    test_dropout();
    group_end("pointwise");
    test_update();
    group_end("update");
    test_load();
    group_end("load");
    return total_fail ? 1 : 0;
}

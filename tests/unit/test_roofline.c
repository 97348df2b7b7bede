/* test_roofline.c: unit tests of the roofline counts (src/front/roofline.c,
 * through coco_program_roofline) against programs counted by hand: Adam
 * and its schedule `paper` at P = 1, 2 and 4, a model-parallel MatMul layer,
 * a program with Sliced, Replicated and Local tensors of three types (each
 * rank's own figures and the busiest rank's), Conv2D, Norm, and
 * Sends between groups and to the rank itself.
 * Run from the repository root; exits non-zero when any check fails. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coconet.h"

#include "unit_check.h"

static coco_program *load(const char *text, int nranks)
{
    char err[4096];
    coco_config cfg = {NULL, 0, nranks, 0};
    coco_program *p = coco_load_string("t.coco", text, &cfg, err, sizeof err);
    if (!p)
        printf("  load: %s\n", err);
    check(p != NULL, "the program loads");
    return p;
}

/* p's figures on `rank` (-1: the busiest) against the hand count */
static void expect(const coco_program *p, int rank, double rd, double wr, double link,
                   double flops, const char *what)
{
    coco_roofline r;
    char msg[256];
    if (!p || coco_program_roofline(p, rank, &r)) {
        check(0, what);
        return;
    }
    int ok = r.read_bytes == rd && r.write_bytes == wr && fabs(r.link_bytes - link) < 1e-9 &&
             r.flops == flops;
    snprintf(msg, sizeof msg, "%s: read %.17g write %.17g link %.17g flops %.17g; want %g %g %g %g",
             what, r.read_bytes, r.write_bytes, r.link_bytes, r.flops, rd, wr, link, flops);
    check(ok, msg);
}

/* Adam over N = 1000: g FP16 (Local), p m v FP32, two scalars.
 * read 2N + 3 * 4N; write p m v 12N (p_ is p's new value: not again);
 * AllReduce of g: 2(P-1)/P * 2N; flops: m_ 3N+1, v_ 4N+1, m1 N+2,
 * v1 N+2, p_ 4N: 13N + 6 (0-dim values such as 1-beta1 count 1). */
static const char *adam =
    "Size N = 1000;\n"
    "Tensor g(FP16, [N], Local, WORLD, RANK);\n"
    "Tensor p(FP32, [N], Replicated, WORLD);\n"
    "Tensor m(FP32, [N], Replicated, WORLD);\n"
    "Tensor v(FP32, [N], Replicated, WORLD);\n"
    "Scalar lr(FP32);  Scalar beta1(FP32, 0.9);  Scalar beta2(FP32, 0.999);  Scalar t(FP32);\n"
    "Var avg = AllReduce(\"+\", g);\n"
    "Var m_ = Update(m, (m*beta1+(1-beta1)*avg));\n"
    "Var v_ = Update(v, (v*beta2+(1-beta2)*avg*avg));\n"
    "Var m1 = m_/(1-Pow(beta1, t));\n"
    "Var v1 = v_/(1-Pow(beta2, t));\n"
    "Var p_ = Update(p, (p - lr * m1/(Sqrt(v1))));\n"
    "Execute adam({g,p,v,m,lr,t}, {p_});\n"
    "Schedule paper {\n"
    "  comps = fuse(m_, v_, m1, v1, p_, ComputationFuse);\n"
    "  (rsG, agG) = split(avg, ARSplitRSAG);\n"
    "  (scComp, agP, agM, agV) = reorder(agG, comps, AGReorder);\n"
    "  asSlice(m); asSlice(v); dead(agM); dead(agV);\n"
    "  fuseAR = fuse(rsG, scComp, agP, AllReduceFuse);\n"
    "}\n";

static void test_adam(void)
{
    const double N = 1000;
    for (int P = 1; P <= 4; P *= 2) {
        char what[64];
        coco_program *p = load(adam, P);
        snprintf(what, sizeof what, "adam at P = %d", P);
        expect(p, -1, 14 * N, 12 * N, 2.0 * (P - 1) / P * 2 * N, 13 * N + 6, what);
        /* paper: m and v kept sliced, the computations on each rank's slice;
         * ReduceScatter of g (FP16) and AllGather of p (FP32) */
        char err[4096];
        coco_program *s = p ? coco_schedule(p, "paper", err, sizeof err) : NULL;
        check(s != NULL, "adam's schedule paper applies");
        snprintf(what, sizeof what, "adam's paper at P = %d", P);
        double k = N / P;
        expect(s, -1, 2 * N + 4 * N + 8 * k, 4 * N + 8 * k,
               (P - 1.0) / P * 2 * N + (P - 1.0) / P * 4 * N, 13 * k + 6, what);
        if (s)
            coco_program_free(s);
        if (p)
            coco_program_free(p);
    }
    group_end("roofline adam");
}

/* Megatron's row-parallel layer: in [B,S,H] Sliced(2), w [H,H] Sliced(0), FP16;
 * MatMul gives a Local [B,S,H] partial sum, AllReduce, + b. B*S*H = 64. */
static void test_matmul(void)
{
    const char *text =
        "Size B = 4, S = 2, H = 8;\n"
        "Tensor w(FP16, [H,H], Sliced(0), WORLD, RANK);\n"
        "Tensor in(FP16, [B,S,H], Sliced(2), WORLD, RANK);\n"
        "Tensor b(FP16, [H], Replicated, WORLD);\n"
        "Var layer = MatMul(in, w);\n"
        "Var sum = AllReduce(\"+\", layer);\n"
        "Var out = sum + b;\n"
        "Execute layer({w,in,b}, {out});\n";
    for (int P = 1; P <= 4; P *= 2) {
        char what[64];
        snprintf(what, sizeof what, "MatMul layer at P = %d", P);
        coco_program *p = load(text, P);
        /* read w 64/P*2, in 64/P*2, b 16; write out 128; MatMul 2*64*(8/P), + 64 */
        expect(p, -1, 256.0 / P + 16, 128, 2.0 * (P - 1) / P * 128, 2 * 64 * (8.0 / P) + 64,
               what);
        if (p)
            coco_program_free(p);
    }
    group_end("roofline matmul");
}

/* Three layouts and three types over N = 12: a FP32 Sliced(0) (12/P
 * elements a rank), r FP64 Replicated, l FP16 Local. s is l's
 * ReduceScatter (FP16, Sliced), y a's AllGather (FP32, whole), z = y + r
 * (FP64, 12 additions). Each rank with k = 12/P elements of a: read 4k +
 * 96 + 24, write s 2k and z 96; link: RS (P-1)/P*12*2 + AG (P-1)/P*12*4. */
static void test_layouts(void)
{
    const char *text =
        "Size N = 12;\n"
        "Tensor a(FP32, [N], Sliced(0), WORLD, RANK);\n"
        "Tensor r(FP64, [N], Replicated, WORLD);\n"
        "Tensor l(FP16, [N], Local, WORLD, RANK);\n"
        "Var s = ReduceScatter(\"+\", l);\n"
        "Var y = AllGather(a);\n"
        "Var z = y + r;\n"
        "Execute t({a,r,l}, {s,z});\n";
    coco_program *p1 = load(text, 1), *p2 = load(text, 2), *p4 = load(text, 4);
    expect(p1, 0, 168, 120, 0, 12, "layouts at P = 1");
    expect(p2, -1, 144, 108, 36, 12, "layouts at P = 2");
    expect(p2, 1, 144, 108, 36, 12, "layouts at P = 2, rank 1");
    expect(p4, 0, 132, 102, 54, 12, "layouts at P = 4, rank 0");
    expect(p4, 3, 132, 102, 54, 12, "layouts at P = 4, rank 3");
    expect(p4, -1, 132, 102, 54, 12, "layouts at P = 4, the busiest rank");
    coco_roofline r;
    check(p4 && coco_program_roofline(p4, 4, &r) == -1, "a rank out of range is refused");
    check(p4 && coco_program_roofline(p4, -2, &r) == -1, "rank -2 is refused");
    for (coco_program *const *q = (coco_program *const[]){p1, p2, p4, NULL}; *q; q++)
        coco_program_free(*q);
    group_end("roofline layouts");
}

/* Conv2D of x [2,4,3,3] and w [2,4,3,3] both Sliced(1) (channels), stride
 * 1, padding 1: out [2,2,3,3] = 36 elements, each 2 * (4/P) * 3 * 3 flops;
 * then Norm of a FP32 [N] (2 per element) at P = 2. */
static void test_conv_norm(void)
{
    const char *conv =
        "Tensor x(FP32, [2,4,3,3], Sliced(1), WORLD, RANK);\n"
        "Tensor w(FP32, [2,4,3,3], Sliced(1), WORLD, RANK);\n"
        "Var y = Conv2D(x, w, 1, 1);\n"
        "Var s = AllReduce(\"+\", y);\n"
        "Execute conv({x,w}, {s});\n";
    coco_program *p = load(conv, 2);
    /* read x 72/2*4 + w 72/2*4; write s 36*4; AllReduce 2*(1/2)*36*4 */
    expect(p, -1, 288, 144, 144, 2 * 36 * 2 * 9, "Conv2D at P = 2");
    if (p)
        coco_program_free(p);
    const char *norm =
        "Size N = 100;\n"
        "Tensor u(FP32, [N], Replicated, WORLD);\n"
        "Var n = Norm(u);\n"
        "Execute norm({u}, {n});\n";
    p = load(norm, 2);
    /* read 400; write one FP32 value */
    expect(p, -1, 400, 4, 0, 200, "Norm at P = 2");
    if (p)
        coco_program_free(p);
    group_end("roofline conv2d, norm");
}

/* Send of x FP16 [8] to the next group: at P = 4 with groups of 2 each rank
 * sends its part (whole: 16 bytes; Sliced(0) in its group: 8 bytes); at
 * P = 2 there is one group and each rank sends to itself: nothing moves. */
static void test_send(void)
{
    const char *whole =
        "Size N = 8;\n"
        "Group GROUP(2);\n"
        "Tensor x(FP16, [N], Replicated, GROUP);\n"
        "Var y = Send(x, GroupRank(GROUP+1, RANK));\n"
        "Execute send({x}, {y});\n";
    const char *sliced =
        "Size N = 8;\n"
        "Group GROUP(2);\n"
        "Tensor x(FP16, [N], Sliced(0), GROUP, RANK);\n"
        "Var y = Send(x, GroupRank(GROUP+1, RANK));\n"
        "Execute send({x}, {y});\n";
    coco_program *p4 = load(whole, 4), *p2 = load(whole, 2), *s4 = load(sliced, 4);
    expect(p4, -1, 16, 16, 16, 0, "Send between 2 groups");
    expect(p4, 3, 16, 16, 16, 0, "Send between 2 groups, rank 3");
    expect(p2, -1, 16, 16, 0, 0, "Send within one group: to the rank itself");
    expect(s4, -1, 8, 8, 8, 0, "sliced Send between 2 groups");
    for (coco_program *const *q = (coco_program *const[]){p4, p2, s4, NULL}; *q; q++)
        coco_program_free(*q);
    group_end("roofline send");
}

int main(void)
{
    test_adam();
    test_matmul();
    test_layouts();
    test_conv_norm();
    test_send();
    return total_fail != 0;
}

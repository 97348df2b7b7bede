/* test_footprint.c: the memory a CPU run holds, told before running it
 * (exec_footprint, src/cpu/footprint.c): against figures counted by hand
 * for small programs, against what the executor really asked of malloc
 * (Exec.held_peak, rank_peak, held) for every example, every schedule and
 * the FP64 evaluation, and the refusals and out-of-memory failures of the
 * API under an address-space limit (RLIMIT_AS). Run from the repository
 * root. */
#include <dirent.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "api_mem.h"

#include "unit_check.h"

static coco_program *load(const char *text, int nranks)
{
    coco_config cfg = {NULL, 0, nranks, 0};
    char err[2048];
    coco_program *p = coco_load_string("t.coco", text, &cfg, err, sizeof err);
    if (!p)
        printf("  cannot load: %s", err);
    return p;
}

static void expect_peak(const char *what, const char *text, int nranks, double peak,
                        double rank_peak, double kept, int values)
{
    coco_program *p = load(text, nranks);
    check(p != NULL, what);
    if (!p)
        return;
    Footprint f;
    exec_footprint(p, 0, &f);
    char msg[256];
    snprintf(msg, sizeof msg, "%s: peak %.0f (expected %.0f), rank %.0f (%.0f), kept %.0f (%.0f), "
             "values %d (%d)", what, f.peak, peak, f.rank_peak, rank_peak, f.kept, kept,
             f.values, values);
    check(f.peak == peak && f.rank_peak == rank_peak && f.kept == kept && f.values == values,
          msg);
    program_free(p);
}

/* Figures counted by hand: a value is 8 bytes an element on every rank
 * holding it, a literal 8 bytes on every rank. */
static void test_hand_counted(void)
{
    /* x and four sums of it all live at the last one (outputs are kept);
     * each literal is freed after its sum: only "4" is live then */
    expect_peak("four sums",
                "Size N = 1000;\nTensor x(FP32, [N], Replicated, WORLD);\n"
                "Var a = x + 1;\nVar b = x + 2;\nVar c = x + 3;\nVar d = x + 4;\n"
                "Execute p({x}, {a, b, c, d});\n",
                4, 5 * 4 * 8000.0 + 4 * 8, 5 * 8000.0 + 8, 5 * 4 * 8000.0, 5);
    /* a chain: b and c are written over a's buffers, so x and a at most */
    expect_peak("chain written in place",
                "Size N = 1000;\nTensor x(FP32, [N], Replicated, WORLD);\n"
                "Var a = x + 1;\nVar b = a * 2;\nVar c = Tanh(b);\nExecute p({x}, {c});\n",
                2, 2 * 2 * 8000.0 + 2 * 8, 2 * 8000.0 + 8, 2 * 2 * 8000.0, 2);
    /* MatMul [2,8] x [8,4] on one rank: the inputs (16 and 32 elements),
     * the output (8), and its scratch: A packed in 1 block of 8 rows x 8
     * (64 floats), B in 1 panel of 16 columns x 8 (128 floats), two maps
     * of one batch (a long each) */
    expect_peak("matmul scratch",
                "Tensor a(FP32, [2, 8], Replicated, WORLD);\n"
                "Tensor b(FP32, [8, 4], Replicated, WORLD);\n"
                "Var c = MatMul(a, b);\nExecute p({a, b}, {c});\n",
                1, 128 + 256 + 64 + 256 + 512 + 16, 128 + 256 + 64 + 256 + 512 + 16,
                128 + 256 + 64, 3);
    /* AllGather of 12 elements Sliced over 4 ranks: the parts (96 bytes in
     * all) and the whole on every rank (4 x 96) */
    expect_peak("allgather",
                "Tensor x(FP32, [12], Sliced(0), WORLD, RANK);\nVar y = AllGather(x);\n"
                "Execute p({x}, {y});\n",
                4, 96 + 384, 24 + 96, 96 + 384, 2);
    /* an intermediate freed before the next is made: t (4 ranks x 8000)
     * is freed after u reads it (u, Local, is written anew), so v is made
     * beside x and u only */
    expect_peak("freed after its last reader",
                "Size N = 1000;\nTensor x(FP32, [N], Local, WORLD, RANK);\n"
                "Var t = AllReduce(\"+\", x);\nVar u = t + x;\nVar v = Sqrt(x);\n"
                "Execute p({x}, {u, v});\n",
                4, 3 * 4 * 8000.0, 3 * 8000.0, 3 * 4 * 8000.0, 3);
    group_end("hand-counted");
}

/* The largest value held at the peak is found where the peak was, not at
 * the end: n (a MatMul of 1000 x 1000, 8 MB a rank) is freed after its
 * Norm, and the peak is while n is made (with its scratch). */
static void test_largest_at_peak(void)
{
    coco_program *p = load("Size N = 1000;\nTensor u(FP32, [N, 1], Replicated, WORLD);\n"
                           "Tensor v(FP32, [1, N], Replicated, WORLD);\n"
                           "Var n = MatMul(u, v);\nVar s = Norm(n);\nVar z = u * s;\n"
                           "Execute p({u, v}, {z});\n", 2);
    check(p != NULL, "load the MatMul program");
    if (!p)
        return;
    Footprint f;
    exec_footprint(p, 0, &f);
    char msg[256];
    snprintf(msg, sizeof msg, "at the peak: largest %d (%.0f bytes), at %d, %d values",
             f.largest, f.largest_bytes, f.at, f.values);
    int n = f.largest >= 0 ? f.largest : 0;
    check(f.largest >= 0 && !strcmp(p->node[n].name, "n") && f.largest_bytes == 2 * 8e6 &&
          f.at == f.largest && f.values == 3, msg);
    program_free(p);
    group_end("the largest value at the peak");
}

/* The executor's own count of a run of p equals the footprint's. */
static int agrees(Program *p, const char *what)
{
    Footprint f;
    exec_footprint(p, 0, &f);
    Exec *e = exec_new(p, 3, 2);
    int ok = !exec_fill_inputs(e) && !exec_run(e);
    char msg[512];
    snprintf(msg, sizeof msg, "%s: executed peak %.0f, footprint %.0f; rank %.0f, %.0f; "
             "kept %.0f, %.0f", what, e->held_peak, f.peak, e->rank_peak, f.rank_peak,
             e->held, f.kept);
    ok = ok && e->held_peak == f.peak && e->rank_peak == f.rank_peak && e->held == f.kept;
    check(ok, msg);
    exec_free(e);
    return ok;
}

static void test_examples(int nranks)
{
    DIR *d = opendir("examples");
    check(d != NULL, "examples/ is found (run from the repository root)");
    int programs = 0, runs = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".coco"))
            continue;
        char path[512], err[2048], what[600];
        snprintf(path, sizeof path, "examples/%s", de->d_name);
        coco_config cfg = {NULL, 0, nranks, 0};
        coco_program *p = coco_load_file(path, &cfg, err, sizeof err);
        if (!p)
            continue; /* needs other ranks */
        programs++;
        snprintf(what, sizeof what, "%s on %d ranks", path, nranks);
        runs += agrees(p, what);
        Program *x64 = program_exact(p);
        snprintf(what, sizeof what, "%s on %d ranks, FP64", path, nranks);
        runs += agrees(x64, what);
        program_free(x64);
        int n = coco_enumerate_schedules(p);
        for (int i = 0; i < coco_num_schedules(p) && n > 0; i++) {
            coco_program *s = coco_schedule(p, coco_schedule_name(p, i), err, sizeof err);
            if (!s)
                continue;
            snprintf(what, sizeof what, "%s on %d ranks, schedule %s", path, nranks,
                     coco_schedule_name(p, i));
            runs += agrees(s, what);
            coco_program_free(s);
        }
        coco_program_free(p);
    }
    if (d)
        closedir(d);
    check(programs >= 5 && runs > programs * 2, "examples and their schedules were run");
    printf("  %d examples, %d runs agree on %d ranks\n", programs, runs, nranks);
}

/* ---- under an address-space limit ---- */

static rlim_t saved_as;

static void limit_address_space(double more_bytes)
{
    struct rlimit r;
    getrlimit(RLIMIT_AS, &r);
    saved_as = r.rlim_cur;
    long page = sysconf(_SC_PAGESIZE);
    double size = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%lf", &size) != 1)
        size = 0;
    if (f)
        fclose(f);
    r.rlim_cur = (rlim_t)(size * (double)page + more_bytes);
    setrlimit(RLIMIT_AS, &r);
}

static void restore_address_space(void)
{
    struct rlimit r;
    getrlimit(RLIMIT_AS, &r);
    r.rlim_cur = saved_as;
    setrlimit(RLIMIT_AS, &r);
}

static void test_limits(void)
{
    /* 4 ranks x 2^24 elements x 8 bytes = 512 MiB a value: x, and a, which
     * b is written over */
    const char *text = "Size N = 16777216;\nTensor x(FP32, [N], Replicated, WORLD);\n"
                       "Var a = x + 1;\nVar b = x * a;\nExecute p({x}, {b});\n";
    coco_program *p = load(text, 4);
    check(p != NULL, "load the large program");
    if (!p)
        return;
    char err[2048] = "";
    limit_address_space(768.0 * (1 << 20));
    const char *why = "";
    double limit = memory_limit(&why);
    check(limit < 768.01 * (1 << 20) && strstr(why, "RLIMIT_AS"), "the limit is RLIMIT_AS's");
    int refused = coco_run_fits(p, err, sizeof err);
    check(refused && strstr(err, "t.coco:3:11: error: the run needs 1.0 GiB at its peak") &&
          strstr(err, "2 values live at once on 4 ranks (256.0 MiB on one rank) while computing "
                 "'a'") && strstr(err, "RLIMIT_AS"), err);
    coco_run *r = coco_run_create(p, 1, 1, err, sizeof err);
    check(!r && strstr(err, "the run needs 1.0 GiB"), "coco_run_create refuses it too");
    /* past the check: the executor's own allocations fail cleanly */
    Exec *e = exec_new(p, 1, 1);
    e->recover = 1;
    int filled = exec_fill_inputs(e) == 0;
    check(filled, "the inputs (512 MiB) fit under 768 MiB");
    int ran = filled ? exec_run(e) : 0;
    char msg[512] = "";
    if (ran)
        exec_oom_message(e, msg, sizeof msg);
    check(ran == -1 && e->failed && strstr(msg, "out of memory: 0.125 GiB for 'a' on rank"), msg[0] ? msg : "exec_run fails with out of memory");
    check(e->held <= 768.0 * (1 << 20), "the failed run holds what it made, no more");
    exec_free(e);
    /* without recover (the CUDA backend's reference runs): a message and
     * exit status 1, not an abort */
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        if (!freopen("/dev/null", "w", stderr))
            _exit(3);
        Exec *x = exec_new(p, 1, 1);
        exec_fill_inputs(x);
        exec_run(x);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    check(child > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 1,
          "without recover, a failed allocation exits with status 1");
    restore_address_space();
    program_free(p);
    group_end("memory limits");
}

int main(void)
{
    test_hand_counted();
    test_largest_at_peak();
    test_examples(1);
    test_examples(3);
    group_end("footprint equals the executor's count");
    test_limits();
    return total_fail != 0;
}

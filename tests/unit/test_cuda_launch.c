/* test_cuda_launch.c: unit tests of the CUDA backend's launcher, none of
 * which starts CUDA: the cache key and the nvcc command (cuda_build.c), the
 * toolchain file, running a tool with a time limit, the report lines and
 * the table's verdicts (cuda_report.c), the checks and tolerances the
 * parent prepares (cuda_job.c), and the whole launcher run end to end with
 * the stand-in runtime build/fake/libfake_rt.so and the host-only object
 * tests/gpu/host.cu (only where nvcc is installed, as build/cuda.conf
 * says): build then cache, fork, NCCL id exchange, reports, and a rank that
 * computes wrong, crashes, fails, hangs, is of another ABI, writes past a
 * buffer (guard bytes) or gives other bits when run again; and the same
 * with no CPU reference (--reference none); each variant's own knobs
 * reaching the runtime in one launch; the tuner's ranks kept from one round
 * to the next (cuda_ranks_*); the roofline table, the
 * machine limits' cache, and --breakdown's table with the stand-in's fake
 * figures and times.
 * Run from the repository root. Prints one "group: N passed, M failed" line
 * per group; exits non-zero when any check fails. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "cuda/cuda.h"

#include "unit_check.h"

static char tmpdir[256];

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* ---- cache key and nvcc command ---- */

static void test_fnv(void)
{
    check(fnv1a(FNV_INIT, "", 0) == FNV_INIT, "fnv1a of nothing is the offset basis");
    check(fnv1a(FNV_INIT, "a", 1) == 0xaf63dc4c8601ec8cULL, "fnv1a(\"a\") is the published value");
    check(fnv1a(fnv1a(FNV_INIT, "ab", 2), "c", 1) == fnv1a(FNV_INIT, "abc", 3),
          "fnv1a continues across calls");
    group_end("fnv1a");
}

static void toolchain(CudaToolchain *t, const char *nccl)
{
    memset(t, 0, sizeof *t);
    strcpy(t->nvcc, "/opt/cuda/bin/nvcc");
    strcpy(t->cuda_lib, "/opt/cuda/lib64");
    strcpy(t->nccl_include, nccl);
    strcpy(t->nccl_lib, "/opt/nccl/lib");
    strcpy(t->nccl_link, "-lnccl");
    strcpy(t->arch, "native");
}

static int has_arg(const Argv *a, const char *s)
{
    for (int i = 0; i < a->argc; i++)
        if (!strcmp(a->argv[i], s))
            return i + 1;
    return 0;
}

static void test_nvcc_argv(void)
{
    CudaToolchain t;
    toolchain(&t, "/opt/nccl/include");
    Argv a;
    cuda_nvcc_argv(&t, "/src/coconet", "/c/k.cu", "/c/k.so.tmp", &a);
    check(!strcmp(a.argv[0], "/opt/cuda/bin/nvcc"), "argv[0] is nvcc");
    check(a.argv[a.argc] == NULL, "argv ends with NULL");
    const char *want[] = {"-O3", "-shared", "-Xcompiler", "-fPIC", "-arch=native", "-std=c++17",
                          "-I/src/coconet/include", "-I/src/coconet/rt/kernels",
                          "-I/opt/nccl/include", "/c/k.cu", "-L/opt/nccl/lib",
                          "-rpath=/opt/nccl/lib", "-L/opt/cuda/lib64", "-lnccl", "-lcublasLt",
                          "-lcudart"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char what[128];
        snprintf(what, sizeof what, "nvcc command has %s", want[i]);
        check(has_arg(&a, want[i]), what);
    }
    int o = has_arg(&a, "-o");
    check(o && o < a.argc && !strcmp(a.argv[o], "/c/k.so.tmp"), "-o names the temporary");
    check(has_arg(&a, "-Xcompiler") + 1 == has_arg(&a, "-fPIC"), "-Xcompiler -fPIC");
    check(has_arg(&a, "-lnccl") < has_arg(&a, "-lcublasLt") &&
          has_arg(&a, "-lcublasLt") < has_arg(&a, "-lcudart"), "libraries in order");
    toolchain(&t, "/usr/include");
    strcpy(t.nccl_lib, "/opt/cuda/lib64");
    cuda_nvcc_argv(&t, "/h", "s.cu", "o", &a);
    check(!has_arg(&a, "-I/usr/include"), "no -I/usr/include (it breaks #include_next)");
    int nl = 0;
    for (int i = 0; i < a.argc; i++)
        nl += !strncmp(a.argv[i], "-L", 2);
    check(nl == 1, "one -L when NCCL and CUDA share their library directory");
    /* a build in parts: each compiled with -c (no libraries), then linked */
    toolchain(&t, "/opt/nccl/include");
    cuda_nvcc_compile_argv(&t, "/h", "p0.cu", "p0.o", &a);
    check(has_arg(&a, "-c") && !has_arg(&a, "-shared") && !has_arg(&a, "-lnccl") &&
          has_arg(&a, "-O3") && has_arg(&a, "-arch=native") && has_arg(&a, "-I/h/rt/kernels") &&
          has_arg(&a, "-I/opt/nccl/include") && has_arg(&a, "p0.cu"),
          "a part: nvcc -c with the whole build's options, no libraries");
    o = has_arg(&a, "-o");
    check(o && !strcmp(a.argv[o], "p0.o"), "a part: -o names its object");
    char *objs[] = {"p0.o", "p1.o"};
    cuda_nvcc_link_argv(&t, objs, 2, "k.so.tmp", &a);
    check(has_arg(&a, "-shared") && has_arg(&a, "p0.o") && has_arg(&a, "p1.o") &&
          has_arg(&a, "-arch=native") && has_arg(&a, "-rpath=/opt/nccl/lib") &&
          has_arg(&a, "-lnccl") < has_arg(&a, "-lcudart") && !has_arg(&a, "-c"),
          "the link: nvcc -shared of the parts' objects and the libraries");
    o = has_arg(&a, "-o");
    check(o && !strcmp(a.argv[o], "k.so.tmp"), "the link: -o names the temporary");
    /* a kernel's longest wait for a peer: COCONET_TIMEOUT + 30 s, rounded up */
    const char *saved = getenv("COCONET_TIMEOUT");
    char keep[64] = "";
    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    const struct { const char *env, *want; } waits[] = {
        {NULL, NULL}, {"120", "-DCOCO_PEER_WAIT_S=150"}, {"0.5", "-DCOCO_PEER_WAIT_S=31"},
        {"0", NULL}, {"-3", NULL}, {"ten", NULL}, {"5s", NULL}};
    for (size_t i = 0; i < sizeof waits / sizeof *waits; i++) {
        if (waits[i].env)
            setenv("COCONET_TIMEOUT", waits[i].env, 1);
        else
            unsetenv("COCONET_TIMEOUT");
        cuda_nvcc_compile_argv(&t, "/h", "p0.cu", "p0.o", &a);
        int d = 0;
        for (int k = 0; k < a.argc; k++)
            d = !strncmp(a.argv[k], "-DCOCO_PEER_WAIT_S=", 19) ? k : d;
        char what[128];
        snprintf(what, sizeof what, "COCONET_TIMEOUT=%s: %s", waits[i].env ? waits[i].env : "(unset)",
                 waits[i].want ? waits[i].want : "the header's default");
        check(waits[i].want ? d && !strcmp(a.argv[d], waits[i].want) : !d, what);
    }
    if (saved)
        setenv("COCONET_TIMEOUT", keep, 1);
    else
        unsetenv("COCONET_TIMEOUT");
    group_end("nvcc command");
}

static void test_cache_key(void)
{
    CudaToolchain t;
    toolchain(&t, "/opt/nccl/include");
    Argv a, b;
    cuda_nvcc_argv(&t, "/h", "SRC.cu", "OUT", &a);
    const char *src = "__global__ void k() {}";
    uint64_t k = cuda_cache_key(src, strlen(src), &a, "nvcc 13.0", 22803, "H200", NULL);
    check(k == cuda_cache_key(src, strlen(src), &a, "nvcc 13.0", 22803, "H200", NULL),
          "the key is a function of its inputs");
    check(k != cuda_cache_key(src, strlen(src) - 1, &a, "nvcc 13.0", 22803, "H200", NULL),
          "the source changes the key");
    check(k != cuda_cache_key(src, strlen(src), &a, "nvcc 13.1", 22803, "H200", NULL),
          "nvcc --version changes the key");
    check(k != cuda_cache_key(src, strlen(src), &a, "nvcc 13.0", 22809, "H200", NULL),
          "the NCCL version changes the key");
    check(k != cuda_cache_key(src, strlen(src), &a, "nvcc 13.0", 22803, "H100", NULL),
          "the GPU changes the key");
    strcpy(t.arch, "sm_90");
    cuda_nvcc_argv(&t, "/h", "SRC.cu", "OUT", &b);
    check(k != cuda_cache_key(src, strlen(src), &b, "nvcc 13.0", 22803, "H200", NULL),
          "the nvcc command changes the key");
    /* the headers generated code includes are part of it */
    char home[512], path[600];
    snprintf(home, sizeof home, "%s/home", tmpdir);
    snprintf(path, sizeof path, "%s/include", home);
    mkdir(home, 0777);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/include/coconet_cuda.h", home);
    write_text(path, "one");
    uint64_t h1 = cuda_cache_key(src, strlen(src), &a, "v", 1, "g", home);
    write_text(path, "two");
    check(h1 != cuda_cache_key(src, strlen(src), &a, "v", 1, "g", home),
          "include/coconet_cuda.h changes the key");
    group_end("cache key");
}

static void test_toolchain_files(void)
{
    char conf[512], inc[512], h[600];
    snprintf(conf, sizeof conf, "%s/cuda.conf", tmpdir);
    write_text(conf, "# made by make\nNVCC=/x/nvcc\nCUDA_LIB=/x/lib64\nNCCL_INCLUDE=/y/include\n"
                     "NCCL_LIB=/y/lib\nNCCL_LINK=-l:libnccl.so.2\nOTHER=1\nBROKEN\n");
    CudaToolchain t;
    toolchain(&t, "/z");
    cuda_toolchain_read(&t, conf);
    check(!strcmp(t.nvcc, "/x/nvcc") && !strcmp(t.cuda_lib, "/x/lib64"), "conf: NVCC, CUDA_LIB");
    check(!strcmp(t.nccl_include, "/y/include") && !strcmp(t.nccl_lib, "/y/lib"),
          "conf: NCCL_INCLUDE, NCCL_LIB");
    check(!strcmp(t.nccl_link, "-l:libnccl.so.2"), "conf: NCCL_LINK");
    check(!strcmp(t.arch, "native"), "conf: other keys change nothing");
    cuda_toolchain_read(&t, "/nonexistent/cuda.conf");
    check(!strcmp(t.nvcc, "/x/nvcc"), "a missing conf changes nothing");
    snprintf(inc, sizeof inc, "%s/inc", tmpdir);
    mkdir(inc, 0777);
    check(nccl_header_version(inc) == -1, "no nccl.h: -1");
    snprintf(h, sizeof h, "%s/nccl.h", inc);
    write_text(h, "#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 3\n"
                  "#define NCCL_SUFFIX \"\"\n\n#define NCCL_VERSION_CODE 22803\n");
    check(nccl_header_version(inc) == 22803, "NCCL_VERSION_CODE read from nccl.h");
    group_end("toolchain");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_run_capture(void)
{
    char out[256];
    char *echo[] = {"sh", "-c", "echo hello; echo err >&2; exit 3", NULL};
    check(run_capture(echo, NULL, out, sizeof out, 10) == 3, "exit status comes back");
    check(strstr(out, "hello") && strstr(out, "err"), "stdout and stderr are captured");
    char *missing[] = {"/nonexistent/tool", NULL};
    check(run_capture(missing, NULL, out, sizeof out, 10) == 127, "a missing tool: 127");
    char *slow[] = {"sleep", "30", NULL};
    double t0 = now_s();
    check(run_capture(slow, NULL, out, sizeof out, 0.5) == -2, "past the limit: -2");
    check(now_s() - t0 < 5, "a tool past its limit is killed at once");
    char log[512];
    snprintf(log, sizeof log, "%s/log.txt", tmpdir);
    char *tolog[] = {"sh", "-c", "echo logged", NULL};
    check(run_capture(tolog, log, NULL, 0, 10) == 0, "output to a log file");
    FILE *f = fopen(log, "r");
    check(f && fgets(out, sizeof out, f) && !strcmp(out, "logged\n"), "the log holds it");
    if (f)
        fclose(f);
    group_end("run_capture");
}

/* ---- reports ---- */

static void test_report_lines(void)
{
    RankRow row;
    memset(&row, 0, sizeof row);
    row.differing = 3;
    row.elements = 1000;
    row.outside = 1;
    row.max_abs = 0.125;
    row.max_rel = INFINITY;
    row.median_ms = 1.5;
    row.min_ms = 1.25;
    row.max_ms = 2;
    strcpy(row.worst, "out");
    row.hash[0] = 0x0123456789abcdefULL;
    row.hash[1] = 42;
    char line[1024];
    rank_row_line(line, sizeof line, 1, &row, 2);
    Report r;
    report_init(&r, 2, 3);
    report_line(&r, 1, line);
    const RankRow *got = &r.rows[1 * 2 + 1];
    check(got->seen && got->differing == 3 && got->elements == 1000 && got->outside == 1,
          "ROW counts round-trip");
    check(got->max_abs == 0.125 && isinf(got->max_rel) && got->median_ms == 1.5 &&
          got->min_ms == 1.25 && got->max_ms == 2, "ROW numbers round-trip");
    check(!strcmp(got->worst, "out") && got->hash[0] == row.hash[0] && got->hash[1] == 42,
          "ROW name and hashes round-trip");
    report_line(&r, 0, "GPU NVIDIA H200 (sm_90), NCCL 2.28.3");
    check(!strcmp(r.gpu, "NVIDIA H200 (sm_90), NCCL 2.28.3"), "GPU line");
    report_line(&r, 1, "ERR rank 1: cudaMalloc failed");
    report_line(&r, 0, "ERR rank 0: later");
    report_line(&r, 1, "ERR rank 1: second reason");
    check(r.error[1] && !strcmp(r.error[1], "rank 1: cudaMalloc failed"), "the first error counts");
    check(r.first_failure == 1, "the first rank to fail is remembered");
    report_line(&r, 0, "DONE");
    check(r.done[0] && !r.done[1], "DONE");
    report_line(&r, 1, "FAULT 1 GUARD output 'y' (8 bytes) was written outside");
    check(got->seen && got->fault == 1 && !strcmp(got->fault_msg, "output 'y' (8 bytes) was "
          "written outside"), "FAULT GUARD marks the row and keeps the reason");
    report_line(&r, 0, "FAULT 2 REPEAT output 'y': other bits");
    check(r.rows[2 * 2 + 0].fault == 2, "FAULT REPEAT");
    report_line(&r, 0, "FAULT 1 SOMETHING why");
    check(r.error[0] != NULL, "an unknown FAULT kind is an error");
    free(r.error[0]);
    r.error[0] = NULL;
    report_line(&r, 0, "ERR rank 0: later");
    report_line(&r, 0, "ROW 7 1 1 1 0 0 0 0 0 x 0");
    check(r.error[0] && !strcmp(r.error[0], "rank 0: later"), "a bad variant index is refused");
    Report r2;
    report_init(&r2, 1, 1);
    report_line(&r2, 0, "ROW 0 garbage");
    check(r2.error[0] != NULL, "a malformed line is an error");
    report_line(&r2, 5, "DONE");
    check(!r2.done[0], "a line from an unknown rank is ignored");
    report_free(&r2);
    report_free(&r);
    group_end("report lines");
}

/* LIMITS and --breakdown's STEPS / STEP lines */
static void test_report_steps(void)
{
    Report r;
    report_init(&r, 2, 2);
    report_line(&r, 1, "LIMITS measured 1 2 3 not rank 0's");
    check(!r.limits.known && !r.limits.key[0], "LIMITS from another rank than 0 is ignored");
    report_line(&r, 0, "LIMITS cached 3350.5 420 989.25 NVIDIA H200 uuid ab driver 1 cuda 2");
    check(r.limits.known && !strcmp(r.limits.how, "cached") && r.limits.copy_gbs == 3350.5 &&
              r.limits.peer_gbs == 420 && r.limits.gemm_tflops == 989.25 &&
              !strcmp(r.limits.key, "NVIDIA H200 uuid ab driver 1 cuda 2"),
          "LIMITS round-trips");
    report_line(&r, 0, "LIMITS none no GPU to measure");
    check(!r.limits.known && !strcmp(r.limits.key, "no GPU to measure"), "LIMITS none: why");
    report_line(&r, 0, "LIMITS measured 0 0 0 x");
    check(!r.limits.known, "LIMITS with a zero bandwidth is not known");
    report_line(&r, 0, "STEPS 1 2 1");
    report_line(&r, 1, "STEPS 1 2 2");
    check(r.steps_differ[1] == 3, "STEPS: runs left out add up over the ranks");
    report_line(&r, 0, "STEP 1 0 11 1 4 0.25 ncclReduce AllGather");
    report_line(&r, 1, "STEP 1 0 11 1 4 0.5 ncclReduce AllGather");
    report_line(&r, 0, "STEP 1 1 12 0 1 0.125 kernel scatter into members");
    report_line(&r, 1, "STEP 1 1 13 0 1 0.0625 kernel computation");
    check(r.nstep == 2 && r.step[0].ms == 0.5 && r.step[0].ranks == 2 && r.step[0].calls == 4 &&
              !strcmp(r.step[0].call, "ncclReduce") && !strcmp(r.step[0].op, "AllGather") &&
              !r.step[0].mixed, "STEP: the slowest rank's time of a step");
    check(r.step[1].ms == 0.125 && !strcmp(r.step[1].op, "scatter into members") &&
              r.step[1].mixed, "STEP: an operation with spaces; ranks that differ are marked");
    report_line(&r, 0, "STEP 2 0 11 1 1 0.5 kernel x");
    check(r.error[0] != NULL && r.nstep == 2, "STEP of an unknown variant is an error");
    report_line(&r, 1, "STEP 0 0 11 1 1 0.5 kernel");
    check(r.error[1] != NULL, "STEP without an operation is an error");
    report_free(&r);
    group_end("report steps");
}

/* ---- the checks the parent prepares ---- */

static coco_program *load(const char *text, int nranks)
{
    char err[2048];
    coco_config cfg = {NULL, 0, nranks, 0};
    coco_program *p = coco_load_string("test.coco", text, &cfg, err, sizeof err);
    if (!p)
        printf("  load failed: %s\n", err);
    return p;
}

/* --reference none: the same inputs, nothing computed, the checks kept
 * (where each value is, whether it is Replicated) without a reference. */
static void test_job_unchecked(Program **v, int nv)
{
    Program *p = v[0];
    char err[1024];
    coco_cuda_options o = {.seed = 1, .threads = 1, .iters = 5, .timeout_s = 10};
    CudaJob checked, job;
    check(cuda_job_prepare(&checked, v, nv, &o, err, sizeof err) == 0, "prepare (each)");
    o.reference = COCO_REFERENCE_NONE;
    check(cuda_job_prepare(&job, v, nv, &o, err, sizeof err) == 0, "prepare (none)");
    check(job.unchecked && !checked.unchecked, "none: the job is unchecked");
    check(job.x64 == NULL && job.exact == NULL, "none: no FP64 evaluation");
    check(job.v[0].own == NULL && (nv < 2 || job.v[1].own == NULL), "none: no variant's CPU run");
    int a = program_input(p, "a"), y = p->exec_out[0];
    long na, nc;
    const double *da = exec_data(job.data, a, 2, &na), *ca = exec_data(checked.data, a, 2, &nc);
    check(da && ca && na == nc && na > 0 && !memcmp(da, ca, (size_t)na * sizeof *da),
          "none: the inputs are the checked run's, bit for bit");
    check(exec_data(job.data, y, 0, NULL) == NULL, "none: the program is not run");
    check(job.v[0].ncheck == 3 && job.v[0].check[0].ref == NULL && job.v[0].check[0].output == 0 &&
          job.v[0].check[2].input == 3, "none: the values are kept, with no reference");
    check(job.v[0].check[0].replicated && job.v[0].check[1].replicated,
          "none: Replicated values still compared across ranks");
    cuda_job_free(&job);
    cuda_job_free(&checked);
    /* a product too large for the CPU reference, from inputs that fit */
    coco_program *big = load("Size M = 1048576;\n"
                             "Tensor x(FP32, [M,1], Replicated, WORLD);\n"
                             "Tensor w(FP32, [1,M], Replicated, WORLD);\n"
                             "Var y = Norm(MatMul(x, w));\n"
                             "Execute t({x,w}, {y});\n", 4);
    check(big != NULL, "the large program loads");
    if (!big)
        return;
    Program *bv[1] = {big};
    o.reference = COCO_REFERENCE_PROGRAM;
    check(cuda_job_prepare(&job, bv, 1, &o, err, sizeof err) == -1 && strstr(err, "the run needs"),
          "a reference that cannot be held is refused");
    o.reference = COCO_REFERENCE_NONE;
    check(cuda_job_prepare(&job, bv, 1, &o, err, sizeof err) == 0,
          "none: only the inputs and the host copies need to fit");
    cuda_job_free(&job);
    coco_program_free(big);
    coco_program *huge = load("Size M = 1099511627776;\n"
                              "Tensor x(FP32, [M], Replicated, WORLD);\n"
                              "Execute t({x}, {x});\n", 4);
    Program *hv[1] = {huge};
    check(huge && cuda_job_prepare(&job, hv, 1, &o, err, sizeof err) == -1 &&
              strstr(err, "--reference none: the inputs drawn on 4 ranks need 3.28e+04 GiB"),
          "none: inputs too large for the host are refused");
    coco_program_free(huge);
}

static void test_job(void)
{
    coco_program *p = load("Size M = 8, K = 64, N = 4;\n"
                           "Tensor a(FP32, [M,K], Sliced(1), WORLD, RANK);\n"
                           "Tensor b(FP32, [K,N], Sliced(0), WORLD, RANK);\n"
                           "Tensor c(FP32, [M,N], Replicated, WORLD);\n"
                           "Tensor s(FP32, [M,N], Replicated, WORLD);\n"
                           "Var y = AllReduce(\"+\", MatMul(a, b));\n"
                           "Var z = c * 2;\n"
                           "Var s_ = Update(s, s + z);\n"
                           "Execute t({a,b,c,s}, {y, z});\n"
                           "Schedule sp { split(y, ARSplitRSAG); }\n", 4);
    check(p != NULL, "the program loads");
    if (!p) {
        group_end("job");
        return;
    }
    char err[1024];
    coco_program *sp = coco_schedule(p, "sp", err, sizeof err);
    check(sp != NULL, "the schedule applies");
    Program *v[2] = {p, sp};
    coco_cuda_options o = {.seed = 1, .threads = 1, .iters = 5, .timeout_s = 10};
    CudaJob job;
    check(cuda_job_prepare(&job, v, sp ? 2 : 1, &o, err, sizeof err) == 0, "prepare");
    check(job.nv == 2 && !strcmp(job.v[0].name, "program") && !strcmp(job.v[1].name, "sp"),
          "variant names");
    check(job.v[0].ncheck == 3, "checks: two outputs and one new value");
    CudaCheck *y = &job.v[0].check[0], *z = &job.v[0].check[1], *s = &job.v[0].check[2];
    check(y->output == 0 && z->output == 1 && s->output == -1 && s->input == 3,
          "where each checked value is found");
    check(!strcmp(s->name, "s"), "the new value is named by its tensor");
    check(y->tol.slack > 0 && y->tol.slack <= 16 * ldexp(1, -24) * y->tol.scale * 1.0001,
          "MatMul slack: K/P = 16 products in FP32");
    check(z->tol.slack == 0 && s->tol.slack == 0, "no slack without a contraction");
    check(y->replicated && z->replicated, "Replicated values are checked across ranks");
    check(job.v[1].own != NULL && job.v[1].own != job.data, "each variant's own CPU run");
    check(job.v[1].check[0].ref == job.v[1].own, "checked against its own run");
    cuda_job_free(&job);
    o.reference = COCO_REFERENCE_PROGRAM;
    check(cuda_job_prepare(&job, v, sp ? 2 : 1, &o, err, sizeof err) == 0, "prepare (program)");
    check(job.v[1].own == NULL && job.v[1].check[0].ref == job.data &&
          job.v[1].check[0].rnode == p->exec_out[0], "checked against the program's run");
    cuda_job_free(&job);
    size_t n;
    char *src = cuda_source(v, sp ? 2 : 1, NULL, &n, err, sizeof err);
    check(src && !strncmp(src, "#define COCO_ONLY_P 4 ", 22) && strstr(src, "coco_run__sp("),
          "the runtime's source: kernel instances for the program's 4 ranks alone");
    free(src);
    test_job_unchecked(v, sp ? 2 : 1);
    coco_program_free(sp);
    coco_program_free(p);
    /* one rank: the same program, its source built for one rank */
    coco_program *one = load("Size N = 64;\n"
                             "Tensor g(FP32, [N], Local, WORLD, RANK);\n"
                             "Tensor w(FP32, [N], Replicated, WORLD);\n"
                             "Var s = AllReduce(\"+\", g);\n"
                             "Var w_ = Update(w, w - s * 0.5);\n"
                             "Execute step({g, w}, {w_});\n"
                             "Schedule fused { (rs, ag) = split(s, ARSplitRSAG);\n"
                             "  f = fuse(rs, ag, AllReduceFuse); }\n", 1);
    check(one != NULL, "a program on one rank loads");
    coco_program *fused = one ? coco_schedule(one, "fused", err, sizeof err) : NULL;
    check(fused != NULL, "its fused schedule applies on one rank");
    if (fused) {
        Program *v1[2] = {one, fused};
        check(cuda_job_prepare(&job, v1, 2, &o, err, sizeof err) == 0, "prepare (one rank)");
        cuda_job_free(&job);
        src = cuda_source(v1, 2, NULL, &n, err, sizeof err);
        check(src && !strncmp(src, "#define COCO_ONLY_P 1 ", 22),
              "the runtime's source for one rank: its kernel instances alone");
        check(src && strstr(src, "(G_WORLD == 1 || G_WORLD == 2 || G_WORLD == 4 || G_WORLD == 8)") &&
                  strstr(src, "#if COCO_HAS_P(1)\n    if (FORM && V == 4 && P == 1 && ck.count == 1 && "
                              "!ck.flag) {\n") &&
                  strstr(src, "    } else\n    if (V == 4 && P == 1) {\n"),
              "one rank: the fused collective's kernel has an instance for it, and an elementwise "
              "form");
        free(src);
    }
    coco_program_free(fused);
    coco_program_free(one);
    group_end("job");
}

/* ---- the launcher end to end, with the stand-in runtime ---- */

static int coconet(char *out, size_t len, const char *mode, const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "FAKE_RT_MODE=%s COCONET_TEST_GPUS=8 ./coconet run tests/gpu/host.coco "
             "--backend cuda "
             "--cuda-source tests/gpu/host.cu --iters 3 %s", mode, extra);
    char *argv[] = {"sh", "-c", cmd, NULL};
    return run_capture(argv, NULL, out, len, 120);
}

/* --reference none: times and the GPU-side checks, no value compared */
static void test_launch_unchecked(char *out, size_t len)
{
    int rc = coconet(out, len, "ok", "--ranks 3 --reference none");
    check(rc == 0, "none: every rank ran every variant: exit status 0");
    check(strstr(out, "\ncpu reference: not computed (--reference none): no value below is "
                      "checked") && !strstr(out, "fnv-1a (cpu)"),
          "none: a line says so where the outputs' summary was");
    check(strstr(out, "\nprogram                  unchecked           -            -   ") &&
              strstr(out, "\nfused                    unchecked ") && !strstr(out, "bitwise"),
          "none: the rows say unchecked, with no differences");
    check(strstr(out, " 0.003 ms") != NULL, "none: the slowest rank's time");
    check(strstr(out, "checked run's in 2 of 2 variants, on every rank\n") != NULL,
          "none: the runtime's own checks are still made");
    if (rc)
        printf("%s\n", out);
    rc = coconet(out, len, "wrong", "--ranks 2 --reference none");
    check(rc == 1 && strstr(out, "\nprogram                  REPLICAS ") &&
              strstr(out, "program: the Replicated value 'y' has other bits on rank 1 than on "
                          "rank 0"), "none: ranks that disagree on a Replicated value: REPLICAS");
    rc = coconet(out, len, "guard", "--ranks 2 --reference none --schedule fused");
    check(rc == 1 && strstr(out, "\nfused                    GUARD ") &&
              strstr(out, "rank 1: fused: output 'y' (4000 bytes) was written outside"),
          "none: a guard byte written: GUARD");
    rc = coconet(out, len, "repeat", "--ranks 2 --reference none");
    check(rc == 1 && strstr(out, "\nprogram                  REPEAT "), "none: REPEAT");
    rc = coconet(out, len, "crash", "--ranks 2 --reference none");
    check(rc == 1 && strstr(out, "\nprogram                  FAILED "), "none: a rank that dies");
    rc = coconet(out, len, "ok", "--ranks 2 --reference none --backend cpu");
    check(rc == 2 && strstr(out, "--reference none goes with `run --backend cuda`, not on "
                                 "--backend cpu"), "none: refused on the cpu backend");
    rc = coconet(out, len, "ok", "--ranks 2 --reference nothing");
    check(rc == 2 && strstr(out, "--reference expects 'each', 'program' or 'none'"),
          "an unknown --reference");
}

/* How many times the stand-in runtime measured the limits so far. */
static int measured_count(const char *log)
{
    FILE *f = fopen(log, "r");
    int n = 0, c;
    if (!f)
        return 0;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* The roofline table, the limits cache and --breakdown, with the stand-in
 * runtime's fixed limits (copy 1000 GB/s, peer 100 GB/s, GEMM 10 TFLOP/s)
 * and times (rank r: 0.001 (r+1) ms a run; step i: 0.001 (i+1)(r+1) ms).
 * host.coco at N = 1000: read x, s (8000 bytes), write y, s (8000 bytes),
 * 3 FLOPs an element (x * a, + 1, s + y), no link. */
static void test_launch_roofline(char *out, size_t len, const char *cache)
{
    char log[600], cmd[1200];
    snprintf(log, sizeof log, "%s/measured", tmpdir);
    setenv("FAKE_RT_MEASURED", log, 1);
    snprintf(cmd, sizeof cmd, "rm -f %s/limits-*.txt", cache);
    char *rm[] = {"sh", "-c", cmd, NULL};
    run_capture(rm, NULL, NULL, 0, 60);
    int rc = coconet(out, len, "ok", "--ranks 2");
    check(rc == 0 && measured_count(log) == 1, "the limits are measured when not cached");
    check(strstr(out, "\nroofline                     memory       link        flops       "
                      "GB/s    TFLOP/s  bound    of-bound\n"
                      "program                       16 kB        0 B      3 kFLOP          8"
                      "     0.0015  memory      0.8 %\n") != NULL,
          "a roofline row: bytes, FLOPs, rates at the slowest rank's 0.002 ms, the bound");
    check(strstr(out, "\nlimits: device copy 1000 GB/s (read + written), peer copy 100 GB/s, "
                      "FP16 GEMM 10 TFLOP/s; measured now") != NULL, "the limits line");
    if (rc)
        printf("%s\n", out);
    rc = coconet(out, len, "ok", "--ranks 1 --schedule fused");
    check(rc == 0 && measured_count(log) == 1 && strstr(out, "; from the cache"),
          "the second run reads the cache");
    check(strstr(out, "\nfused                         16 kB        0 B      3 kFLOP         16"
                      "      0.003  memory      1.6 %\n") != NULL, "one rank: 0.001 ms");
    rc = coconet(out, len, "ok", "--ranks 1 --remeasure");
    check(rc == 0 && measured_count(log) == 2 && strstr(out, "; measured now"),
          "--remeasure measures again");
    rc = coconet(out, len, "ok", "--ranks 1 --schedule program");
    check(rc == 0 && measured_count(log) == 2, "... and the cache holds the new figures");
    setenv("COCONET_REMEASURE", "1", 1);
    rc = coconet(out, len, "ok", "--ranks 1 --schedule program");
    unsetenv("COCONET_REMEASURE");
    check(rc == 0 && measured_count(log) == 3, "COCONET_REMEASURE=1 measures again");
    rc = coconet(out, len, "ok", "--ranks 1 --iters 0 --remeasure");
    check(rc == 0 && measured_count(log) == 3 && !strstr(out, "roofline") &&
              !strstr(out, "limits:"), "--iters 0: no times, no limits, no roofline");
    rc = coconet(out, len, "ok", "--ranks 2 --breakdown");
    check(rc == 0 && strstr(out, "\nbreakdown                 line  operation              call"
                                 "                            time\n"
                                 "program                      9  computation            kernel"
                                 "                     0.0020 ms\n"
                                 "program                     10  computation            kernel"
                                 "                     0.0040 ms\n"
                                 "program                         (sum)                        "
                                 "                     0.0060 ms\n"
                                 "fused                        9  computation            kernel"
                                 "                     0.0020 ms\n"),
          "--breakdown: a row per mark of the code, the slowest rank's time, a sum a variant");
    check(strstr(out, "the median of 3 runs after the timed runs") != NULL,
          "--breakdown: as many runs as --iters");
    if (rc)
        printf("%s\n", out);
    rc = coconet(out, len, "ok", "--ranks 2");
    check(rc == 0 && !strstr(out, "breakdown"), "no --breakdown, no second table");
    rc = coconet(out, len, "ok", "--ranks 2 --backend cpu --breakdown");
    check(rc == 2 && strstr(out, "--breakdown goes with `run --backend cuda`"),
          "--breakdown on the cpu backend is refused");
    rc = coconet(out, len, "ok", "--ranks 2 --backend cpu --remeasure");
    check(rc == 2 && strstr(out, "--remeasure goes with `run --backend cuda`"),
          "--remeasure on the cpu backend is refused");
    unsetenv("FAKE_RT_MEASURED");
}

/* The fault tests' hook COCONET_TEST_DIE (include/coconet_rt.h), with the
 * stand-in runtime (which honours init, upload and timed): a rank killed at
 * each point is named with its signal as the first failure, at once; a value
 * that names no point, rank or variant of the run is refused. */
static void test_launch_die(char *out, size_t len)
{
    static const char *const points[] = {"start", "init", "upload", "timed", "timed:fused",
                                         "exit"};
    char what[256], want[128], first[64];
    for (size_t k = 0; k < sizeof points / sizeof *points; k++)
        for (int rank = 1; rank >= 0; rank--) {
            snprintf(what, sizeof what, "%d:%s", rank, points[k]);
            setenv("COCONET_TEST_DIE", what, 1);
            double t0 = now_s();
            int rc = coconet(out, len, "ok", "--ranks 3");
            snprintf(want, sizeof want, "coconet: rank %d was killed by signal 9 (Killed) ", rank);
            snprintf(first, sizeof first, "coconet: rank %d failed first", rank);
            snprintf(what, sizeof what, "COCONET_TEST_DIE=%d:%s: status 1, the rank named, first",
                     rank, points[k]);
            check(rc == 1 && strstr(out, want) && strstr(out, first), what);
            snprintf(what, sizeof what, "COCONET_TEST_DIE=%d:%s: at once", rank, points[k]);
            check(now_s() - t0 < 20, what);
        }
    setenv("COCONET_TEST_DIE", "1:timed:fused", 1);
    int rc = coconet(out, len, "ok", "--ranks 2");
    check(rc == 1 && strstr(out, "killed by signal 9 (Killed) in variant 'fused'") &&
              strstr(out, "\nprogram                  bitwise "),
          "COCONET_TEST_DIE with a variant: the variants before it pass");
    static const char *const bad[][2] = {
        {"1:bogus", "expected RANK:POINT or RANK:POINT:VARIANT, with POINT start, init, upload, "
                    "timed or exit"},
        {"x:start", "expected RANK:POINT"},
        {"2:start", "rank 2 is not one of the 2 ranks of this run"},
        {"1:start:fused", "(a VARIANT only after upload or timed)"},
        {"1:timed:", "expected RANK:POINT"},
        {"1:timed:nope", "no variant 'nope' in this run"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        setenv("COCONET_TEST_DIE", bad[k][0], 1);
        rc = coconet(out, len, "ok", "--ranks 2");
        snprintf(what, sizeof what, "COCONET_TEST_DIE=%s is refused", bad[k][0]);
        check(rc == 1 && strstr(out, bad[k][1]) && !strstr(out, "\nprogram "), what);
    }
    unsetenv("COCONET_TEST_DIE");
}

/* A run too large for the host is refused before any build, with or
 * without a reference. */
static void test_launch_too_large(char *out, size_t len)
{
    int rc = coconet(out, len, "ok", "--ranks 2 -D N=68719476736");
    check(rc == 1 && strstr(out, "GiB at its peak") && !strstr(out, "cuda: "),
          "too large for the host: refused before the build");
    rc = coconet(out, len, "ok", "--ranks 2 -D N=68719476736 --reference none");
    check(rc == 1 && strstr(out, "--reference none: the inputs drawn on 2 ranks need") &&
              !strstr(out, "cuda: "),
          "too large for the host, --reference none: refused before the build");
}

/* The job of tests/gpu/host.coco's two variants at 2 ranks over the cached
 * build of tests/gpu/host.cu (the stand-in runtime's code); -1 after a
 * failed check named with `what` */
typedef struct {
    Program *p, **v;
    int nv;
    CudaJob job;
} HostJob;

static int host_job(HostJob *h, const char *what)
{
    char err[4096], msg[128];
    coco_config cfg = {NULL, 0, 2, 0};
    memset(h, 0, sizeof *h);
    h->p = coco_load_file("tests/gpu/host.coco", &cfg, err, sizeof err);
    h->v = h->p ? cuda_variants(h->p, NULL, &h->nv, err, sizeof err) : NULL;
    CudaBuild b;
    size_t n;
    char *src = cuda_source(NULL, 0, "tests/gpu/host.cu", &n, err, sizeof err);
    int built = h->v && h->nv == 2 && src && !cuda_build_setup(&b, 60, err, sizeof err) &&
                !cuda_build(&b, src, n, err, sizeof err);
    free(src);
    snprintf(msg, sizeof msg, "%s: the host code is in the cache", what);
    check(built && b.cached, msg);
    coco_cuda_options o = {.seed = 1, .threads = 1, .iters = 3, .timeout_s = 30};
    if (!built || cuda_job_prepare(&h->job, h->v, h->nv, &o, err, sizeof err)) {
        printf("  %s: %s\n", what, err);
        snprintf(msg, sizeof msg, "%s: the job is prepared", what);
        check(0, msg);
        return -1;
    }
    snprintf(h->job.so, sizeof h->job.so, "%s", b.so);
    cuda_runtime_path(b.home, h->job.runtime, sizeof h->job.runtime);
    return 0;
}

static void host_job_free(HostJob *h)
{
    cuda_job_free(&h->job);
    for (int i = 1; i < h->nv; i++)
        program_free(h->v[i]);
    free(h->v);
    coco_program_free(h->p);
}

/* Each variant's own knobs reach the runtime, for its runs alone: one
 * launch runs the program under two knob sets (as `coconet tune` times a
 * variant's knob sets) and the schedule with the environment's; the
 * stand-in logs what each run got (FAKE_RT_KNOBS), and the report names
 * each row as given ("program/twoshot"). The code is the cached build of
 * tests/gpu/host.cu. */
static void test_launch_knobs(void)
{
    char log[600];
    HostJob h;
    if (host_job(&h, "knobs"))
        return;
    CudaJob job = h.job;
    check(job.v[0].fused_algo == -1 && job.v[0].overlap_chunks == -1 &&
              !strcmp(job.v[1].entry, "fused"),
          "knobs: a run's variants take the environment's knobs, under their own names");
    CudaVariant three[3] = {job.v[0], job.v[0], job.v[1]};
    three[0].name = "program/twoshot";
    three[0].fused_algo = 2;
    three[0].overlap_chunks = 0;
    three[1].name = "program/chunks4";
    three[1].fused_algo = 0;
    three[1].overlap_chunks = 4;
    CudaJob view = job;
    view.v = three;
    view.nv = 3;
    snprintf(log, sizeof log, "%s/knobs.log", tmpdir);
    unlink(log);
    setenv("FAKE_RT_KNOBS", log, 1);
    setenv("FAKE_RT_MODE", "ok", 1);
    Report rep;
    report_init(&rep, 2, 3);
    cuda_launch(&view, &rep);
    unsetenv("FAKE_RT_KNOBS");
    unsetenv("FAKE_RT_MODE");
    int passed = 0;
    for (int i = 0; i < 3; i++) {
        RankRow all;
        passed += report_passed(report_verdict(&view, &rep, i, &all));
    }
    check(passed == 3, "knobs: the three runs of one launch pass");
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    report_print(&view, &rep, mem);
    fclose(mem);
    check(text && strstr(text, "\nprogram/twoshot          bitwise ") &&
              strstr(text, "\nprogram/chunks4          bitwise ") &&
              strstr(text, "\nfused                    bitwise "),
          "knobs: the report names each run with its knobs");
    free(text);
    report_free(&rep);
    FILE *f = fopen(log, "r");
    char got[4096] = "";
    size_t k = f ? fread(got, 1, sizeof got - 1, f) : 0;
    got[k] = 0;
    if (f)
        fclose(f);
    for (int r = 0; r < 2; r++) {
        char want[3][64], msg[160];
        snprintf(want[0], sizeof want[0], "rank %d program fused 2 chunks 0\n", r);
        snprintf(want[1], sizeof want[1], "rank %d program fused 0 chunks 4\n", r);
        snprintf(want[2], sizeof want[2], "rank %d fused fused -1 chunks -1\n", r);
        for (int i = 0; i < 3; i++) {
            snprintf(msg, sizeof msg, "knobs: the runtime got '%.*s'", (int)strlen(want[i]) - 1,
                     want[i]);
            check(strstr(got, want[i]) != NULL, msg);
        }
    }
    host_job_free(&h);
}

/* The pid that ran each rank's runs in the stand-in's FAKE_RT_KNOBS log
 * from byte `from` (0: none); how many runs */
static int knob_log_pids(const char *log, long from, long pid[2], long *end)
{
    FILE *f = fopen(log, "r");
    int runs = 0;
    pid[0] = pid[1] = 0;
    *end = from;
    if (!f)
        return 0;
    fseek(f, from, SEEK_SET);
    long p;
    int r;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "pid %ld rank %d", &p, &r) == 2 && r >= 0 && r < 2) {
            runs++;
            if (pid[r] && pid[r] != p)
                pid[r] = -1; /* two processes for one rank */
            else if (!pid[r])
                pid[r] = p;
        }
    *end = ftell(f);
    fclose(f);
    return runs;
}

/* The lines of the stand-in's FAKE_RT_KNOBS log from byte `from` that
 * contain `text` */
static int log_lines_with(const char *log, long from, const char *text)
{
    FILE *f = fopen(log, "r");
    int n = 0;
    char line[256];
    if (!f)
        return 0;
    fseek(f, from, SEEK_SET);
    while (fgets(line, sizeof line, f))
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

/* The tuner's ranks kept from one round to the next (cuda_ranks_start):
 * two rounds of the host code's variants with their own knobs run in the
 * same processes, and a third timed alone (time_only); stopping them ends the processes; ranks where one dies in
 * its first round stop, and say so in the next round. */
static void test_ranks_rounds(void)
{
    char log[600];
    HostJob h;
    if (host_job(&h, "rounds"))
        return;
    CudaJob job = h.job;
    snprintf(log, sizeof log, "%s/rounds.log", tmpdir);
    unlink(log);
    setenv("FAKE_RT_KNOBS", log, 1);
    setenv("FAKE_RT_MODE", "ok", 1);
    CudaRanks *r = cuda_ranks_start(&job);
    unsetenv("FAKE_RT_MODE");
    check(cuda_ranks_alive(r), "rounds: two ranks started");
    /* round 1: the program under two knob sets and the schedule */
    CudaVariant three[3] = {job.v[0], job.v[0], job.v[1]};
    three[0].name = "program/twoshot";
    three[0].fused_algo = 2;
    three[1].name = "program/chunks4";
    three[1].overlap_chunks = 4;
    int idx1[3] = {0, 0, 1}, idx2[1] = {1};
    CudaJob view = job;
    view.v = three;
    view.nv = 3;
    Report rep;
    report_init(&rep, 2, 3);
    int rc = cuda_ranks_run(r, &view, idx1, &rep);
    int passed = 0;
    for (int i = 0; i < 3; i++) {
        RankRow all;
        passed += report_passed(report_verdict(&view, &rep, i, &all));
    }
    check(rc == 0 && passed == 3 && cuda_ranks_alive(r), "rounds: the first round's three pass");
    check(strstr(rep.gpu, "stand-in") != NULL, "rounds: the first round has the GPU line");
    report_free(&rep);
    long pid1[2], pid2[2], at;
    int runs1 = knob_log_pids(log, 0, pid1, &at);
    /* round 2: the schedule alone, its knobs as given */
    CudaVariant one[1] = {job.v[1]};
    one[0].name = "fused/push";
    one[0].fused_algo = 4;
    view.v = one;
    view.nv = 1;
    report_init(&rep, 2, 1);
    rc = cuda_ranks_run(r, &view, idx2, &rep);
    RankRow all;
    check(rc == 0 && report_passed(report_verdict(&view, &rep, 0, &all)) &&
              strstr(rep.gpu, "stand-in") != NULL && rep.limits.known &&
              rep.limits.copy_gbs == 1000,
          "rounds: the second round passes, the GPU line and rank 0's limits kept");
    report_free(&rep);
    int runs2 = knob_log_pids(log, at, pid2, &at);
    check(runs1 == 6 && runs2 == 2, "rounds: each round ran its variants on both ranks");
    check(log_lines_with(log, 0, " host_alloc ") > 0,
          "rounds: the ranks' result buffers come from the runtime's host_alloc");
    /* round 3: the same, timed alone (a "TIME" round: tune's confirmation) */
    long from = at, pid3[2];
    view.time_only = 1;
    view.unchecked = 1;
    report_init(&rep, 2, 1);
    rc = cuda_ranks_run(r, &view, idx2, &rep);
    check(rc == 0 && !strcmp(report_verdict(&view, &rep, 0, &all), "unchecked") &&
              rep.rows[0].elements == 0 && rep.rows[1].elements == 0,
          "rounds: a round timed alone passes, no value checked on either rank");
    report_free(&rep);
    check(knob_log_pids(log, from, pid3, &at) == 2 && pid3[0] == pid1[0] &&
              log_lines_with(log, from, " alone") == 2,
          "rounds: timed alone on both ranks, in the same processes");
    view.time_only = 0;
    view.unchecked = job.unchecked;
    check(pid1[0] > 0 && pid1[1] > 0 && pid1[0] != pid1[1] && pid2[0] == pid1[0] &&
              pid2[1] == pid1[1],
          "rounds: both rounds ran in the same two processes");
    cuda_ranks_leave(r); /* told to exit, not waited for */
    check(!cuda_ranks_alive(r), "rounds: ranks told to leave take no more rounds");
    cuda_ranks_stop(r);
    check(kill((pid_t)pid1[0], 0) && errno == ESRCH && kill((pid_t)pid1[1], 0) && errno == ESRCH,
          "rounds: stopped, the processes are gone");
    /* rank 1 dies in the first round: both stop; the next round is refused */
    setenv("FAKE_RT_MODE", "crash", 1);
    r = cuda_ranks_start(&job);
    unsetenv("FAKE_RT_MODE");
    view.v = three;
    view.nv = 3;
    report_init(&rep, 2, 3);
    rc = cuda_ranks_run(r, &view, idx1, &rep);
    check(rc == -1 && !cuda_ranks_alive(r) && rep.error[1] &&
              strstr(rep.error[1], "rank 1 was killed by signal 11"),
          "rounds: a rank that dies ends the round and the ranks");
    report_free(&rep);
    report_init(&rep, 2, 3);
    rc = cuda_ranks_run(r, &view, idx1, &rep);
    check(rc == -1 && rep.error[0] && strstr(rep.error[0], "stopped after an earlier round"),
          "rounds: a round on stopped ranks fails, saying why");
    report_free(&rep);
    cuda_ranks_stop(r);
    unsetenv("FAKE_RT_KNOBS");
    host_job_free(&h);
}

static void test_launch(void)
{
    char cwd[1024], rt[1200], cache[512];
    if (access("build/cuda.conf", R_OK) || access("build/fake/libfake_rt.so", R_OK) ||
        !getcwd(cwd, sizeof cwd)) {
        printf("launch: skipped (no nvcc when built, or no build/fake/libfake_rt.so)\n");
        return;
    }
    snprintf(rt, sizeof rt, "%s/build/fake/libfake_rt.so", cwd);
    snprintf(cache, sizeof cache, "%s/cache", tmpdir);
    setenv("COCONET_CUDA_RUNTIME", rt, 1);
    setenv("COCONET_CACHE", cache, 1);
    setenv("COCONET_CUDA_ARCH", "sm_80", 1); /* no GPU here for -arch=native */
    setenv("COCONET_HOME", cwd, 1);
    unsetenv("COCONET_BACKEND");
    static char out[65536];
    int rc = coconet(out, sizeof out, "ok", "--ranks 3");
    check(rc == 0, "3 ranks run and pass");
    check(strstr(out, "cuda: building ") && strstr(out, "cuda: built "),
          "the first run builds, and says so before it starts");
    check(strstr(out, "3 ranks on a stand-in runtime") != NULL, "the GPU line of rank 0");
    check(strstr(out, "\nprogram                  bitwise ") && strstr(out, "\nfused "),
          "a row per variant, the program first");
    check(strstr(out, "\ngpu-checks: guard bytes intact and the repeat run bit for bit the "
                      "checked run's in 2 of 2 variants, on every rank\n") != NULL,
          "the runtime's own checks passed, said under the table");
    if (rc)
        printf("%s\n", out);
    rc = coconet(out, sizeof out, "ok", "--ranks 2 --schedule fused --reference program");
    check(rc == 0 && strstr(out, "cuda: cached ") != NULL, "the second run finds the cache");
    check(strstr(out, "checked against the program's") != NULL, "--reference program");
    rc = coconet(out, sizeof out, "ok", "--ranks 2 --schedule program");
    check(rc == 0 && strstr(out, "\nprogram                  bitwise ") && !strstr(out, "\nfused "),
          "--schedule program: the program alone");
    rc = coconet(out, sizeof out, "ok", "--ranks 1");
    check(rc == 0 && strstr(out, "1 rank on a stand-in runtime") &&
              strstr(out, "\nprogram                  bitwise ") &&
              strstr(out, "\nfused                    bitwise ") &&
              strstr(out, "checked run's in 2 of 2 variants, on every rank\n"),
          "one rank runs and passes");
    if (rc)
        printf("%s\n", out);
    setenv("FAKE_RT_RANK", "0", 1);
    rc = coconet(out, sizeof out, "wrong", "--ranks 1");
    check(rc == 1 && strstr(out, "\nprogram                  WRONG "),
          "one rank: a wrong element fails the run");
    rc = coconet(out, sizeof out, "crash", "--ranks 1");
    check(rc == 1 && strstr(out, "rank 0 was killed by signal 11") && strstr(out, "FAILED"),
          "one rank that dies");
    unsetenv("FAKE_RT_RANK");
    rc = coconet(out, sizeof out, "ok", "--ranks 1 --schedule nope");
    check(rc == 1 && strstr(out, "no schedule named 'nope'"), "an unknown schedule");
    rc = coconet(out, sizeof out, "wrong", "--ranks 2");
    check(rc == 1 && strstr(out, " WRONG ") != NULL, "a wrong element fails the run");
    rc = coconet(out, sizeof out, "guard", "--ranks 2");
    check(rc == 1 && strstr(out, "\nprogram                  GUARD ") &&
              strstr(out, "\nfused                    GUARD "), "a guard byte written: GUARD rows");
    check(strstr(out, "rank 1: program: output 'y' (4000 bytes) was written outside: the guard "
                      "after it is damaged, first at byte 3 past its end (offset 4003): ") &&
              strstr(out, "found after the checked run"), "which buffer, which side, which byte");
    check(strstr(out, "run's in 0 of 2 variants") != NULL, "no variant passed the runtime's checks");
    rc = coconet(out, sizeof out, "ok", "--ranks 2 --threads 4 -D N=3000001");
    check(rc == 0 && strstr(out, "\nfused                    bitwise             0            0 "
                                 "         0/12000004 "),
          "3 million elements: inputs converted and values checked on threads, result buffers "
          "kept for the next variant");
    rc = coconet(out, sizeof out, "wrong", "--ranks 2 --threads 4 -D N=3000001");
    check(rc == 1 && strstr(out, "\nprogram                  WRONG ") &&
              strstr(out, "\nfused                    WRONG "),
          "a wrong element among 3 million is found in each variant");
    rc = coconet(out, sizeof out, "repeat", "--ranks 3 --schedule fused");
    check(rc == 1 && strstr(out, "\nprogram                  REPEAT ") &&
              strstr(out, "rank 1: fused: output 'y': a repeat run on the same inputs gave "
                          "other bits than the checked run, first at byte 3999 (element 999)"),
          "a repeat run with other bits: REPEAT rows");
    check(!strstr(out, "rank 0: program:") && !strstr(out, "rank 2: program:"),
          "only the rank that differs is named");
    rc = coconet(out, sizeof out, "crash", "--ranks 3");
    check(rc == 1 && strstr(out, "rank 1 was killed by signal 11") != NULL, "a rank that dies");
    check(strstr(out, "FAILED") != NULL, "its rows say FAILED");
    rc = coconet(out, sizeof out, "error", "--ranks 2");
    check(rc == 1 && strstr(out, "rank 1: fake failure in program"), "a rank's own error");
    double t0 = now_s();
    rc = coconet(out, sizeof out, "hang", "--ranks 2 --timeout 1");
    check(rc == 1 && strstr(out, "rank 1 said nothing for ") &&
              strstr(out, " s, in variant 'program': stopped"),
          "a rank that hangs is stopped, and where it was is said");
    check(now_s() - t0 < 30, "within the time limit");
    t0 = now_s();
    rc = coconet(out, sizeof out, "hang", "--ranks 3 --timeout 100 & pid=$!; sleep 2; "
                 "kill -TERM $pid; wait $pid");
    check(rc == 1 && strstr(out, "rank 1 stopped in variant 'program': coconet received signal "
                                 "15 (Terminated)") &&
              strstr(out, "\nprogram                  FAILED "),
          "SIGTERM to coconet: the ranks stopped, where each was said, the table printed");
    check(!strstr(out, "rank 0 stopped") || strstr(out, "rank 0 stopped in variant"),
          "each rank's place is its own");
    check(now_s() - t0 < 30, "at once, not after the time limit");
    rc = coconet(out, sizeof out, "abi", "--ranks 2");
    check(rc == 1 && strstr(out, "not a coconet CUDA runtime of this version"), "ABI mismatch");
    test_launch_knobs();
    test_ranks_rounds();
    test_launch_unchecked(out, sizeof out);
    test_launch_die(out, sizeof out);
    test_launch_too_large(out, sizeof out);
    test_launch_roofline(out, sizeof out, cache);
    setenv("COCONET_CUDA_RUNTIME", "/nonexistent/libcoconet_cuda.so", 1);
    rc = coconet(out, sizeof out, "ok", "--ranks 2");
    check(rc == 1 && strstr(out, "is not built"), "no runtime: --backend cuda refuses");
    group_end("launch");
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/coconet-cuda-test.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_fnv();
    test_nvcc_argv();
    test_cache_key();
    test_toolchain_files();
    test_run_capture();
    test_report_lines();
    test_report_steps();
    test_job();
    test_launch();
    char *rm[] = {"rm", "-rf", tmpdir, NULL};
    run_capture(rm, NULL, NULL, 0, 60);
    return total_fail ? 1 : 0;
}

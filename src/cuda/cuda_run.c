/* cuda_run.c: `coconet run --backend cuda` (coco_run_cuda) and what it
 * asks first, without CUDA in this process: whether the machine can run P
 * ranks (the runtime built, GPUs seen through the driver's files), the
 * variants (the program and its schedules: cuda_variants, and the
 * enumerated ones: cuda_all_variants), their CUDA source (emit_cuda, or a
 * file given with --cuda-source) built with nvcc into the cache
 * (cuda_build.c), the CPU references (cuda_job.c; none with --reference
 * none: the inputs alone), then the ranks (cuda_launch.c, or cuda_mpi.c
 * under mpirun) and the table (cuda_report.c). */
#define _DEFAULT_SOURCE
#include "cuda/cuda.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coconet_rt.h"

/* ---- GPUs, seen without CUDA ---- */

static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && !strncmp(e->d_name, prefix, strlen(prefix)) &&
            (!*prefix || (e->d_name[strlen(prefix)] >= '0' && e->d_name[strlen(prefix)] <= '9')))
            n++;
    closedir(d);
    return n;
}

int cuda_gpu_count(void)
{
    /* a test hook: the stand-in runtime's tests run where no driver is */
    const char *test = getenv("COCONET_TEST_GPUS");
    if (test && *test)
        return atoi(test);
    int n = count_entries("/proc/driver/nvidia/gpus", "");
    if (n < 0) {
        n = count_entries("/dev", "nvidia");
        if (n <= 0)
            return -1;
    }
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis) {
        int listed = *vis ? 1 : 0;
        for (const char *s = vis; *s; s++)
            listed += *s == ',';
        if (listed < n)
            n = listed;
    }
    return n;
}

int coco_cuda_usable(int nranks, char *why, size_t len)
{
    char rt[CUDA_PATH_MAX + 64];
    const char *home = coco_home();
    if (!home) {
        snprintf(why, len, "the coconet directory (with include/coconet_cuda.h) is not found: "
                 "set COCONET_HOME");
        return 0;
    }
    cuda_runtime_path(home, rt, sizeof rt);
    if (access(rt, R_OK)) {
        snprintf(why, len, "the CUDA runtime %s is not built (make, with nvcc)", rt);
        return 0;
    }
    int gpus = cuda_gpu_count();
    if (gpus < 0) {
        snprintf(why, len, "the NVIDIA driver shows no GPUs (no /proc/driver/nvidia/gpus, "
                 "no /dev/nvidiaN)");
        return -1;
    }
    if (gpus < nranks) {
        snprintf(why, len, "%d rank%s need%s %d GPU%s, this machine shows %d", nranks,
                 nranks == 1 ? "" : "s", nranks == 1 ? "s" : "", nranks, nranks == 1 ? "" : "s",
                 gpus < 0 ? 0 : gpus);
        return 0;
    }
    return 1;
}

/* ---- the public entry points ---- */

Program **cuda_variants(Program *p, const char *only, int *nv, char *err, size_t errlen)
{
    Program **v = xcalloc((size_t)p->nsched + 1, sizeof *v);
    v[0] = p;
    *nv = 1;
    if (only && !strcmp(only, "program"))
        return v; /* the program alone, as on the cpu backend */
    for (int i = 0; i < p->nsched; i++) {
        const char *name = p->sched[i].name;
        if (only && strcmp(only, name))
            continue;
        if (!strcmp(name, "program")) {
            snprintf(err, errlen, "%s: error: a schedule may not be named 'program' on the "
                     "cuda backend (the program's own entry point has that name)\n", p->file);
        } else if ((v[*nv] = coco_schedule(p, name, err, errlen))) {
            ++*nv;
            continue;
        }
        for (int k = 1; k < *nv; k++)
            program_free(v[k]);
        free(v);
        return NULL;
    }
    if (only && *nv == 1) {
        schedule_unknown(p, only, err, errlen);
        free(v);
        return NULL;
    }
    return v;
}

Program **cuda_all_variants(Program *p, int *nv, char *err, size_t errlen)
{
    int enumerated = 0;
    for (int i = 0; i < p->nsched && !enumerated; i++)
        enumerated = p->sched[i].generated;
    if (!enumerated)
        enumerate_schedules(p);
    return cuda_variants(p, NULL, nv, err, errlen);
}

/* COCONET_TEST_DIE (the fault tests' hook, include/coconet_rt.h), when set:
 * it must parse and name a rank and (if any) a variant of this run. */
static int check_test_die(Program **v, int nv, char *err, size_t errlen)
{
    const char *s = getenv("COCONET_TEST_DIE"), *point, *variant;
    int rank;
    if (!s || !*s)
        return 0;
    if (coco_test_die_parse(s, &rank, &point, &variant)) {
        snprintf(err, errlen, "coconet: COCONET_TEST_DIE=%s: expected RANK:POINT or "
                 "RANK:POINT:VARIANT, with POINT " COCO_TEST_DIE_POINTS " (a VARIANT only "
                 "after upload or timed)\n", s);
        return -1;
    }
    if (rank >= v[0]->nranks) {
        snprintf(err, errlen, "coconet: COCONET_TEST_DIE=%s: rank %d is not one of the %d "
                 "rank%s of this run\n", s, rank, v[0]->nranks, v[0]->nranks == 1 ? "" : "s");
        return -1;
    }
    for (int k = 0; variant && k < nv; k++)
        if (!strcmp(variant, k ? v[k]->applied : "program"))
            return 0;
    if (variant) {
        snprintf(err, errlen, "coconet: COCONET_TEST_DIE=%s: no variant '%s' in this run (the "
                 "program and the schedules chosen)\n", s, variant);
        return -1;
    }
    return 0;
}

static void free_variants(Program **v, int nv)
{
    for (int k = 1; k < nv; k++)
        program_free(v[k]);
    free(v);
}

int cuda_build_setup(CudaBuild *b, double timeout_s, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    const char *home = coco_home();
    if (!home) {
        snprintf(err, errlen, "coconet: the coconet directory (with include/coconet_cuda.h) "
                 "is not found: set COCONET_HOME\n");
        return -1;
    }
    snprintf(b->home, sizeof b->home, "%s", home);
    if (cuda_cache_dir(b->cache, sizeof b->cache)) {
        snprintf(err, errlen, "coconet: no cache directory: set COCONET_CACHE or HOME\n");
        return -1;
    }
    cuda_toolchain_defaults(&b->tool);
    char rt[CUDA_PATH_MAX + 64], conf[CUDA_PATH_MAX + 128];
    cuda_runtime_path(b->home, rt, sizeof rt);
    snprintf(conf, sizeof conf, "%s", rt);
    char *slash = strrchr(conf, '/');
    snprintf(slash ? slash + 1 : conf, sizeof conf - (size_t)(slash ? slash + 1 - conf : 0),
             "cuda.conf");
    cuda_toolchain_read(&b->tool, conf);
    b->timeout_s = timeout_s > 600 ? timeout_s : 600;
    return 0;
}

/* Builds (or finds) the shared object; under MPI the first rank of each
 * host builds while the others wait, then find it in the cache. */
static int build(const char *src, size_t n, const coco_cuda_options *o, CudaBuild *b,
                 FILE *out, char *err, size_t errlen)
{
    if (cuda_build_setup(b, o->timeout_s, err, errlen))
        return -1;
    int mpi = cuda_mpi_active(), first = !mpi || cuda_mpi_local_rank() == 0, rc = 0;
    char e[8192] = "";
    b->progress = !mpi || cuda_mpi_rank() == 0 ? out : NULL;
    if (first)
        rc = cuda_build(b, src, n, e, sizeof e);
    if (mpi && !cuda_mpi_all_ok(!rc)) {
        if (!rc)
            snprintf(e, sizeof e, "another rank could not build the CUDA code");
        rc = -1;
    }
    if (!rc && !first)
        rc = cuda_build(b, src, n, e, sizeof e);
    if (rc) {
        snprintf(err, errlen, "coconet: %s\n", e);
        return -1;
    }
    if (!mpi || cuda_mpi_rank() == 0) {
        if (b->cached)
            fprintf(out, "cuda: cached %s\n", b->so);
        else
            fprintf(out, "cuda: built %s in %.1f s\n", b->so, b->seconds);
    }
    return 0;
}

static int run_job(CudaJob *job, FILE *out)
{
    if (cuda_mpi_active())
        return cuda_mpi_run(job, out);
    Report rep;
    report_init(&rep, job->base->nranks, job->nv);
    cuda_launch(job, &rep);
    int bad = report_print(job, &rep, out);
    report_free(&rep);
    return bad;
}

int coco_run_cuda(coco_program *p, const coco_cuda_options *o, FILE *out, char *err,
                  size_t errlen)
{
    if (errlen)
        err[0] = 0;
    if (o->reference < COCO_REFERENCE_EACH || o->reference > COCO_REFERENCE_NONE) {
        snprintf(err, errlen, "coconet: coco_cuda_options.reference is %d, not a "
                 "COCO_REFERENCE_* value\n", o->reference);
        return 1;
    }
    int nv, rc = 1;
    Program **v = cuda_variants(p, o->schedule, &nv, err, errlen);
    if (!v)
        return 1;
    if (check_test_die(v, nv, err, errlen)) {
        free_variants(v, nv);
        return 1;
    }
    size_t n;
    if (!o->build_only && cuda_job_fits(v, nv, o, err, errlen)) {
        free_variants(v, nv);
        return 1;
    }
    int nall = 0;
    Program **all = o->build_all ? cuda_all_variants(p, &nall, err, errlen) : NULL;
    if (o->build_all && !all) {
        free_variants(v, nv);
        return 1;
    }
    char *src = cuda_source(all ? all : v, all ? nall : nv, o->cuda_source, &n, err, errlen);
    if (all)
        free_variants(all, nall);
    CudaBuild b;
    CudaJob job;
    coco_cuda_options mine = *o; /* under MPI, each process of a host takes its share of cores */
    mine.threads = o->threads / cuda_mpi_local_size() > 0 ? o->threads / cuda_mpi_local_size() : 1;
    int built = src && !build(src, n, o, &b, out, err, errlen);
    if (built && o->build_only) {
        rc = 0;
    } else if (built && !cuda_job_prepare(&job, v, nv, &mine, err, errlen)) {
        snprintf(job.so, sizeof job.so, "%s", b.so);
        cuda_runtime_path(b.home, job.runtime, sizeof job.runtime);
        rc = run_job(&job, out);
        cuda_job_free(&job);
    }
    free(src);
    free_variants(v, nv);
    cuda_mpi_finish();
    return rc;
}

/* build_parts.c: a generated source's variants compiled apart, in parallel.
 *
 * nvcc compiles one translation unit on one core, and a program's source
 * holds every variant (tens of them for `coconet tune` and --all-schedules),
 * each with its own kernels: most of a first build's minutes. emit_cuda
 * marks the source's parts (CUDA_PART_VARIANT before each variant,
 * CUDA_PART_TABLES before the tables every object exports once); here the
 * variants are dealt into `jobs` files, each the prologue (the includes)
 * and its variants, the first also the tables (the others define
 * COCO_PART_NO_TABLES, which leaves out coco_lsa.cuh's exported functions),
 * compiled at once with `nvcc -c` and linked with `nvcc -shared`. The
 * headers' own kernels are static, so each part has its copy. The result
 * is the same code as the whole file's, built under the same cache key. */
#include "cuda/cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAXPARTS = 16 };

typedef struct {
    const char *at;
    size_t len;
} Span;

/* The prologue, the variants and the tables of src: the variants' count, or
 * -1 when src has no tables marker (not emit_cuda's) */
static int split(const char *src, size_t n, Span *prologue, Span **variants, Span *tables)
{
    const char *end = src + n, *p = src, *open = NULL;
    int nv = 0, cap = 0;
    Span *v = NULL;
    *prologue = (Span){src, 0};
    *tables = (Span){NULL, 0};
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        size_t len = (size_t)((eol ? eol : end) - p);
        int is_var = len == strlen(CUDA_PART_VARIANT) && !memcmp(p, CUDA_PART_VARIANT, len);
        int is_tab = len == strlen(CUDA_PART_TABLES) && !memcmp(p, CUDA_PART_TABLES, len);
        if (is_var || is_tab) {
            if (open)
                v[nv - 1].len = (size_t)(p - open);
            else
                prologue->len = (size_t)(p - src);
            open = NULL;
            if (is_tab) {
                *tables = (Span){next, (size_t)(end - next)};
                break;
            }
            v = xgrow(v, nv, &cap, 16, sizeof *v);
            v[nv++] = (Span){next, 0};
            open = next;
        }
        p = next;
    }
    *variants = v;
    return tables->at ? nv : -1;
}

/* Deals the variants into nparts parts of about equal size: part[i] for
 * variant i (the largest first, each to the lightest part so far) */
static void deal(const Span *v, int nv, int nparts, int *part)
{
    size_t load[MAXPARTS] = {0};
    int *order = xcalloc((size_t)nv, sizeof *order);
    for (int i = 0; i < nv; i++)
        order[i] = i;
    for (int i = 1; i < nv; i++) /* by size, descending (insertion: a few dozen) */
        for (int k = i; k > 0 && v[order[k]].len > v[order[k - 1]].len; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    for (int i = 0; i < nv; i++) {
        int best = 0;
        for (int q = 1; q < nparts; q++)
            if (load[q] < load[best])
                best = q;
        part[order[i]] = best;
        load[best] += v[order[i]].len;
    }
    free(order);
}

static int write_part(const char *path, int q, const Span *prologue, const Span *v, int nv,
                      const int *part, const Span *tables, char *err, size_t errlen)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        pathf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    if (q > 0)
        fputs("#define COCO_PART_NO_TABLES /* the tables are the first part's */\n", f);
    fwrite(prologue->at, 1, prologue->len, f);
    for (int i = 0; i < nv; i++)
        if (part[i] == q)
            fwrite(v[i].at, 1, v[i].len, f);
    if (q == 0)
        fwrite(tables->at, 1, tables->len, f);
    if (fclose(f)) {
        pathf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- a machine-wide limit on nvcc processes ----
 * One of as many lock files as cores, under the cache directory: a build
 * holds one for each nvcc it runs (flock: released when closed, or when the
 * holder dies), so builds started at once (the GPU tests, `coconet tune`
 * beside the PyTorch ranks) share the cores instead of multiplying their
 * processes (and nvcc's memory). */
int cuda_nvcc_slot(const char *cache, double timeout_s)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores < 1 ? 1 : cores > 256 ? 256 : (int)cores;
    char dir[CUDA_PATH_MAX + 16], path[CUDA_PATH_MAX + 48];
    pathf(dir, sizeof dir, "%s/nvcc-slots", cache);
    mkdir(dir, 0777);
    double deadline = cuda_now_s() + timeout_s;
    for (;;) {
        for (int k = 0; k < n; k++) {
            pathf(path, sizeof path, "%s/%d", dir, k);
            int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
            if (fd < 0)
                return -1; /* no lock files: no limit */
            if (!flock(fd, LOCK_EX | LOCK_NB))
                return fd;
            close(fd);
        }
        if (cuda_now_s() > deadline)
            return -1;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Runs the n commands, each once it has an nvcc slot (cuda_nvcc_slot),
 * until each ends or the time limit: the first that failed (its index;
 * *status its exit status, or -2 timed out), or -1 when all succeeded. A
 * failure stops the others. */
static int run_all(const CudaBuild *b, Argv *cmd, int n, char (*log)[CUDA_PATH_MAX + 64],
                   int *status)
{
    pid_t pid[MAXPARTS];
    int slot[MAXPARTS], started = 0, running = 0, failed = -1;
    double deadline = cuda_now_s() + b->timeout_s;
    while ((started < n && failed < 0) || running > 0) {
        int late = cuda_now_s() > deadline;
        if (started < n && failed < 0 && !late) {
            /* while none runs, wait for a slot (and start anyway after the
             * build's time: no starving) */
            int fd = cuda_nvcc_slot(b->cache, running ? 0 : deadline - cuda_now_s());
            if (fd >= 0 || !running) {
                slot[started] = fd;
                pid[started] = cuda_spawn(cmd[started].argv, log[started], NULL);
                if (pid[started] < 0) {
                    if (fd >= 0)
                        close(fd);
                    failed = started;
                    *status = -1;
                } else {
                    started++;
                    running++;
                }
            }
        }
        for (int i = 0; i < started; i++) {
            int st;
            if (pid[i] <= 0 || waitpid(pid[i], &st, WNOHANG) != pid[i])
                continue;
            pid[i] = 0;
            running--;
            if (slot[i] >= 0)
                close(slot[i]);
            int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (rc && failed < 0) {
                failed = i;
                *status = rc;
            }
        }
        if ((failed >= 0 || late) && running > 0) {
            for (int i = 0; i < started; i++)
                if (pid[i] > 0) {
                    kill(-pid[i], SIGKILL);
                    waitpid(pid[i], NULL, 0);
                    if (slot[i] >= 0)
                        close(slot[i]);
                    pid[i] = 0;
                    if (failed < 0) {
                        failed = i;
                        *status = -2;
                    }
                }
            running = 0;
        }
        if (late && failed < 0 && started < n) {
            failed = started;
            *status = -2;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return failed;
}

static void remove_parts(char (*file)[CUDA_PATH_MAX + 64], int n)
{
    for (int i = 0; i < n; i++)
        unlink(file[i]);
}

int cuda_build_parts(const CudaBuild *b, const char *src, size_t n, const char *so_tmp,
                     const char *log_base, int jobs, char *err, size_t errlen)
{
    Span prologue, tables, *v;
    int nv = split(src, n, &prologue, &v, &tables);
    int nparts = jobs < nv ? jobs : nv;
    if (nparts > MAXPARTS)
        nparts = MAXPARTS;
    if (nparts < 2) {
        free(v);
        return 1;
    }
    int *part = xcalloc((size_t)nv, sizeof *part);
    deal(v, nv, nparts, part);
    char cu[MAXPARTS][CUDA_PATH_MAX + 64], obj[MAXPARTS][CUDA_PATH_MAX + 64];
    char log[MAXPARTS + 1][CUDA_PATH_MAX + 64];
    static Argv cmd[MAXPARTS + 1]; /* 16 kB each: not on the stack */
    char *objs[MAXPARTS];
    int rc = 0;
    for (int q = 0; q < nparts && !rc; q++) {
        pathf(cu[q], sizeof cu[q], "%s.part%d.cu", so_tmp, q);
        pathf(obj[q], sizeof obj[q], "%s.part%d.o", so_tmp, q);
        pathf(log[q], sizeof log[q], "%s.%d", log_base, q);
        objs[q] = obj[q];
        rc = write_part(cu[q], q, &prologue, v, nv, part, &tables, err, errlen);
        cuda_nvcc_compile_argv(&b->tool, b->home, cu[q], obj[q], &cmd[q]);
    }
    free(part);
    free(v);
    int status = 0, bad = rc ? -1 : run_all(b, cmd, nparts, log, &status);
    if (!rc && bad >= 0) {
        char tail[2048];
        FILE *f = fopen(log[bad], "rb");
        size_t got = f ? fread(tail, 1, sizeof tail - 1, f) : 0;
        tail[got] = 0;
        if (f)
            fclose(f);
        pathf(err, errlen, "nvcc %s building part %d of %d (%s; log: %s):\n%s",
              status == -2 ? "timed out" : status == 127 ? "could not be run" : "failed", bad,
              nparts, cu[bad], log[bad], tail);
        rc = -1;
    }
    if (!rc) {
        pathf(log[nparts], sizeof log[nparts], "%s.link", log_base);
        cuda_nvcc_link_argv(&b->tool, objs, nparts, so_tmp, &cmd[nparts]);
        int link = run_capture(cmd[nparts].argv, log[nparts], NULL, 0, b->timeout_s);
        if (link) {
            pathf(err, errlen, "nvcc %s linking %d parts into %s (log: %s)",
                  link == -2 ? "timed out" : "failed", nparts, so_tmp, log[nparts]);
            rc = -1;
        } else {
            unlink(log[nparts]);
        }
    }
    remove_parts(obj, nparts);
    if (!rc) { /* kept on a failure, beside their logs */
        remove_parts(cu, nparts);
        remove_parts(log, nparts);
    }
    return rc;
}

/* nvcc.c: the nvcc commands that build generated code (a whole source, or
 * a part of it and the link of the parts) and running a tool with a time
 * limit, its output to a log or a buffer. No CUDA here. */
#include "cuda/cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* snprintf for paths and messages built from paths (a path too long to fit
 * is cut, and then simply not found) */
void pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* ---- the nvcc command ---- */

void argv_add(Argv *a, const char *fmt, ...)
{
    ASSERT(a->argc + 1 < (int)(sizeof a->argv / sizeof *a->argv));
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(a->buf + a->used, sizeof a->buf - a->used, fmt, ap);
    va_end(ap);
    ASSERT(n >= 0 && a->used + (size_t)n + 1 < sizeof a->buf);
    a->argv[a->argc++] = a->buf + a->used;
    a->argv[a->argc] = NULL;
    a->used += (size_t)n + 1;
}

/* The seconds a kernel waits for a peer at a barrier before it traps
 * (COCO_PEER_WAIT_S, rt/kernels/coco_lsa.cuh): COCONET_TIMEOUT + 30, so
 * that the host's watchdog, which names the rank, reports first; 0 where
 * COCONET_TIMEOUT is unset or not a positive number (the header's default,
 * for the default timeout). Part of the build's command, so of its cache key. */
static long peer_wait_s(void)
{
    const char *env = getenv("COCONET_TIMEOUT");
    char *end;
    double t = env && *env ? strtod(env, &end) : 0;
    if (!env || !*env || *end || !(t > 0) || t > 1e7)
        return 0;
    return (long)ceil(t) + 30;
}

/* nvcc, then the options every compilation of generated code takes up to
 * the architecture and the include paths (mode: "-shared" or "-c"). The NCCL
 * include directory is named only when it is not one the compiler searches
 * anyway (-I/usr/include would break libstdc++'s #include_next). */
static void nvcc_compile_flags(const CudaToolchain *t, const char *home, const char *mode,
                               Argv *a)
{
    memset(a, 0, sizeof *a);
    argv_add(a, "%s", t->nvcc);
    argv_add(a, "-O3");
    argv_add(a, "%s", mode);
    argv_add(a, "-Xcompiler");
    argv_add(a, "-fPIC");
    argv_add(a, "-arch=%s", t->arch);
    argv_add(a, "-std=c++17");
    argv_add(a, "-I%s/include", home);
    argv_add(a, "-I%s/rt/kernels", home);
    long wait = peer_wait_s();
    if (wait > 0)
        argv_add(a, "-DCOCO_PEER_WAIT_S=%ld", wait);
    if (t->nccl_include[0] && strcmp(t->nccl_include, "/usr/include") &&
        strcmp(t->nccl_include, "/usr/local/include"))
        argv_add(a, "-I%s", t->nccl_include);
}

/* the libraries a shared object of generated code links, with their rpaths */
static void nvcc_link_libs(const CudaToolchain *t, Argv *a)
{
    const char *libs[2] = {t->nccl_lib, t->cuda_lib};
    for (int i = 0; i < 2; i++) {
        if (!libs[i][0] || (i == 1 && !strcmp(libs[1], libs[0])))
            continue;
        argv_add(a, "-L%s", libs[i]);
        argv_add(a, "-Xlinker");
        argv_add(a, "-rpath=%s", libs[i]);
    }
    argv_add(a, "%s", t->nccl_link);
    argv_add(a, "-lcublasLt");
    argv_add(a, "-lcudart");
}

/* nvcc -O3 -shared -Xcompiler -fPIC -arch=ARCH -std=c++17 -I... -o OUT SRC
 *      -L... -Xlinker -rpath=... NCCL -lcublasLt -lcudart */
void cuda_nvcc_argv(const CudaToolchain *t, const char *home, const char *src, const char *out,
                    Argv *a)
{
    nvcc_compile_flags(t, home, "-shared", a);
    argv_add(a, "-o");
    argv_add(a, "%s", out);
    argv_add(a, "%s", src);
    nvcc_link_libs(t, a);
}

void cuda_nvcc_compile_argv(const CudaToolchain *t, const char *home, const char *src,
                            const char *obj, Argv *a)
{
    nvcc_compile_flags(t, home, "-c", a);
    argv_add(a, "-o");
    argv_add(a, "%s", obj);
    argv_add(a, "%s", src);
}

void cuda_nvcc_link_argv(const CudaToolchain *t, char *const *objs, int n, const char *out,
                         Argv *a)
{
    memset(a, 0, sizeof *a);
    argv_add(a, "%s", t->nvcc);
    argv_add(a, "-shared");
    argv_add(a, "-arch=%s", t->arch);
    argv_add(a, "-o");
    argv_add(a, "%s", out);
    for (int i = 0; i < n; i++)
        argv_add(a, "%s", objs[i]);
    nvcc_link_libs(t, a);
}

/* ---- running a tool with a time limit ---- */

/* seconds of CLOCK_MONOTONIC */
double cuda_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads fd until EOF into out (truncated to len), or until the deadline. */
static int drain(int fd, char *out, size_t len, double deadline)
{
    size_t used = 0;
    char chunk[4096];
    for (;;) {
        double left = deadline - cuda_now_s();
        if (left <= 0)
            return -1;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t k = (size_t)n < len - 1 - used ? (size_t)n : len - 1 - used;
        memcpy(out + used, chunk, k);
        used += k;
    }
    out[used] = 0;
    return 0;
}

pid_t cuda_spawn(char *const argv[], const char *log_path, const int pipe_fds[2])
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0); /* its own process group: a time-out stops its helpers too */
    int logfd = log_path ? open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0666) : -1;
    int to = logfd >= 0 ? logfd : pipe_fds ? pipe_fds[1] : -1;
    if (to >= 0) {
        dup2(to, 1);
        dup2(to, 2);
    }
    if (pipe_fds) {
        close(pipe_fds[0]);
        close(pipe_fds[1]);
    }
    if (logfd >= 0)
        close(logfd);
    execvp(argv[0], argv);
    dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

int run_capture(char *const argv[], const char *log_path, char *out, size_t len, double timeout_s)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    pid_t pid = cuda_spawn(argv, log_path, fds);
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    close(fds[1]);
    char none[1];
    int timed_out = drain(fds[0], out ? out : none, out ? len : 1, cuda_now_s() + timeout_s);
    close(fds[0]);
    int status = 0;
    double deadline = cuda_now_s() + (timed_out ? 0 : timeout_s);
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (cuda_now_s() > deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -2;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (timed_out)
        return -2;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* cuda_build.c: the CUDA backend's toolchain and build cache (no CUDA here:
 * this file only runs programs such as nvcc in child processes).
 *
 * Where things are: the coconet home (coco_home(): include/ and
 * rt/kernels/, which generated code includes), the runtime
 * build/libcoconet_cuda.so (or COCONET_CUDA_RUNTIME), and the
 * toolchain the Makefile chose, written next to the runtime in cuda.conf
 * (NVCC, CUDA_LIB, NCCL_INCLUDE, NCCL_LIB, NCCL_LINK lines), so that the
 * generated code is built against the NCCL the runtime links.
 *
 * The cache: the generated source is built once into
 * CACHE/KEY.so, CACHE = $COCONET_CACHE or ${XDG_CACHE_HOME:-$HOME/.cache}/coconet,
 * KEY = 64-bit FNV-1a of the source, the ABI headers it includes, the nvcc
 * command, `nvcc --version`, the NCCL_VERSION_CODE of the nccl.h used and
 * the GPU model; built under a temporary name and renamed into place, so
 * concurrent runs never see half a file. */
#define _DEFAULT_SOURCE /* realpath */
#include "cuda/cuda.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- where things are ---- */

void cuda_runtime_path(const char *home, char *buf, size_t len)
{
    const char *env = getenv("COCONET_CUDA_RUNTIME");
    if (env && *env)
        pathf(buf, len, "%s", env);
    else
        pathf(buf, len, "%s/build/libcoconet_cuda.so", home ? home : ".");
}

int cuda_cache_dir(char *buf, size_t len)
{
    const char *c = getenv("COCONET_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (c && *c)
        pathf(buf, len, "%s", c);
    else if (x && *x)
        pathf(buf, len, "%s/coconet", x);
    else if (h && *h)
        pathf(buf, len, "%s/.cache/coconet", h);
    else
        return -1;
    return 0;
}

/* mkdir -p */
static int make_dirs(const char *path, char *err, size_t errlen)
{
    char p[4096];
    pathf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST) {
            pathf(err, errlen, "cannot create the cache directory %s: %s", p, strerror(errno));
            return -1;
        }
        if (!c)
            return 0;
        *s = c;
    }
}

/* ---- the toolchain ---- */

static void set(char *dst, const char *src)
{
    pathf(dst, CUDA_PATH_MAX, "%s", src);
}

static int has_nccl_lib(const char *dir)
{
    char p[CUDA_PATH_MAX + 32];
    pathf(p, sizeof p, "%s/libnccl.so", dir);
    if (is_file(p))
        return 1;
    pathf(p, sizeof p, "%s/libnccl.so.2", dir);
    return is_file(p) ? 2 : 0;
}

/* NCCL: $NCCL_HOME, else the first of CUDA_HOME, /usr/local, /usr with
 * include/nccl.h (the order in which nvcc looks for the header); its
 * library in lib64, lib or lib/x86_64-linux-gnu of the same prefix. */
static void default_nccl(CudaToolchain *t, const char *cuda)
{
    const char *env = getenv("NCCL_HOME");
    const char *prefix[] = {env && *env ? env : cuda, cuda, "/usr/local", "/usr"};
    static const char *libdir[] = {"lib64", "lib", "lib/x86_64-linux-gnu"};
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++) {
        char inc[CUDA_PATH_MAX + 32];
        pathf(inc, sizeof inc, "%s/include/nccl.h", prefix[i]);
        if (!is_file(inc))
            continue;
        pathf(t->nccl_include, CUDA_PATH_MAX, "%s/include", prefix[i]);
        for (size_t k = 0; k < sizeof libdir / sizeof *libdir; k++) {
            char lib[CUDA_PATH_MAX + 32];
            pathf(lib, sizeof lib, "%s/%s", prefix[i], libdir[k]);
            int found = has_nccl_lib(lib);
            if (found) {
                set(t->nccl_lib, lib);
                set(t->nccl_link, found == 1 ? "-lnccl" : "-l:libnccl.so.2");
                return;
            }
        }
        return;
    }
}

void cuda_toolchain_defaults(CudaToolchain *t)
{
    memset(t, 0, sizeof *t);
    const char *env = getenv("CUDA_HOME");
    const char *cuda = env && *env ? env : "/usr/local/cuda";
    pathf(t->nvcc, CUDA_PATH_MAX, "%s/bin/nvcc", cuda);
    if (!is_file(t->nvcc))
        set(t->nvcc, "nvcc"); /* from PATH */
    pathf(t->cuda_lib, CUDA_PATH_MAX, "%s/lib64", cuda);
    set(t->nccl_link, "-lnccl");
    default_nccl(t, cuda);
    const char *arch = getenv("COCONET_CUDA_ARCH");
    set(t->arch, arch && *arch ? arch : "native");
}

/* Lines KEY=VALUE; unknown keys are ignored, a missing file changes nothing. */
void cuda_toolchain_read(CudaToolchain *t, const char *conf)
{
    FILE *f = fopen(conf, "r");
    if (!f)
        return;
    char line[CUDA_PATH_MAX + 64];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (!eq || !eq[1])
            continue;
        *eq = 0;
        const char *v = eq + 1;
        if (!strcmp(line, "NVCC"))
            set(t->nvcc, v);
        else if (!strcmp(line, "CUDA_LIB"))
            set(t->cuda_lib, v);
        else if (!strcmp(line, "NCCL_INCLUDE"))
            set(t->nccl_include, v);
        else if (!strcmp(line, "NCCL_LIB"))
            set(t->nccl_lib, v);
        else if (!strcmp(line, "NCCL_LINK"))
            set(t->nccl_link, v);
    }
    fclose(f);
}

int nccl_header_version(const char *include_dir)
{
    char path[CUDA_PATH_MAX + 32], line[512];
    pathf(path, sizeof path, "%s/nccl.h", include_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int code = -1;
    while (code < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, " #define NCCL_VERSION_CODE %d", &code) != 1)
            code = -1;
    fclose(f);
    return code;
}

/* ---- the cache key ---- */

/* The first "Model:" line of the driver's description of each GPU. */
static void proc_gpu_models(char *buf, size_t len)
{
    struct dirent **e;
    int n = scandir("/proc/driver/nvidia/gpus", &e, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        char path[512], line[256];
        pathf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", e[i]->d_name);
        FILE *f = e[i]->d_name[0] != '.' ? fopen(path, "r") : NULL;
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "Model:", 6) && strlen(buf) + strlen(line) < len) {
                strcat(buf, line);
                break;
            }
        if (f)
            fclose(f);
        free(e[i]);
    }
    if (n >= 0)
        free(e);
}

/* The GPU models of this machine, read without CUDA: nvidia-smi, else the
 * driver's /proc files, else "no GPU seen". Read once a process: a tune
 * asks at its start and at each build's cache key, and nvidia-smi takes a
 * noticeable part of a second on some machines. */
void cuda_gpu_model(char *buf, size_t len)
{
    static char model[1024];
    if (!model[0]) {
        char *argv[] = {"nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader",
                        NULL};
        if (run_capture(argv, NULL, model, sizeof model, 30) || !model[0]) {
            model[0] = 0;
            proc_gpu_models(model, sizeof model);
        }
        if (!model[0])
            pathf(model, sizeof model, "no GPU seen");
    }
    pathf(buf, len, "%s", model);
}

/* `NVCC --version`'s output into version; 0, or -1 when it does not run.
 * Kept for the last NVCC asked about (each build's cache key reads it). */
static int nvcc_version(const char *nvcc, char *version, size_t len)
{
    static char path[CUDA_PATH_MAX], kept[2048];
    if (!path[0] || strcmp(path, nvcc)) {
        char *argv[] = {(char *)nvcc, "--version", NULL};
        if (run_capture(argv, NULL, kept, sizeof kept, 60))
            return -1;
        pathf(path, sizeof path, "%s", nvcc);
    }
    pathf(version, len, "%s", kept);
    return 0;
}

static uint64_t hash_file(uint64_t h, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fnv1a(h, path, strlen(path));
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        h = fnv1a(h, chunk, n);
    fclose(f);
    return h;
}

/* The headers generated code includes: include/coconet_cuda.h and rt's. */
static uint64_t hash_headers(uint64_t h, const char *home)
{
    char path[CUDA_PATH_MAX + 64];
    pathf(path, sizeof path, "%s/include/coconet_cuda.h", home);
    h = hash_file(h, path);
    static const char *dirs[] = {"rt", "rt/kernels"};
    for (int d = 0; d < 2; d++) {
        char dir[CUDA_PATH_MAX + 32];
        pathf(dir, sizeof dir, "%s/%s", home, dirs[d]);
        struct dirent **e;
        int n = scandir(dir, &e, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            const char *dot = strrchr(e[i]->d_name, '.');
            if (dot && (!strcmp(dot, ".cuh") || !strcmp(dot, ".h"))) {
                pathf(path, sizeof path, "%s/%s", dir, e[i]->d_name);
                h = fnv1a(h, e[i]->d_name, strlen(e[i]->d_name) + 1);
                h = hash_file(h, path);
            }
            free(e[i]);
        }
        if (n >= 0)
            free(e);
    }
    return h;
}

uint64_t cuda_cache_key(const char *src, size_t n, const Argv *cmd, const char *nvcc_version,
                        int nccl_version, const char *gpu, const char *home)
{
    uint64_t h = fnv1a(FNV_INIT, src, n);
    h = fnv1a(h, "", 1);
    for (int i = 0; i < cmd->argc; i++)
        h = fnv1a(h, cmd->argv[i], strlen(cmd->argv[i]) + 1);
    h = fnv1a(h, nvcc_version, strlen(nvcc_version) + 1);
    char v[32];
    pathf(v, sizeof v, "nccl %d", nccl_version);
    h = fnv1a(h, v, strlen(v) + 1);
    h = fnv1a(h, gpu, strlen(gpu) + 1);
    return home ? hash_headers(h, home) : h;
}

/* ---- building ---- */

static int write_atomic(const char *path, const char *data, size_t n, char *err, size_t errlen)
{
    char tmp[4200];
    pathf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) || rename(tmp, path)) {
        pathf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* The end of the build log, for the error message. */
static void log_tail(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "rb");
    out[0] = 0;
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long start = size > (long)len - 1 ? size - ((long)len - 1) : 0;
    fseek(f, start, SEEK_SET);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = 0;
    fclose(f);
}

/* How many nvcc processes one build may run at once: COCONET_BUILD_JOBS
 * (1 to 16), else the cores online, at most 16 */
static int build_jobs(void)
{
    const char *env = getenv("COCONET_BUILD_JOBS");
    long n = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}

/* src (written to cu) into the shared object so: its variants compiled
 * apart in parallel where there are several (cuda_build_parts), else the
 * whole file with one nvcc */
static int compile(const CudaBuild *b, const char *src, size_t n, const char *cu, const char *so,
                   char *err, size_t errlen)
{
    char tmp[4200], log[4200];
    pathf(tmp, sizeof tmp, "%s.tmp.%ld", so, (long)getpid());
    pathf(log, sizeof log, "%s.log", so);
    int rc = cuda_build_parts(b, src, n, tmp, log, build_jobs(), err, errlen);
    if (rc == 1) {
        Argv a;
        cuda_nvcc_argv(&b->tool, b->home, cu, tmp, &a);
        int slot = cuda_nvcc_slot(b->cache, b->timeout_s);
        rc = run_capture(a.argv, log, NULL, 0, b->timeout_s);
        if (slot >= 0)
            close(slot);
        if (rc) {
            char tail[2048];
            log_tail(log, tail, sizeof tail);
            pathf(err, errlen, "nvcc %s building %s (log: %s):\n%s",
                  rc == -2 ? "timed out" : rc == 127 ? "could not be run" : "failed", cu, log,
                  tail);
        }
    }
    if (rc == 0 && rename(tmp, so) == 0) {
        unlink(log);
        return 0;
    }
    if (rc == 0)
        pathf(err, errlen, "cannot rename %s to %s: %s", tmp, so, strerror(errno));
    unlink(tmp);
    return -1;
}

int cuda_build(CudaBuild *b, const char *src, size_t n, char *err, size_t errlen)
{
    char version[2048];
    if (nvcc_version(b->tool.nvcc, version, sizeof version)) {
        pathf(err, errlen, "cannot run '%s --version': is the CUDA toolkit installed? "
                 "(CUDA_HOME, or the NVCC line of %s/build/cuda.conf)", b->tool.nvcc, b->home);
        return -1;
    }
    int nccl = nccl_header_version(b->tool.nccl_include);
    if (nccl < 0) {
        pathf(err, errlen, "no nccl.h with NCCL_VERSION_CODE in '%s' (set NCCL_HOME)",
                 b->tool.nccl_include);
        return -1;
    }
    char gpu[1024];
    cuda_gpu_model(gpu, sizeof gpu);
    Argv cmd;
    cuda_nvcc_argv(&b->tool, b->home, "SRC.cu", "OUT", &cmd);
    b->key = cuda_cache_key(src, n, &cmd, version, nccl, gpu, b->home);
    if (make_dirs(b->cache, err, errlen))
        return -1;
    char cu[4200];
    pathf(cu, sizeof cu, "%s/%016llx.cu", b->cache, (unsigned long long)b->key);
    pathf(b->so, sizeof b->so, "%s/%016llx.so", b->cache, (unsigned long long)b->key);
    b->cached = is_file(b->so);
    if (b->cached)
        return 0;
    if (b->on_build) { /* said at once: a build of many variants takes minutes */
        b->on_build(b->so, b->on_build_arg);
    } else if (b->progress) {
        fprintf(b->progress, "cuda: building %s with nvcc (once for this source)\n", b->so);
        fflush(b->progress);
    }
    double t0 = cuda_now_s();
    if (write_atomic(cu, src, n, err, errlen) || compile(b, src, n, cu, b->so, err, errlen))
        return -1;
    b->seconds = cuda_now_s() - t0;
    return 0;
}

/* The CUDA source: a given file, or cuda_compile of the variants, with the
 * kernel instances for their number of ranks alone (COCO_ONLY_P). */
char *cuda_source(Program **v, int nv, const char *path, size_t *n, char *err, size_t errlen)
{
    char *text = NULL;
    if (path) {
        FILE *f = open_regular_file(path, err, errlen);
        if (!f)
            return NULL;
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = xmalloc((size_t)(size > 0 ? size : 0) + 1);
        *n = fread(text, 1, (size_t)(size > 0 ? size : 0), f);
        text[*n] = 0;
        fclose(f);
        return text;
    }
    FILE *mem = open_memstream(&text, n);
    if (!mem)
        BUG("open_memstream failed");
    int rc = cuda_compile(v, nv, v[0]->nranks, mem, err, errlen);
    fclose(mem);
    if (rc) {
        free(text);
        return NULL;
    }
    return text;
}

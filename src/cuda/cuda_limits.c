/* cuda_limits.c: the machine's limits for the roofline table (no CUDA here:
 * the runtime measures, through include/coconet_rt.h).
 *
 * Rank 0's process, before it opens its communicators, asks the runtime
 * for the key of its GPU (model, UUID, PCI id, driver and CUDA versions,
 * number of GPUs) and looks for CACHE/limits-HASH.txt (CACHE: the build
 * cache, cuda_cache_dir; HASH: FNV-1a of the key). The file holds the key
 * and the three figures; when it is missing, holds another key, cannot be
 * read, or --remeasure (COCONET_REMEASURE=1) asks, the runtime measures
 * (rt/limits.c) and the file is written again (under a temporary name,
 * then renamed). The outcome goes to the report as one line:
 *   LIMITS measured|cached COPY_GBS PEER_GBS GEMM_TFLOPS KEY
 *   LIMITS none WHY */
#include "cuda/cuda.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coconet_rt.h"

static void limits_path(const char *key, char *path, size_t len)
{
    char dir[CUDA_PATH_MAX];
    if (cuda_cache_dir(dir, sizeof dir)) {
        path[0] = 0;
        return;
    }
    pathf(path, len, "%s/limits-%016llx.txt", dir,
          (unsigned long long)fnv1a(FNV_INIT, key, strlen(key)));
}

/* 0 when path holds key's limits */
static int read_cached(const char *path, const char *key, CocoRtLimits *l)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024], want[1024];
    int ok = 0, n = 0;
    snprintf(want, sizeof want, "key %s\n", key);
    while (fgets(line, sizeof line, f)) {
        if (!strcmp(line, want))
            ok = 1;
        n += sscanf(line, "copy_gbs %lf", &l->copy_gbs) == 1;
        n += sscanf(line, "peer_gbs %lf", &l->peer_gbs) == 1;
        n += sscanf(line, "gemm_tflops %lf", &l->gemm_tflops) == 1;
    }
    fclose(f);
    return ok && n == 3 && l->copy_gbs > 0 && l->gemm_tflops > 0 ? 0 : -1;
}

static int write_cached(const char *path, const char *key, const CocoRtLimits *l)
{
    char tmp[CUDA_PATH_MAX + 128];
    pathf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "# coconet: this machine's limits, measured by the CUDA runtime (rt/limits.c)\n"
               "key %s\ncopy_gbs %.17g\npeer_gbs %.17g\ngemm_tflops %.17g\n",
            key, l->copy_gbs, l->peer_gbs, l->gemm_tflops);
    if (fclose(f) || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int remeasure_asked(const CudaJob *job)
{
    const char *env = getenv("COCONET_REMEASURE");
    return job->remeasure || (env && !strcmp(env, "1"));
}

void cuda_limits_line(const CudaJob *job, const CocoRtApi *api, int local_rank, char *line,
                      size_t len)
{
    char key[512], err[1024], path[CUDA_PATH_MAX + 64];
    CocoRtLimits l;
    memset(&l, 0, sizeof l);
    if (api->machine(local_rank, key, sizeof key, err, sizeof err)) {
        snprintf(line, len, "LIMITS none %s", err);
        return;
    }
    for (char *s = key; *s; s++)
        if (*s == '\n')
            *s = ' ';
    limits_path(key, path, sizeof path);
    const char *how = "cached";
    if (!path[0] || remeasure_asked(job) || read_cached(path, key, &l)) {
        if (api->limits(local_rank, &l, err, sizeof err)) {
            snprintf(line, len, "LIMITS none %s", err);
            return;
        }
        how = path[0] && !write_cached(path, key, &l) ? "measured" : "measured-uncached";
    }
    snprintf(line, len, "LIMITS %s %.17g %.17g %.17g %s", how, l.copy_gbs, l.peer_gbs,
             l.gemm_tflops, key);
}

/* home.c: where coconet's own files are (include/, rt/kernels/): the
 * COCONET_HOME variable, else the directory of the running executable. */
#define _DEFAULT_SOURCE /* readlink */
#include "cuda/cuda.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int has_headers(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/include/coconet_cuda.h", dir);
    return access(path, R_OK) == 0;
}

const char *coco_home(void)
{
    static char dir[4096];
    const char *env = getenv("COCONET_HOME");
    if (env && *env) {
        snprintf(dir, sizeof dir, "%s", env);
        return has_headers(dir) ? dir : NULL;
    }
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0)
        return NULL;
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    return has_headers(dir) ? dir : NULL;
}

/* api_cuda.c: the public API of the CUDA code generator: the program and
 * the chosen schedules applied, then cuda_compile over all of them; and
 * the build of one variant's shared object into the cache (cuda_build_variant,
 * behind coco_build_cuda), for callers that run it themselves
 * (include/coconet_session.h). */
#include "cuda/cuda.h"

#include <stdlib.h>
#include <string.h>

int coco_gen_cuda(coco_program *p, const char *const *schedules, int n, FILE *out, char *err,
                  size_t errlen)
{
    Program **v = xcalloc((size_t)n + 1, sizeof(Program *));
    int made = 1, rc = 0;
    v[0] = p;
    for (int i = 0; i < n && !rc; i++) {
        v[made] = coco_schedule(p, schedules[i], err, errlen);
        rc = !v[made];
        made += !rc;
    }
    if (!rc)
        rc = cuda_compile(v, made, 0, out, err, errlen);
    for (int i = 1; i < made; i++)
        program_free(v[i]);
    free(v);
    return rc;
}

/* One variant's shared object (coco_build_cuda, src/tune/build.c, resolves
 * "tuned" first): the program and schedule `name` generated and built into
 * the cache as coco_run_cuda builds them; with `all`, the program and every
 * schedule, enumerated ones too (cuda_all_variants), as `coconet tune` and
 * `run --schedule tuned` build them: their object in the cache serves. */
int cuda_build_variant(coco_program *p, const char *name, int all, const coco_cuda_build *o,
                       char *err, size_t errlen)
{
    int nv;
    Program **v = all ? cuda_all_variants(p, &nv, err, errlen)
                      : cuda_variants(p, name, &nv, err, errlen);
    if (!v)
        return -1;
    size_t n;
    char *src = cuda_source(v, nv, o->cuda_source, &n, err, errlen);
    CudaBuild b;
    int rc = -1;
    if (src && !cuda_build_setup(&b, o->timeout_s, err, errlen)) {
        b.progress = stderr;
        b.on_build = o->on_build;
        b.on_build_arg = o->on_build_arg;
        if (o->nccl_home && *o->nccl_home) {
            pathf(b.tool.nccl_include, CUDA_PATH_MAX, "%s/include", o->nccl_home);
            pathf(b.tool.nccl_lib, CUDA_PATH_MAX, "%s/lib", o->nccl_home);
            pathf(b.tool.nccl_link, CUDA_PATH_MAX, "-l:libnccl.so.2");
        }
        rc = cuda_build(&b, src, n, err, errlen);
    }
    if (!rc) {
        snprintf(o->so, o->solen, "%s", b.so);
        snprintf(o->variant, o->variantlen, "%s", name);
    }
    free(src);
    for (int k = 1; k < nv; k++)
        program_free(v[k]);
    free(v);
    return rc;
}

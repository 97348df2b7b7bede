/* api_cuda.c: the public API of the CUDA code generator: the program and
 * the chosen schedules applied, then cuda_compile over all of them. */
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

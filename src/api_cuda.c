/* api_cuda.c: the public API of the CUDA code generator: the program and
 * the chosen schedules applied, then emit_cuda over all of them. */
#include "coco.h"

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
    ErrorCtx ctx;
    if (!rc) {
        error_push(&ctx, err, errlen, p->file, p->src);
        if (setjmp(ctx.jb)) {
            rc = 1;
        } else {
            emit_cuda(v, made, out);
        }
        error_pop(&ctx);
    }
    for (int i = 1; i < made; i++)
        program_free(v[i]);
    free(v);
    return rc;
}

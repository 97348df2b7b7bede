/* compile.c: the CUDA backend's passes over a program and its scheduled
 * variants, in order: lower (collectives over scattered tensors become
 * FusedAllReduces, lower_collectives.c), emit (the CUDA source, emit_cuda.c),
 * write (to the caller's stream; a user error comes back in err). The one
 * entry of `coconet gen` (coco_gen_cuda) and of the build (cuda_source). */
#include "gen/gen.h"

#include <stdlib.h>

int cuda_compile(Program **variants, int n, int only_p, FILE *out, char *err, size_t errlen)
{
    Program **lowered = xcalloc((size_t)n + 1, sizeof *lowered);
    Program **made = xcalloc((size_t)n + 1, sizeof *made);
    ErrorCtx ctx;
    int rc = 0;
    error_push(&ctx, err, errlen, variants[0]->file, variants[0]->src);
    if (setjmp(ctx.jb)) {
        rc = 1;
    } else {
        for (int i = 0; i < n; i++) {
            made[i] = lower_collectives(variants[i]);
            lowered[i] = made[i] ? made[i] : variants[i];
        }
        if (only_p > 0)
            fprintf(out, "#define COCO_ONLY_P %d /* kernel instances for this many ranks only */\n",
                    only_p);
        emit_cuda(variants, lowered, n, out);
    }
    error_pop(&ctx);
    for (int i = 0; i < n; i++)
        if (made[i])
            program_free(made[i]);
    free(made);
    free(lowered);
    return rc;
}

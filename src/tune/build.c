/* build.c: coco_build_cuda, the public entry that builds one variant's
 * shared object for a caller that runs it itself (python/coconet/torch):
 * "tuned" becomes the tuning record's choice (lookup.c's coco_tuned), found
 * in the object `coconet tune` built (every variant, as `run --schedule
 * tuned` finds it); a schedule named is built with the program alone, as
 * `coconet run --backend cuda --schedule NAME` builds it (cuda_build_variant).
 * Here, above the backend, because the tuner is. */
#include "tune/tune.h"

#include <string.h>

int coco_build_cuda(coco_program *p, coco_cuda_build *o, char *err, size_t errlen)
{
    char name[256], knobs[256] = "", note[1024] = "";
    const char *s = o->schedule && *o->schedule ? o->schedule : "program";
    if (errlen)
        err[0] = 0;
    if (!strcmp(s, "tuned")) {
        if (coco_tuned(p, name, sizeof name, knobs, sizeof knobs, note, sizeof note, err,
                       errlen))
            return -1;
    } else {
        snprintf(name, sizeof name, "%s", s);
    }
    if (o->knobslen)
        snprintf(o->knobs, o->knobslen, "%s", knobs);
    if (o->notelen)
        snprintf(o->note, o->notelen, "%s", note);
    /* tuned: the tuner's object (every variant), which its run left in the cache */
    return cuda_build_variant(p, name, !strcmp(s, "tuned"), o, err, errlen);
}

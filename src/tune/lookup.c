/* lookup.c: reading the tuning record back: the machine it is keyed on,
 * `coconet tune --show`, and the choice that `run` and `gen --schedule
 * tuned` use (coco_tuned; record.c has the format and the nearest-size rule). */
#include "tune/tune.h"

#include <stdlib.h>
#include <string.h>

int tune_machine(char *gpu, size_t len, int *nccl, char *err, size_t errlen)
{
    const char *fake = getenv("COCONET_TUNE_FAKE");
    if (fake && *fake)
        return timer_fake_machine(fake, gpu, len, nccl, err, errlen);
    CudaBuild b;
    char e[2048];
    if (cuda_build_setup(&b, 0, e, sizeof e)) {
        snprintf(err, errlen, "%s", e);
        return -1;
    }
    cuda_gpu_model(gpu, len);
    *nccl = nccl_header_version(b.tool.nccl_include);
    return 0;
}

/* The record of p on this machine, read; 0, or -1 with a message saying
 * what to run */
static int load_record(Program *p, Record *r, char *err, size_t errlen)
{
    char gpu[512];
    int nccl;
    memset(r, 0, sizeof *r);
    if (tune_machine(gpu, sizeof gpu, &nccl, err, errlen) ||
        record_key(p, gpu, nccl, r, err, errlen))
        return -1;
    int rc = record_read(r, err, errlen);
    if (rc == 1 || rc == 2) {
        char model[512];
        snprintf(model, sizeof model, "%s", gpu);
        model[strcspn(model, "\n")] = 0;
        snprintf(err, errlen, "%s: error: no tuning record for this program at %d rank%s on this "
                 "machine (%s, NCCL %d)%s: run `coconet tune %s --ranks %d --sizes ...` first\n",
                 p->file, p->nranks, p->nranks == 1 ? "" : "s", model, nccl,
                 rc == 2 ? "; the file found holds another key" : "", p->file, p->nranks);
        return -1;
    }
    return rc;
}

static int load(const char *file, const coco_tune_options *o, Program **p, char *err,
                size_t errlen)
{
    coco_config cfg = {.defines = o->defines, .ndefines = o->ndefines, .nranks = o->nranks,
                       .group_size = o->group_size};
    int status;
    *p = coco_load_file_status(file, &cfg, &status, err, errlen);
    if (*p && o->sched_file && coco_add_schedules(*p, o->sched_file, err, errlen)) {
        coco_program_free(*p);
        *p = NULL;
    }
    return *p ? 0 : status == COCO_LOAD_BAD_CONFIG ? 2 : 1;
}

int coco_tune_show(const char *file, const coco_tune_options *o, FILE *out, char *err,
                   size_t errlen)
{
    Program *p;
    Record r;
    int rc = load(file, o, &p, err, errlen);
    if (rc)
        return rc;
    rc = load_record(p, &r, err, errlen) ? 1 : 0;
    if (!rc)
        record_print(&r, out);
    record_free(&r);
    coco_program_free(p);
    return rc;
}

int coco_tuned(coco_program *p, char *schedule, size_t slen, char *knobs, size_t klen,
               char *note, size_t nlen, char *err, size_t errlen)
{
    Record r;
    note[0] = 0;
    if (load_record(p, &r, err, errlen)) {
        record_free(&r);
        return -1;
    }
    int exact;
    char why[2048];
    const RecordEntry *e = record_nearest(&r, p, &exact, why, sizeof why);
    if (!e) {
        snprintf(err, errlen, "%s: error: %s; run `coconet tune` at these sizes first (record: "
                 "%s)\n", p->file, why, r.path);
        record_free(&r);
        return -1;
    }
    if (!exact) {
        char mine[512];
        record_sizes(p, mine, sizeof mine);
        snprintf(note, nlen, "%s was not tuned at %s: using the choice for the nearest tuned "
                 "sizes, %s", p->file, mine, e->sizes);
    }
    snprintf(schedule, slen, "%s", e->schedule);
    snprintf(knobs, klen, "%s", knob_env(e->knob));
    int rc = 0;
    if (strcmp(e->schedule, "program") && !schedule_find(p, e->schedule)) {
        enumerate_schedules(p);
        if (!schedule_find(p, e->schedule)) {
            snprintf(err, errlen, "%s: error: the tuned schedule '%s' (record %s) is not a "
                     "schedule of this program: run `coconet tune` again\n", p->file,
                     e->schedule, r.path);
            rc = -1;
        }
    }
    record_free(&r);
    return rc;
}

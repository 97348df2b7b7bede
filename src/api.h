/* api.h: what the public C API (api.c, api_sched.c; include/coconet.h)
 * shares with the CUDA backend and the command. */
#ifndef COCO_API_H
#define COCO_API_H

#include "cpu/cpu.h"

/* ---- api.c ---- */
char *read_source_file(const char *path, char *err, size_t errlen);

/* ---- api_sched.c ---- */
/* "FILE: error: no schedule named 'name' (its schedules: ...)" into err */
void schedule_unknown(const Program *p, const char *name, char *err, size_t errlen);

#endif

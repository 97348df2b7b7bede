/* api_mem.h: the memory this process may still use (api_mem.c), against
 * which coco_run_fits and coco_run_all_fits (include/coconet.h) hold a
 * run's peak. */
#ifndef COCO_API_MEM_H
#define COCO_API_MEM_H

/* The bytes this process may still use, and which limit says so. */
double memory_limit(const char **why);

#endif

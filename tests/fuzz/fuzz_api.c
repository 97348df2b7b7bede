/* fuzz_api.c: a libFuzzer harness over the public API (include/coconet.h).
 *
 * An input is one byte of settings, then the text of a program:
 *   bits 0-1  ranks - 1 (1 to 4)      bit 2  two executor threads, else one
 *   bits 3-5  the data seed
 * The harness loads the program, prints it, enumerates its schedules and
 * prints, applies and prints each, generates the CUDA source of the program
 * and all its schedules (no nvcc), and, when the whole run fits under a cap
 * of 2 MiB (coco_run_all_fits under coco_set_memory_cap: a run too large is
 * refused through the API), runs the program and up to 8 schedules on the
 * CPU executor and compares them as `coconet run` does. A crash, a leak, a
 * sanitizer report, a schedule whose values are WRONG or Replicated copies
 * that differ are findings (abort). Inputs that crashed once are kept in
 * tests/fuzz/crashers/ and replayed by the fuzz-api test group. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coconet.h"

/* Bounds that keep an input to a second or so under the sanitizers: the
 * schedules grow exponentially with the collectives (the enumerator stops
 * at 4000, seconds of work), so programs with more than MAX_COMM of them
 * keep only the schedules written in the file; at most MAX_SCHEDULES are
 * applied and generated, MAX_RUN_SCHEDULES run. */
enum { MAX_COMM = 4, MAX_SCHEDULES = 128, MAX_RUN_SCHEDULES = 8, MAX_TEXT = 1 << 16 };

static FILE *sink; /* /dev/null: what is printed is not looked at */

static void finding(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_api: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* Every output's summary; Replicated copies must agree. */
static void summarize(coco_program *p, coco_run *r)
{
    for (int i = 0; i < coco_num_outputs(p); i++) {
        coco_summary s;
        coco_tensor t;
        const char *name = coco_output_name(p, i);
        if (coco_run_summary(r, name, &s) || coco_run_tensor(r, name, 0, &t))
            finding("an output has no value", name);
        if (!s.replicas_agree)
            finding("Replicated copies differ", name);
    }
}

static coco_run *run_of(coco_program *p, uint64_t seed, int threads)
{
    char err[4096];
    coco_run *r = coco_run_create(p, seed, threads, err, sizeof err);
    if (r && coco_run_execute(r, err, sizeof err)) {
        coco_run_free(r);
        r = NULL;
    }
    return r;
}

/* The program's run, then schedules' runs compared with it (within the
 * tolerance of the FP64 evaluation when bits differ). */
static void run_all(coco_program *p, const char **names, int n, uint64_t seed, int threads)
{
    char err[4096];
    if (coco_run_all_fits(p, names, n, err, sizeof err))
        return; /* refused through the API: too large for the cap */
    coco_run *ref = run_of(p, seed, threads);
    if (!ref)
        return;
    summarize(p, ref);
    coco_program *x64 = NULL;
    coco_run *exact = NULL;
    for (int i = 0; i < n; i++) {
        coco_program *s = coco_schedule(p, names[i], err, sizeof err);
        coco_run *r = s ? run_of(s, seed, threads) : NULL;
        coco_comparison c;
        if (r && !coco_run_compare(ref, r, NULL, &c) && c.differing) {
            if (!exact) {
                x64 = coco_program_exact(p);
                exact = run_of(x64, seed, threads);
            }
            if (exact && !coco_run_compare(ref, r, exact, &c) && c.outside)
                finding("a schedule's values are WRONG", names[i]);
        }
        coco_run_free(r);
        coco_program_free(s);
    }
    coco_run_free(exact);
    coco_program_free(x64);
    coco_run_free(ref);
}

/* Communication operations named in the text (an upper bound). */
static int comm_words(const char *text)
{
    static const char *const words[] = {"AllReduce", "ReduceScatter", "AllGather", "Reduce",
                                         "Broadcast", "Send"};
    int n = 0;
    for (size_t w = 0; w < sizeof words / sizeof *words; w++)
        for (const char *t = strstr(text, words[w]); t; t = strstr(t + 1, words[w]))
            n++;
    return n;
}

/* Prints each schedule and the program it makes; returns their names. */
static const char **schedules(coco_program *p, const char *text, int *n)
{
    if (comm_words(text) <= MAX_COMM)
        coco_enumerate_schedules(p);
    *n = coco_num_schedules(p) < MAX_SCHEDULES ? coco_num_schedules(p) : MAX_SCHEDULES;
    const char **names = calloc((size_t)*n + 1, sizeof *names);
    if (!names)
        finding("out of memory in the harness", NULL);
    for (int i = 0; i < *n; i++) {
        char err[4096];
        names[i] = coco_schedule_name(p, i);
        coco_print_schedule(p, i, sink);
        coco_program *s = coco_schedule(p, names[i], err, sizeof err);
        if (s)
            coco_print(s, sink);
        coco_program_free(s);
    }
    return names;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    sink = fopen("/dev/null", "w");
    coco_set_memory_cap(2 << 20);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > MAX_TEXT)
        return 0;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    coco_config cfg = {NULL, 0, 1 + (data[0] & 3), 0};
    char err[4096];
    coco_program *p = coco_load_string("fuzz.coco", text, &cfg, err, sizeof err);
    if (!p) {
        free(text);
        return 0;
    }
    coco_print(p, sink);
    int n;
    const char **names = schedules(p, text, &n);
    free(text);
    if (coco_gen_cuda(p, names, n, sink, err, sizeof err))
        coco_gen_cuda(p, NULL, 0, sink, err, sizeof err);
    run_all(p, names, n < MAX_RUN_SCHEDULES ? n : MAX_RUN_SCHEDULES, (data[0] >> 3) & 7,
            data[0] & 4 ? 2 : 1);
    free(names);
    coco_program_free(p);
    return 0;
}

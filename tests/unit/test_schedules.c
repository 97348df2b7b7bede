/* test_schedules.c: checks through the public API that
 *   - every enumerated and written schedule of every example, printed with
 *     `coconet print --schedule`, is a program that loads, checks and
 *     computes bit for bit what the scheduled program computes;
 *   - the schedule comparison's tolerance accepts nothing but rounding: a
 *     program off by 0.1% is caught, an identical one is bitwise;
 *   - a refused schedule leaves the program it was applied to untouched;
 *   - the CPU executor gives the same bits with 1 and with 3 threads.
 * Run from the repository root (tests/run.sh does). */
#define _DEFAULT_SOURCE
#include "coconet.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

static void check(int ok, const char *what, const char *detail)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAIL: %s %s\n", what, detail ? detail : "");
    }
}

static char *print_to_string(coco_program *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    coco_print(p, f);
    fclose(f);
    return text;
}

static coco_run *run(coco_program *p)
{
    coco_run *r = coco_run_new(p, 7, 1);
    char err[256];
    if (r && coco_run_execute(r, err, sizeof err)) {
        coco_run_free(r);
        return NULL;
    }
    return r;
}

/* The printed form of schedule i of p computes what the schedule computes. */
static void check_printed_schedule(coco_program *p, int i, const coco_config *cfg,
                                   const char *file)
{
    char err[4096], what[1024];
    const char *name = coco_schedule_name(p, i);
    snprintf(what, sizeof what, "%s schedule %s", file, name);
    coco_program *s = coco_schedule(p, name, err, sizeof err);
    check(s != NULL, what, err);
    if (!s)
        return;
    char *text = print_to_string(s);
    coco_program *q = coco_load_string("printed.coco", text, cfg, err, sizeof err);
    check(q != NULL, what, err);
    if (q) {
        coco_run *a = run(s), *b = run(q);
        coco_comparison c;
        int ok = a && b && coco_run_compare(a, b, NULL, &c) == 0 && c.differing == 0;
        check(ok, what, "printed program computes differently");
        coco_run_free(a);
        coco_run_free(b);
        coco_program_free(q);
    }
    free(text);
    coco_program_free(s);
}

static void check_examples(void)
{
    DIR *d = opendir("examples");
    check(d != NULL, "opendir examples", NULL);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 5, ".coco"))
            continue;
        char path[512], err[4096];
        snprintf(path, sizeof path, "examples/%s", e->d_name);
        coco_config cfg = {NULL, 0, 4, 0};
        coco_program *p = coco_load_file(path, &cfg, err, sizeof err);
        check(p != NULL, path, err);
        if (!p)
            continue;
        coco_enumerate_schedules(p);
        for (int i = 0; i < coco_num_schedules(p); i++)
            check_printed_schedule(p, i, &cfg, path);
        coco_program_free(p);
    }
    closedir(d);
}

static coco_program *load(const char *text)
{
    char err[4096];
    coco_config cfg = {NULL, 0, 2, 0};
    coco_program *p = coco_load_string("t.coco", text, &cfg, err, sizeof err);
    check(p != NULL, "load", err);
    return p;
}

static void check_tolerance(void)
{
    const char *base = "Size N = 64;\nTensor x(FP32, [N], Local, WORLD, RANK);\n"
                       "Var s = AllReduce(\"+\", x);\n";
    char a_text[512], b_text[512], c_text[512];
    snprintf(a_text, sizeof a_text, "%sVar y = s * 3;\nExecute t({x}, {y});\n", base);
    snprintf(b_text, sizeof b_text, "%sVar y = s * 3.003;\nExecute t({x}, {y});\n", base);
    snprintf(c_text, sizeof c_text, "%sVar y = s * 3;\nExecute t({x}, {y});\n", base);
    coco_program *a = load(a_text), *b = load(b_text), *c = load(c_text);
    if (!a || !b || !c)
        return;
    coco_program *x = coco_program_exact(a);
    coco_run *ra = run(a), *rb = run(b), *rc = run(c), *rx = run(x);
    coco_comparison cmp;
    check(coco_run_compare(ra, rb, rx, &cmp) == 0 && cmp.outside > 0, "tolerance",
          "a result off by 0.1% was accepted as rounding");
    check(coco_run_compare(ra, rc, rx, &cmp) == 0 && cmp.differing == 0, "tolerance",
          "identical programs differ");
    coco_run_free(ra);
    coco_run_free(rb);
    coco_run_free(rc);
    coco_run_free(rx);
    coco_program_free(x);
    coco_program_free(a);
    coco_program_free(b);
    coco_program_free(c);
}

static void check_refusal_keeps_program(void)
{
    char err[4096];
    coco_config cfg = {NULL, 0, 4, 0};
    coco_program *p = coco_load_file("examples/self_attention.coco", &cfg, err, sizeof err);
    check(p != NULL, "load self_attention", err);
    if (!p)
        return;
    char *before = print_to_string(p);
    check(coco_add_schedules(p, "tests/unit/bad_schedule.sched", err, sizeof err) == 0,
          "add bad_schedule.sched", err);
    check(coco_schedule(p, "bad", err, sizeof err) == NULL, "bad schedule refused", NULL);
    check(strstr(err, "cannot run on slices") != NULL, "refusal message", err);
    char *after = print_to_string(p);
    /* the added schedule is printed too: compare the program part only */
    char *cut = strstr(after, "\nSchedule bad");
    if (cut)
        *cut = 0;
    check(strncmp(before, after, strlen(after)) == 0, "program untouched by a refusal", NULL);
    free(before);
    free(after);
    coco_program_free(p);
}

/* Threads share out large pointwise work: the bits must not change. */
static void check_thread_count(void)
{
    char err[4096];
    const char *defs[] = {"N=200016"};
    coco_config cfg = {defs, 1, 4, 0};
    coco_program *p = coco_load_file("examples/lamb.coco", &cfg, err, sizeof err);
    check(p != NULL, "load lamb", err);
    if (!p)
        return;
    coco_run *one = coco_run_new(p, 3, 1), *three = coco_run_new(p, 3, 3);
    coco_run_execute(one, err, sizeof err);
    coco_run_execute(three, err, sizeof err);
    coco_comparison c;
    check(coco_run_compare(one, three, NULL, &c) == 0 && c.differing == 0 && c.elements > 0,
          "1 and 3 threads", "give different bits");
    coco_run_free(one);
    coco_run_free(three);
    coco_program_free(p);
}

int main(void)
{
    check_thread_count();
    check_examples();
    check_tolerance();
    check_refusal_keeps_program();
    printf("test_schedules: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}

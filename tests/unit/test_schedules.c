/* test_schedules.c: checks through the public API that
 *   - every enumerated and written schedule of every example, printed with
 *     `coconet print --schedule`, is a program that loads, checks and
 *     computes bit for bit what the scheduled program computes;
 *   - the enumerated schedules of every example (and of
 *     tests/oracle/programs/ragged.coco) are distinct: no two print the same
 *     program once the names the transformations generate are renamed in
 *     order of appearance (fusing, splitting and reordering in another order
 *     is the same schedule);
 *   - fuse(allreduce, computations..., AllReduceFuse) gives the program
 *     that split + reorder + fuse written out gives, computing the same bits,
 *     and Update(t, AllGather(v)) fused into a FusedAllReduce (the RS-C-AG
 *     optimizer written by hand) computes the program's bits with the
 *     AllGather ending the fused operation, at 1, 2, 3, 4 and 8 ranks;
 *   - the schedule comparison's tolerance accepts nothing but rounding: a
 *     program off by 0.1% is caught, an identical one is bitwise;
 *   - a refused schedule leaves the program it was applied to untouched;
 *   - the CPU executor gives the same bits with 1 and with 3 threads.
 * Run from the repository root (tests/run.sh does). */
#define _DEFAULT_SOURCE
#include "coconet.h"

#include <ctype.h>
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

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
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

/* Is word w (n bytes) an identifier of text? */
static int has_word(const char *text, const char *w, size_t n)
{
    for (const char *c = text; *c; c++) {
        if (strncmp(c, w, n) || (c > text && (isalnum((unsigned char)c[-1]) || c[-1] == '_')))
            continue;
        if (!isalnum((unsigned char)c[n]) && c[n] != '_')
            return 1;
    }
    return 0;
}

/* The printed scheduled program with every identifier that the program
 * itself does not have renamed _1, _2... in order of first appearance; the
 * header and the schedule's own name are dropped, and the summary of
 * fusions and overlaps is sorted. */
static char *canonical(const char *text, const char *program_text)
{
    size_t cap = 2 * strlen(text) + 64, len = 0;
    char *out = malloc(cap);
    char (*names)[64] = calloc(512, 64);
    int nnames = 0;
    size_t header = strcspn(text, "\n");
    const char *body = text + header + (text[header] ? 1 : 0);
    const char *tail = strstr(body, "// as scheduled by");
    for (const char *c = body; *c && len + 80 < cap;) {
        if (c == tail) {
            c = strchr(c, '\n');
            if (!c)
                break;
            c++;
            continue;
        }
        if (!isalpha((unsigned char)*c) && *c != '_') {
            out[len++] = *c++;
            continue;
        }
        size_t n = 0;
        while (isalnum((unsigned char)c[n]) || c[n] == '_')
            n++;
        if (n < 64 && !has_word(program_text, c, n)) {
            int k = 0;
            while (k < nnames && (strlen(names[k]) != n || strncmp(names[k], c, n)))
                k++;
            if (k == nnames && nnames < 512)
                memcpy(names[nnames++], c, n);
            len += (size_t)snprintf(out + len, cap - len, "_%d", k + 1);
        } else {
            memcpy(out + len, c, n);
            len += n;
        }
        c += n;
    }
    out[len] = 0;
    free(names);
    /* the summary lines in a fixed order */
    char *sum = strstr(out, "\n//   ");
    if (sum) {
        char *lines[512];
        int nl = 0;
        for (char *l = strtok(sum + 1, "\n"); l && nl < 512; l = strtok(NULL, "\n"))
            lines[nl++] = strdup(l);
        qsort(lines, (size_t)nl, sizeof lines[0], cmp_str);
        size_t at = (size_t)(sum + 1 - out);
        for (int i = 0; i < nl; i++) {
            at += (size_t)snprintf(out + at, cap - at, "%s\n", lines[i]);
            free(lines[i]);
        }
    }
    return out;
}

/* No two enumerated schedules of p print the same program. */
static void check_distinct(coco_program *p, const char *file)
{
    char err[4096], what[1024];
    char *program_text = print_to_string(p);
    int n = coco_num_schedules(p);
    char **canon = calloc((size_t)n + 1, sizeof(char *));
    for (int i = 0; i < n; i++) {
        if (!coco_schedule_note(p, i))
            continue;
        coco_program *s = coco_schedule(p, coco_schedule_name(p, i), err, sizeof err);
        if (!s)
            continue; /* check_printed_schedule reports it */
        char *text = print_to_string(s);
        canon[i] = canonical(text, program_text);
        free(text);
        coco_program_free(s);
        for (int j = 0; j < i; j++)
            if (canon[j] && !strcmp(canon[i], canon[j])) {
                snprintf(what, sizeof what, "%s: schedules %s and %s", file,
                         coco_schedule_name(p, j), coco_schedule_name(p, i));
                check(0, what, "give the same program");
            }
    }
    check(1, file, NULL);
    for (int i = 0; i < n; i++)
        free(canon[i]);
    free(canon);
    free(program_text);
}

static void check_file(const char *path)
{
    char err[4096];
    coco_config cfg = {NULL, 0, 4, 0};
    coco_program *p = coco_load_file(path, &cfg, err, sizeof err);
    check(p != NULL, path, err);
    if (!p)
        return;
    coco_enumerate_schedules(p);
    for (int i = 0; i < coco_num_schedules(p); i++)
        check_printed_schedule(p, i, &cfg, path);
    check_distinct(p, path);
    coco_program_free(p);
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
        char path[512];
        snprintf(path, sizeof path, "examples/%s", e->d_name);
        check_file(path);
    }
    closedir(d);
    check_file("tests/oracle/programs/ragged.coco");
}

/* The printed program p as scheduled by `name`, without the line naming
 * the schedule; NULL if refused. */
static char *scheduled_text(coco_program *p, const char *name, coco_program **out)
{
    char err[4096];
    coco_program *s = coco_schedule(p, name, err, sizeof err);
    check(s != NULL, name, err);
    if (!s)
        return NULL;
    char *printed = print_to_string(s);
    /* the text without the line "// as scheduled by 'NAME':" */
    size_t len = strlen(printed), at = 0;
    char *text = malloc(len + 1);
    for (const char *l = printed; *l;) {
        size_t n = strcspn(l, "\n") + (l[strcspn(l, "\n")] ? 1 : 0);
        if (strncmp(l, "// as scheduled by", 18)) {
            memcpy(text + at, l, n);
            at += n;
        }
        l += n;
    }
    text[at] = 0;
    free(printed);
    *out = s;
    return text;
}

/* Schedule `name` of p computes the program's bits. */
static int same_bits(coco_program *p, coco_program *s)
{
    coco_run *a = run(p), *b = run(s);
    coco_comparison c;
    int ok = a && b && coco_run_compare(a, b, NULL, &c) == 0 && c.differing == 0 &&
             c.elements > 0;
    coco_run_free(a);
    coco_run_free(b);
    return ok;
}

static const char *const adam_text =
    "Size N = 1001;\n"
    "Tensor g(FP16, [N], Local, WORLD, RANK);\n"
    "Tensor p(FP32, [N], Replicated, WORLD);\n"
    "Tensor m(FP32, [N], Replicated, WORLD);\n"
    "Tensor v(FP32, [N], Replicated, WORLD);\n"
    "Scalar lr(FP32);  Scalar beta1(FP32, 0.9);  Scalar beta2(FP32, 0.999);  Scalar t(FP32);\n"
    "Var avg = AllReduce(\"+\", g);\n"
    "Var m_ = Update(m, (m*beta1+(1-beta1)*avg));\n"
    "Var v_ = Update(v, (v*beta2+(1-beta2)*avg*avg));\n"
    "Var m1 = m_/(1-Pow(beta1, t));\n"
    "Var v1 = v_/(1-Pow(beta2, t));\n"
    "Var p_ = Update(p, (p - lr * m1/(Sqrt(v1))));\n"
    "Execute adam({g,p,v,m,lr,t}, {p_});\n"
    "Schedule shorthand { f = fuse(avg, m_, v_, m1, v1, p_, AllReduceFuse); }\n"
    "Schedule spelled {\n"
    "  split(avg, ARSplitRSAG);\n"
    "  reorder(ag_avg, m_, v_, m1, v1, p_, AGReorder);\n"
    "  f = fuse(rs_avg, sc_m_, sc_v_, sc_m1, sc_v1, sc_p_, ag_p_, ag_m_, ag_v_, AllReduceFuse);\n"
    "}\n";

/* The RS-C-AG Adam as the original writes it: m and v sliced, the new
 * parameters the AllGather of the sliced step, all fused. */
static const char *const rscag_text =
    "Size N = 1008;\n"
    "Tensor g(FP16, [N], Local, WORLD, RANK);\n"
    "Tensor p(FP32, [N], Replicated, WORLD);\n"
    "Tensor m(FP32, [N], Sliced(0), WORLD, RANK);\n"
    "Tensor v(FP32, [N], Sliced(0), WORLD, RANK);\n"
    "Scalar lr(FP32);  Scalar beta1(FP32, 0.9);  Scalar beta2(FP32, 0.999);  Scalar t(FP32);\n"
    "Var g1 = ReduceScatter(\"+\", g, 0);\n"
    "Var m1 = Update(m, m*beta1+(1-beta1)*g1);\n"
    "Var v1 = Update(v, v*beta2+(1-beta2)*g1*g1);\n"
    "Var w1 = Slice(p, 0) - lr * m1/Sqrt(v1);\n"
    "Var w2 = Update(p, AllGather(w1));\n"
    "Execute adam({g,p,v,m,lr,t}, {w2});\n"
    "Schedule fused { f = fuse(g1, m1, v1, w1, w2, AllReduceFuse); }\n";

static coco_program *load_ranks(const char *text, int ranks)
{
    char err[4096];
    coco_config cfg = {NULL, 0, ranks, 0};
    coco_program *p = coco_load_string("t.coco", text, &cfg, err, sizeof err);
    check(p != NULL, "load", err);
    return p;
}

static void check_fuse_allreduce_forms(void)
{
    static const int ranks[] = {1, 2, 3, 4, 8};
    for (int k = 0; k < 5; k++) {
        coco_program *p = load_ranks(adam_text, ranks[k]);
        coco_program *s1 = NULL, *s2 = NULL;
        char *a = p ? scheduled_text(p, "shorthand", &s1) : NULL;
        char *b = p ? scheduled_text(p, "spelled", &s2) : NULL;
        check(a && b && !strcmp(a, b), "fuse(avg, ..., AllReduceFuse)",
              "differs from split + reorder + fuse written out");
        check(a && strstr(a, "Var ag_p_ = AllGather(sc_p_);  // FP32 [N] Replicated WORLD, in f\n"),
              "fuse(avg, ..., AllReduceFuse)", "does not end with the gather of the parameters");
        check(s1 && same_bits(p, s1), "fuse(avg, ..., AllReduceFuse)", "computes differently");
        check(s2 && same_bits(p, s2), "split + reorder + fuse", "computes differently");
        free(a);
        free(b);
        coco_program_free(s1);
        coco_program_free(s2);
        coco_program_free(p);
        p = load_ranks(rscag_text, ranks[k]);
        s1 = NULL;
        a = p ? scheduled_text(p, "fused", &s1) : NULL;
        check(a && strstr(a, "Var sc_w2 = Update(p, w1);  // FP32 [N] Sliced(0) WORLD, in f\n") &&
                  strstr(a, "Var w2 = AllGather(sc_w2);  // FP32 [N] Replicated WORLD, in f\n"),
              "Update(p, AllGather(w1)) fused", a ? a : "");
        check(s1 && same_bits(p, s1), "Update(p, AllGather(w1)) fused", "computes differently");
        free(a);
        coco_program_free(s1);
        coco_program_free(p);
    }
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
    check_fuse_allreduce_forms();
    check_refusal_keeps_program();
    printf("test_schedules: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}

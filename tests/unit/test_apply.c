/* test_apply.c: applying a schedule in one go (schedule_apply: runs of
 * splits on the unsorted graph, re-sorted once, src/sched/sched.c) gives
 * the graph that applying its statements one at a time gives (each call
 * re-sorts after its statement): node for node, with the same ids, names,
 * inputs, facts, fused operations, overlaps and outputs. For every written
 * and enumerated schedule of every example and of the programs below (splits
 * of inline AllReduces, of an AllReduce of an AllReduce, twice of one
 * AllReduce, of outputs, mixed with reorder, fuse and overlap). Run from the
 * repository root. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "sched/sched.h"

#include "unit_check.h"

static const char *const programs[] = {
    "Tensor g(FP32, [8, 4], Local, WORLD, RANK);\n"
    "Tensor w(FP32, [8, 4], Replicated, WORLD);\n"
    "Var a1 = AllReduce(\"+\", g);\nVar a2 = AllReduce(\"+\", g * a1);\n"
    "Var v = AllReduce(\"+\", g) * 2;\nVar h = a2 + v;\nVar a3 = AllReduce(\"+\", h * g);\n"
    "Var t = a3 + a1 + a2;\nVar u = Dropout(t, 0.1) + a1;\nVar z = Update(w, w * 0.5 + u);\n"
    "Execute f({g, w}, {z, a2, a3});\n"
    "Schedule s1 { split(a2); split(a1); split(v); split(a3, ARSliceAG); }\n"
    "Schedule s2 { split(a1, ARSliceAG); split(a1, ARSliceAG); split(a2, ARSliceAG); }\n"
    "Schedule s3 { (x, y) = split(a1); split(a2, ARSliceAG); split(a3);\n"
    "  c = fuse(t, u, ComputationFuse); split(v); }\n"
    "Schedule s4 { split(a3); split(a1); (p, q) = split(a2); (r, r2) = reorder(q, t, AGReorder);\n"
    "  split(v); }\n"
    "Schedule s5 { split(a1); (rs_a2, b) = split(a2); split(a3); o = overlap(rs_a1, ag_a1); }\n",
    "Tensor g(FP16, [16, 4], Local, WORLD, RANK);\nTensor m(FP16, [16, 4], Replicated, WORLD);\n"
    "Var a = AllReduce(\"+\", g);\nVar b = AllReduce(\"+\", g * 2);\nVar c = a + b;\n"
    "Var n = Update(m, m * 0.9 + c);\nExecute f({g, m}, {n, a});\n"
    "Schedule s1 { split(a); split(b); }\n"
    "Schedule s2 { (r, ag) = split(a); (sc, agc) = reorder(ag, c, AGReorder); split(b); }\n"
    "Schedule s3 { split(b); f1 = fuse(a, c, AllReduceFuse); }\n",
};

/* Everything of p that a schedule can change, one line per node. */
static char *dump(Program *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    for (int i = 0; i < p->nnode; i++) {
        const Node *n = &p->node[i];
        fprintf(f, "%d %d %s %d %d %d %d %d %d %g %d %d %d %d", n->id, (int)n->op, n->name,
                n->named, n->dead, n->fusion, (int)n->type, (int)n->layout.kind, n->layout.dim,
                n->seq, n->target, n->updated_by, n->axis, n->nin);
        for (int k = 0; k < n->nin; k++)
            fprintf(f, " %d", n->in[k]);
        fputc('\n', f);
    }
    for (int i = 0; i < p->nexec_out; i++)
        fprintf(f, "out %d\n", p->exec_out[i]);
    for (int i = 0; i < p->nfusion; i++)
        fprintf(f, "fusion %s %d %d\n", p->fusion[i].name, (int)p->fusion[i].kind,
                p->fusion[i].dead);
    for (int i = 0; i < p->noverlap; i++)
        for (int k = 0; k < p->overlap[i].nitem; k++)
            fprintf(f, "overlap %s %d\n", p->overlap[i].name, p->overlap[i].item[k]);
    fclose(f);
    return text;
}

/* s applied to p a statement at a time, or NULL when refused. */
static Program *one_at_a_time(Program *p, const Schedule *s)
{
    Program *q = program_clone(p);
    char msg[1024];
    ErrorCtx ctx;
    error_push(&ctx, msg, sizeof msg, p->file, p->src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        program_free(q);
        return NULL;
    }
    q->applied = s->name;
    for (int i = 0; i < s->nstmt; i++)
        schedule_apply_stmts(q, s->name, &s->stmt[i], 1);
    error_pop(&ctx);
    return q;
}

static int same_graph(Program *p, const Schedule *s, const char *where)
{
    Program *whole = schedule_applied(p, s, NULL, 0), *steps = one_at_a_time(p, s);
    char *a = whole ? dump(whole) : NULL, *b = steps ? dump(steps) : NULL;
    char what[512];
    snprintf(what, sizeof what, "%s, schedule %s: applied whole and a statement at a time",
             where, s->name);
    check((!a && !b) || (a && b && !strcmp(a, b)), what);
    int applied = a != NULL;
    free(a);
    free(b);
    program_free(whole);
    program_free(steps);
    return applied;
}

/* Every written and enumerated schedule of p; how many apply. */
static int every_schedule(Program *p, const char *where)
{
    int applied = 0;
    enumerate_schedules(p);
    for (int i = 0; i < p->nsched; i++)
        applied += same_graph(p, &p->sched[i], where);
    return applied;
}

static void test_programs(void)
{
    int applied = 0;
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++) {
        coco_config cfg = {NULL, 0, 4, 0};
        char err[2048], where[64];
        coco_program *p = coco_load_string("t.coco", programs[i], &cfg, err, sizeof err);
        snprintf(where, sizeof where, "program %zu", i);
        check(p != NULL, where);
        if (p)
            applied += every_schedule(p, where);
        coco_program_free(p);
    }
    check(applied >= 20, "the programs' schedules apply");
    printf("  %d schedules of the programs\n", applied);
    group_end("schedules applied whole: the programs");
}

static void test_examples(void)
{
    DIR *d = opendir("examples");
    check(d != NULL, "examples/ is found (run from the repository root)");
    int applied = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".coco"))
            continue;
        char path[512], err[2048];
        snprintf(path, sizeof path, "examples/%s", de->d_name);
        coco_config cfg = {NULL, 0, 4, 0};
        coco_program *p = coco_load_file(path, &cfg, err, sizeof err);
        if (p)
            applied += every_schedule(p, path);
        coco_program_free(p);
    }
    if (d)
        closedir(d);
    check(applied >= 50, "the examples' schedules apply");
    printf("  %d schedules of the examples\n", applied);
    group_end("schedules applied whole: the examples");
}

int main(void)
{
    test_programs();
    test_examples();
    return total_fail != 0;
}

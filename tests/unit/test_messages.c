/* test_messages.c: messages name values as the program writes them. The
 * memory refusal (coco_run_fits, under a cap set by coco_set_memory_cap)
 * and the out-of-memory message (exec_oom_message) of a value that is a
 * part of an expression give its text, never the name of the temporary
 * the compiler made for it ('_t8'). */
#include <string.h>

#include "api.h"

#include "unit_check.h"

/* mu*mom and the AllReduce are parts of the statement on line 5 */
static const char program[] =
    "Size N = 65536;\n"
    "Tensor g(FP32, [N], Local, WORLD, RANK);\n"
    "Tensor mom(FP32, [N], Replicated, WORLD);\n"
    "Scalar mu(FP32, 0.9);\n"
    "Var mom_ = Update(mom, mu*mom + AllReduce(\"+\", g));\n"
    "Execute sgd({g, mom, mu}, {mom_});\n";

static coco_program *load(void)
{
    coco_config cfg = {.defines = NULL, .ndefines = 0, .nranks = 4, .group_size = 0};
    char err[2048];
    coco_program *p = coco_load_string("m.coco", program, &cfg, err, sizeof err);
    if (!p)
        printf("  cannot load: %s", err);
    return p;
}

/* The node of the product mu*mom */
static int product(coco_program *p)
{
    for (int i = 0; i < p->nnode; i++)
        if (p->node[i].op == O_MUL && !p->node[i].named)
            return i;
    return -1;
}

static void test_refusal(coco_program *p)
{
    char err[2048] = "";
    coco_set_memory_cap(1024);
    int refused = coco_run_fits(p, err, sizeof err);
    coco_set_memory_cap(0);
    check(refused && !strstr(err, "'_t"), err);
    check(strstr(err, "while computing 'AllReduce(\"+\", g)'") ||
              strstr(err, "while computing 'mu * mom'"), err);
    check(strstr(err, "the largest 'g' of") || strstr(err, "the largest 'mom' of"), err);
}

static void test_out_of_memory(coco_program *p)
{
    Exec *e = exec_new(p, 1, 1);
    e->oom_node = product(p);
    e->oom_rank = 2;
    e->oom_bytes = 1 << 30;
    char msg[512] = "";
    if (e->oom_node >= 0)
        exec_oom_message(e, msg, sizeof msg);
    check(strstr(msg, "out of memory: 1 GiB for 'mu * mom' (line 5, column 26) on rank 2") != NULL,
          msg[0] ? msg : "no product in the program");
    exec_free(e);
}

int main(void)
{
    coco_program *p = load();
    check(p != NULL, "load the program");
    if (p) {
        test_refusal(p);
        test_out_of_memory(p);
    }
    coco_program_free(p);
    group_end("messages");
    return total_fail != 0;
}

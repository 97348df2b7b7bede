/* sched.c: applies a named schedule to a clone of the program, one
 * statement at a time, verifying the whole graph after each (what the
 * transformations share, names and refusals, is in xform.c). */
#include "sched/sched.h"

#include <string.h>

/* each verb's transformation */
static void (*const apply_verb[V_UNKNOWN])(const Xform *) = {
    [V_SPLIT] = xform_split,     [V_REORDER] = xform_reorder, [V_FUSE] = xform_fuse_verb,
    [V_OVERLAP] = xform_overlap, [V_ASSLICE] = xform_asslice, [V_DEAD] = xform_dead,
};

static void apply_stmt(const Xform *x)
{
    if (x->st->verb == V_UNKNOWN)
        error_at(x->st->pos, "schedule '%s': unknown transformation '%s' (use split, reorder, "
                 "fuse, overlap, asSlice or dead)", x->sched, x->st->unknown);
    apply_verb[x->st->verb](x);
    program_resort(x->p);
    verify_program(x->p);
}

void schedule_apply_stmts(Program *p, const char *sched, const SchedStmt *st, int n)
{
    for (int i = 0; i < n; i++) {
        Xform x = {.p = p, .st = &st[i], .sched = sched};
        apply_stmt(&x);
    }
}

const Schedule *schedule_find(Program *p, const char *name)
{
    for (int i = 0; i < p->nsched; i++)
        if (!strcmp(p->sched[i].name, name))
            return &p->sched[i];
    return NULL;
}

void schedule_apply(Program *p, const Schedule *s)
{
    p->applied = s->name;
    schedule_apply_stmts(p, s->name, s->stmt, s->nstmt);
}

Program *schedule_applied(Program *p, const Schedule *s, char *err, size_t errlen)
{
    Program *clone = program_clone(p);
    char ignored[8];
    ErrorCtx ctx;
    error_push(&ctx, errlen ? err : ignored, errlen ? errlen : sizeof ignored,
               s->file ? s->file : p->file, s->src ? s->src : p->src);
    if (setjmp(ctx.jb)) {
        error_pop(&ctx);
        program_free(clone);
        return NULL;
    }
    schedule_apply(clone, s);
    error_pop(&ctx);
    return clone;
}

/* sched.c: applies a named schedule to a clone of the program, one
 * statement at a time, verifying the whole graph after each (what the
 * transformations share, names and refusals, is in xform.c). */
#include "sched/sched.h"

#include <string.h>

static const struct {
    const char *verb;
    void (*apply)(const Xform *);
} verbs[] = {
    {"split", xform_split},     {"reorder", xform_reorder}, {"fuse", xform_fuse_verb},
    {"overlap", xform_overlap}, {"asSlice", xform_asslice}, {"dead", xform_dead},
};

static void apply_stmt(const Xform *x)
{
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(x->st->verb, verbs[i].verb)) {
            verbs[i].apply(x);
            program_resort(x->p);
            verify_program(x->p);
            return;
        }
    error_at(x->st->pos, "schedule '%s': unknown transformation '%s' (use split, reorder, fuse, "
             "overlap, asSlice or dead)", x->sched, x->st->verb);
}

SchedStmt schedule_stmt(Arena *a, const char *verb, const char **args, int nargs,
                        const char *policy)
{
    SchedStmt st;
    memset(&st, 0, sizeof st);
    st.verb = verb;
    st.arg = arena_alloc(a, (size_t)(nargs + 1) * sizeof(char *));
    st.argpos = arena_alloc(a, (size_t)(nargs + 1) * sizeof(Pos));
    for (int i = 0; i < nargs; i++)
        st.arg[i] = arena_strdup(a, args[i]);
    st.narg = nargs;
    st.policy = policy;
    return st;
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

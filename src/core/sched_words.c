/* sched_words.c: the words of schedule statements, made from the one table
 * in coco.h (SCHED_VERBS, SCHED_POLICIES). The parser reads a statement's
 * words into a Verb and a Policy once; everything after switches on them,
 * and the printer and messages write them back from here. */
#include "coco.h"

#include <string.h>

static const char *const verb_words[V_UNKNOWN] = {
#define SCHED_VERB(id, word) [id] = word,
    SCHED_VERBS(SCHED_VERB)
#undef SCHED_VERB
};

static const struct {
    const char *word;
    int fuse; /* FuseKind, or -1 */
} policies[NPOLICY] = {
#define SCHED_POLICY(id, word, fuse) [id] = {word, fuse},
    SCHED_POLICIES(SCHED_POLICY)
#undef SCHED_POLICY
};

const char *verb_word(Verb v)
{
    return v >= 0 && v < V_UNKNOWN ? verb_words[v] : NULL;
}

Verb verb_parse(const char *word)
{
    for (int v = 0; v < V_UNKNOWN; v++)
        if (!strcmp(word, verb_words[v]))
            return (Verb)v;
    return V_UNKNOWN;
}

const char *stmt_verb_word(const SchedStmt *st)
{
    return st->verb == V_UNKNOWN ? st->unknown : verb_word(st->verb);
}

const char *policy_word(Policy p)
{
    return p > P_NONE && p < NPOLICY ? policies[p].word : NULL;
}

Policy policy_parse(const char *word)
{
    for (int p = P_NONE + 1; p < NPOLICY; p++)
        if (!strcmp(word, policies[p].word))
            return (Policy)p;
    return P_NONE;
}

int policy_fuse_kind(Policy p)
{
    return p > P_NONE && p < NPOLICY ? policies[p].fuse : -1;
}

Policy fuse_kind_policy(FuseKind k)
{
    for (int p = P_NONE + 1; p < NPOLICY; p++)
        if (policies[p].fuse == (int)k)
            return (Policy)p;
    BUG("no policy makes fused operations of kind %d", (int)k);
}

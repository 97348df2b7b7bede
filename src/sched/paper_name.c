/* paper_name.c: an enumerated schedule's name in the paper's notation,
 * read off the scheduled program: its operations in order as tokens (MM,
 * AR, RS, AG, P2P, C for a run of computations, Opt for an optimizer's),
 * fused collectives as fuse(...) and each overlap as ol(...), e.g.
 * ol(MM,fuse(RS-C-AG)) or ol(MM,RS)-C-ol(AG,MM). A name has no length
 * limit: its text grows. */
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *buf; /* malloc'd, NUL-terminated */
    size_t len, cap;
    int last_comp; /* the last token was a computation */
} Name;

/* Appends a then b. */
static void append(Name *nm, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (nm->len + la + lb + 1 > nm->cap) {
        nm->cap = 2 * (nm->len + la + lb + 1);
        nm->buf = realloc(nm->buf, nm->cap);
        if (!nm->buf)
            BUG("out of memory");
    }
    memcpy(nm->buf + nm->len, a, la);
    memcpy(nm->buf + nm->len + la, b, lb + 1);
    nm->len += la + lb;
}

static char last_char(const Name *nm)
{
    return nm->len ? nm->buf[nm->len - 1] : '(';
}

static void put(Name *nm, const char *tok, int comp)
{
    if (comp && nm->last_comp)
        return;
    size_t tl = strlen(tok);
    if (nm->len >= tl && !strcmp(nm->buf + nm->len - tl, tok) &&
        (nm->len == tl || nm->buf[nm->len - tl - 1] == '-'))
        return; /* AG-AG is one AG */
    char last = last_char(nm);
    append(nm, last == '(' || last == ',' ? "" : "-", tok);
    nm->last_comp = comp;
}

static void put_raw(Name *nm, const char *s)
{
    append(nm, s, "");
    nm->last_comp = 0;
}

static const char *token(Program *q, const Node *n, int *comp)
{
    *comp = 0;
    if (n->op == O_ALLREDUCE && node_of(q, n->in[0])->op == O_PARTIAL_REDUCE)
        return NULL; /* a Norm's sum across ranks, part of the computation */
    if (op_info(n->op)->paper)
        return op_info(n->op)->paper;
    if (!is_computation(n) || n->op == O_SLICE || n->op == O_TRANSPOSE) /* moves, not computes */
        return NULL;
    *comp = 1;
    return "C";
}

static int has_update(Program *q)
{
    for (int i = 0; i < q->nnode; i++)
        if (q->node[i].op == O_UPDATE)
            return 1;
    return 0;
}

static void put_node(Name *nm, Program *q, const Node *n, const char *comp_name)
{
    int comp;
    const char *t = token(q, n, &comp);
    if (t)
        put(nm, comp ? comp_name : t, comp);
}

static void put_fusion(Name *nm, Program *q, int f, const char *comp_name, int *done)
{
    if (q->fusion[f].kind == F_COMPUTATION) {
        put(nm, comp_name, 1);
    } else {
        if (nm->len && last_char(nm) != '(' && last_char(nm) != ',')
            put_raw(nm, "-");
        put_raw(nm, "fuse(");
        static const char *const order[] = {"RS", "C", "P2P", "AG"};
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < q->nnode; i++) {
                int comp;
                const char *t = q->node[i].fusion == f ? token(q, &q->node[i], &comp) : NULL;
                if (t && !strcmp(t, order[k]))
                    put(nm, comp ? comp_name : t, comp);
            }
        put_raw(nm, ")");
    }
    done[f] = 1;
}

/* ol_of[i]: the overlap node i is in (as an item, the MatMul a
 * computation item stands for, or a member of a fused item), or -1; the
 * rest of a computation item's statement is named after the overlap. */
static void mark_overlaps(Program *q, int *ol_of)
{
    int *fusion_ol = xmalloc(((size_t)q->nfusion + 1) * sizeof(int));
    for (int f = 0; f < q->nfusion; f++)
        fusion_ol[f] = -1;
    for (int i = 0; i < q->nnode; i++)
        ol_of[i] = -1;
    for (int o = 0; o < q->noverlap; o++)
        for (int k = 0; k < q->overlap[o].nitem; k++) {
            Ref r = q->overlap[o].item[k];
            if (REF_IS_FUSION(r))
                fusion_ol[REF_FUSION_INDEX(r)] = o;
            else
                ol_of[overlap_operation(q, r)] = o;
        }
    for (int i = 0; i < q->nnode; i++)
        if (q->node[i].fusion >= 0 && fusion_ol[q->node[i].fusion] >= 0)
            ol_of[i] = fusion_ol[q->node[i].fusion];
    free(fusion_ol);
}

static void put_overlap(Name *nm, Program *q, const Overlap *ol, const char *comp, int *done)
{
    if (nm->len)
        put_raw(nm, "-");
    put_raw(nm, "ol(");
    for (int k = 0; k < ol->nitem; k++) {
        if (k)
            put_raw(nm, ",");
        Ref r = ol->item[k];
        if (REF_IS_FUSION(r))
            put_fusion(nm, q, REF_FUSION_INDEX(r), comp, done);
        else
            put_node(nm, q, node_of(q, overlap_operation(q, r)), comp);
    }
    put_raw(nm, ")");
}

/* Node i's part of the name: the overlap it is in (once), its fused
 * operation (once), or its own token. */
static void put_part(Name *nm, Program *q, int i, const char *comp, int *done, const int *ol_of,
                     char *ol_done)
{
    Node *n = &q->node[i];
    int o = ol_of[i];
    if (o >= 0) {
        if (!ol_done[o])
            put_overlap(nm, q, &q->overlap[o], comp, done);
        ol_done[o] = 1;
    } else if (n->fusion >= 0) {
        if (!done[n->fusion])
            put_fusion(nm, q, n->fusion, comp, done);
    } else {
        put_node(nm, q, n, comp);
    }
}

static const char *paper_name(Arena *a, Program *q)
{
    Name nm = {NULL, 0, 0, 0};
    const char *comp = has_update(q) ? "Opt" : "C";
    int *done = xcalloc((size_t)q->nfusion + 1, sizeof(int));
    char *ol_done = xcalloc((size_t)q->noverlap + 1, 1);
    int *ol_of = xmalloc(((size_t)q->nnode + 1) * sizeof(int));
    mark_overlaps(q, ol_of);
    for (int i = 0; i < q->nnode; i++)
        put_part(&nm, q, i, comp, done, ol_of, ol_done);
    free(ol_of);
    free(ol_done);
    free(done);
    const char *name = arena_strdup(a, nm.len ? nm.buf : "C");
    free(nm.buf);
    return name;
}

/* The paper's tables write computations before a P2P as P2P-C (its text as
 * C-P2P); where a name has C-P2P, the other spelling is given too. */
static const char *with_paper_alias(Arena *a, const char *note)
{
    if (!strstr(note, "C-P2P"))
        return note;
    char *alias = arena_strdup(a, note);
    for (char *c = alias; (c = strstr(c, "C-P2P")); c += 5)
        memcpy(c, "P2P-C", 5);
    return arena_printf(a, "%s (paper: %s)", note, alias);
}

const char *paper_note(Arena *a, Program *q)
{
    return with_paper_alias(a, paper_name(a, q));
}

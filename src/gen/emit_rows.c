/* emit_rows.c: row kernels, for computations that hold row reductions (Norm
 * or ReduceTensor along the last dimension, with Keep: a LayerNorm, an
 * RMSNorm, a softmax) and the elementwise computations around them. Two
 * forms share the code below:
 *   - a FusedAllReduce whose slices are whole rows (its ReduceScatter along
 *     dimension 0, its rows along the last dimension: emit_lsa_plan.c
 *     decides), as one kernel over the peers' memory with emit_lsa.c's
 *     launch, barriers and chunks: each rank takes the rows of its slice,
 *     loads each row's elements from every peer and sums them in double in
 *     rank order (the CPU's bits), computes the row, and stores the
 *     gathered values into every peer's buffer; at P = 1 the same kernel is
 *     the computation over the local rows (its one-rank form);
 *   - a fused computation's row reductions and elementwise members (a
 *     ComputationFuse, or a FusedAllReduce's NCCL path between its
 *     ReduceScatter and AllGather) as one kernel of one segment
 *     (emit_cuda.c), launched at its first member that follows its
 *     operands.
 *
 * A row goes to a group of W warps (coco_rows.cuh): each thread holds R
 * vectors of V elements (R and W template parameters: each vector's place
 * is a constant offset, and a row's code one block of straight code, the
 * vectors past the row masked: `ok`). The members of the rows' shape S are
 * computed element by element, the members of S's shape with a last extent
 * of 1 once a row (in every thread of its group), 0-dim members once a
 * thread. The computation goes in phases: phase p computes the row values
 * known from the row reductions finalized by phase p - 1, then, element by
 * element, the members that need them and the row reductions of those; at
 * its end each reduction is folded over the row (coco_rows_fold) and
 * rounded once to its type. Each operand is loaded once, at the first
 * phase that reads it, every vector's load before any is used, into
 * registers (la<x>[R][...], 32-bit words: coco_rows.cuh, CocoRowWords), and
 * a member read in a later phase than its own is kept there (ha<x>); values
 * are stored where they are computed. Rows longer than the registers hold
 * take the streaming form (R = 0): each phase loads its operands again and
 * computes the element values of the earlier phases again, with the same
 * operations, so the same bits.
 * Operands are read element by element (of S's shape), per column
 * (broadcast along the rows: a bias, LayerNorm's gamma and beta: a vector
 * at the column), per row (S's shape with a last extent of 1: a statistic
 * saved by the forward; in a FusedAllReduce, a Slice of one) or once
 * (Scalars, 0-dim values); any other broadcast keeps the other lowering.
 * The arithmetic is emit_value.c's, element by element as elsewhere, so
 * that results are the CPU's but for the order of a row reduction's sum
 * (coco_rows.cuh: exact for FP16 rows up to 8192 elements, else within the
 * documented tolerance: doc/gpu.md, Row kernels). */
#include "gen/emit_lsa.h"

#include "coconet_cuda.h" /* COCO_ROWS_SHAPES */

#include <string.h>

/* The shapes (R, W) of the instances held in registers */
#define ROW_SHAPE_ITEM(r, w) {r, w},
static const int row_shapes[][2] = {COCO_ROWS_SHAPES(ROW_SHAPE_ITEM)};
enum { NROW_SHAPES = sizeof row_shapes / sizeof *row_shapes };

typedef struct {
    int *m, nm;         /* members, in program order */
    int *in, nin;       /* operands read from outside (memory or scalars), each once */
    int shape;          /* a node of the rows' shape S */
    char *role;         /* per node: RR_* (emit_cuda.h) */
    signed char *phase; /* per member: the phase from which its value is known */
    int nphase;         /* at most 63 */
    uint64_t *reads;    /* per node: the phases whose element loops read it (bit p) */
    signed char *since; /* per node: the streaming form's, every phase from this one on
                           (element values computed again), else 127 */
    const Lsa *l;       /* the FusedAllReduce's plan, or NULL: a segment */
    int seg;            /* the segment number its members take while written */
} Rows;

static Node *nd(Emitter *e, int id)
{
    return node_of(e->p, id);
}

static const char *tn(Emitter *e, int id)
{
    return emit_tname[nd(e, id)->type];
}

/* ---- the analysis: roles and phases ---- */

static int member_role(Emitter *e, const Rows *w, const Node *n)
{
    const Node *s = nd(e, w->shape);
    if (w->l && n->op == O_SLICE && emit_row_shaped(n, s))
        return RR_ROWLOAD;
    if (w->l && (n->id == w->l->rs || n->op == O_SLICE))
        return RR_LOAD;
    if (w->l && n->op == O_ALLGATHER)
        return RR_GATHER;
    if (emit_row_reduction(e->p, n))
        return RR_RED;
    if (!emit_is_elementwise(n))
        return RR_NONE;
    if (n->ndim == 0)
        return RR_ZERO;
    if (emit_same_local_shape(n, s))
        return RR_ELEM;
    return emit_row_shaped(n, s) ? RR_ROW : RR_NONE;
}

static int operand_role(Emitter *e, const Rows *w, const Node *x)
{
    const Node *s = nd(e, w->shape);
    if (x->op == O_SCALAR || x->ndim == 0)
        return RR_SCALAR;
    if (emit_same_local_shape(x, s))
        return RR_FLAT;
    if (emit_col_shaped(x, s))
        return RR_COL;
    return emit_row_shaped(x, s) ? RR_ROWIN : RR_NONE;
}

static int is_member(const Rows *w, int id)
{
    return w->role[id] >= RR_ZERO && w->role[id] <= RR_GATHER;
}

/* Does member n read its input j as a value (not the input of a load, the
 * ReduceScatter's or a Slice's, nor an Update's tensor)? */
static int reads_input(const Rows *w, const Node *n, int j)
{
    return !(n->op == O_UPDATE && j == 0) && w->role[n->id] != RR_LOAD &&
           w->role[n->id] != RR_ROWLOAD;
}

/* The members' roles, then their operands'; 0 when one has none. */
static int find_roles(Emitter *e, Rows *w)
{
    for (int k = 0; k < w->nm; k++) {
        Node *n = nd(e, w->m[k]);
        w->role[n->id] = (char)member_role(e, w, n);
        if (w->role[n->id] == RR_NONE)
            return 0;
    }
    for (int k = 0; k < w->nm; k++) {
        Node *n = nd(e, w->m[k]);
        for (int j = 0; j < n->nin; j++) {
            Node *x = nd(e, n->in[j]);
            if (!reads_input(w, n, j) || is_member(w, x->id) || x->op == O_CONST ||
                emit_in_list(w->in, w->nin, x->id))
                continue;
            w->in[w->nin++] = x->id;
            w->role[x->id] = (char)operand_role(e, w, x);
            if (w->role[x->id] == RR_NONE)
                return 0;
        }
    }
    return 1;
}

/* Is member n computable as its role says? A reduction folds a value of
 * S's shape, a gather gathers a value of a row or of S's shape, a Dropout
 * is of S's shape (its index is lg + i: cut along dimension 0 at most). */
static int member_fits(Emitter *e, const Rows *w, const Node *n)
{
    int in = n->nin ? w->role[n->in[0]] : RR_NONE;
    switch (w->role[n->id]) {
    case RR_RED:
        return in == RR_ELEM || in == RR_LOAD || in == RR_FLAT;
    case RR_GATHER:
        return in == RR_ELEM || in == RR_LOAD || in == RR_ROW || in == RR_ROWLOAD || in == RR_RED;
    case RR_ROW:
        return n->op != O_DROPOUT;
    case RR_ELEM:
        return n->op != O_DROPOUT || n->layout.kind != L_SLICED || n->layout.dim == 0;
    default:
        return 1;
    }
}

/* phase[]: a reduction's value is known from the phase after its input's,
 * any other member's from its latest input's (loads and operands: 0). */
static void find_phases(Emitter *e, Rows *w)
{
    w->nphase = 1;
    for (int k = 0; k < w->nm; k++) {
        Node *n = nd(e, w->m[k]);
        int p = 0;
        for (int j = 0; j < n->nin; j++)
            if (reads_input(w, n, j) && is_member(w, n->in[j]) && w->phase[n->in[j]] > p)
                p = w->phase[n->in[j]];
        if (w->role[n->id] == RR_RED)
            p++;
        w->phase[n->id] = (signed char)p;
        if (p + 1 > w->nphase)
            w->nphase = p + 1;
    }
}

static void rows_free(Emitter *e, Rows *w)
{
    emit_free(e, w->in);
    emit_free(e, w->role);
    emit_free(e, w->phase);
    emit_free(e, w->reads);
    emit_free(e, w->since);
}

static int per_element(Emitter *e, const Rows *w, int id);
static int code_phase(const Rows *w, int id);

/* reads[] and since[]: where the element code reads each value */
static void find_reads(Emitter *e, Rows *w)
{
    memset(w->since, 127, (size_t)e->p->nnode);
    for (int k = 0; k < w->nm; k++) {
        Node *n = nd(e, w->m[k]);
        if (!per_element(e, w, n->id))
            continue;
        for (int j = 0; j < n->nin; j++) {
            int x = n->in[j];
            if (!reads_input(w, n, j))
                continue;
            w->reads[x] |= (uint64_t)1 << code_phase(w, n->id);
            if (w->role[n->id] == RR_ELEM && w->phase[n->id] < w->since[x])
                w->since[x] = w->phase[n->id];
        }
    }
}

/* Roles, operands and phases of w's members (w->m, w->shape, w->l);
 * 0 when they are not a row kernel's. Free with rows_free. */
static int rows_analyse(Emitter *e, Rows *w)
{
    size_t nn = (size_t)e->p->nnode;
    w->in = emit_alloc(e, (nn * MAXIN + 1) * sizeof(int));
    w->role = emit_alloc(e, nn);
    w->phase = emit_alloc(e, nn);
    w->reads = emit_alloc(e, nn * sizeof(uint64_t));
    w->since = emit_alloc(e, nn);
    w->nin = 0;
    if (!find_roles(e, w))
        return 0;
    for (int k = 0; k < w->nm; k++)
        if (!member_fits(e, w, nd(e, w->m[k])))
            return 0;
    find_phases(e, w);
    if (w->nphase > 63)
        return 0;
    find_reads(e, w);
    return 1;
}

/* ---- which code reads what, where ---- */

/* Does member id compute element by element (its own value, a fold's
 * step, a gathered element)? */
static int per_element(Emitter *e, const Rows *w, int id)
{
    int r = w->role[id];
    int in = r == RR_GATHER ? w->role[nd(e, id)->in[0]] : RR_NONE;
    return r == RR_ELEM || r == RR_RED || in == RR_ELEM || in == RR_LOAD;
}

/* The phase of member id's element code: a reduction folds in its input's */
static int code_phase(const Rows *w, int id)
{
    return w->role[id] == RR_RED ? w->phase[id] - 1 : w->phase[id];
}

/* Is member id's element code in phase p's loop? In the streaming form
 * (stream) that loop computes again the element values of every earlier
 * phase. */
static int in_pass(Emitter *e, const Rows *w, int id, int p, int stream)
{
    if (!per_element(e, w, id))
        return 0;
    if (stream && w->role[id] == RR_ELEM)
        return w->phase[id] <= p;
    return code_phase(w, id) == p;
}

/* Does phase p's element loop read x? */
static int pass_reads(Emitter *e, const Rows *w, int x, int p, int stream)
{
    return (w->reads[x] >> p & 1) || (stream && p >= w->since[x]);
}

static int pass_has_elements(Emitter *e, const Rows *w, int p, int stream)
{
    for (int k = 0; k < w->nm; k++)
        if (in_pass(e, w, w->m[k], p, stream))
            return 1;
    return 0;
}

/* The first phase whose element loop reads x (with registers), or -1 */
static int first_read(Emitter *e, const Rows *w, int x)
{
    for (int p = 0; p < w->nphase; p++)
        if (pass_reads(e, w, x, p, 0))
            return p;
    return -1;
}

/* Is member id read in a later phase than its own (kept in ha<id>)? */
static int held(Emitter *e, const Rows *w, int id)
{
    if (w->role[id] != RR_ELEM)
        return 0;
    for (int p = w->phase[id] + 1; p < w->nphase; p++)
        if (pass_reads(e, w, id, p, 0))
            return 1;
    return 0;
}

/* Is x loaded element by element into la<x> (a load member, a flat operand)? */
static int loaded(const Rows *w, int x)
{
    return w->role[x] == RR_LOAD || w->role[x] == RR_FLAT;
}

/* Must member id be written to memory: a segment's stored value
 * (emit_stored), or one a FusedAllReduce keeps locally (not gathered)? */
static int stored(Emitter *e, const Rows *w, int id)
{
    if (!w->l)
        return emit_stored(e, id);
    return w->role[id] != RR_GATHER && emit_needed_outside(e, w->l->m, w->l->nm, id);
}

/* ---- the kernel's code ---- */
/* Indentation: the kernel's body (B), a row's code (RI), a vector's (VI)
 * and an element's (EI) */
#define B "    "
#define RI "            "
#define VI "                "
#define EI "                    "

/* Rows of S's shape: H, the group's G threads (W warps: the instance's, or
 * in the streaming form the host's rule), the thread's place in it */
static void emit_setup(Emitter *e, const Rows *w)
{
    FILE *o = e->o;
    for (int k = 0; k < w->nm; k++)
        if (nd(e, w->m[k])->op == O_DROPOUT && w->role[w->m[k]] == RR_ELEM)
            fprintf(o, B "const long lg%d = coco_lin_gbase(h%d); /* the part's first index */\n"
                       B "(void)lg%d;\n", w->m[k], w->m[k], w->m[k]);
    fprintf(o, B "const long H = it.dim[it.nd - 1];\n"
               B "const int G = 32 * (W > 0 ? W : coco_rows_stream_warps(H, V)), RB = (int)blockDim.x / G;\n"
               B "const int tix = (int)threadIdx.x %% G, slot = (int)threadIdx.x / G;\n"
               B "__shared__ double fold[COCO_ROWS_THREADS / 32];\n" B "(void)fold;\n");
}

/* The 0-dim members, once a thread before the rows */
static void emit_zero_members(Emitter *e, const Rows *w)
{
    for (int k = 0; k < w->nm; k++) {
        Node *n = nd(e, w->m[k]);
        if (w->role[n->id] != RR_ZERO)
            continue;
        emit_value_statement(e, w->seg, n);
        fprintf(e->o, B "(void)r%d;\n", n->id);
        if (stored(e, w, n->id))
            fprintf(e->o, B "if (blockIdx.x == 0 && threadIdx.x == 0)\n" B B "coco_st(y%d, 0, %s, "
                          "r%d);\n", n->id, tn(e, n->id), n->id);
    }
}

/* Vector k of x (a load member, a flat operand) into its words la<x>[k] */
static void emit_load(Emitter *e, const Rows *w, int x, const char *indent)
{
    FILE *o = e->o;
    Node *n = nd(e, x);
    const char *t = tn(e, x);
    if (w->l && x == w->l->rs) /* from every peer, summed in rank order */
        fprintf(o, "%scoco_rows_reduce<V, %s, P>(win, o%d, base, i0, n, %d, la%d[k]);\n", indent, t,
                n->in[0], (int)n->redop, x);
    else if (w->role[x] == RR_LOAD) /* a Slice: the whole tensor at the part */
        fprintf(o, "%scoco_rows_ld<V, %s>((const char *)z%d + base * %zu, i0, la%d[k]);\n", indent,
                t, n->in[0], type_size(n->type), x);
    else
        fprintf(o, "%scoco_rows_ld<V, %s>(x%d, i0, la%d[k]);\n", indent, t, x, x);
}

/* The declaration of x's words, [rows] vectors of them */
static void emit_words(Emitter *e, const char *name, int x, const char *rows, const char *indent)
{
    fprintf(e->o, "%salignas(16) uint32_t %s%d[%s][CocoRowWords<V, %s>::N];\n", indent, name, x,
            rows, tn(e, x));
}

/* The loop over a row's vectors: the thread's R (registers), each a
 * constant offset, the row's code one block of straight code (a vector
 * past the row, ok 0, reads the row's first and stores nothing); or, in
 * the streaming form, all of them W warps at a time */
static void emit_vectors_open(Emitter *e, int stream)
{
    if (stream)
        fprintf(e->o, RI "for (long col0 = (long)tix * V; live && col0 < H; col0 += (long)G * V) {\n"
                      VI "constexpr int k = 0;\n" VI "constexpr bool ok = true;\n"
                      VI "const long c0 = col0, i0 = row * H + col0;\n"
                      VI "(void)k;\n" VI "(void)ok;\n" VI "(void)c0;\n" VI "(void)i0;\n");
    else
        fprintf(e->o, "#pragma unroll\n" RI "for (int k = 0; k < R; k++) {\n"
                      VI "const long col0 = ((long)k * G + tix) * V;\n"
                      VI "const bool ok = live && col0 < H;\n"
                      VI "const long c0 = ok ? col0 : 0, i0 = rrow * H + c0;\n"
                      VI "(void)c0;\n" VI "(void)i0;\n");
}

/* Register form: the loads that phase p reads first, every vector's in
 * flight before any is used */
static void emit_load_loop(Emitter *e, const Rows *w, int p)
{
    int any = 0;
    for (int k = 0; k < w->nin + w->nm && !any; k++) {
        int x = k < w->nin ? w->in[k] : w->m[k - w->nin];
        any = loaded(w, x) && first_read(e, w, x) == p;
    }
    if (!any)
        return;
    emit_vectors_open(e, 0);
    for (int k = 0; k < w->nin + w->nm; k++) {
        int x = k < w->nin ? w->in[k] : w->m[k - w->nin];
        if (loaded(w, x) && first_read(e, w, x) == p)
            emit_load(e, w, x, VI);
    }
    fprintf(e->o, RI "}\n");
}

/* The streaming form: phase p's loads, each vector's */
static void emit_stream_loads(Emitter *e, const Rows *w, int p)
{
    for (int k = 0; k < w->nin + w->nm; k++) {
        int x = k < w->nin ? w->in[k] : w->m[k - w->nin];
        if (!loaded(w, x) || !pass_reads(e, w, x, p, 1))
            continue;
        emit_words(e, "la", x, "1", VI);
        emit_load(e, w, x, VI);
    }
}

/* Does member id's element code stage its vector for a store in phase p? */
static int stages(Emitter *e, const Rows *w, int id, int p)
{
    if (w->role[id] == RR_GATHER)
        return per_element(e, w, id) && w->phase[id] == p;
    return w->role[id] == RR_ELEM && w->phase[id] == p && stored(e, w, id);
}

/* Is member id computed in phase p and read later (register form)? */
static int holds(Emitter *e, const Rows *w, int id, int p, int stream)
{
    return !stream && w->phase[id] == p && held(e, w, id);
}

/* Is x read by phase p's element loop from its words (la<x> or ha<x>)? */
static const char *unpacked(Emitter *e, const Rows *w, int x, int p, int stream)
{
    if (!pass_reads(e, w, x, p, stream))
        return NULL;
    if (loaded(w, x))
        return "la";
    return !stream && w->role[x] == RR_ELEM && w->phase[x] < p ? "ha" : NULL;
}

/* Before a vector's elements: its column operands' vectors (lb<x>), the
 * raw copies (u<x>) of the words it reads (a flat operand's through
 * l<x>), and the arrays staging its stores (g<x>) and its held values
 * (hs<x>) */
static void emit_vector_head(Emitter *e, const Rows *w, int p, int stream)
{
    FILE *o = e->o;
    for (int k = 0; k < w->nin + w->nm; k++) {
        int x = k < w->nin ? w->in[k] : w->m[k - w->nin];
        const char *words = unpacked(e, w, x, p, stream), *t = tn(e, x);
        if (w->role[x] == RR_COL && pass_reads(e, w, x, p, stream))
            fprintf(o, VI "alignas(16) CocoRaw<%s> lb%d[V];\n" VI "coco_rows_ld<V, %s>(x%d, c0, lb%d);\n",
                    t, x, t, x, x);
        if (words)
            fprintf(o, VI "alignas(16) CocoRaw<%s> u%d[V];\n" VI "coco_rows_unpack<V, %s>(%s%d[k], u%d);\n",
                    t, x, t, words, x, x);
        if (words && w->role[x] == RR_FLAT)
            fprintf(o, VI "const CocoRaw<%s> *l%d = u%d;\n", t, x, x);
    }
    for (int k = 0; k < w->nm; k++) {
        int x = w->m[k];
        if (stages(e, w, x, p))
            fprintf(o, VI "alignas(16) CocoRaw<%s> g%d[V];\n", tn(e, x), x);
        if (holds(e, w, x, p, stream))
            fprintf(o, VI "alignas(16) CocoRaw<%s> hs%d[V];\n", tn(e, x), x);
    }
}

/* r<x> from its raw copy, for the element code that reads it: a load
 * member's, or (register form) a member's of an earlier phase */
static void emit_reloads(Emitter *e, const Rows *w, int p, int stream)
{
    for (int k = 0; k < w->nm; k++) {
        int x = w->m[k];
        if (unpacked(e, w, x, p, stream))
            emit_register_load(e, EI, nd(e, x), arena_printf(e->p->arena, "u%d", x));
    }
}

/* Reduction n's step (coco_red_step's operation) and its fold's */
static int red_step(const Node *n)
{
    return n->op == O_NORM ? (int)R_SUMSQ : (int)n->redop;
}

static int red_combine(const Node *n)
{
    return n->op == O_NORM ? (int)R_SUM : (int)n->redop;
}

/* Member id's element code in phase p: its value, or a gathered element,
 * or a fold's step (of the vectors of the row alone: ok) */
static void emit_element_member(Emitter *e, const Rows *w, int id, int p, int stream)
{
    FILE *o = e->o;
    Node *n = nd(e, id);
    const char *t = tn(e, id);
    if (w->role[id] == RR_GATHER) {
        fprintf(o, EI "coco_st(g%d, v, %s, r%d);\n", id, t, n->in[0]);
    } else if (w->role[id] == RR_RED) {
        fprintf(o, EI "if (ok)\n" EI "    a%d = coco_red_step(%d, a%d, ", id, red_step(n), id);
        emit_operand_value(e, w->seg, n->in[0], 0);
        fprintf(o, ");\n");
    } else {
        emit_value_statement(e, w->seg, n);
        fprintf(o, EI "(void)r%d;\n", id);
        if (holds(e, w, id, p, stream))
            fprintf(o, EI "coco_st(hs%d, v, %s, r%d);\n", id, t, id);
        if (stages(e, w, id, p))
            fprintf(o, EI "coco_st(g%d, v, %s, r%d);\n", id, t, id);
    }
}

/* After a vector's elements: its held values into their words, its
 * stores (the vectors of the row alone), locally or into every peer */
static void emit_vector_stores(Emitter *e, const Rows *w, int p, int stream)
{
    for (int k = 0; k < w->nm; k++) {
        int id = w->m[k];
        const char *t = tn(e, id);
        if (holds(e, w, id, p, stream))
            fprintf(e->o, VI "coco_rows_pack<V, %s>(ha%d[k], hs%d);\n", t, id, id);
        if (!stages(e, w, id, p))
            continue;
        if (w->role[id] == RR_GATHER)
            fprintf(e->o, VI "if (ok)\n" VI "    coco_rows_store<V, %s, P>(win, o%d, base, i0, g%d);\n",
                    t, id, id);
        else
            fprintf(e->o, VI "if (ok)\n" VI "    coco_rows_st<V, %s>(y%d, i0, g%d);\n", t, id, id);
    }
}

/* Phase p's loop over the row's vectors */
static void emit_element_loop(Emitter *e, const Rows *w, int p, int stream)
{
    FILE *o = e->o;
    emit_vectors_open(e, stream);
    if (stream)
        emit_stream_loads(e, w, p);
    emit_vector_head(e, w, p, stream);
    fprintf(o, "#pragma unroll\n" VI "for (int v = 0; v < V; v++) {\n"
               EI "const long i = i0 + v;\n" EI "(void)i;\n");
    emit_reloads(e, w, p, stream);
    for (int k = 0; k < w->nm; k++)
        if (in_pass(e, w, w->m[k], p, stream))
            emit_element_member(e, w, w->m[k], p, stream);
    fprintf(o, VI "}\n");
    emit_vector_stores(e, w, p, stream);
    fprintf(o, RI "}\n");
}

/* A row's value r<id> to memory: locally, or (gather g) into every peer,
 * by the row's first thread */
static void emit_row_store(Emitter *e, int id, int g)
{
    if (g >= 0)
        fprintf(e->o, RI "if (live && tix == 0)\n" RI "    coco_rows_store_one<%s, P>(win, o%d, "
                      "base / H + row, r%d);\n", tn(e, g), g, id);
    else
        fprintf(e->o, RI "if (live && tix == 0)\n" RI "    coco_st(y%d, row, %s, r%d);\n", id,
                tn(e, id), id);
}

/* Phase p's values of a row, at its start: the row members known from the
 * reductions folded before, and the gathers of row values */
static void emit_row_members(Emitter *e, const Rows *w, int p)
{
    for (int k = 0; k < w->nm; k++) {
        Node *n = nd(e, w->m[k]);
        if (w->phase[n->id] != p)
            continue;
        if (w->role[n->id] == RR_ROWLOAD) { /* the whole tensor at the part's row */
            fprintf(e->o, RI "%s r%d = ((const CocoRaw<%s> *)z%d)[base / H + rrow];\n",
                    emit_value_type(e, n->type), n->id, tn(e, n->id), n->in[0]);
        } else if (w->role[n->id] == RR_ROW) {
            emit_value_statement(e, w->seg, n);
            fprintf(e->o, RI "(void)r%d;\n", n->id);
            if (stored(e, w, n->id))
                emit_row_store(e, n->id, -1);
        } else if (w->role[n->id] == RR_GATHER && !per_element(e, w, n->id)) {
            emit_row_store(e, n->in[0], n->id);
        }
    }
}

/* Phase p's end: each reduction folded over the row, rounded once */
static void emit_folds(Emitter *e, const Rows *w, int p)
{
    for (int k = 0; k < w->nm; k++) {
        Node *n = nd(e, w->m[k]);
        if (w->role[n->id] != RR_RED || code_phase(w, n->id) != p)
            continue;
        fprintf(e->o, RI "a%d = coco_rows_fold(%d, a%d, G / 32, fold);\n", n->id, red_combine(n),
                n->id);
        emit_register_round(e, RI, n, arena_printf(e->p->arena, n->op == O_NORM ? "__dsqrt_rn(a%d)"
                                                                                  : "a%d", n->id));
        fprintf(e->o, RI "(void)r%d;\n", n->id);
        if (stored(e, w, n->id))
            emit_row_store(e, n->id, -1);
    }
}

/* A row's code in the register form (stream 0) or the streaming one */
static void emit_row_body(Emitter *e, const Rows *w, int stream)
{
    FILE *o = e->o;
    for (int k = 0; k < w->nin + w->nm && !stream; k++) {
        int x = k < w->nin ? w->in[k] : w->m[k - w->nin];
        if (loaded(w, x) && first_read(e, w, x) >= 0)
            emit_words(e, "la", x, "R", RI);
        if (held(e, w, x))
            emit_words(e, "ha", x, "R", RI);
    }
    for (int k = 0; k < w->nm; k++)
        if (w->role[w->m[k]] == RR_RED)
            fprintf(o, RI "double a%d = coco_rows_identity(%d);\n", w->m[k],
                    red_step(nd(e, w->m[k])));
    for (int p = 0; p < w->nphase; p++) {
        fprintf(o, RI "/* phase %d */\n", p);
        emit_row_members(e, w, p);
        if (!stream)
            emit_load_loop(e, w, p);
        if (pass_has_elements(e, w, p, stream))
            emit_element_loop(e, w, p, stream);
        emit_folds(e, w, p);
    }
}

/* The loop over rows [lo, hi), RB a block a step; a group past hi (live
 * 0) joins the folds' syncs and reads row rb where it reads */
static void emit_rows_loop(Emitter *e, const Rows *w, const char *lo, const char *hi)
{
    fprintf(e->o, B "for (long rb = %s + (long)blockIdx.x * RB; rb < %s; rb += (long)gridDim.x * RB) {\n"
                  B "    const long row = rb + slot;\n" B "    const bool live = row < %s;\n"
                  B "    const long rrow = live ? row : rb;\n" B "    (void)rrow;\n"
                  B "    if constexpr (R > 0) { /* the row in registers */\n", lo, hi, hi);
    emit_row_body(e, w, 0);
    fprintf(e->o, B "    } else { /* streaming: each phase loads again */\n");
    emit_row_body(e, w, 1);
    fprintf(e->o, B "    }\n" B "}\n");
}

#undef B
#undef RI
#undef VI
#undef EI

/* ---- the sizes and vectors the host picks ---- */

/* The nodes whose buffers the kernel reads or writes by vectors, in ids */
static int vector_nodes(Emitter *e, const Rows *w, int *ids)
{
    int n = 0;
    for (int k = 0; k < w->nin; k++)
        if (w->role[w->in[k]] == RR_FLAT || w->role[w->in[k]] == RR_COL)
            n = emit_add_once(ids, n, w->in[k]);
    for (int k = 0; k < w->nm; k++) {
        int id = w->m[k];
        if (w->role[id] == RR_LOAD) /* the ReduceScatter's input, a Slice's whole tensor */
            n = emit_add_once(ids, n, nd(e, id)->in[0]);
        else if ((w->role[id] == RR_GATHER && per_element(e, w, id)) ||
                 (w->role[id] == RR_ELEM && stored(e, w, id)))
            n = emit_add_once(ids, n, id);
    }
    return n;
}

/* V: 16 bytes of the widest of them */
static int vector_width(Emitter *e, const Rows *w)
{
    int *ids = emit_alloc(e, ((size_t)w->nm + (size_t)w->nin + 1) * sizeof(int));
    int n = vector_nodes(e, w, ids);
    size_t size = 1;
    for (int k = 0; k < n; k++)
        if (type_size(nd(e, ids[k])->type) > size)
            size = type_size(nd(e, ids[k])->type);
    emit_free(e, ids);
    return (int)(16 / (size < 2 ? 2 : size));
}

/* int V (knob: a condition before the others, or ""): vmax where H and
 * every vector buffer allow it, else 1 */
static void emit_vector_choice(Emitter *e, const Rows *w, const char *knob)
{
    FILE *o = e->o;
    int *ids = emit_alloc(e, ((size_t)w->nm + (size_t)w->nin + 1) * sizeof(int));
    int n = vector_nodes(e, w, ids), vmax = vector_width(e, w);
    if (n) {
        fprintf(o, "        const void *vp[] = {");
        for (int k = 0; k < n; k++)
            fprintf(o, "%sb%d", k ? ", " : "", ids[k]);
        fprintf(o, "};\n        const int vs[] = {");
        for (int k = 0; k < n; k++)
            fprintf(o, "%s%zu", k ? ", " : "", type_size(nd(e, ids[k])->type));
        fprintf(o, "};\n");
    }
    fprintf(o, "        const int V = %sH %% %d == 0", knob, vmax);
    if (n)
        fprintf(o, " && coco_pick_vec(%d, vp, vs, %d) == %d", vmax, n, vmax);
    fprintf(o, " ? %d : 1;\n", vmax);
    emit_free(e, ids);
}

/* ---- a FusedAllReduce's row kernel (emit_lsa.c: its parameters, its
 * dispatch over the instances and its launch) ---- */

static int rows_of_lsa(Emitter *e, const Lsa *l, Rows *w)
{
    memset(w, 0, sizeof *w);
    w->m = l->m;
    w->nm = l->nm;
    w->shape = l->rs;
    w->l = l;
    w->seg = l->seg;
    return rows_analyse(e, w);
}

int rows_lsa_ok(Emitter *e, const Lsa *l)
{
    Rows w;
    int ok = rows_of_lsa(e, l, &w);
    for (int k = 0; ok && k < w.nm; k++) /* a value loaded and also kept: not generated */
        ok = !(w.role[w.m[k]] == RR_LOAD && stored(e, &w, w.m[k]));
    rows_free(e, &w);
    return ok;
}

int rows_lsa_vmax(Emitter *e, const Lsa *l)
{
    Rows w;
    ASSERT(rows_of_lsa(e, l, &w));
    int v = vector_width(e, &w);
    rows_free(e, &w);
    return v;
}

/* The launch bounds of a row kernel of w: with BF16 values, at least two
 * blocks an SM (their arithmetic's registers left one block an SM:
 * doc/gpu.md, Row kernels) */
static const char *bounds(Emitter *e, const Rows *w)
{
    for (int k = 0; k < w->nm; k++)
        if (nd(e, w->m[k])->type == T_BF16)
            return "COCO_ROWS_THREADS, 2";
    return "COCO_ROWS_THREADS";
}

const char *rows_lsa_bounds(Emitter *e, const Lsa *l)
{
    Rows w;
    ASSERT(rows_of_lsa(e, l, &w));
    const char *b = bounds(e, &w);
    rows_free(e, &w);
    return b;
}

void rows_emit_lsa_body(Emitter *e, const Lsa *l)
{
    FILE *o = e->o;
    Rows w;
    ASSERT(rows_of_lsa(e, l, &w));
    e->rowrole = w.role;
    fprintf(o, "{\n    CocoLsaBarrier<P> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, "
               "blockIdx.x};\n    (void)seed;\n");
    emit_setup(e, &w);
    fprintf(o, "    bar.sync(ncclCoopCta(), cuda::memory_order_acquire);\n");
    emit_zero_members(e, &w);
    fprintf(o, "    const long base = (long)rank * cs, n = coco_lsa_part_n(rank, cs, nall);\n"
               "    for (int c = ck.from; c < ck.to; c++) {\n"
               "    const long chunk_lo = coco_chunk_lo(ck, c), chunk_hi = coco_chunk_lo(ck, c + 1);\n"
               "    if (ck.count > 1) { /* chunk c written here (its flag), then on every rank */\n"
               "        if (ck.flag)\n            coco_chunk_wait(ck, c);\n"
               "        bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);\n    }\n"
               "    const long row_lo = chunk_lo / H, row_hi = (n < chunk_hi ? n : chunk_hi) / H;\n");
    emit_rows_loop(e, &w, "row_lo", "row_hi");
    fprintf(o, "    }\n    bar.sync(ncclCoopCta(), cuda::memory_order_release);\n}\n\n");
    e->rowrole = NULL;
    rows_free(e, &w);
}

void rows_emit_lsa_choice(Emitter *e, const Lsa *l)
{
    Rows w;
    ASSERT(rows_of_lsa(e, l, &w));
    fprintf(e->o, "        const long H = it.dim[it.nd - 1];\n");
    emit_vector_choice(e, &w, "!ctx->fused_vec && ");
    fprintf(e->o, "        dim3 grid, block;\n        coco_rows_lsa_grid(ctx, cs, H, %d, &grid, "
                  "&block);\n", vector_width(e, &w));
    rows_free(e, &w);
}

void rows_emit_instances(Emitter *e, const char *kernel, int v, const char *rest,
                         void (*args)(Emitter *, const void *), const void *ctx)
{
    FILE *o = e->o;
    for (int k = 0; k <= NROW_SHAPES && v > 1; k++) {
        if (k < NROW_SHAPES)
            fprintf(o, "        %sif (shape.r == %d && shape.w == %d)\n    ", k ? "else " : "",
                    row_shapes[k][0], row_shapes[k][1]);
        else
            fprintf(o, "        else\n    ");
        fprintf(o, "        %s<%d%s, %d, %d><<<grid, block, 0, st>>>", kernel, v, rest,
                k < NROW_SHAPES ? row_shapes[k][0] : 0, k < NROW_SHAPES ? row_shapes[k][1] : 0);
        args(e, ctx);
    }
    if (v == 1) {
        fprintf(o, "        %s<1%s, 0, 0><<<grid, block, 0, st>>>", kernel, rest);
        args(e, ctx);
    }
}

/* ---- a segment's row kernel (emit_cuda.c) ---- */

static int segment_first(Emitter *e, int seg)
{
    return e->seg_member[e->seg_first[seg]];
}

static void rows_of_segment(Emitter *e, int seg, Rows *w)
{
    memset(w, 0, sizeof *w);
    w->m = e->seg_member + e->seg_first[seg];
    w->nm = e->seg_first[seg + 1] - e->seg_first[seg];
    w->shape = e->row_shape[seg];
    w->seg = seg;
    ASSERT(rows_analyse(e, w));
}

/* Where the kernel of w (a segment's) is launched: at its first member
 * that follows every operand computed in the program, where no member is
 * read outside before it; -1 where there is none, or where it reads or
 * writes a scattered tensor (no row kernel). */
static int segment_at(Emitter *e, const Rows *w)
{
    Program *p = e->p;
    int need = -1, at = -1;
    for (int k = 0; k < w->nm; k++)
        if (emit_scat_of(e, w->m[k]))
            return -1;
    for (int k = 0; k < w->nin; k++) {
        if (emit_scat_of(e, w->in[k]))
            return -1;
        if (op_info(nd(e, w->in[k])->op)->kind != K_LEAF && w->in[k] > need)
            need = w->in[k];
    }
    for (int k = 0; k < w->nm && at < 0; k++)
        if (w->m[k] > need)
            at = w->m[k];
    for (int j = w->m[0]; j < at; j++) {
        Node *u = &p->node[j];
        for (int i = 0; !u->dead && !is_member(w, j) && i < u->nin; i++)
            if (is_member(w, u->in[i]))
                return -1;
    }
    return at;
}

/* Fusion f's row reductions and elementwise members as one row segment,
 * where they make one (the next segment number); 1 when they do */
static int find_segment(Emitter *e, int f)
{
    Program *p = e->p;
    Rows w;
    memset(&w, 0, sizeof w);
    w.m = emit_alloc(e, ((size_t)p->nnode + 1) * sizeof(int));
    w.shape = -1;
    w.seg = e->nsegment;
    for (int i = 0; i < p->nnode; i++) {
        Node *n = &p->node[i];
        if (n->fusion != f || n->dead || (!emit_is_elementwise(n) && !emit_row_reduction(p, n)))
            continue;
        w.m[w.nm++] = i;
        if (w.shape < 0 && emit_row_reduction(p, n))
            w.shape = n->in[0];
    }
    int at = w.shape >= 0 && rows_analyse(e, &w) ? segment_at(e, &w) : -1, ok = at >= 0;
    for (int k = 0; ok && k < w.nm; k++)
        e->segment[w.m[k]] = e->nsegment;
    if (ok) {
        e->row_at[e->nsegment] = at;
        e->row_shape[e->nsegment++] = w.shape;
    }
    if (w.shape >= 0)
        rows_free(e, &w);
    emit_free(e, w.m);
    return ok;
}

void rows_find_segments(Emitter *e)
{
    for (int f = 0; f < e->p->nfusion; f++)
        if (!e->p->fusion[f].dead)
            find_segment(e, f);
}

static void emit_segment_params(Emitter *e, const Rows *w)
{
    FILE *o = e->o;
    for (int k = 0; k < w->nin; k++) {
        Node *x = nd(e, w->in[k]);
        if (x->op == O_SCALAR)
            fprintf(o, ", double s%d", x->id);
        else
            fprintf(o, ", const void *__restrict__ x%d, CocoShape h%d", x->id, x->id);
    }
    for (int k = 0; k < w->nm; k++)
        if (stored(e, w, w->m[k]))
            fprintf(o, ", void *__restrict__ y%d", w->m[k]);
    for (int k = 0; k < w->nm; k++)
        if (nd(e, w->m[k])->op == O_DROPOUT && w->role[w->m[k]] == RR_ELEM)
            fprintf(o, ", CocoShape h%d", w->m[k]);
}

void rows_emit_segment_kernel(Emitter *e, int seg)
{
    FILE *o = e->o;
    Rows w;
    rows_of_segment(e, seg, &w);
    fprintf(o, "// a row kernel:");
    for (int k = 0; k < w.nm; k++) {
        Node *n = nd(e, w.m[k]);
        if (n->named || stored(e, &w, n->id))
            fprintf(o, " %s (line %d)", n->name, n->pos.line);
    }
    fprintf(o, "\ntemplate <int V, int R, int W>\n__global__ void __launch_bounds__(%s) "
               "%s_k%d(long n, CocoShape it, unsigned long long seed", bounds(e, &w), e->v, seg);
    emit_segment_params(e, &w);
    fprintf(o, ")\n{\n    (void)seed;\n");
    emit_flat_clear(e);
    for (int k = 0; k < w.nin; k++)
        if (w.role[w.in[k]] == RR_FLAT)
            emit_flat_set(e, w.in[k]);
    e->rowrole = w.role;
    emit_setup(e, &w);
    emit_zero_members(e, &w);
    fprintf(o, "    const long nrows = coco_rows_count(it);\n");
    emit_rows_loop(e, &w, "0", "nrows");
    fprintf(o, "}\n\n");
    e->rowrole = NULL;
    emit_flat_clear(e);
    rows_free(e, &w);
}

static void emit_segment_args(Emitter *e, const void *ctx)
{
    const Rows *w = ctx;
    FILE *o = e->o;
    fprintf(o, "(n, it, args->seed");
    for (int k = 0; k < w->nin; k++) {
        Node *x = nd(e, w->in[k]);
        if (x->op == O_SCALAR && x->has_value)
            fprintf(o, ", %.17g", x->value);
        else if (x->op == O_SCALAR)
            fprintf(o, ", args->scalar[%d]", e->in_index[x->id]);
        else
            fprintf(o, ", b%d, h%d", x->id, x->id);
    }
    for (int k = 0; k < w->nm; k++)
        if (stored(e, w, w->m[k]))
            fprintf(o, ", b%d", w->m[k]);
    for (int k = 0; k < w->nm; k++)
        if (nd(e, w->m[k])->op == O_DROPOUT && w->role[w->m[k]] == RR_ELEM)
            fprintf(o, ", h%d", w->m[k]);
    fprintf(o, ");\n");
}

void rows_emit_segment_launch(Emitter *e, int seg)
{
    FILE *o = e->o;
    Rows w;
    rows_of_segment(e, seg, &w);
    int vmax = vector_width(e, &w), line = nd(e, segment_first(e, seg))->pos.line;
    fprintf(o, "    { /* line %d: a row kernel */\n        CocoShape it = h%d;\n"
               "        const long n = coco_count(it), H = it.dim[it.nd - 1], nrows = "
               "coco_rows_count(it);\n        (void)n;\n", line, w.shape);
    emit_vector_choice(e, &w, "");
    fprintf(o, "        const CocoRowsShape shape = coco_rows_shape(H, V);\n        (void)shape;\n"
               "        const dim3 grid = coco_rows_grid(nrows, H, V, 65535), block = "
               "coco_rows_block(H, V);\n        if (nrows > 0) {\n");
    const char *kernel = arena_printf(e->p->arena, "%s_k%d", e->v, seg);
    if (vmax > 1) {
        fprintf(o, "        if (V == %d) {\n", vmax);
        rows_emit_instances(e, kernel, vmax, "", emit_segment_args, &w);
        fprintf(o, "        } else {\n");
    }
    rows_emit_instances(e, kernel, 1, "", emit_segment_args, &w);
    if (vmax > 1)
        fprintf(o, "        }\n");
    fprintf(o, "        COCO_LAUNCHED(ctx, \"computation\", %d);\n        }\n    }\n", line);
    for (int k = 0; k < w.nm; k++)
        emit_state_copy(e, nd(e, w.m[k]));
    rows_free(e, &w);
}

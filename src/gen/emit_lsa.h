/* emit_lsa.h: the plan of a FusedAllReduce generated over the peers' memory,
 * shared by emit_lsa_plan.c (does a fusion qualify; which member is computed
 * in which kernel) and emit_lsa.c (the kernels and their launch). */
#ifndef COCO_EMIT_LSA_H
#define COCO_EMIT_LSA_H

#include "gen/emit_cuda.h"

enum { LSA_MAXRED = 8 };        /* cross-rank reductions in one fusion */
enum { LSA_K0 = 1, LSA_K1 = 2 }; /* need[] bits: computed in kernel 0, in kernel 1 */

/* A cross-rank reduction is a 0-dim member whose value folds every element
 * of a whole tensor across the ranks: AllReduce(op, PartialReduce(op', y))
 * of a member y of the slice's shape (each rank folds its slice of y), or
 * Norm / ReduceTensor (all elements) of a whole Replicated tensor x that is
 * not a member (each rank folds its slice of x; the folds are combined).
 * Members that read one are "level 1": computed after the exchange of the
 * ranks' partial folds, in a second kernel (emit_lsa.c says why). */
typedef struct {
    int *m;      /* members, in program order (absorbed helpers included) */
    int nm;
    int rs;      /* the ReduceScatter */
    int seg;     /* the segment number the members take while the kernels are written */
    char *level; /* per node: 1 when it depends on a cross-rank reduction */
    char *need;  /* per node: LSA_K0 | LSA_K1, the kernels that compute it */
    char *carry; /* per node: computed in kernel 0, stored for kernel 1 */
    int red[LSA_MAXRED]; /* the cross-rank reductions, in program order */
    int nred;
    int scat;    /* a scattered operand whose buckets the kernels take (c<scat>), or -1 */
    int rows;    /* it holds row reductions or values per row: one row kernel (emit_rows.c) */
} Lsa;

int lsa_plan(Emitter *e, int f, Lsa *l); /* fills l (free with lsa_free); qualifies? */
void lsa_free(Emitter *e, Lsa *l);
int lsa_is_member(const Lsa *l, int id);
int lsa_kept(Emitter *e, const Lsa *l, int id); /* needed outside the kernels */
int lsa_red_index(const Lsa *l, int id);       /* k when l->red[k] == id, else -1 */
/* Cross-rank reduction k: the node whose elements are folded (y or x); the
 * fold of one element (COCO_SUMSQ for sums of squares), of two partial
 * folds within a rank and of the ranks' values (codes of RedOp); the type a rank's fold is rounded to before the exchange, or -1 */
int lsa_red_source(Emitter *e, const Lsa *l, int k);
int lsa_red_step(Emitter *e, const Lsa *l, int k);
int lsa_red_combine(Emitter *e, const Lsa *l, int k);
int lsa_red_across(Emitter *e, const Lsa *l, int k); /* the fold of the ranks' values */
int lsa_red_partial_type(Emitter *e, const Lsa *l, int k);
/* Is operand id addressed through its scattered tensor's members? */
int lsa_scattered(Emitter *e, const Lsa *l, int id);

/* ---- emit_rows.c: a FusedAllReduce whose slices are whole rows (l->rows) ---- */
int rows_lsa_ok(Emitter *e, const Lsa *l);    /* can its members make the row kernel? */
int rows_lsa_vmax(Emitter *e, const Lsa *l);  /* V: 16 bytes of its widest vector operand */
const char *rows_lsa_bounds(Emitter *e, const Lsa *l); /* its kernel's launch bounds */
void rows_emit_lsa_body(Emitter *e, const Lsa *l); /* the kernel's body, after its parameters */
/* in its launch, after `it` and cs: H, V and its grid and block */
void rows_emit_lsa_choice(Emitter *e, const Lsa *l);

#endif

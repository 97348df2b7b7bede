/* front.h: the front end: lexing, parsing, type/shape/layout inference,
 * where each rank's part of a value lies, the whole-graph check, printing.
 * Files of src/front/ include this header and src/coco.h, nothing above. */
#ifndef COCO_FRONT_H
#define COCO_FRONT_H

#include "coco.h"

/* ---- lex.c ---- */
typedef enum { TK_IDENT, TK_NUM, TK_STR, TK_PUNCT, TK_EOF } TokKind;
typedef struct {
    TokKind kind;
    const char *start;
    int len;
    double num;
    int is_int;
    Pos pos;
} Token;
typedef struct {
    const char *src;
    const char *p;
    int line;
    const char *line_start;
} Lexer;
void lex_init(Lexer *lx, const char *src);
Token lex_next(Lexer *lx);
/* text as the grammar's NUMBER (with sign_ok, ["-"] NUMBER), wholly; 1 if so */
int lex_number_text(const char *text, int sign_ok, double *v, int *is_int);
/* The len characters at text as a size given on the command line (-D,
 * --sizes, --check-size): decimal digits or 2^k, from 1 to MAX_SIZE, and
 * nothing else. NULL with the value in *v, else what is wrong. */
const char *size_text_read(const char *text, size_t len, long *v);

/* ---- parse.c: text -> graph (inference runs as each node is made) ---- */
typedef struct {
    const char *name;
    const char *value;
} Binding;
void parse_program(Program *p, const Binding *b, int nb, int nranks, long group_size);
void parse_schedules(Program *p, const char *file, const char *src); /* Schedule blocks */
int is_reserved(const char *s);                    /* a keyword of the language */

/* ---- infer.c: type, shape and layout of one node from its inputs ---- */
void infer_node(Program *p, Node *n);      /* user error on a violated rule */
/* dimension argument `written` of operation `what` on x (negative: counted
 * from the last, -1), as an index of x; a user error at pos if x has none */
int infer_dim_argument(Program *p, Pos pos, const Node *x, int written, const char *what);
int same_members(const Node *a, const Node *b); /* scattered alike (both contiguous: 1) */

/* ---- shape.c: where each rank's part of a value lies ---- */
long group_size_of(const Program *p, GroupKind g);  /* ranks in one group */
int ngroups_of(const Program *p, GroupKind g);      /* number of groups */
int group_index(const Program *p, GroupKind g, int rank); /* which group */
int group_rank(const Program *p, GroupKind g, int rank);  /* index within it */
int rank_of(const Program *p, GroupKind g, int group, int index);
/* blocks of c = ceil(n/parts): part idx is [min(n, idx*c), min(n, (idx+1)*c)) */
void slice_range(long n, long parts, long idx, long *lo, long *hi);
/* the shape one rank holds, and where it starts in the logical tensor */
void local_shape(const Program *p, const Node *n, int rank, long *shape, long *offset);
long local_count(const Program *p, const Node *n, int rank);
int same_place(const Node *a, const Node *b); /* the same local part on every rank */
/* Walks one rank's local elements in local row-major order, giving each
 * one's row-major index in the node's logical shape (added for inputs.c,
 * dropout and the collectives). */
typedef struct {
    int ndim;
    long shape[MAXDIM];  /* local shape */
    long stride[MAXDIM]; /* row-major strides of the logical shape */
    long idx[MAXDIM];    /* local coordinates of the current element */
    long gidx;           /* logical row-major index of the current element */
} GlobalIter;
void global_iter_start(GlobalIter *it, const Program *p, const Node *n, int rank);
void global_iter_next(GlobalIter *it);

/* ---- verify.c: whole-graph consistency, run after every step ---- */
void verify_program(Program *p);           /* BUG() on an internal inconsistency */

/* ---- print.c: graph -> .coco text ---- */
void print_program(Program *p, FILE *out);
void print_schedule(const Schedule *s, FILE *out);
/* a value in a message: its name or its expression as the user wrote it */
const char *value_text(Program *p, int id);
const char *value_desc(Program *p, int id); /* 'name', 'text' (line L, column C) */
const char *ref_desc(Program *p, Ref r);    /* a value's, or a fusion's 'name' */


/* ---- roofline.c: what a variant must move and compute, per rank ---- */
typedef struct {
    double read_bytes;  /* each Tensor input read once */
    double write_bytes; /* each output and each Updated tensor written once */
    double link_bytes;  /* sent to other ranks: the collectives' minimal traffic */
    double flops;       /* the counting rule is at the top of roofline.c */
} Roofline;
void roofline_rank(const Program *p, int rank, Roofline *r);
void roofline_busiest(const Program *p, Roofline *r); /* each figure's most over the ranks */
/* one node's share on one rank: the bytes a collective sends, the FLOPs of a computation */
double roofline_link(const Program *p, const Node *n, int rank);
double roofline_flops(const Program *p, const Node *n, int rank);

#endif

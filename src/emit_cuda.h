/* emit_cuda.h: what the parts of the CUDA code generator share:
 * emit_cuda.c (the entry points, elementwise kernels, library calls),
 * emit_lsa.c (a FusedAllReduce as kernels over peers' memory) and
 * emit_send.c (a fused Send as one kernel storing into the receiver). */
#ifndef COCO_EMIT_CUDA_H
#define COCO_EMIT_CUDA_H

#include "coco.h"

typedef struct {
    Program *p;
    FILE *o;
    const char *v;  /* variant prefix: v0, v1, ... */
    int *segment;   /* per node: elementwise segment (kernel) index, or -1 */
    int nsegment;
    int *out_index; /* per node: index in Execute outputs, or -1 */
    int *in_index;  /* per input node: index in Execute inputs, or -1 */
    int *state_of;  /* per node: the input it is the new value of, or -1 */
    char *flat;     /* per node, in the kernel being written: read as l<id>[v] */
    int *lsa;       /* per fusion: generated as kernels over peers' memory
                       (a FusedAllReduce: emit_lsa.c; a fused Send: emit_send.c) */
    int *lsa_node;  /* per node: the fusion whose kernels compute it, or -1 */
} Emitter;

extern const char *const emit_tname[NTYPE];

int emit_is_elementwise(const Node *n);
int emit_add_once(int *ids, int n, int id); /* ids gains id unless there; the count */
int emit_same_local_shape(const Node *a, const Node *b);
/* r<id> = the value of elementwise node n (a statement inside the v loop) */
void emit_value_statement(Emitter *e, int seg, const Node *n);
/* the comment naming the statements of the nodes whose segment is seg */
void emit_kernel_comment(Emitter *e, int seg, int (*keep)(Emitter *, int));
int emit_stored(Emitter *e, int i);
/* the lowering of node n (its segment's kernel launch, once), then the copy
 * of a new value into its tensor */
void emit_node(Emitter *e, const Node *n, int *done_segment);
void emit_state_copy(Emitter *e, const Node *n);
/* the scattered input whose members hold node id's value, or NULL */
const Node *emit_scat_of(Emitter *e, int id);
/* fusion f's NCCL path: gathers the scattered inputs only it reads whole */
void emit_scat_gather_for(Emitter *e, int f);

/* emit_lsa.c, emit_lsa_plan.c */
int lsa_eligible(Emitter *e, int f);           /* can fusion f be one kernel? */
void lsa_claim(Emitter *e, int f);             /* marks the nodes that kernel computes */
void lsa_emit_kernel(Emitter *e, int f);       /* its kernels (before the body) */
void lsa_emit_workspace(Emitter *e, int f);    /* their workspace, with the body's buffers */
void lsa_emit_launch(Emitter *e, int f, int *done_segment); /* its launch, or the NCCL path */


/* emit_send.c: a fused Send as one kernel storing into the receiver */
int send_eligible(Emitter *e, int f);          /* can fusion f be that kernel? */
void send_claim(Emitter *e, int f);            /* marks the nodes it computes */
void send_emit_kernel(Emitter *e, int f);      /* the kernel (before the body) */
void send_emit_launch(Emitter *e, int f, int *done_segment); /* its launch, or the NCCL path */

#endif

/* emit_cuda.h: what the parts of the CUDA code generator share. The parts,
 * from the top: emit_cuda.c (the entry points, elementwise kernels, library
 * calls) calls emit_overlap_blocks.c (a MatMul by an AllGather's or a
 * ReduceScatter's blocks), emit_lsa.c and emit_lsa_plan.c (a FusedAllReduce
 * as kernels over the peers' memory), emit_rows.c (row kernels: computations
 * holding row reductions), emit_send.c (a fused Send as one kernel storing
 * into the receiver), emit_lowering.c (what the lowering of a collective or a
 * MatMul shares), emit_scatter.c (scattered tensors), emit_value.c (one
 * element's arithmetic) and emit_common.c (helpers), each only those below it
 * in this list. A part that must lower a node of the program (a fused
 * operation's NCCL path) does so through Emitter.emit_node. */
#ifndef COCO_EMIT_CUDA_H
#define COCO_EMIT_CUDA_H

#include "gen/gen.h"

typedef struct Emitter Emitter;
struct Emitter {
    Program *p;
    FILE *o;
    const char *v;  /* variant prefix: v0, v1, ... */
    int *segment;   /* per node: elementwise segment (kernel) index, or -1 */
    int nsegment;
    int *seg_first; /* the members of segment s, in program order: seg_member[seg_first[s]] */
    int *seg_member; /* up to seg_member[seg_first[s + 1] - 1] */
    char *read_apart; /* per node: read by a live node of another segment (emit_stored) */
    int *reader_first; /* the live readers of node i: reader[reader_first[i]] up to */
    int *reader;       /* reader[reader_first[i + 1] - 1] (emit_needed_outside) */
    int *out_index; /* per node: index in Execute outputs, or -1 */
    int *in_index;  /* per input node: index in Execute inputs, or -1 */
    int *state_of;  /* per node: the input it is the new value of, or -1 */
    char *flat;     /* per node, in the kernel being written: read as l<id>[v]; set
                       through emit_flat_set, cleared by emit_flat_clear */
    int *flat_ids;  /* the nodes flat marks, nflat of them */
    int nflat;
    char *seen;     /* per node: scratch marks, all 0 between uses */
    int lin;        /* the kernel being written has a LIN template parameter: with LIN,
                       element i's operands are found from i alone (lq<id>, lm<id>,
                       lg<id>: emit_cuda.c, emit_lin_setup), not its coordinates */
    int *lsa;       /* per fusion: generated as kernels over peers' memory
                       (a FusedAllReduce: emit_lsa.c; a fused Send: emit_send.c) */
    int *lsa_node;  /* per node: the fusion whose kernels compute it, or -1 */
    int *overlap_mm; /* per fusion: the MatMul its launch computes in chunks, overlapped
                        with its kernels (emit_overlap.c), or -1 */
    int *ovl_block;  /* per node: for a MatMul run by the blocks of the collective it
                        overlaps (emit_overlap_blocks.c), that collective; for the
                        collective, OVL_BLOCK_DEFERRED (emitted with its MatMul); else -1 */
    char *nccl_only; /* per node: its buffers serve only a FusedAllReduce's NCCL path (the
                        kernels keep it in registers, or address its members): taken
                        from the workspace's end (coco_ws_tail), needed only when that
                        path can run (lsa_mark_nccl_only) */
    const char *rowrole; /* per node, in the row kernel being written (emit_rows.c): its
                            role (RR_*), which says how its value is read; else NULL */
    int *row_shape; /* per segment: a node of the rows' shape of a row segment (one row
                       kernel: emit_rows.c), or -1 */
    int *row_at;    /* per row segment: the member where its kernel is launched */
    /* the lowering of node n (its segment's kernel launch, once), then the
     * copy of a new value into its tensor (emit_cuda.c) */
    void (*emit_node)(Emitter *e, const Node *n, int *done_segment);
    void **scratch; /* emit_alloc's blocks not yet freed */
    int nscratch, capscratch;
};

/* The roles of the nodes of a row kernel (emit_rows.c, Emitter.rowrole):
 * members computed once (0-dim), per element of the rows' shape, per row
 * (the rows' shape with last extent 1), row reductions, values loaded per
 * element (a FusedAllReduce's ReduceScatter and Slices) or per row (a
 * Slice of a value per row) and AllGathers; operands read per element
 * (flat), per column (lb<x>: broadcast along the rows, the last dimension
 * the rows'), per row (x<x>[rrow]) and scalars. */
enum { RR_NONE, RR_ZERO, RR_ELEM, RR_ROW, RR_RED, RR_LOAD, RR_ROWLOAD, RR_GATHER,
       RR_FLAT, RR_COL, RR_ROWIN, RR_SCALAR };

/* ---- emit_lowering.c: what emit_cuda.c's lowering of a collective or a
 * MatMul shares with the overlaps that lower them otherwise ---- */
const char *emit_comm_of(Emitter *e, const Node *n); /* the communicator of n's NCCL calls */
int emit_redop_code(RedOp r);                        /* coco_nccl_op's code of r */
int emit_widened(const Node *n); /* does collective n reduce FP16/BF16 values in FP32? */
void emit_narrow(Emitter *e, const Node *n);  /* `narrow` where widened: NCCL sums FP16 itself */
void emit_reduce_result(Emitter *e, const Node *n); /* where widened, unless narrow: the FP32
                                                       result into b<n> */
/* is n a Transpose that the MatMuls reading it read in place (no copy)? */
int emit_transpose_in_place(Emitter *e, const Node *n);
/* the buffer a MatMul reads for operand x: x's, or its input's for a
 * Transpose read in place (*trans set) */
int emit_matmul_source(Emitter *e, const Node *x, int *trans);

/* ---- emit_common.c ---- */
extern const char *const emit_tname[NTYPE];

/* The emitter's working memory: a zeroed block kept on e's list until
 * emit_free, so that a refusal in the middle frees it (emit_free_all). */
void *emit_alloc(Emitter *e, size_t n);
void emit_free(Emitter *e, void *block);
void emit_free_all(Emitter *e);

/* The start of a workspace buffer's declaration for node id: "coco_ws(&ws,
 * ctx, " or, for a buffer only a NCCL path uses, "coco_ws_tail(&wst, ctx, " */
const char *emit_ws(const Emitter *e, int id);
int emit_is_elementwise(const Node *n);
int emit_add_once(int *ids, int n, int id); /* ids gains id unless there; the count */
void emit_program_order(int *ids, int n);   /* sorts node ids ascending */
int emit_in_list(const int *ids, int n, int id); /* is id one of ids[0..n)? */
/* Of the members m[0..nm) of a kernel: is member id needed outside it (an
 * output, a tensor's new value, or read by a node that is not a member)? */
int emit_needed_outside(Emitter *e, const int *m, int nm, int id);
void emit_list_readers(Emitter *e); /* fills reader_first and reader */
/* The operands (memory or Scalars) that the elementwise members read from
 * outside, each once, into ids; their count */
int emit_outside_operands(Emitter *e, const int *m, int nm, int *ids);
/* The parameter lists of the peer-memory kernels (emit_lsa.c, emit_send.c):
 * the kernel's typed parameters, the entry point's arguments, or the
 * launcher's (_go) arguments forwarded to the kernel. */
enum { EMIT_TYPED, EMIT_HOST, EMIT_FORWARD };
/* the format of that mode (typed, host or forward) with id */
void emit_param(Emitter *e, int mode, const char *typed, const char *host, const char *forward,
                int id);
/* ", PARAM" of an input x read from outside the kernel, in that mode */
void emit_input_param(Emitter *e, const Node *x, int mode);
int emit_same_local_shape(const Node *a, const Node *b);
int emit_stored(Emitter *e, int i);          /* must member i be written to memory? */
void emit_flat_set(Emitter *e, int id);      /* e->flat[id] = 1 */
void emit_flat_clear(Emitter *e);            /* e->flat all 0 again */
/* a new value that is also an output: the copy into its tensor */
void emit_state_copy(Emitter *e, const Node *n);
/* Rows: is n a reduction along its input's last dimension that keeps it
 * (Norm or ReduceTensor with Keep: a row reduction)? Is x of the rows'
 * shape s but for a last extent of 1 (a value per row), or broadcast along
 * the rows (its last dimension s's, every other 1: a value per column)? */
int emit_row_reduction(Program *p, const Node *n);
int emit_row_shaped(const Node *x, const Node *s);
int emit_col_shaped(const Node *x, const Node *s);
/* the node whose shape segment seg's kernel iterates over, or -1 */
int emit_segment_shape(Emitter *e, int seg);
void emit_size_expr(Emitter *e, const char *text); /* a size expression, in C */
/* the elements every rank reserves for node n's value in the workspace (the
 * same on every rank: its count, or a sliced value's chunk), as C */
const char *emit_room(Emitter *e, const Node *n);
/* A vector's element loop opened at INDENT (for v: i = i0 + v), with, where
 * coords, the coordinates c of its elements: the first's before the loop,
 * then a step at the top of each iteration (in a kernel with a LIN
 * parameter, e->lin, only where LIN is 0) */
void emit_vector_loop_open(Emitter *e, int coords, const char *indent);
/* Linear indices (e->lin, under LIN): is x read with broadcasting; x's count
 * lm<x> and a Dropout's first logical index lg<id> (before the loops); x's
 * index for a vector's first element lq<x> (before its element loop) */
int emit_read_broadcast(Emitter *e, const Node *x);
void emit_lin_count(Emitter *e, int x);
void emit_lin_base(Emitter *e, int id);
void emit_lin_first(Emitter *e, int x, const char *indent);

/* ---- emit_value.c: one element's arithmetic ---- */
/* the C type of the register r<id> of a value of type t: float (FP16,
 * BF16 and FP32 values are floats exactly) or double */
const char *emit_register_type(Type t);
/* the C type of member r<id> of type t in the kernel being written: in a row
 * kernel FP16 and BF16 values in their own type (__half, __nv_bfloat16) */
const char *emit_value_type(const Emitter *e, Type t);
/* r<id> = the value of elementwise node n (a statement inside the v loop) */
void emit_value_statement(Emitter *e, int seg, const Node *n);
/* operand x of a member of segment seg as a float (in_float) or a double */
void emit_operand_value(Emitter *e, int seg, int x, int in_float);
/* INDENT r<id> = element v of raw array FROM, node n's value */
void emit_register_load(Emitter *e, const char *indent, const Node *n, const char *from);
/* INDENT r<id> = double expression FROM rounded to n's type */
void emit_register_round(Emitter *e, const char *indent, const Node *n, const char *from);

/* ---- emit_scatter.c: scattered tensors ---- */
/* the scattered input whose members hold node id's value, or NULL */
const Node *emit_scat_of(Emitter *e, int id);
void emit_scat_outputs(Emitter *e);      /* outputs in members: into the caller's buffers */
int emit_scat_needs_buffer(Emitter *e, int id); /* does it also need a contiguous b<id>? */
/* the fusion whose NCCL path alone reads input i whole (it gathers it), or -1 */
int emit_scat_gather_fusion(Emitter *e, int i);
/* the descriptor c<id> of scattered value n (t: its tensor), and b<id> */
void emit_scat_buffer(Emitter *e, const Node *n, const Node *t);
/* does collective n also run as one kernel over members (the peers' too)? */
int emit_scat_lsa(Emitter *e, const Node *n);
/* the ReduceScatter whose NCCL path alone reads input i whole, or -1 */
int emit_scat_gather_node(Emitter *e, int i);
/* if (usable) { the kernel } else { emit_nccl's NCCL path } */
void emit_scat_lsa_collective(Emitter *e, const Node *n,
                              void (*emit_nccl)(Emitter *, const Node *));
/* copies between members c<scat> and b<buf>: to_members 0 gathers, 1 scatters */
void emit_scat_copy(Emitter *e, int scat, int buf, const Node *n, int to_members);
/* fusion f's NCCL path: gathers the scattered inputs only it reads whole */
void emit_scat_gather_for(Emitter *e, int f);
void emit_scat_sync(Emitter *e, const Node *n); /* after n: members and copy agree */
int emit_has_member_norm(const Program *p);     /* includes coco_members.cuh? */
void emit_member_norm(Emitter *e, const Node *n); /* Norm(x, Members) */
/* is operand or result x of segment seg's kernel addressed in members? */
int emit_scat_member(Emitter *e, int seg, int x);
/* the scattered value whose buckets segment seg's kernel takes, or -1 */
int emit_segment_scat(Emitter *e, int seg, const int *ins, int nin);
int emit_fusion_scattered(Emitter *e, int f); /* does fusion f touch one? */

/* ---- emit_lsa.c, emit_lsa_plan.c: a FusedAllReduce as kernels over the
 * peers' memory. "LSA" is NCCL's word for it: load/store accessible, the
 * ranks whose memory this GPU reaches with plain loads and stores (NVLink on
 * one host), through the device API's windows (ncclGetLsaPointer). ---- */
int lsa_eligible(Emitter *e, int f);           /* can fusion f be one kernel? */
void lsa_claim(Emitter *e, int f);             /* marks the nodes that kernel computes */
void lsa_emit_kernel(Emitter *e, int f);       /* its kernels (before the body) */
void lsa_emit_workspace(Emitter *e, int f);    /* their workspace, with the body's buffers */
void lsa_mark_nccl_only(Emitter *e, int f);    /* e->nccl_only: what only its NCCL path uses */
int lsa_window_nodes(Emitter *e, int f, int *ids); /* what its kernels reach in the peers */
void lsa_emit_launch(Emitter *e, int f, int *done_segment); /* its launch, or the NCCL path */

/* ---- emit_rows.c: row kernels (computations holding row reductions) ---- */
/* In find_segments: each fusion whose elementwise members and row
 * reductions make one row kernel becomes one segment (e->row_shape). */
void rows_find_segments(Emitter *e);
void rows_emit_segment_kernel(Emitter *e, int seg); /* its kernel (before the body) */
/* its launch (where its member e->row_at[seg] is), then the copies of its
 * members' new values into their tensors */
void rows_emit_segment_launch(Emitter *e, int seg);
/* The launches of kernel<V REST, R> for each R (V > 1: if (R == r) ... for
 * each of COCO_ROWS_VECTORS, else the streaming R = 0; V = 1: R = 0), each
 * followed by args(e, ctx)'s argument list */
void rows_emit_instances(Emitter *e, const char *kernel, int v, const char *rest,
                         void (*args)(Emitter *, const void *), const void *ctx);

/* ---- emit_overlap.c: overlap(MatMul, FusedAllReduce) chunk by chunk ---- */
int ovl_matmul(Emitter *e, int f);   /* the MatMul fusion f's launch chunks, or -1 */
int ovl_deferred(Emitter *e, int id); /* is node id that MatMul of some fusion? */
/* inside the launch block of a FusedAllReduce's kernels (its lambda `go`):
 * MatMul mm in chunks, each followed by the kernels on the side stream, or
 * mm whole then the kernels (push: the instance's push flag, C) */
void ovl_emit_launch(Emitter *e, int mm, int line, const char *push, int *done_segment);
/* ---- emit_overlap_blocks.c: overlap(AllGather, MatMul) and overlap(MatMul,
 * ReduceScatter) by the collective's blocks ---- */
enum { OVL_BLOCK_DEFERRED = -2 };
void ovl_blocks_find(Emitter *e); /* fills e->ovl_block (after the fusions' e->overlap_mm) */
/* if mm is such a MatMul: its launch with the collective's (by blocks, or in
 * order without chunks), 1; else nothing, 0 */
int ovl_blocks_launch(Emitter *e, int mm, int *done_segment);

/* ---- emit_send.c: a fused Send as one kernel storing into the receiver ---- */
int send_eligible(Emitter *e, int f);          /* can fusion f be that kernel? */
void send_claim(Emitter *e, int f);            /* marks the nodes it computes */
void send_emit_kernel(Emitter *e, int f);      /* the kernel (before the body) */
void send_emit_launch(Emitter *e, int f, int *done_segment); /* its launch, or the NCCL path */

#endif

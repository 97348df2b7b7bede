/* gen.h: the CUDA code generator, the layer between the API and the CUDA
 * backend: a program and its scheduled variants in, CUDA source out. It
 * builds nothing and runs nothing (src/cuda/ does). It may include every
 * layer below it; src/cuda/ and above include it.
 *
 * The names in generated code (K: the variant's index, 0 the program and
 * 1.. its schedules; S: an elementwise segment; N: a node of the variant):
 *   coco_run__ENTRY        a variant's entry point (include/coconet_cuda.h)
 *   coco_workspace__ENTRY  the workspace bytes that entry point needs
 *   vK_body                the variant's body, shared by the two above
 *   vK_kS                  the elementwise kernel of segment S
 *   vK_fN, vK_fN_b         FusedAllReduce N's kernel over the peers' memory,
 *                          and its second pass where it reduces across ranks
 *   vK_fN_one              the same on one rank; vK_fN_go its host dispatch
 *   vK_sN, vK_sN_go        fused Send N's kernel and its host dispatch
 *   coco_*                 the helpers of rt/kernels, shared by all variants
 */
#ifndef COCO_GEN_H
#define COCO_GEN_H

#include "api.h"

/* ---- lower_collectives.c: collectives the CUDA backend generates as FusedAllReduces ---- */
Program *lower_collectives(Program *p); /* a lowered clone, or NULL: nothing to lower */

/* ---- emit_overlap_blocks.c: the overlaps the CUDA backend runs by a
 * collective's blocks ---- */
/* Overlap items `before`, `after` of p: an AllGather of a value sliced along
 * dimension 0 and the MatMul reading it as its left operand (OVERLAP_GATHER),
 * or a MatMul and the ReduceScatter along dimension 0 of its result
 * (OVERLAP_SCATTER); neither fused, the MatMul of one batch (a 2-D right
 * operand) and, before a ReduceScatter, of a left operand not read
 * transposed. Else 0. */
enum { OVERLAP_GATHER = 1, OVERLAP_SCATTER = 2 };
int overlap_block_pair(const Program *p, Ref before, Ref after);

/* ---- emit_cuda.c: CUDA source for a program and its scheduled variants ---- */
/* Its parts, each line alone: a prologue (the includes), then each
 * variant's code after CUDA_PART_VARIANT, then the shared tables after
 * CUDA_PART_TABLES (a build may compile the variants apart:
 * cuda_build_parts) */
#define CUDA_PART_VARIANT "// @coconet part: a variant"
#define CUDA_PART_TABLES "// @coconet part: the tables"
void emit_cuda(Program **variants, Program **lowered, int n, FILE *out);

/* ---- compile.c: the backend's passes: lower, emit, write ---- */
/* The CUDA source of variants[0..n) (variants[0]: the program) to out,
 * preceded, when only_p > 0, by COCO_ONLY_P (kernel instances for that many
 * ranks alone). 0, or 1 with the user error in err. */
int cuda_compile(Program **variants, int n, int only_p, FILE *out, char *err, size_t errlen);

#endif

#!/bin/sh
# bench/device/p2lamb.sh: one lease of nvidia-h200-x2 after the change of
# the fused kernels with cross-rank reductions (LAMB's norms): no push, and
# V from the widest vector operand (src/emit_lsa.c). First the Figure 6
# rows of LAMB (mixed and FP32) with NCCL AllReduce and PyTorch's
# all_reduce + LAMB at P = 2 (bench/fused.sh; unchecked at 2^28), then the
# GPU tests of the programs with such fusions (tests/gpu/run.sh's examples
# part, with its knobs, over EXAMPLES), built meanwhile at low priority.
# Files under $OUT: fused.csv, ex-p2.md, logs.tgz.
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs logs         # $W
lease_make
EX="examples/lamb.coco tests/gpu/lamb_scattered.coco tests/gpu/norms.coco"
RANKS=2 PARTS=examples BUILD_ONLY=1 EXAMPLES=$EX JOBS=8 \
    nice -n 19 sh tests/gpu/run.sh "$W/ahead.md" >/dev/null 2>&1 &
RANKS=2 POWS="28 26 24 20" UNCHECKED_POW=28 ITERS=20 \
    PROGRAMS="allreduce_fused16 allreduce_fused lamb lamb_fp32 torch" \
    SCHEDULES="AR_Opt RS_Opt_AG fuse_RS_Opt_AG fuse_RS_Opt_AG_4" \
    timeout "$(left 200)" sh bench/fused.sh "$W" >"$W/fused.out" 2>&1
cp "$W/fused.csv" "$OUT/fused.csv"
echo "fused.sh done at $(($(date +%s) - T0)) s"
wait
RANKS=2 PARTS=examples JOBS=12 TIMEOUT=150 EXAMPLES=$EX \
    timeout "$(left 10)" sh tests/gpu/run.sh "$OUT/ex-p2.md" >"$W/ex.out" 2>&1
echo "examples: status $?"
mv "$OUT/ex-p2.md.log" "$OUT/ex-p2.md.log.build" "$W/" 2>/dev/null
grep -h -A2 FAIL "$W/ex.out" | cut -c1-200 | head -20
grep -h -E '^(ok|FAIL)' "$W/ex.out" | sed 's/--backend cuda//; s/--iters 20//' | cut -c1-140
grep -E 'lamb|allreduce' "$OUT/fused.csv" | grep -E 'fuse_RS_Opt_AG_4|,fused,|program|AllReduce|baseline' |
    cut -d, -f2,4,5,6,8,9 | cut -c1-100
echo "end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/p2check.sh: one lease of nvidia-h200-x2 for what changed
# after the last P = 2 checks (commit 7098ce6) and had not run on a GPU: the
# ReduceScatter + AllGather lowering over scattered tensors
# (src/lower_scattered.c), the scattered gather/widen kernels
# (coco_warp_move), the fused kernels' part length (coco_lsa_part_n); and
# the fused Send at G = 2 with COCONET_FUSED=nccl. tests/gpu/run.sh's
# selftest and examples parts over the programs these touch (EXAMPLES), at
# P = 2. The Figure 6 programs and BERT's are built ahead, at low priority,
# for bench/device/fig6.sh on the same warm machine:
#   R=2 POWS="28 26 24 20" UNCHECKED_POW=28 TORCH=1 SCATTERED=1 sh bench/device/fig6.sh
# Files under $OUT: ex-p2.md (the table), logs.tgz.
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs logs         # $W
lease_make
lease_bert_ahead 2 "$W/ahead.log"
BUILD_ONLY=1 RANKS=2 POWS=10 SCHEDULES="AR_Opt RS_Opt_AG fuse_RS_Opt_AG fuse_RS_Opt_AG_4" \
    nice -n 19 sh bench/fused.sh "$W/ahead-fused" >/dev/null 2>&1 &
RANKS=2 PARTS="selftest examples" JOBS=12 TIMEOUT=150 \
    EXAMPLES="examples/adam.coco examples/lamb.coco examples/adam_scattered.coco
              tests/gpu/lamb_scattered.coco tests/gpu/scattered_inline.coco tests/gpu/norms.coco
              tests/gpu/send.coco" \
    timeout "$(left 10)" sh tests/gpu/run.sh "$OUT/ex-p2.md" >"$W/ex.out" 2>&1
echo "examples: status $?"
mv "$OUT/ex-p2.md.log" "$OUT/ex-p2.md.log.build" "$W/" 2>/dev/null
while [ -n "$(jobs -p)" ] && [ "$(left)" -gt 5 ]; do sleep 2; done
grep -h -A2 FAIL "$W/ex.out" | cut -c1-200 | head -20
grep -h -E '^(ok|FAIL)' "$W/ex.out" | sed 's/--backend cuda//; s/--iters 20//' | cut -c1-140
echo "end at $(($(date +%s) - T0)) s"

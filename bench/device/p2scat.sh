#!/bin/sh
# bench/device/p2scat.sh: one lease of nvidia-h200-x2 for the ReduceScatter
# and AllGather over scattered tensors' members (coco_lsa_scat_launch):
# tests/gpu/run.sh's examples part, with its knobs, over the two scattered
# optimizers at P = 2 (every schedule; W = 41 two-shot and NCCL paths,
# W = 401 on one block). Files under $OUT: ex-p2.md, logs.tgz.
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs logs         # $W
lease_make
RANKS=2 PARTS=examples JOBS=12 TIMEOUT=150 \
    EXAMPLES="examples/adam_scattered.coco tests/gpu/lamb_scattered.coco" \
    timeout "$(left 10)" sh tests/gpu/run.sh "$OUT/ex-p2.md" >"$W/ex.out" 2>&1
echo "examples: status $?"
mv "$OUT/ex-p2.md.log" "$OUT/ex-p2.md.log.build" "$W/" 2>/dev/null
grep -h -A3 FAIL "$W/ex.out" | cut -c1-240 | head -24
grep -h -E '^(ok|FAIL)' "$W/ex.out" | sed 's/--backend cuda//; s/--iters 20//' | cut -c1-140
echo "end at $(($(date +%s) - T0)) s"

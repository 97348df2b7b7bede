#!/bin/sh
# bench/device/head.sh: one short lease of P = 2 GPUs for the contiguous
# fused kernels' part heads (coco_lsa_step): bench/device/ab.sh against the
# tree in ab-old (made and carried as ab.sh says; the fused AllReduce at
# 2^28, two-shot and push, the trees taking turns), then the GPU tests' paper and knobs parts over adam, lamb
# and sgd_momentum at N = 3, 1001 and 1048577 (parts that are not whole
# vectors at P = 2, one of them shorter than its head) with every schedule,
# one-shot, two-shot, push and V = 1. Files under $OUT: ab.txt, odd.md,
# logs.tgz; a short table last.
#
#   COMMIT=<sha> DEADLINE=320 sh bench/device/head.sh
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs logs         # $W
REPS=${REPS:-1} OUT=$W sh bench/device/ab.sh >"$W/ab.out" 2>&1
cp "$W/ab.txt" "$OUT/" 2>/dev/null
RANKS=2 PARTS="paper knobs" B_SIZES=" " N_POW=" " N_ODD="3 1001 1048577" \
    EXAMPLES="examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco" \
    JOBS=16 TIMEOUT=150 timeout "$(left 5)" sh tests/gpu/run.sh "$OUT/odd.md" >"$W/odd.out" 2>&1
echo "odd sizes: status $? at $(($(date +%s) - T0)) s"
mv "$OUT/odd.md.log" "$OUT/odd.md.log.build" "$W/" 2>/dev/null
grep -h -A3 FAIL "$W/odd.out" | cut -c1-240 | head -12
echo "odd-size runs passed: $(grep -h -c -E '^ok' "$W/odd.out"), failed: $(grep -h -c -E '^FAIL' "$W/odd.out")"
grep -oE '\| (bitwise|rounding|[A-Z]+) \|' "$OUT/odd.md" | sort | uniq -c
cat "$OUT/ab.txt" 2>/dev/null
echo "end at $(($(date +%s) - T0)) s"

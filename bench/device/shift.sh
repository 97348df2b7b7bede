#!/bin/sh
# bench/device/shift.sh: one lease of P = R GPUs (2 unless set) for the
# contiguous fused kernels' shifted parts (coco_lsa_shift: every part's
# peers' vectors aligned whatever cs, the part-local arrays at any
# alignment): the GPU tests' knobs and paper parts over adam, lamb,
# sgd_momentum and norms (odd N: 3, 1001, 1002, 1048577, whose parts are not
# whole vectors at P = 2; push, one-shot, two-shot, V = 1), BERT-large's
# Adam scattered against contiguous (bench/scattered.sh; the contiguous
# parts of 336,226,108 / P elements are not whole vectors either), and
# bench/device/push.sh at 2^28 (powers of two: no shift; against the
# figures before). Files under $OUT: odd.md, scattered.txt, push.txt,
# logs.tgz; a short table last.
#
#   COMMIT=<sha> DEADLINE=560 sh bench/device/shift.sh
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs logs         # $W
lease_make
R=${R:-2}
lease_bert_push_ahead "$R" "$W/ahead.log"
RANKS=$R PARTS="knobs paper" B_SIZES=" " N_POW="16 20" N_ODD="3 1001 1002 1048577" \
    EXAMPLES="examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco tests/gpu/norms.coco" \
    JOBS=12 TIMEOUT=150 timeout "$(left 260)" sh tests/gpu/run.sh "$OUT/odd.md" >"$W/odd.out" 2>&1
echo "odd sizes: status $? at $(($(date +%s) - T0)) s"
mv "$OUT/odd.md.log" "$OUT/odd.md.log.build" "$W/" 2>/dev/null
wait
RANKS=$R timeout "$(left 120)" sh bench/scattered.sh "$W/scat" >"$OUT/scattered.txt" 2>&1
P=$R POWS=28 DEADLINE=$(left 5) OUT=$W sh bench/device/push.sh >/dev/null 2>&1
cp "$W/push.txt" "$OUT/" 2>/dev/null
grep -h -A3 FAIL "$W/odd.out" | cut -c1-240 | head -12
echo "odd-size runs passed: $(grep -h -c -E '^ok' "$W/odd.out"), failed: $(grep -h -c -E '^FAIL' "$W/odd.out")"
grep -oE '\| (bitwise|rounding|[A-Z]+) \|' "$OUT/odd.md" | sort | uniq -c
tail -4 "$OUT/scattered.txt"
cat "$OUT/push.txt" 2>/dev/null
echo "end at $(($(date +%s) - T0)) s"

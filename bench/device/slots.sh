#!/bin/sh
# bench/device/slots.sh: one lease of nvidia-h200-x2 for the push
# algorithm's staging slots laid out at the input's vector alignment
# (coco_lsa_slot): the GPU tests' knobs part over the programs with push
# (scattered W = 41 and 401, contiguous N = 3 and 1001), then BERT-large's
# Adam scattered against contiguous (bench/scattered.sh) with
# COCONET_FUSED=push, auto (the default) and twoshot, then
# bench/device/push.sh at 2^28 (with mixed-precision Adam at 2^26 and 2^28).
# Files under $OUT: knobs.md, scattered-{push,auto,twoshot}.txt,
# push.txt, logs.tgz; a short table last.
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs logs         # $W
lease_make
lease_bert_ahead 2 "$W/ahead.log"
P=2 BUILD_ONLY=1 nice -n 19 sh bench/device/push.sh >>"$W/ahead.log" 2>&1 &
RANKS=2 PARTS=knobs JOBS=12 TIMEOUT=150 \
    EXAMPLES="examples/adam.coco examples/adam_scattered.coco tests/gpu/lamb_scattered.coco
              examples/sgd_momentum.coco examples/mlp.coco" \
    timeout "$(left 300)" sh tests/gpu/run.sh "$OUT/knobs.md" >"$W/knobs.out" 2>&1
echo "knobs: status $? at $(($(date +%s) - T0)) s"
mv "$OUT/knobs.md.log" "$OUT/knobs.md.log.build" "$W/" 2>/dev/null
wait
for algo in push auto twoshot; do
    COCONET_FUSED=$algo RANKS=2 timeout "$(left 100)" \
        sh bench/scattered.sh "$W/scat-$algo" >"$OUT/scattered-$algo.txt" 2>&1
done
P=2 POWS=28 DEADLINE=$(left 5) OUT=$W sh bench/device/push.sh >/dev/null 2>&1
cp "$W/push.txt" "$OUT/" 2>/dev/null
grep -h -A3 FAIL "$W/knobs.out" | cut -c1-240 | head -12
grep -h -c -E '^ok' "$W/knobs.out"
for algo in push auto twoshot; do echo "== scattered, COCONET_FUSED=$algo"; tail -3 "$OUT/scattered-$algo.txt"; done
cat "$OUT/push.txt" 2>/dev/null
echo "end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/slots.sh: the push algorithm and the scattered kernels on
# P = R GPUs (2 unless set; first written for the staging slots at the
# input's alignment, coco_lsa_slot, and the scattered bucket walk): the GPU
# tests' knobs part over the programs with push (scattered W = 41 and 401,
# contiguous N = 3 and 1001; KNOBS=0 leaves it out, e.g. after
# bench/device/final.sh on the same machine, whose examples part has it),
# then BERT-large's Adam scattered against contiguous (bench/scattered.sh)
# with COCONET_FUSED=auto (the default), push and twoshot, then
# bench/device/push.sh at 2^28 (with mixed-precision Adam at 2^26 and 2^28).
# Files under $OUT: knobs.md, scattered-{push,auto,twoshot}.txt, push.txt,
# logs.tgz; a short table last.
#
#   DEADLINE=560 sh bench/device/slots.sh
#   R=4 KNOBS=0 DEADLINE=560 sh bench/device/slots.sh
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs logs         # $W
lease_make
R=${R:-2}
lease_bert_push_ahead "$R" "$W/ahead.log"
if [ "${KNOBS:-1}" = 1 ]; then
    RANKS=$R PARTS=knobs JOBS=12 TIMEOUT=150 \
        EXAMPLES="examples/adam.coco examples/adam_scattered.coco tests/gpu/lamb_scattered.coco
                  examples/sgd_momentum.coco examples/mlp.coco" \
        timeout "$(left 300)" sh tests/gpu/run.sh "$OUT/knobs.md" >"$W/knobs.out" 2>&1
    echo "knobs: status $? at $(($(date +%s) - T0)) s"
    mv "$OUT/knobs.md.log" "$OUT/knobs.md.log.build" "$W/" 2>/dev/null
fi
wait
for algo in auto push twoshot; do
    COCONET_FUSED=$algo RANKS=$R timeout "$(left 100)" \
        sh bench/scattered.sh "$W/scat-$algo" >"$OUT/scattered-$algo.txt" 2>&1
done
P=$R POWS=28 DEADLINE=$(left 5) OUT=$W sh bench/device/push.sh >/dev/null 2>&1
cp "$W/push.txt" "$OUT/" 2>/dev/null
if [ -f "$W/knobs.out" ]; then
    grep -h -A3 FAIL "$W/knobs.out" | cut -c1-240 | head -12
    echo "knobs runs passed: $(grep -h -c -E '^ok' "$W/knobs.out")"
fi
for algo in auto push twoshot; do echo "== scattered, COCONET_FUSED=$algo"; tail -3 "$OUT/scattered-$algo.txt"; done
cat "$OUT/push.txt" 2>/dev/null
echo "end at $(($(date +%s) - T0)) s"

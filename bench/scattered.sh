#!/bin/sh
# bench/scattered.sh OUT_DIR: Adam over BERT-large's 398 parameter tensors as
# scattered tensors (bench/bert_adam_scattered.coco) against the same work on
# one contiguous tensor of the same total size (bench/bert_adam.coco), on P
# GPUs (after `make`). Each program runs with its schedules (program,
# fusedComp, paper), every variant checked against the CPU reference; prints
# each variant's GPU time for both, the ratio scattered / contiguous and
# whether it meets the goal, at most 1.03 (GOAL).
#
# On one host (P = 2, 4 or 8 GPUs reaching each other's memory: the runtime's
# first line says "fused collectives: one kernel over the peers' memory"),
# `paper` (ReduceScatter, Adam and AllGather in one FusedAllReduce) is the
# same one kernel over the peers' memory on both sides: over the elements of
# each rank's part for the contiguous tensor, over the buckets intersecting
# it for the scattered one, which reads g from the peers' members and p from
# its own, with no copy into one buffer. In `program` and `fusedComp` the
# scattered side's AllReduce, which no schedule fuses, is generated as a
# FusedAllReduce with no computation over the members (one kernel, no copy:
# src/gen/lower_collectives.c) and the contiguous side's is NCCL's; then the
# elementwise kernels run over buckets on one side, over elements on the
# other.
#
#   RANKS=4 ITERS=20 sh bench/scattered.sh OUT
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-build/bench}
RANKS=${RANKS:-4}
ITERS=${ITERS:-20}
GOAL=${GOAL:-1.03}
mkdir -p "$OUT"
LOG=$OUT/scattered.log
: >"$LOG"
status=0
for f in bench/bert_adam_scattered.coco bench/bert_adam.coco; do
    name=$(basename "$f" .coco)
    cmd="./coconet run $f --backend cuda --ranks $RANKS --reference program --iters $ITERS"
    echo "==== $cmd" >>"$LOG"
    $cmd >"$OUT/$name.out" 2>&1 || status=1
    cat "$OUT/$name.out" >>"$LOG"
    # the fused collectives' path, from the runtime's description (the line
    # after the build's, which says "cuda: built" or "cuda: cached")
    path=$(sed -n 's/.*fused collectives: \([^,]*\).*/\1/p' "$OUT/$name.out" | head -n 1)
    echo "$name: fused collectives: ${path:-not reported}"
    # variant rows: name, result, ms (the column before "ms")
    awk '/^schedule +outputs/ { on = 1; next } /^gpu-time:/ { on = 0 }
         on && NF >= 7 { for (i = 2; i <= NF; i++) if ($i == "ms") { print $1, $2, $(i - 1); break } }' \
        "$OUT/$name.out" | sort >"$OUT/$name.rows"
done
echo "variant          result(scattered) result(contiguous)  scattered ms  contiguous ms  ratio  goal"
join "$OUT/bert_adam_scattered.rows" "$OUT/bert_adam.rows" |
    awk -v goal="$GOAL" '{ r = $5 > 0 ? $3 / $5 : 0
        printf "%-16s %-17s %-18s %13.3f %14.3f %6.3f  %s\n", $1, $2, $4, $3, $5, r,
               r <= goal + 0 ? "met" : "missed" }'
exit $status

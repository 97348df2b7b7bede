#!/bin/sh
# bench/device/arith.sh: FP32 arithmetic in generated kernels
# (src/emit_value.c) on P GPUs (2 unless set), in one lease:
#   1. correctness: tests/gpu/run.sh's examples part over EXAMPLES (every
#      program whose kernels compute elementwise values, tests/gpu/arith.coco
#      among them, unless set), every schedule, checked against the CPU;
#   2. bench/device/ab.sh: LAMB and Adam (all-FP32 and FP16 gradients) at
#      fuse_RS_Opt_AG_4, two-shot, and NCCL's AllReduce alone (the program of
#      bench/allreduce_fused.coco), at N = 2^28, this tree against ab-old's
#      (carried), REPS turns (2 unless set).
# The second part's builds run beside the first, at low priority.
#   COMMIT=<sha> DEADLINE=560 sh bench/device/arith.sh
. bench/device/lease.sh # T0, left, lease_logs, lease_make
P=${P:-2}
lease_logs logs
lease_make
PROGRAMS="bench/lamb_fp32.coco examples/lamb.coco bench/adam_fp32.coco examples/adam.coco bench/allreduce_fused.coco"
export PROGRAMS P
BUILD_ONLY=1 OUT=$W nice -n 19 sh bench/device/ab.sh >"$W/ab-build.out" 2>&1 &
EXAMPLES=${EXAMPLES:-examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco examples/mlp.coco \
examples/self_attention.coco examples/adam_scattered.coco examples/reduce_broadcast.coco \
tests/gpu/arith.coco tests/gpu/norms.coco tests/gpu/send.coco tests/gpu/lamb_scattered.coco}
RANKS=$P PARTS=examples JOBS=12 TIMEOUT=150 EXAMPLES="$EXAMPLES" \
    timeout "$(left "${ABT:-220}")" sh tests/gpu/run.sh "$OUT/examples.md" >"$W/examples.out" 2>&1
echo "examples: status $? at $(($(date +%s) - T0)) s, $(grep -c '^ok' "$W/examples.out") runs passed"
grep -A2 '^FAIL' "$W/examples.out" | head -20
wait
DEADLINE=$(left) REPS=${REPS:-2} ALGOS=twoshot sh bench/device/ab.sh
echo "arith.sh: end at $(($(date +%s) - T0)) s"

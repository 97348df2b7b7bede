#!/bin/sh
# bench/device/multi.sh: one lease of a multi-GPU machine, in steps (one
# command each on the same warm machine; the build cache carries over):
#   STEP=check  make; tests/gpu/run.sh's examples part at P = $EXR (4) over
#               EXAMPLES (the programs whose kernels take linear indices:
#               the layers, LAMB, the arithmetic and uneven-slice tests, the
#               pipeline), beside the faults part at P = $FR ("2 4"); their
#               tables ex.md and faults.md
#   STEP=tune   bench/tune.sh at P = $P within BUDGET seconds
# Variables: STEP, EXR, FR, EXAMPLES, P, BUDGET, COMMIT, DEADLINE.
# shellcheck source=bench/device/lease.sh
. bench/device/lease.sh
STEP=${STEP:-check}
case $STEP in
check)
    lease_make
    EXAMPLES=${EXAMPLES:-examples/self_attention.coco examples/mlp.coco examples/lamb.coco \
tests/gpu/arith.coco tests/oracle/programs/ragged.coco tests/gpu/norms.coco examples/pipeline.coco}
    RANKS=${EXR:-4} BUILD_ONLY=1 PARTS=examples EXAMPLES=$EXAMPLES \
        sh tests/gpu/run.sh "$OUT/ex.md" >/dev/null 2>&1 &
    RANKS=${FR:-2 4} PARTS=faults COMMIT=${COMMIT:-?} timeout "$(left 240)" \
        sh tests/gpu/run.sh "$OUT/faults.md" >"$OUT/faults.out" 2>&1
    echo "faults: exit status $?"
    wait
    RANKS=${EXR:-4} PARTS=examples EXAMPLES=$EXAMPLES COMMIT=${COMMIT:-?} timeout "$(left 10)" \
        sh tests/gpu/run.sh "$OUT/ex.md" >"$OUT/ex.out" 2>&1
    echo "examples: exit status $?"
    gzip -f "$OUT/ex.md.log" "$OUT/faults.md.log" 2>/dev/null
    rm -f "$OUT"/*.log.build
    tail -3 "$OUT/ex.out"
    echo "faults: $(grep -c '| PASS |$' "$OUT/faults.md") rows passed, $(grep -c '| FAIL |$' "$OUT/faults.md") failed"
    grep '| FAIL |$' "$OUT/faults.md" | cut -c 1-300 | head -5
    ;;
tune)
    P=${P:-4} OUT=$OUT BUDGET=${BUDGET:-300} sh bench/tune.sh >"$OUT/tune.out" 2>&1
    echo "tune: exit status $?"
    tail -60 "$OUT/summary.md"
    ;;
esac

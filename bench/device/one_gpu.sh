#!/bin/sh
# bench/device/one_gpu.sh: one lease of a single-GPU machine, in steps (one
# command each, on the same warm machine; the build cache carries over):
#   STEP=measure  make; bench/matmul.sh (coconet's MatMul beside torch.matmul at
#                 the per-rank shapes of P = 1, 2, 4); bench/one_gpu.sh over the
#                 model-parallel layers at B = $B_SIZES (8 16) with --breakdown;
#                 then, in the time left, the builds of tests/gpu/run.sh's P = 1
#                 parts
#   STEP=tests    tests/gpu/run.sh at P = 1, parts $PARTS (selftest examples)
#   STEP=faults   tests/gpu/run.sh at P = 1, parts faults sanitize tune
# Variables: STEP, PARTS, COMMIT, DEADLINE. Output under $OUT: make.log,
# mm/ (matmul.md, torch.csv), layers/ (summary.md, coconet.log), p1-*.md and
# their logs (packed).
# shellcheck source=bench/device/lease.sh
. bench/device/lease.sh
STEP=${STEP:-measure}
case $STEP in
measure)
    lease_make
    ITERS=50 sh bench/matmul.sh "$OUT/mm" >/dev/null 2>&1
    PROGRAMS=" " POWS=" " B_SIZES=${B_SIZES:-8 16} ITERS=20 ARGS=--breakdown \
        LAYER_SCHEDULES="MM_AR_C MM_fuse_RS_C_AG" sh bench/one_gpu.sh "$OUT/layers" >/dev/null 2>&1
    RANKS=1 BUILD_ONLY=1 PARTS="selftest examples" timeout "$(left 20)" \
        sh tests/gpu/run.sh "$OUT/build-ahead.md" >/dev/null 2>&1
    cat "$OUT/mm/matmul.md" "$OUT/layers/summary.md"
    ;;
tests | faults)
    lease_make >/dev/null
    [ "$STEP" = tests ] && parts=${PARTS:-selftest examples} || parts=${PARTS:-faults sanitize tune}
    name=p1-$(echo "$parts" | tr ' ' '-')
    RANKS=1 PARTS="$parts" TIMEOUT=$(left 30) COMMIT=${COMMIT:-?} timeout "$(left 15)" \
        sh tests/gpu/run.sh "$OUT/$name.md" >"$OUT/$name.out" 2>&1
    echo "exit status $?"
    tar -C "$OUT" -czf "$OUT/$name-log.tgz" "$name.md.log" 2>/dev/null && rm -f "$OUT/$name.md.log"
    tail -40 "$OUT/$name.out"
    ;;
esac

#!/bin/sh
# bench/device/window.sh: NCCL AllReduce alone (bench/allreduce_fused.coco's
# program, FP32) with the arena registered as a symmetric window
# (COCONET_NCCL_WINDOW_BYTES huge: NCCL's symmetric kernels) and without
# (0: NCCL's ring and tree kernels on the same memory), at N = 2^POWS on P
# GPUs, beside the FusedAllReduce; then the self-test (the runtime with
# WORLD's twin communicator). Table in $OUT/window.txt, logs in
# $OUT/window.log.
. bench/device/lease.sh # T0, left, lease_make
P=${P:-2}
lease_make
./coconet run bench/allreduce_fused.coco --backend cuda --ranks "$P" --build-only >/dev/null 2>&1
printf '%-6s %12s %12s %12s\n' N window-ms plain-ms fused-ms | tee "$OUT/window.txt"
# at N elements with COCONET_NCCL_WINDOW_BYTES=$1: the run's output in one.txt
one() {
    timeout "$(left 60)" env COCONET_NCCL_WINDOW_BYTES="$1" ./coconet run \
        bench/allreduce_fused.coco -D N="$n" --backend cuda --ranks "$P" --iters 30 \
        --reference program >"$OUT/one.txt" 2>&1
    cat "$OUT/one.txt" >>"$OUT/window.log"
}
# ms VARIANT: that row's time in one.txt
ms() { awk -v v="$1" '$1 == v { print $(NF - 1) }' "$OUT/one.txt"; }
for p in ${POWS:-14 16 18 20 21 22 23 24 26 28}; do
    n=$((1 << p))
    one 1099511627776
    window=$(ms program)
    one 0
    printf '2^%-4s %12s %12s %12s\n' "$p" "$window" "$(ms program)" "$(ms fused)" |
        tee -a "$OUT/window.txt"
done
timeout "$(left 5)" ./coconet run tests/gpu/selftest.coco --cuda-source tests/gpu/selftest.cu \
    --backend cuda --ranks "$P" --iters 2 >"$OUT/selftest.txt" 2>&1
echo "selftest: status $?" | tee -a "$OUT/window.txt"
tail -6 "$OUT/selftest.txt"
echo "end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/lambknobs.sh: mixed-precision LAMB (examples/lamb.coco)
# fuse_RS_Opt_AG_4 at N = 2^28 on P = 2 GPUs, by loads (twoshot), under the
# fused kernels' knobs: the default instance, one element a step
# (COCONET_FUSED_VEC=1), 256 threads a block, 132 blocks; beside all-FP32
# LAMB and mixed Adam. Unchecked (--reference none). One line per run.
. bench/device/lease.sh # T0, lease_make
lease_make
which ncu nsys 2>&1 | head -2
for f in examples/lamb.coco bench/lamb_fp32.coco examples/adam.coco; do
    ./coconet run "$f" --all-schedules --schedule fuse_RS_Opt_AG_4 --backend cuda --ranks 2 \
        --build-only >/dev/null 2>&1 &
done
wait
echo "built at $(($(date +%s) - T0)) s"
# one LABEL FILE ENV...: the run's time of fuse_RS_Opt_AG_4 at 2^28
one() {
    label=$1 f=$2
    shift 2
    ms=$(env COCONET_FUSED=twoshot "$@" ./coconet run "$f" -D N=268435456 --all-schedules \
        --schedule fuse_RS_Opt_AG_4 --backend cuda --ranks 2 --iters 20 --reference none 2>&1 |
        awk '$1 == "fuse_RS_Opt_AG_4" { for (i = 2; i <= NF; i++) if ($i == "ms") print $(i - 1) }')
    echo "$label $ms"
}
one "lamb mixed default" examples/lamb.coco
one "lamb mixed VEC=1" examples/lamb.coco COCONET_FUSED_VEC=1
one "lamb mixed 256 threads" examples/lamb.coco COCONET_FUSED_THREADS=256
one "lamb mixed 132 blocks" examples/lamb.coco COCONET_FUSED_BLOCKS=132
one "lamb mixed 132 blocks of 256" examples/lamb.coco COCONET_FUSED_BLOCKS=132 COCONET_FUSED_THREADS=256
one "lamb fp32 default" bench/lamb_fp32.coco
one "lamb fp32 132 blocks" bench/lamb_fp32.coco COCONET_FUSED_BLOCKS=132
one "adam mixed default" examples/adam.coco
one "adam mixed VEC=1" examples/adam.coco COCONET_FUSED_VEC=1
echo "end $(($(date +%s) - T0)) s"

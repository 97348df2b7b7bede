#!/bin/sh
# bench/device/push.sh: the push algorithm of the FusedAllReduce against
# two-shot by loads (COCONET_FUSED=push / twoshot), on P GPUs: the
# FusedAllReduce with no computation at N = 2^POWS (FP32), beside NCCL
# AllReduce (the program, on the communicator coco_world picks), and
# Adam's fuse_RS_Opt_AG_4 at 2^26 and 2^28, all-FP32 (bench/adam_fp32.coco)
# and with FP16 gradients (examples/adam.coco); every row checked
# against the CPU reference. BUILD_ONLY=1: the builds alone (for the cache).
# Table in $OUT/push.txt, logs in $OUT/push.log.
. bench/device/lease.sh # T0, left
P=${P:-2}
if [ "${BUILD_ONLY:-0}" = 1 ]; then
    ./coconet run bench/allreduce_fused.coco --backend cuda --ranks "$P" --build-only &
    for f in bench/adam_fp32.coco examples/adam.coco; do
        ./coconet run "$f" --all-schedules --schedule fuse_RS_Opt_AG_4 --backend cuda \
            --ranks "$P" --build-only &
    done
    wait
    exit 0
fi
# row LABEL ENV=VALUE... COMMAND...: one run; its rows prefixed with LABEL
row() {
    label=$1
    shift
    timeout "$(left 10)" env "$@" --backend cuda --ranks "$P" --iters 20 --reference program \
        >"$OUT/one.txt" 2>&1
    echo "== $label: $*" >>"$OUT/push.log"
    cat "$OUT/one.txt" >>"$OUT/push.log"
    awk -v l="$label" '/^schedule +outputs/ { on = 1; next } /^gpu-time:/ { on = 0 }
        on && NF >= 7 { for (i = 2; i <= NF; i++) if ($i == "ms") printf "%-28s %-22s %-9s %s\n", l, $1, $2, $(i - 1) }' \
        "$OUT/one.txt" | tee -a "$OUT/push.txt"
}
for p in ${POWS:-20 22 24 26 28}; do
    for algo in twoshot push; do
        row "AR 2^$p $algo" COCONET_FUSED=$algo ./coconet run bench/allreduce_fused.coco -D N=$((1 << p))
    done
done
for f in bench/adam_fp32.coco examples/adam.coco; do
    for p in 26 28; do
        for algo in twoshot push; do
            row "$(basename "$f" .coco) 2^$p $algo" COCONET_FUSED=$algo ./coconet run "$f" \
                -D N=$((1 << p)) --all-schedules --schedule fuse_RS_Opt_AG_4
        done
    done
done
echo "push.sh: end at $(($(date +%s) - T0)) s"

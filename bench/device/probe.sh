#!/bin/sh
# bench/device/probe.sh: does a FusedAllReduce whose reduce-scatter stores
# into the peers (bench/probe/allreduce_push.cu, PROBE_PUSH) reach more
# bandwidth than the one that loads from them (coconet's kernels), and how
# fast is NCCL AllReduce with the arena a symmetric window or plain memory
# (COCONET_FUSED=nccl)? FP32 AllReduce at N = 2^26 and 2^28 on P (2) GPUs.
# Every run's output in $OUT/probe.log; a table last.
export COCONET_HOME=$PWD
export COCONET_CACHE=$PWD/build/cache
. bench/device/deadline.sh # T0, left
P=${P:-2}
LOG=$OUT/probe.log
make -j16 >"$OUT/make.log" 2>&1 || { tail -30 "$OUT/make.log"; exit 1; }
one() { # label, env..., then the run
    label=$1
    shift
    echo "== $label" >>"$LOG"
    timeout "$(left 5)" env "$@" ./coconet run bench/allreduce_fused.coco -D N=$n --backend cuda \
        --ranks "$P" --iters 20 --reference program --cuda-source bench/probe/allreduce_push.cu \
        >"$OUT/one.txt" 2>&1
    cat "$OUT/one.txt" >>"$LOG"
    grep -E '^(program|fused) ' "$OUT/one.txt" | sed "s/^/$n $label: /" | tee -a "$OUT/table.txt"
}
for n in ${NS:-268435456 67108864}; do
    one window-ld X=0
    one push PROBE_PUSH=1
    one push-rot PROBE_PUSH=2
    one plain COCONET_FUSED=nccl
    [ "$n" = 268435456 ] || continue
    one ld-132x512 COCONET_FUSED_BLOCKS=132
    one push-132x512 PROBE_PUSH=1 COCONET_FUSED_BLOCKS=132
    one push-264x256 PROBE_PUSH=1 COCONET_FUSED_THREADS=256
    one push-64x512 PROBE_PUSH=1 COCONET_FUSED_BLOCKS=64
done
echo "end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/verify.sh: every example and test program x every schedule
# (tests/gpu/run.sh's selftest and examples parts), then uneven slices
# (adam, lamb, sgd_momentum at N = 1, 5, 1001, 1000003, fused and with
# COCONET_FUSED=nccl) and scattered parts cutting buckets (W = 41 and 401),
# --reference none at 2^24, then Adam at N = 2^28 with COCONET_TRACE=1 to
# show where a large run spends its time. Logs under $OUT; a short table
# last. Variables: R (ranks, 4), DEADLINE (seconds, 565), COMMIT (the
# commit to name in the tables).
#
#   COMMIT=<sha> R=4 sh bench/device/verify.sh   (COMMIT given literally: lease.sh says why)
export COCONET_HOME=$PWD
R=${R:-4}
. bench/device/deadline.sh # T0, left
make -j16 >"$OUT/make.log" 2>&1 || { tail -30 "$OUT/make.log"; exit 1; }

# 1. every example and test program x every schedule (send, norms,
#    lamb_scattered, ragged, pipeline with and without COCONET_FUSED=nccl)
RANKS=$R PARTS="selftest examples" JOBS=12 TIMEOUT=150 timeout "$(left 240)" \
    sh tests/gpu/run.sh "$OUT/examples.md" >"$OUT/examples.out" 2>&1

# 2. uneven slices and scattered parts cutting buckets, on both fused paths
one() { # NAME [VAR=VALUE...] COMMAND...: one run on the GPUs, its status in the summary
    name=$1; shift
    env "$@" --backend cuda --ranks "$R" --all-schedules --iters 5 >"$OUT/$name.log" 2>&1
    echo "$name status $? $(grep -c -E ' (WRONG|FAILED|GUARD|REPEAT|REPLICAS) ' "$OUT/$name.log") bad rows" \
        >>"$OUT/summary"
}
: >"$OUT/summary"
for n in 1 5 1001 1000003; do
    for f in adam lamb sgd_momentum; do
        [ "$(left)" -gt 200 ] || break
        one "$f-$n" ./coconet run "examples/$f.coco" -D "N=$n" --reference program
        one "$f-$n-nccl" COCONET_FUSED=nccl ./coconet run "examples/$f.coco" -D "N=$n" --reference program
    done
done
for f in examples/adam_scattered.coco tests/gpu/lamb_scattered.coco; do
    b=$(basename "$f" .coco)
    one "$b-w41" COCONET_FUSED=twoshot ./coconet run "$f" -D W=41
    one "$b-w401" COCONET_FUSED=twoshot COCONET_FUSED_BLOCKS=1 COCONET_FUSED_THREADS=96 \
        ./coconet run "$f" -D W=401
done
one none-2p24 ./coconet run bench/adam_fp32.coco -D N=16777216 --reference none

# 3. where a run at 2^28 spends its time
[ "$(left)" -gt 120 ] && COCONET_TRACE=1 timeout "$(left 10)" ./coconet run examples/adam.coco \
    -D N=268435456 --backend cuda --ranks "$R" --all-schedules --reference program \
    >"$OUT/adam-2p28.log" 2>&1
echo "adam 2^28 status $? ($(grep -c 'coconet trace' "$OUT/adam-2p28.log") trace lines)" >>"$OUT/summary"

grep -E '^(ok|FAIL)' "$OUT/examples.out" | cut -c1-150
cat "$OUT/summary"
echo "end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/tune_quality.sh: one command on a lent machine with P GPUs for
# how often the tuner's pruning loses the best (issue 22) and how much two
# tunes of the same code differ, with the timed runs started either way
# (rt/run.c's timed_run: behind the ranks' line-up on the GPU, the default;
# COCONET_TIME_HOST_START=1: after the host waited for it):
#   1. make; the builds (bench/tune.sh BUILD over OPT and WARM_WORKLOADS),
#      then bench/tune.sh WARM over WARM_WORKLOADS (when set: warm.md);
#   2. bench/tune.sh's EXH and PRUNED parts over OPT at N = 2^k for k in
#      POWS, in TURNS: gpu1, host1, gpu2, host2 (host: with
#      COCONET_TIME_HOST_START=1; warm: with COCONET_COLD_L2=0, the inputs
#      left in the L2 as before tune emptied it; every turn in the same
#      build cache);
#   3. the same at N = 2^BIG_POW over BIG (unless BIG is empty), while the
#      deadline allows.
# Under $OUT: one summary a turn (warm.md, gpu1.md, host1.md, gpu2.md,
# host2.md, big.md), turns.md (bench/tune_turns.py over the GPU-start turns
# with a cold L2, when there are two or more: each candidate at its median
# over the turns; turns-warm.md: the same over the warm turns)
# and logs.tgz (each turn's tune.log and tune-runs.tgz:
# every tune's table). Variables: P (4), OPT ("adam lamb"), POWS ("20 24"),
# WARM_WORKLOADS (none), TURNS ("gpu1 host1 gpu2 host2"), BIG (adam),
# BIG_POW (28), TUNE_MAX (tune.sh's, 120; 200 for BIG), COMMIT, DEADLINE.
# shellcheck source=bench/device/lease.sh
. bench/device/lease.sh
P=${P:-4}
OPT=${OPT:-adam lamb}
POWS=${POWS:-20 24}
BIG=${BIG-adam}
BIG_POW=${BIG_POW:-28}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
lease_logs logs
lease_make
TW=/tmp/coconet-tune-quality
WARM_WORKLOADS=${WARM_WORKLOADS:-}
TURNS=${TURNS:-gpu1 host1 gpu2 host2}
P=$P OUT=$W/build WORK=$TW/base BUDGET=$(left 200) WORKLOADS=$WARM_WORKLOADS OPT=$OPT COLD=0 \
    WARM=0 EXH=0 PRUNED=0 sh bench/tune.sh >"$W/build.out" 2>&1
echo "builds done at $(($(date +%s) - T0)) s"
if [ -n "$WARM_WORKLOADS" ]; then
    P=$P OUT=$W/warm WORK=$TW/base BUDGET=$(left 200) WORKLOADS=$WARM_WORKLOADS OPT="" COLD=0 \
        BUILD=0 EXH=0 PRUNED=0 sh bench/tune.sh >"$W/warm.out" 2>&1
    echo "warm: bench/tune.sh exit status $? at $(($(date +%s) - T0)) s"
    cp "$W/warm/summary.md" "$OUT/warm.md"
fi

# turn NAME OPT POWS TUNE_MAX [VAR=VALUE...]: bench/tune.sh's EXH and PRUNED
# parts in the shared build cache, its summary in $OUT/NAME.md
turn() {
    name=$1 opt=$2 pows=$3 max=$4
    shift 4
    mkdir -p "$TW/$name"
    ln -sfn "$TW/base/cache" "$TW/$name/cache"
    env "$@" P="$P" OUT="$W/$name" WORK="$TW/$name" BUDGET="$(left 5)" OPT="$opt" POWS="$pows" \
        COLD=0 BUILD=0 WARM=0 TUNE_MAX="$max" sh bench/tune.sh >"$W/$name.out" 2>&1
    echo "$name: bench/tune.sh exit status $? at $(($(date +%s) - T0)) s"
    cp "$W/$name/summary.md" "$OUT/$name.md"
}
for t in $TURNS; do
    case $t in
    host*) turn "$t" "$OPT" "$POWS" "${TUNE_MAX:-120}" COCONET_TIME_HOST_START=1 ;;
    warm*) turn "$t" "$OPT" "$POWS" "${TUNE_MAX:-120}" COCONET_COLD_L2=0 ;;
    *) turn "$t" "$OPT" "$POWS" "${TUNE_MAX:-120}" ;;
    esac
done
[ -n "$BIG" ] && [ "$(left)" -gt 60 ] && turn big "$BIG" "$BIG_POW" "${TUNE_MAX:-200}"
gpu_turns=
warm_turns=
for t in $TURNS; do
    case $t in
    host*) ;;
    warm*) warm_turns="$warm_turns $TW/$t" ;;
    *) gpu_turns="$gpu_turns $TW/$t" ;;
    esac
done
# shellcheck disable=SC2086 # the turns' folders: words
[ "$(echo $gpu_turns | wc -w)" -ge 2 ] && python3 bench/tune_turns.py $gpu_turns >"$OUT/turns.md"
# shellcheck disable=SC2086 # the turns' folders: words
[ "$(echo $warm_turns | wc -w)" -ge 2 ] &&
    python3 bench/tune_turns.py $warm_turns >"$OUT/turns-warm.md"
for f in warm $TURNS big turns turns-warm; do
    [ -f "$OUT/$f.md" ] || continue
    echo "== $f"
    grep '^| [a-z]' "$OUT/$f.md"
done
exit 0

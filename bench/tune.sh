#!/bin/sh
# bench/tune.sh: `coconet tune` on the paper's workloads, on a machine with
# P GPUs: how long tuning one size takes with a cold build cache and a warm
# one, and whether the pruned search picks what the exhaustive one finds best.
#
#   P=4 OUT=/some/dir sh bench/tune.sh
#
# Steps (every command and its output in $OUT/tune.log):
# 1. make (the command and the GPU runtime, built here).
# 2. At once: the cold tune of each workload in COLD (default adam) at its
#    first size, in a fresh cache ($OUT/cache-cold-NAME: nvcc builds its
#    variants and the runtime measures the machine's limits inside the
#    time), beside the build of every workload's variants into the warm
#    cache $OUT/cache (`run --build-only --all-schedules`: the source tune
#    builds; JOBS at once). COLD_ALONE=1 runs the cold tunes first, alone
#    (no nvcc beside them: a cleaner time, a longer script).
# 3. Warm: each workload tuned at its first size in $OUT/cache (timed).
# 4. Exhaustive: each workload at all its sizes with --exhaustive, which
#    also says, per size, what pruning at 1.5 picks from the same times.
# 5. The tables: seconds of each tune; per size, the exhaustive best, the
#    pruned pick (from the same times) and whether it is within 3 % of the
#    best; and the warm run's own pick at its size, timed in step 4.
#
# Workloads: adam and lamb at N = 2^POW for POW in POWS (20 24 28; the first
# is the warm and cold size); self_attention, mlp and pipeline at B=8
# S=1024 H=3072 (pipeline: GROUP of 2, so P even). Variables: P (4), OUT
# (build/tune-results), WORKLOADS (adam lamb self_attention mlp pipeline),
# POWS ("20 24 28"), COLD (adam; "" for none), COLD_ALONE (0), ITERS (10
# timed runs a variant), JOBS (8 builds at once). QUICK=1: POWS="20 24",
# WORKLOADS="adam lamb self_attention". The default is meant to take about
# 6 minutes at P = 4 (an estimate: not measured yet).
cd "$(dirname "$0")/.." || exit 2
P=${P:-4}
OUT=${OUT:-build/tune-results}
ITERS=${ITERS:-10}
JOBS=${JOBS:-8}
if [ "${QUICK:-0}" = 1 ]; then
    POWS=${POWS:-20 24}
    WORKLOADS=${WORKLOADS:-adam lamb self_attention}
fi
POWS=${POWS:-20 24 28}
WORKLOADS=${WORKLOADS:-adam lamb self_attention mlp pipeline}
COLD=${COLD-adam}
mkdir -p "$OUT"
LOG=$OUT/tune.log
: >"$LOG"
: >"$OUT/times.txt"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# args NAME all|first: the workload's file and sizes
args() {
    case $1 in
    adam | lamb)
        s=""
        for k in $POWS; do
            s="$s${s:+,}2^$k"
            [ "$2" = first ] && break
        done
        echo "examples/$1.coco --sizes N=$s" ;;
    *) echo "examples/$1.coco -D B=8 -D S=1024 -D H=3072" ;;
    esac
}

# tune NAME CACHE MODE SIZES [OPTIONS]: one `coconet tune`, timed; its output
# in $OUT/NAME.MODE.txt, each launch's report in $OUT/NAME.MODE.launches.log
tune() {
    name=$1 cache=$2 mode=$3 which=$4
    shift 4
    # shellcheck disable=SC2046 # args are words
    set -- $(args "$name" "$which") --ranks "$P" --iters "$ITERS" "$@"
    t0=$(now)
    COCONET_CACHE=$cache ./coconet tune "$@" --log "$OUT/$name.$mode.launches.log" \
        >"$OUT/$name.$mode.txt" 2>"$OUT/$name.$mode.err"
    rc=$?
    s=$(since "$t0")
    { echo "== $mode: COCONET_CACHE=$cache ./coconet tune $*: exit $rc in $s s"
      cat "$OUT/$name.$mode.txt" "$OUT/$name.$mode.err"; } >>"$LOG"
    echo "$name $mode $which $s $rc" >>"$OUT/times.txt"
    echo "== $mode: $name ($which sizes): exit $rc in $s s"
}

cold() {
    for w in $COLD; do
        rm -rf "$OUT/cache-cold-$w"
        tune "$w" "$OUT/cache-cold-$w" cold first
    done
}

build_all() {
    echo "== building every workload's variants into $OUT/cache ($JOBS at once)"
    t0=$(now)
    n=0
    for w in $WORKLOADS; do
        # shellcheck disable=SC2046
        set -- $(args "$w" first)
        file=$1
        shift
        [ "$1" = --sizes ] && shift 2 # the source is the same at every size
        COCONET_CACHE=$OUT/cache ./coconet run "$file" "$@" --ranks "$P" --backend cuda \
            --all-schedules --build-only >>"$OUT/build.log" 2>&1 &
        n=$((n + 1))
        [ $((n % JOBS)) = 0 ] && wait
    done
    wait
    echo "== built in $(since "$t0") s"
}

echo "== make"
make -j 16 coconet build/libcoconet_cuda.so >>"$LOG" 2>&1 || { echo "make failed: $LOG"; exit 1; }
mkdir -p "$OUT/cache"
: >"$OUT/build.log"
if [ "${COLD_ALONE:-0}" = 1 ]; then
    cold
    build_all
else
    cold &
    build_all
    wait
fi
cat "$OUT/build.log" >>"$LOG"
for w in $WORKLOADS; do
    tune "$w" "$OUT/cache" warm first
done
for w in $WORKLOADS; do
    tune "$w" "$OUT/cache" exhaustive all --exhaustive
done

# per size: the exhaustive best, what pruning picks from the same times, and
# the warm run's own pick timed in the exhaustive run
quality() {
    awk -v w="$1" '
        FNR == 1 { file++ }
        /^[a-z_]+ at [^ ]+, [0-9]+ ranks?: / { cur = $3; sub(/,$/, "", cur) }
        file == 1 && /^best at / { k = $7; sub(/,$/, "", k); warm[cur] = $4 " " k }
        file == 2 && /^ +[0-9]+  / { t[cur " " $2 " " $3] = $4; if ($1 == 1) best[cur] = $2 " " $3 " " $4; if (!(cur in seen)) { seen[cur] = 1; order[++n] = cur } }
        file == 2 && /^pruning at / {
            slower[cur] = $0; sub(/.*\(/, "", slower[cur]); sub(/ %.*/, "", slower[cur])
            sub(/^the best, /, "", slower[cur]); pick[cur] = $6 " " $9 }
        END {
            for (i = 1; i <= n; i++) {
                s = order[i]; split(best[s], b, " ")
                wt = (s in warm) ? t[s " " warm[s]] : ""
                printf "| %s | %s | %s %s | %s ms | %s | %s %% | %s | %s |\n", w, s, b[1], b[2], b[3],
                       pick[s], slower[s], (slower[s] != "" && slower[s] + 0 <= 3) ? "yes" : "NO",
                       (s in warm) ? warm[s] " (" (wt != "" ? sprintf("%.3f", wt / b[3]) : "?") " x best)" : "-"
            }
        }' "$OUT/$1.warm.txt" "$OUT/$1.exhaustive.txt"
}

{
    echo
    echo "## coconet tune at P = $P ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
    echo
    echo "| workload | mode | sizes | seconds | exit |"
    echo "|---|---|---|---|---|"
    awk '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$OUT/times.txt"
    echo
    echo "(cold: a fresh cache, the nvcc build and the limits' measurement included; warm: the code"
    echo "built; first: the first size alone; all: every size, --exhaustive)"
    echo
    echo "| workload | size | exhaustive best | its time | pruned pick (same times) | slower by | within 3 % | warm run's pick (its time / best) |"
    echo "|---|---|---|---|---|---|---|---|"
    for w in $WORKLOADS; do quality "$w"; done
    echo
    echo "logs: $LOG, $OUT/*.txt, $OUT/*.launches.log"
} | tee "$OUT/summary.md"

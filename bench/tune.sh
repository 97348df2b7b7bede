#!/bin/sh
# bench/tune.sh: `coconet tune` on the paper's workloads, on a machine with
# P GPUs: how long tuning takes (with a cold build cache and a warm one),
# and whether the pruned search picks what the exhaustive one finds best.
#
#   P=4 OUT=/some/dir sh bench/tune.sh
#
# Steps (every command and its output in $OUT/tune.log):
# 1. make (the command and the GPU runtime, built here).
# 2. Cold: for each workload in COLD (default adam), `coconet tune` in a
#    fresh cache ($OUT/cache-cold-NAME): nvcc builds its variants and the
#    runtime measures the machine's limits, inside the time.
# 3. The other workloads' code is built into the warm cache ($OUT/cache),
#    all at once (`run --build-only --all-schedules`, the same source tune
#    builds), then each workload is tuned there twice: pruned (warm, timed)
#    and --exhaustive (which also says what pruning would pick from its own
#    times).
# 4. Per size point: the pruned run's pick, its time in the exhaustive run's
#    table, the exhaustive best, and whether the pick is within 3 % of it.
#
# Workloads: adam and lamb at N = 2^POW for POW in POWS (20 24 28);
# self_attention and mlp at B=8 S=1024 H=3072; pipeline at B=8 S=1024
# H=3072 (GROUP of 2: P of 2 or more, even). Variables: P (4), OUT
# (build/tune-results), WORKLOADS (adam lamb self_attention mlp pipeline),
# POWS ("20 24 28"; "20 24" halves the optimizers' time), COLD (adam; ""
# for none), ITERS (10 timed runs a variant), JOBS (parallel builds, 8).
# At P = 4 the default takes about 6 minutes once built (estimate, not yet
# measured); QUICK=1 sets POWS="20 24" and WORKLOADS="adam lamb self_attention".
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
ROWS=$OUT/rows.txt
: >"$LOG"
: >"$ROWS"
: >"$OUT/times.txt"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# args NAME: the workload's tune arguments
args() {
    case $1 in
    adam | lamb)
        s=""
        for k in $POWS; do s="$s${s:+,}2^$k"; done
        echo "examples/$1.coco --sizes N=$s" ;;
    *) echo "examples/$1.coco -D B=8 -D S=1024 -D H=3072" ;;
    esac
}

# tune NAME CACHE MODE [OPTIONS]: one `coconet tune`, timed; its output in
# $OUT/NAME.MODE.txt, its launches' reports in $OUT/NAME.MODE.launches.log
tune() {
    name=$1 cache=$2 mode=$3
    shift 3
    # shellcheck disable=SC2046 # args are words
    set -- $(args "$name") --ranks "$P" --iters "$ITERS" "$@"
    echo "== $mode: COCONET_CACHE=$cache ./coconet tune $*" >>"$LOG"
    t0=$(now)
    COCONET_CACHE=$cache ./coconet tune "$@" --log "$OUT/$name.$mode.launches.log" \
        >"$OUT/$name.$mode.txt" 2>>"$LOG"
    rc=$?
    s=$(since "$t0")
    cat "$OUT/$name.$mode.txt" >>"$LOG"
    echo "$name $mode $s $rc" >>"$OUT/times.txt"
    echo "== $mode: $name: exit $rc in $s s" | tee -a "$LOG"
}

echo "== make" | tee -a "$LOG"
make -j 16 coconet build/libcoconet_cuda.so >>"$LOG" 2>&1 || { echo "make failed: $LOG"; exit 1; }

# 2. cold caches
for w in $COLD; do
    rm -rf "$OUT/cache-cold-$w"
    tune "$w" "$OUT/cache-cold-$w" cold
done

# 3. the warm cache: built in parallel, then a pruned and an exhaustive tune
CACHE=$OUT/cache
mkdir -p "$CACHE"
echo "== building every workload's variants into $CACHE ($JOBS at once)" | tee -a "$LOG"
t0=$(now)
n=0
for w in $WORKLOADS; do
    # shellcheck disable=SC2046
    set -- $(args "$w")
    file=$1
    shift
    [ "$1" = --sizes ] && shift 2 # the source is the same at every size
    COCONET_CACHE=$CACHE ./coconet run "$file" "$@" --ranks "$P" --backend cuda --all-schedules \
        --build-only >>"$LOG" 2>&1 &
    n=$((n + 1))
    [ $((n % JOBS)) = 0 ] && wait
done
wait
echo "== built in $(since "$t0") s" | tee -a "$LOG"
for w in $WORKLOADS; do
    tune "$w" "$CACHE" warm
    tune "$w" "$CACHE" exhaustive --exhaustive
done

# 4. the picks against the exhaustive best, per size point
for w in $WORKLOADS; do
    awk -v w="$w" '
        FNR == 1 { file++ }
        /^best at / { size = $3; sub(/:$/, "", size) }
        file == 1 && /^best at / { k = $7; sub(/,$/, "", k); pick[size] = $4 " " k; sizes[++n] = size }
        file == 2 && /^[a-z_]+ at .* candidates/ { cur = $3; sub(/,$/, "", cur) }
        file == 2 && /^ +[0-9]+  / { t[cur " " $2 " " $3] = $4; if ($1 == 1) best[cur] = $2 " " $3 " " $4 }
        file == 2 && /^pruning at / { replay[cur] = $0 }
        END {
            for (i = 1; i <= n; i++) {
                s = sizes[i]; split(best[s], b, " ")
                pt = t[s " " pick[s]]
                ratio = (pt > 0 && b[3] > 0) ? pt / b[3] : -1
                printf "%s|%s|%s|%s|%s %s|%s|%s|%s\n", w, s, pick[s], pt, b[1], b[2], b[3],
                       ratio < 0 ? "?" : sprintf("%.3f", ratio),
                       ratio < 0 ? "?" : (ratio <= 1.03 ? "yes" : "NO")
            }
        }' "$OUT/$w.warm.txt" "$OUT/$w.exhaustive.txt" >>"$ROWS"
done

{
    echo
    echo "## coconet tune at P = $P ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
    echo
    echo "| workload | mode | seconds | exit |"
    echo "|---|---|---|---|"
    awk '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }' "$OUT/times.txt"
    echo
    echo "| workload | sizes | pruned pick | its time (exhaustive run) | exhaustive best | its time | ratio | within 3 % |"
    echo "|---|---|---|---|---|---|---|---|"
    awk -F'|' '{ printf "| %s | %s | %s | %s ms | %s | %s ms | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$ROWS"
    echo
    echo "What pruning would pick from the exhaustive runs' own times:"
    grep -h '^pruning at' "$OUT"/*.exhaustive.txt | sed 's/^/  /'
    echo
    echo "logs: $LOG, $OUT/*.txt, $OUT/*.launches.log"
} | tee "$OUT/summary.md"

#!/bin/sh
# bench/tune.sh: `coconet tune` on the paper's workloads, on one machine with
# P GPUs, in one command: how long a tune takes, and how good its pick is.
#
#   P=4 OUT=/some/dir sh bench/tune.sh
#
# Parts, in this order (each skippable; with a BUDGET, a part that would
# start past it is recorded SKIPPED, and each tune is stopped at it):
# 1. make (the command and the GPU runtime, built here).
# 2. BUILD: every workload's code built into the warm cache WORK/cache
#    (`run --build-only --all-schedules`, the source tune builds, JOBS at
#    once) beside COLD: one tune of COLD_WORKLOAD (adam) at its warm size in
#    a fresh cache WORK/cache-cold (nvcc builds its variants and the runtime
#    measures the machine's limits inside the time; its summary line says
#    how long the build took). COLD_ALONE=1: the cold tune first, alone (a
#    cleaner time, a longer script).
# 3. WARM: each of WORKLOADS tuned at one size in the warm cache (the goal:
#    at most 10 s at P = 4): adam and lamb at N = 2^WARM_POW (20);
#    self_attention and mlp at B=8 S=1024 H=3072 (bench/mp.sh's); the
#    pipeline at B=1 S=2048 H=12288 (GPT-3's S and H), 2 groups of P/2.
# 4. EXH: each of OPT (adam lamb) tuned --exhaustive at N = 2^k for k in
#    POWS (20 24 28): every candidate timed, one round a size, and what
#    pruning at 1.5 picks from the same times.
# 5. PRUNED: the same sizes tuned with pruning (its own rounds and times):
#    its time against the exhaustive run's, its picks timed in the
#    exhaustive tables.
# 6. The tables, printed last (summary.md): each tune's seconds, launches and
#    where its time went; per size, the exhaustive best, the pruned pick
#    (replayed and run) and whether it is within 3 %; the tuned choice
#    against the best single fixed (schedule, knobs) over POWS (the paper's
#    Figure 6 discussion: the fixed one is the candidate of least mean
#    time/best over the sizes, timed at every one).
#
# Variables: P (4), OUT (build/tune-results), WORK (/tmp/coconet-tune-bench:
# the build caches, the runs' outputs), BUDGET (seconds for the whole
# command; 0, the default: no limit), ITERS (timed runs a candidate, 10),
# JOBS (8), WORKLOADS, OPT, POWS, WARM_POW, COLD_WORKLOAD, COLD_ALONE,
# TUNE_MAX (the most seconds one tune may take, so that one slow part leaves
# time for the others; 0, the default: no limit); BUILD, COLD,
# WARM, EXH, PRUNED: 0 skips the part; TABLES_ONLY=1: no make, no run,
# the tables of the runs already in WORK (the tests make them with a fake
# timer, tests/groups/54-tune.sh). NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0).
#
# Writes under OUT: tune.log (every command and its whole output, as the
# run goes), summary.md (the tables), tune-runs.tgz (each tune's output and
# launch log). Exit status: 0 when every part ran and every tune passed; 1
# when a tune or make failed; 3 when parts were skipped at the budget but
# nothing failed.
cd "$(dirname "$0")/.." || exit 2
P=${P:-4}
OUT=${OUT:-build/tune-results}
WORK=${WORK:-/tmp/coconet-tune-bench}
BUDGET=${BUDGET:-0}
ITERS=${ITERS:-10}
JOBS=${JOBS:-8}
WORKLOADS=${WORKLOADS:-adam lamb self_attention mlp pipeline}
OPT=${OPT:-adam lamb}
POWS=${POWS:-20 24 28}
WARM_POW=${WARM_POW:-20}
COLD_WORKLOAD=${COLD_WORKLOAD:-adam}
TUNE_MAX=${TUNE_MAX:-0}
START=$(date +%s)
NCCL_NVLS_ENABLE=0
export NCCL_NVLS_ENABLE
[ "$P" -ge 2 ] || WORKLOADS=$(echo "$WORKLOADS" | sed 's/pipeline//') # 2 groups
mkdir -p "$OUT" "$WORK/runs" || exit 2
LOG=$OUT/tune.log
TIMES=$WORK/times.txt
failed=0
skipped=0
if [ "${TABLES_ONLY:-0}" != 1 ]; then # TABLES_ONLY=1: the tables of WORK's runs alone (tests)
    : >"$LOG"
    : >"$TIMES"
fi

# left: the seconds of the budget left, for timeout(1); 0 (no limit) without
# a budget
left() {
    if [ "$BUDGET" -gt 0 ]; then echo $((BUDGET - ($(date +%s) - START))); else echo 0; fi
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "$*" | tee -a "$LOG"; }

# args NAME SIZES: the workload's file and options (SIZES: "2^20,2^24" for
# the optimizers, ignored by the layers)
args() {
    case $1 in
    adam | lamb) echo "examples/$1.coco --sizes N=$2" ;;
    self_attention | mlp) echo "examples/$1.coco -D B=8 -D S=1024 -D H=3072" ;;
    pipeline) echo "examples/pipeline.coco -D B=1 -D S=2048 -D H=12288 --group-size $((P / 2))" ;;
    *) echo "examples/$1.coco" ;;
    esac
}

pows() { # "2^20,2^24,2^28" from POWS
    s=""
    for k in $POWS; do s="$s${s:+,}2^$k"; done
    echo "$s"
}

# tune PART NAME CACHE SIZES [OPTIONS]: one `coconet tune`, stopped at the
# budget; its output in WORK/runs/NAME.PART.txt, its launches' reports in
# NAME.PART.launches.log; a line in TIMES: part name seconds exit, then its
# summary line's figures
tune() {
    part=$1 name=$2 cache=$3 sizes=$4
    shift 4
    limit=0 # timeout(1): no limit
    if [ "$BUDGET" -gt 0 ]; then
        limit=$(($(left) - 5))
        if [ "$limit" -lt 15 ]; then
            say "== $part $name: SKIPPED (the budget of $BUDGET s is spent)"
            echo "$part $name - SKIPPED" >>"$TIMES"
            skipped=1
            return
        fi
    fi
    if [ "$TUNE_MAX" -gt 0 ] && { [ "$limit" -eq 0 ] || [ "$limit" -gt "$TUNE_MAX" ]; }; then
        limit=$TUNE_MAX
    fi
    # shellcheck disable=SC2046 # args are words
    set -- $(args "$name" "$sizes") --ranks "$P" --iters "$ITERS" "$@"
    base=$WORK/runs/$name.$part
    t0=$(now)
    COCONET_CACHE=$cache timeout "$limit" ./coconet tune "$@" --log "$base.launches.log" \
        >"$base.txt" 2>"$base.err"
    rc=$?
    s=$(since "$t0")
    { echo "== $part: COCONET_CACHE=$cache ./coconet tune $*: exit $rc in $s s"
      cat "$base.txt"
      grep -v '^\[' "$base.err"; } >>"$LOG"
    [ "$rc" = 0 ] || failed=1
    [ "$rc" = 124 ] && skipped=1
    sum=$(grep '^tune: ' "$base.txt" | tail -n 1)
    echo "$part $name $s $rc $sum" >>"$TIMES"
    echo "== $part: $name: exit $rc in $s s${sum:+: $sum}"
}

cold() {
    rm -rf "$WORK/cache-cold"
    tune cold "$COLD_WORKLOAD" "$WORK/cache-cold" "2^$WARM_POW"
}

build_all() {
    say "== building every workload's variants into $WORK/cache ($JOBS at once)"
    t0=$(now)
    n=0
    for w in $WORKLOADS $OPT; do
        # shellcheck disable=SC2046
        set -- $(args "$w" "2^$WARM_POW")
        file=$1
        shift
        [ "$1" = --sizes ] && shift 2 # the source is the same at every size
        lim=$(left)
        [ "$BUDGET" -eq 0 ] || [ "$lim" -gt 1 ] || lim=1
        COCONET_CACHE=$WORK/cache timeout "$lim" ./coconet run "$file" "$@" --ranks "$P" \
            --backend cuda --all-schedules --build-only >>"$WORK/build.log" 2>&1 &
        n=$((n + 1))
        [ $((n % JOBS)) = 0 ] && wait
    done
    wait
    say "== built in $(since "$t0") s"
}

run_parts() {
say "== bench/tune.sh at P = $P, budget ${BUDGET} s (0: none), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n "$P" >>"$LOG"
say "== make"
if ! make -j 16 coconet build/libcoconet_cuda.so >>"$LOG" 2>&1; then
    echo "make failed: $LOG"
    exit 1
fi
mkdir -p "$WORK/cache"
: >"$WORK/build.log"
if [ "${COLD:-1}" = 1 ] && [ "${COLD_ALONE:-0}" = 1 ]; then
    cold
    [ "${BUILD:-1}" = 1 ] && build_all
elif [ "${COLD:-1}" = 1 ] && [ "${BUILD:-1}" = 1 ]; then
    cold &
    build_all
    wait
    # the cold tune ran in a subshell: its status is its line in TIMES
    awk '$1 == "cold" && $4 != "0" { f = 1 } END { exit !f }' "$TIMES" && failed=1
else
    [ "${COLD:-1}" = 1 ] && cold
    [ "${BUILD:-1}" = 1 ] && build_all
fi
cat "$WORK/build.log" >>"$LOG"
if [ "${WARM:-1}" = 1 ]; then
    for w in $WORKLOADS; do tune warm "$w" "$WORK/cache" "2^$WARM_POW"; done
fi
if [ "${EXH:-1}" = 1 ]; then
    for w in $OPT; do tune exhaustive "$w" "$WORK/cache" "$(pows)" --exhaustive; done
fi
if [ "${PRUNED:-1}" = 1 ]; then
    for w in $OPT; do tune pruned "$w" "$WORK/cache" "$(pows)"; done
fi
}
[ "${TABLES_ONLY:-0}" = 1 ] || run_parts

# ---- the tables ----

# the seconds of each tune and where they went (the summary line's figures)
times_table() {
    echo "| part | workload | seconds | exit | launches | building | CPU reference | checking | timing |"
    echo "|---|---|---|---|---|---|---|---|---|"
    awk '{
        if ($4 == "SKIPPED") { printf "| %s | %s | - | SKIPPED | | | | | |\n", $1, $2; next }
        line = $0; sub(/^[^:]*: /, "", line)
        l = ""; b = ""; r = ""; c = ""; t = ""
        if (match(line, /[0-9]+ launch(es)? of the ranks/)) { l = substr(line, RSTART, RLENGTH); sub(/ .*/, "", l) }
        if (match(line, /building [0-9.]+ s \([^)]*\)/)) b = substr(line, RSTART + 9, RLENGTH - 9)
        if (match(line, /inputs [0-9.]+ s/)) r = substr(line, RSTART + 7, RLENGTH - 7)
        if (match(line, /checking [0-9.]+ s \([^)]*\)/)) c = substr(line, RSTART + 9, RLENGTH - 9)
        if (match(line, /timing [0-9.]+ s \([^)]*\)/)) t = substr(line, RSTART + 7, RLENGTH - 7)
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, l, b, r, c, t
    }' "$TIMES"
}

# WORKLOAD: per size, the exhaustive best, the pruned pick from the same
# times (replay) and the pruned run's own pick, timed in the exhaustive table
quality() {
    ex=$WORK/runs/$1.exhaustive.txt pr=$WORK/runs/$1.pruned.txt
    [ -f "$ex" ] || return
    [ -f "$pr" ] || pr=/dev/null
    awk -v w="$1" '
        FNR == 1 { file++ }
        /^[a-z_]+ at [^ ]+, [0-9]+ ranks?: / { cur = $3; sub(/,$/, "", cur) }
        file == 1 && /^ +[0-9]+  / {
            t[cur " " $2 " " $3] = $4
            if ($1 == 1) best[cur] = $2 "/" $3 " " $4
            if (!(cur in seen)) { seen[cur] = 1; order[++n] = cur }
        }
        file == 1 && /^pruning at / {
            s = $0; sub(/.*\(/, "", s); sub(/ %.*/, "", s); sub(/^the best, /, "", s); slower[cur] = s
            k = $9; replay[cur] = $6 "/" k
            c = $0; sub(/.*, timing /, "", c); cost[cur] = c
        }
        file == 2 && /^best at / { k = $7; sub(/,$/, "", k); run[cur] = $4 " " k }
        END {
            for (i = 1; i <= n; i++) {
                s = order[i]; split(best[s], b, " ")
                r = "-"
                if (s in run) {
                    split(run[s], q, " "); x = t[s " " q[1] " " q[2]]
                    r = q[1] "/" q[2] " (" (x != "" ? sprintf("%.3f", x / b[2]) : "?") " x best)"
                }
                printf "| %s | %s | %s | %s | %s | %s %% | %s | %s | %s |\n", w, s, b[1], b[2],
                       replay[s], slower[s], (slower[s] != "" && slower[s] + 0 <= 3) ? "yes" : "NO",
                       cost[s], r
            }
        }' "$ex" "$pr"
}

# WORKLOAD: the tuned choice (the replayed pruned pick) against the best
# single fixed (schedule, knobs) over the exhaustive sizes
fixed() {
    ex=$WORK/runs/$1.exhaustive.txt
    [ -f "$ex" ] || return
    awk -v w="$1" '
        /^[a-z_]+ at [^ ]+, [0-9]+ ranks?: / { cur = $3; sub(/,$/, "", cur); order[++n] = cur }
        /^ +[0-9]+  / {
            c = $2 "/" $3; t[cur " " c] = $4; cnt[c]++
            if ($1 == 1) best[cur] = $4
        }
        /^pruning at / { k = $9; pick[cur] = $6 "/" k }
        END {
            fix = ""; fm = 0
            for (c in cnt) {
                if (cnt[c] != n) continue
                m = 0
                for (i = 1; i <= n; i++) m += log(t[order[i] " " c] / best[order[i]])
                if (fix == "" || m < fm) { fix = c; fm = m }
            }
            for (i = 1; i <= n; i++) {
                s = order[i]; f = t[s " " fix]; p = t[s " " pick[s]]
                printf "| %s | %s | %s ms | %s: %s ms | %s: %s ms | %s |\n", w, s, best[s], pick[s], p,
                       fix, f, (p != "" && f != "") ? sprintf("%.3f", p / f) : "-"
            }
        }' "$ex"
}

{
    echo
    echo "## coconet tune at P = $P ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)), $(($(date +%s) - START)) s"
    echo
    times_table
    echo
    echo "(cold: a fresh cache, nvcc's build and the limits' measurement inside; warm: the code built;"
    echo "warm sizes: adam, lamb N = 2^$WARM_POW; self_attention, mlp B=8 S=1024 H=3072; pipeline B=1 S=2048"
    echo "H=12288, 2 groups; exhaustive, pruned: N = 2^k, k in $POWS)"
    echo
    echo "| workload | size | exhaustive best | its ms | pruned pick (same times) | slower by | within 3 % | it timed | pruned run's pick |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for w in $OPT; do quality "$w"; done
    echo
    echo "| workload | size | best | tuned (pruned pick) | best fixed over the sizes | tuned / fixed |"
    echo "|---|---|---|---|---|---|"
    for w in $OPT; do fixed "$w"; done
    echo
    echo "logs: $LOG, tune-runs.tgz"
} | tee "$OUT/summary.md"
cat "$OUT/summary.md" >>"$LOG"
[ "${TABLES_ONLY:-0}" = 1 ] || tar -C "$WORK" -czf "$OUT/tune-runs.tgz" runs times.txt build.log 2>/dev/null
[ "$failed" = 1 ] && exit 1
[ "$skipped" = 1 ] && exit 3
exit 0

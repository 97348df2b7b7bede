#!/bin/sh
# bench/fused.sh OUT_DIR: data-parallel Adam and LAMB with the fused
# collectives, on a machine with P GPUs (after `make`). For each N, one
# `coconet run` per program runs its schedules (each checked against the CPU
# reference, its guard bytes and a repeat run; from N = 2^UNCHECKED_POW on,
# guard bytes and repeat run only: `--reference none`) and times them; beside them
# NCCL AllReduce alone (the program of bench/allreduce_fused*.coco) and the
# FusedAllReduce with no computation (its schedule `fused`), and PyTorch's
# all_reduce + optimizer step (bench/torch_opt.py). Appends to
# OUT_DIR/fused.csv (written with its header when absent, so several
# commands can fill one CSV) and OUT_DIR/fused.log.
#
#   RANKS=4 POWS="10 16 20 24 26 28" sh bench/fused.sh OUT
#   RANKS=4 POWS=28 PROGRAMS="lamb lamb_fp32" sh bench/fused.sh OUT
#   python3 bench/plot_fig6.py OUT/fused.csv -o OUT/fig6.svg
#
# Variables:
#   RANKS      GPUs, one process each (4)
#   POWS       N = 2^POW for each (10 16 20 24 26 28); up to 30
#   ITERS      timed runs (20)
#   PROGRAMS   any of: allreduce_fused16 allreduce_fused (bench/), adam lamb
#              (examples/, FP16 gradients: "mixed"), adam_fp32 lamb_fp32
#              (bench/, all FP32), torch (bench/torch_opt.py); default all
#   SCHEDULES  the optimizers' schedules to run besides the program and the
#              file's own: "all" (default: --all-schedules) or names as
#              `coconet schedules FILE` lists them
#   BIG_POW, BIG_SCHEDULES  from N = 2^BIG_POW on (28), SCHEDULES is
#              BIG_SCHEDULES (AR_Opt RS_Opt_AG fuse_RS_Opt_AG fuse_RS_Opt_AG_4:
#              the series of bench/plot_fig6.py)
#   UNCHECKED_POW  from N = 2^UNCHECKED_POW on (29), coconet computes no CPU
#              reference (`--reference none`): the variants are timed, their
#              guard bytes and repeat runs checked and their Replicated values
#              compared across ranks, but no value is compared with the CPU's;
#              their rows' result is "unchecked". Correctness comes from the
#              checked runs of the same code at the smaller N.
#   REF_BYTES  host bytes the CPU reference and the ranks' host copies take
#              per element and rank for an optimizer (160; measured: ~86 for
#              the references of adam/lamb, ~32 for the host copies; an
#              AllReduce takes a quarter); a run that would need more than
#              MemAvailable is skipped with a "skipped" row (P = 4, N = 2^30:
#              ~640 GiB, more than an 8-GPU H200 host has)
#   NONE_BYTES the same without the reference (80: the inputs drawn as
#              doubles, 32 for Adam/LAMB, and the ~32 of the host copies;
#              P = 4, N = 2^30: ~320 GiB)
#   BUILD_ONLY 1: every coconet run's code built into the cache
#              (`--build-only`), nothing timed, no CSV rows, no PyTorch
#   TORCH_LAMB auto (apex FusedLAMB when importable, else foreach), apex, foreach
#
# CSV: tool,program,optimizer,precision,N,variant,schedule,result,ms
#   precision: fp32, mixed (FP16 gradients, FP32 parameters and state), or
#   fp16 (the FP16 AllReduce); schedule: the paper's name of the variant (the
#   last column of coconet's table), else the variant's name; result: bitwise,
#   rounding, WRONG, GUARD, REPEAT, FAILED ... (coconet), unchecked (coconet
#   at N >= 2^UNCHECKED_POW: timed, guard bytes and repeat run intact, values
#   not compared with a CPU reference), measured (torch), skipped (not enough
#   host memory).
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-build/bench}
RANKS=${RANKS:-4}
POWS=${POWS:-10 16 20 24 26 28}
ITERS=${ITERS:-20}
PROGRAMS=${PROGRAMS:-allreduce_fused16 allreduce_fused adam adam_fp32 lamb lamb_fp32 torch}
SCHEDULES=${SCHEDULES:-all}
BIG_POW=${BIG_POW:-28}
BIG_SCHEDULES=${BIG_SCHEDULES:-AR_Opt RS_Opt_AG fuse_RS_Opt_AG fuse_RS_Opt_AG_4}
UNCHECKED_POW=${UNCHECKED_POW:-29}
REF_BYTES=${REF_BYTES:-160}
NONE_BYTES=${NONE_BYTES:-80}
TORCH_LAMB=${TORCH_LAMB:-auto}
mkdir -p "$OUT"
CSV=$OUT/fused.csv
LOG=$OUT/fused.log
[ -s "$CSV" ] || echo "tool,program,optimizer,precision,N,variant,schedule,result,ms" >"$CSV"
touch "$LOG"

# file NAME: the program's file
file() {
    case $1 in
    adam | lamb) echo "examples/$1.coco" ;;
    *) echo "bench/$1.coco" ;;
    esac
}

# kind NAME: "optimizer,precision" of a program
kind() {
    case $1 in
    allreduce_fused16) echo "allreduce,fp16" ;;
    allreduce_fused) echo "allreduce,fp32" ;;
    *_fp32) echo "${1%_fp32},fp32" ;;
    *) echo "$1,mixed" ;;
    esac
}

# rows NAME N: the variant rows of one coconet run's output, as CSV
rows() {
    awk -v prog="$1" -v kind="$(kind "$1")" -v n="$2" '
        function field(s) {
            if (s ~ /[,"]/) { gsub(/"/, "\"\"", s); return "\"" s "\"" }
            return s
        }
        /^schedule +outputs/ { on = 1; next }
        /^gpu-(time|checks):/ { on = 0 }
        on && NF >= 7 {
            note = ""
            for (i = 9; i <= NF; i++) note = note (note == "" ? "" : " ") $i
            printf "coconet,%s,%s,%s,%s,%s,%s,%s\n", prog, kind, n, $1,
                   field(note == "" ? $1 : note), $2, $7
        }' "$OUT/run.out"
}

# selected FILE N NAMES: a schedule file with the enumerated schedules NAMES
selected() {
    ./coconet schedules "$1" -D N="$2" --ranks "$RANKS" 2>>"$LOG" |
        awk -v want=" $3 " '
            /^Schedule / { keep = index(want, " " $2 " ") > 0; if (keep) found[$2] = 1 }
            keep { print }
            /^}/ { keep = 0 }
            END {
                n = split(want, w, " ")
                for (i = 1; i <= n; i++)
                    if (!(w[i] in found)) printf "// no schedule %s\n", w[i]
            }'
}

# fits NAME N BYTES: is there host memory for a run of N elements a rank,
# BYTES per element and rank for an optimizer (a quarter for an AllReduce)?
fits() {
    avail=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo 2>/dev/null)
    [ -z "$avail" ] && return 0
    b=$3
    case $1 in allreduce*) b=$(($3 / 4)) ;; esac
    need=$(awk -v n="$2" -v p="$RANKS" -v b="$b" 'BEGIN { printf "%.0f", n * p * b / 1024 }')
    [ "$need" -le "$avail" ] || {
        echo "skipped: needs ~$((need / 1048576)) GiB of host memory, $((avail / 1048576)) GiB available" >>"$LOG"
        return 1
    }
}

run_coconet() {
    prog=$1 p=$2 n=$((1 << $2))
    f=$(file "$prog")
    ref=program bytes=$REF_BYTES
    [ "$p" -ge "$UNCHECKED_POW" ] && ref=none bytes=$NONE_BYTES
    cmd="./coconet run $f -D N=$n --backend cuda --ranks $RANKS --reference $ref --iters $ITERS"
    case $prog in
    allreduce*) ;;
    *)
        sched=$SCHEDULES
        [ "$p" -ge "$BIG_POW" ] && sched=$BIG_SCHEDULES
        if [ "$sched" = all ]; then
            cmd="$cmd --all-schedules"
        else
            selected "$f" "$n" "$sched" >"$OUT/selected.sched"
            grep '^// no schedule' "$OUT/selected.sched" >>"$LOG"
            cmd="$cmd --schedule-file $OUT/selected.sched"
        fi
        ;;
    esac
    if [ "${BUILD_ONLY:-0}" = 1 ]; then
        echo "==== $cmd --build-only" >>"$LOG"
        $cmd --build-only >>"$LOG" 2>&1
        return
    fi
    echo "==== $cmd" >>"$LOG"
    if ! fits "$prog" "$n" "$bytes"; then
        echo "coconet,$prog,$(kind "$prog"),$n,-,-,skipped," >>"$CSV"
        tail -n 1 "$CSV"
        return
    fi
    $cmd >"$OUT/run.out" 2>&1
    echo "status $?" >>"$OUT/run.out"
    cat "$OUT/run.out" >>"$LOG"
    rows "$prog" "$n" >>"$CSV"
    tail -n 1 "$CSV"
}

run_torch() {
    if ! python3 -c "import torch" 2>/dev/null; then
        echo "torch: not importable, the PyTorch baseline is not measured" | tee -a "$LOG"
        return
    fi
    # shellcheck disable=SC2086 # POWS are words
    echo "==== python3 bench/torch_opt.py --ranks $RANKS --pow $POWS --iters $ITERS --lamb $TORCH_LAMB" >>"$LOG"
    # shellcheck disable=SC2086
    python3 bench/torch_opt.py --ranks "$RANKS" --pow $POWS --iters "$ITERS" \
        --lamb "$TORCH_LAMB" 2>>"$LOG" | tee -a "$CSV"
}

for p in $POWS; do
    for prog in $PROGRAMS; do
        [ "$prog" = torch ] || run_coconet "$prog" "$p"
    done
done
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
for prog in $PROGRAMS; do
    [ "$prog" = torch ] && run_torch
done
rm -f "$OUT/run.out" "$OUT/selected.sched"

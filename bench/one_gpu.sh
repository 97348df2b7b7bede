#!/bin/sh
# bench/one_gpu.sh OUT: coconet on one GPU beside PyTorch, in the same run
# (after `make`, on a machine with a GPU). PyTorch's side is
# bench/torch_one_gpu.py (the device copy, torch._fused_adam_, fused SGD,
# foreach LAMB, torch.matmul and the Megatron-style layer); coconet's side is
# `coconet run --backend cuda --ranks 1 --reference none` of the data-parallel
# optimizers at N = 2^POW and of the model-parallel layers at the paper's
# sizes (S = 1024, H = 3072; self_attention: K = H, mlp: K = 4H), each with
# the program and the file's schedules. Correctness is checked elsewhere
# (make test-gpu, at the examples' sizes): here the times alone.
#
#   sh bench/one_gpu.sh OUT
#   POWS="24 28" B_SIZES="8 16" ITERS=20 ARGS=--all-schedules sh bench/one_gpu.sh OUT
#
# Variables: POWS (24 28), B_SIZES (8 16), ITERS (20), PROGRAMS (the
# optimizers: adam_fp32 lamb_fp32 sgd_fp16 in bench/, adam lamb sgd_momentum
# in examples/; default all), LAYERS (self_attention mlp), OPT_SCHEDULES and
# LAYER_SCHEDULES (enumerated schedules run besides the program and the
# file's own, by the names `coconet schedules` gives them; defaults
# "AR_Opt fuse_RS_Opt_AG" and "MM_AR_C MM_fuse_RS_C_AG"), ARGS (more
# `coconet run` options, e.g. --breakdown), TORCH (1: run the PyTorch side;
# 0: skip it), BUILD_ONLY (1: build every run's code into the cache, all at
# once, and time nothing).
# Writes OUT/torch.csv, OUT/coconet.log (every report whole),
# OUT/summary.md (the variants' times beside PyTorch's; printed) and
# OUT/roofline.svg, .csv (bench/plot_roofline.py: each program's and its best
# variant's share of the bound).
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-build/one-gpu}
POWS=${POWS:-24 28}
B_SIZES=${B_SIZES:-8 16}
ITERS=${ITERS:-20}
PROGRAMS=${PROGRAMS:-adam_fp32 lamb_fp32 sgd_fp16 adam lamb sgd_momentum}
LAYERS=${LAYERS:-self_attention mlp}
OPT_SCHEDULES=${OPT_SCHEDULES-AR_Opt fuse_RS_Opt_AG}
LAYER_SCHEDULES=${LAYER_SCHEDULES-MM_AR_C MM_fuse_RS_C_AG}
TORCH=${TORCH:-1}
mkdir -p "$OUT"
LOG=$OUT/coconet.log
: >"$LOG"

source_of() { # NAME: the program's file
    if [ -f "bench/$1.coco" ]; then echo "bench/$1.coco"; else echo "examples/$1.coco"; fi
}

# selected FILE NAMES: the enumerated schedules NAMES of FILE, as a file
# (written once for each FILE: runs built at once read it)
selected() {
    s=$OUT/$(basename "$1" .coco).sched
    [ -f "$s" ] || ./coconet schedules "$1" --ranks 1 2>/dev/null |
        awk -v want=" $2 " '/^Schedule / { keep = index(want, " " $2 " ") > 0 }
                            keep { print }
                            /^}/ { keep = 0 }' >"$s"
    echo "$s"
}

# run WHAT ARGS...: one coconet run; its variant rows into OUT/rows.txt as
# "WHAT|variant|verdict|ms"
run() {
    what=$1
    shift
    if [ "${BUILD_ONLY:-0}" = 1 ]; then
        ./coconet run "$@" --backend cuda --ranks 1 --build-only >>"$LOG" 2>&1 &
        return
    fi
    echo "== $what: ./coconet run $* --backend cuda --ranks 1 --reference none --iters $ITERS $ARGS" >>"$LOG"
    # shellcheck disable=SC2086 # ARGS is a list of options
    ./coconet run "$@" --backend cuda --ranks 1 --reference none --iters "$ITERS" $ARGS \
        >"$OUT/one.txt" 2>&1
    echo "exit status $?" >>"$OUT/one.txt"
    cat "$OUT/one.txt" >>"$LOG"
    awk -v w="$what" '$2 != "unchecked" && $2 != "FAILED" && $2 != "GUARD" && $2 != "REPEAT" { next }
                      { for (i = 3; i <= NF; i++) if ($i == "ms") { print w "|" $1 "|" $2 "|" $(i - 1); break } }' \
        "$OUT/one.txt" >>"$OUT/rows.txt"
}

: >"$OUT/rows.txt"
rm -f "$OUT"/*.sched
if [ "$TORCH" = 1 ] && [ "${BUILD_ONLY:-0}" != 1 ]; then
    # shellcheck disable=SC2086 # lists of numbers
    python3 bench/torch_one_gpu.py --pow $POWS --b $B_SIZES --iters "$ITERS" >"$OUT/torch.csv" 2>&1
fi
for p in $POWS; do
    n=$((1 << p))
    for prog in $PROGRAMS; do
        f=$(source_of "$prog")
        run "$prog N=2^$p" "$f" -D N=$n --schedule-file "$(selected "$f" "$OPT_SCHEDULES")"
    done
done
for b in $B_SIZES; do
    for layer in $LAYERS; do
        f=examples/$layer.coco
        run "$layer B=$b" "$f" -D B="$b" -D S=1024 -D H=3072 \
            --schedule-file "$(selected "$f" "$LAYER_SCHEDULES")"
    done
done
if [ "${BUILD_ONLY:-0}" = 1 ]; then
    wait
    echo "built (BUILD_ONLY=1): $LOG"
    exit 0
fi

{
    echo "# coconet on one GPU beside PyTorch"
    echo
    echo "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1);" \
         "command: POWS=\"$POWS\" B_SIZES=\"$B_SIZES\" ITERS=$ITERS ARGS=\"$ARGS\" sh bench/one_gpu.sh"
    echo
    echo "| what | variant | verdict | ms |"
    echo "|---|---|---|---|"
    awk -F'|' '{ print "| " $1 " | " $2 " | " $3 " | " $4 " |" }' "$OUT/rows.txt"
    echo
    echo "PyTorch, same run (bench/torch_one_gpu.py: what, size, ms, rate, unit):"
    echo
    echo '```'
    cat "$OUT/torch.csv" 2>/dev/null
    echo '```'
} >"$OUT/summary.md"
# each program's share of its bound (the roofline's of-bound), drawn
python3 bench/plot_roofline.py "$LOG" -o "$OUT/roofline.svg" >"$OUT/roofline.csv" 2>&1 ||
    echo "bench/plot_roofline.py failed: $(tail -n 1 "$OUT/roofline.csv")" >>"$OUT/summary.md"
cat "$OUT/summary.md"

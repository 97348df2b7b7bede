#!/bin/sh
# bench/fused.sh OUT_DIR: data-parallel Adam with the fused collectives, on
# a machine with P GPUs (after `make`). For each N, one `coconet run` per
# program runs every schedule (each checked against the CPU reference) and
# times it; beside it, in the same run, NCCL AllReduce alone (the program of
# bench/allreduce_fused*.coco) and the FusedAllReduce with no computation
# (its schedule `fused`), and PyTorch's all_reduce + torch._fused_adam_
# (bench/torch_adam.py). Writes OUT_DIR/fused.csv and OUT_DIR/fused.log.
#
#   RANKS=4 POWS="10 16 20 24 26 28" sh bench/fused.sh OUT
#
# CSV: tool,program,N,variant,result,ms
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-build/bench}
RANKS=${RANKS:-4}
POWS=${POWS:-10 16 20 24 26 28}
ITERS=${ITERS:-20}
mkdir -p "$OUT"
CSV=$OUT/fused.csv
LOG=$OUT/fused.log
echo "tool,program,N,variant,result,ms" >"$CSV"
: >"$LOG"

# rows FILE N: the variant rows of one coconet run's output, as CSV
rows() {
    awk -v prog="$1" -v n="$2" '
        /^schedule +outputs/ { on = 1; next }
        /^gpu-time:/ { on = 0 }
        on && NF >= 7 { printf "coconet,%s,%s,%s,%s,%s\n", prog, n, $1, $2, $7 }' "$OUT/run.out"
}

for p in $POWS; do
    n=$((1 << p))
    for f in bench/allreduce_fused16.coco bench/allreduce_fused.coco examples/adam.coco \
             bench/adam_fp32.coco; do
        cmd="./coconet run $f -D N=$n --backend cuda --ranks $RANKS --reference program --iters $ITERS"
        case $f in *adam*) cmd="$cmd --all-schedules" ;; esac
        echo "==== $cmd" >>"$LOG"
        $cmd >"$OUT/run.out" 2>&1
        echo "status $?" >>"$OUT/run.out"
        cat "$OUT/run.out" >>"$LOG"
        rows "$(basename "$f" .coco)" "$n" >>"$CSV"
        tail -n 1 "$CSV"
    done
done
if python3 -c "import torch" 2>/dev/null; then
    echo "==== python3 bench/torch_adam.py --ranks $RANKS --pow $POWS" >>"$LOG"
    python3 bench/torch_adam.py --ranks "$RANKS" --pow $POWS --iters "$ITERS" 2>>"$LOG" |
        while IFS=, read -r tool prec n ar both; do
            echo "torch,adam_$prec,$n,allreduce,measured,$ar"
            echo "torch,adam_$prec,$n,allreduce+fused_adam,measured,$both"
        done >>"$CSV"
fi
rm -f "$OUT/run.out"

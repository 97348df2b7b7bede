#!/bin/sh
# bench/matmul.sh OUT: coconet's MatMul (one cuBLASLt call, its plan cached per
# shape) beside torch.matmul at the model-parallel layers' per-rank shapes, on
# one GPU in the same run: FP16 [B*S, K/P] x [K/P, H], S = 1024, H = 3072,
# K = H and 4H, P = 1, 2, 4 (after `make`, on a machine with a GPU).
#
#   B_SIZES="8 16" PS="1 2 4" ITERS=50 sh bench/matmul.sh OUT
#
# Writes OUT/matmul.log (every coconet report whole), OUT/torch.csv and
# OUT/matmul.md (the table), and prints the table.
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-build/matmul}
B_SIZES=${B_SIZES:-8 16}
PS=${PS:-1 2 4}
ITERS=${ITERS:-50}
S=1024
H=3072
mkdir -p "$OUT"
: >"$OUT/matmul.log"
shapes=""
for b in $B_SIZES; do
    for p in $PS; do
        for k in $H $((4 * H)); do
            shape=$((b * S))x$((k / p))x$H
            case " $shapes " in *" $shape "*) ;; *) shapes="$shapes $shape" ;; esac
        done
    done
done
# shellcheck disable=SC2086 # a list of shapes
python3 bench/torch_one_gpu.py --pow --b --mm $shapes --iters "$ITERS" >"$OUT/torch.csv" 2>&1
{
    echo "| shape M x K x N | coconet ms | TFLOP/s | torch.matmul ms | TFLOP/s | coconet / torch TFLOP/s |"
    echo "|---|---|---|---|---|---|"
} >"$OUT/matmul.md"
for shape in $shapes; do
    m=${shape%%x*}
    rest=${shape#*x}
    k=${rest%%x*}
    n=${rest#*x}
    ./coconet run bench/matmul.coco --backend cuda --ranks 1 --reference none --iters "$ITERS" \
        -D M="$m" -D K="$k" -D N="$n" >"$OUT/one.txt" 2>&1
    cat "$OUT/one.txt" >>"$OUT/matmul.log"
    ours=$(awk '$1 == "program" && $2 == "unchecked" { for (i = 3; i <= NF; i++) if ($i == "ms") { print $(i - 1); exit } }' "$OUT/one.txt")
    theirs=$(awk -F, -v s="$shape" '$1 == "torch" && $2 == "mm_shape" && $3 == s { print $4 }' "$OUT/torch.csv")
    awk -v s="$shape" -v m="$m" -v k="$k" -v n="$n" -v a="${ours:-0}" -v b="${theirs:-0}" 'BEGIN {
        f = 2 * m * k * n / 1e9
        ta = (a > 0) ? f / a : 0; tb = (b > 0) ? f / b : 0
        sa = (a > 0) ? a : "failed"; sb = (b > 0) ? b : "failed"
        r = (ta > 0 && tb > 0) ? sprintf("%.3f", ta / tb) : "-"
        printf "| %s | %s | %.1f | %s | %.1f | %s |\n", s, sa, ta, sb, tb, r }' >>"$OUT/matmul.md"
done
cat "$OUT/matmul.md"

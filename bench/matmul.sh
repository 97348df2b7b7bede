#!/bin/sh
# bench/matmul.sh OUT: coconet's MatMul (one cuBLASLt call, its plan cached per
# shape) beside torch.matmul on one GPU in the same run (after `make`, on a
# machine with a GPU and torch). FP16 operands, FP32 accumulation, [M, K] x
# [K, N] (M x K x N in the table):
#
#   nn  the model-parallel layers' per-rank shapes: [B*S, K/P] x [K/P, H],
#       S = 1024, H = 3072, K = H and 4H, P = 1, 2, 4 (bench/matmul.coco)
#   nt  the backward's dX = dY * W^T at T = B*S tokens: [T, K] x [H, K]^T
#       with K = H, N = 4H and K = 4H, N = H (bench/matmul_nt.coco)
#   tn  the backward's dW = X^T * dY, the tokens the reduction:
#       [T, H]^T x [T, 4H] and [T, 4H]^T x [T, H] (bench/matmul_tn.coco)
#   ag  the column-parallel layer's AllGather -> MatMul at P = 1, [T, H] x
#       [H, H] (tests/gpu/gather_matmul.coco): the program, the overlap
#       (`ol`: on one rank the MatMul alone, no chunks) and the overlap in 4
#       chunks of rows (COCONET_OVERLAP_CHUNKS=4), each against the program
#
# The Transposes of nt and tn are read in place (cuBLASLt's transpose flags),
# as torch.matmul reads the same views.
#
#   B_SIZES="8 16" PS="1 2 4" FORMS="nn nt tn ag" ITERS=50 sh bench/matmul.sh OUT
#
# Writes OUT/matmul.log (every coconet report whole), OUT/torch.csv and
# OUT/matmul.md (the table), and prints the table.
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-build/matmul}
B_SIZES=${B_SIZES:-8 16}
PS=${PS:-1 2 4}
FORMS=${FORMS:-nn nt tn ag}
ITERS=${ITERS:-50}
S=1024
H=3072
mkdir -p "$OUT"
: >"$OUT/matmul.log"

# add SHAPE: SHAPE (form:MxKxN) into $shapes once
add() {
    case " $shapes " in *" $1 "*) ;; *) shapes="$shapes $1" ;; esac
}
shapes=""
for form in $FORMS; do
    for b in $B_SIZES; do
        t=$((b * S))
        case $form in
        nn) for p in $PS; do for k in $H $((4 * H)); do add "nn:${t}x$((k / p))x$H"; done; done ;;
        nt) add "nt:${t}x${H}x$((4 * H))"; add "nt:${t}x$((4 * H))x$H" ;;
        tn) add "tn:${H}x${t}x$((4 * H))"; add "tn:$((4 * H))x${t}x$H" ;;
        ag) add "ag:${t}x${H}x$H" ;;
        *) echo "bench/matmul.sh: unknown form '$form' in FORMS (nn, nt, tn, ag)" >&2; exit 2 ;;
        esac
    done
done
# torch's side of ag is the program's MatMul (the same shape, nn)
torch_shapes=$(echo "$shapes" | sed 's/ag:/nn:/g')
# shellcheck disable=SC2086 # a list of shapes
python3 bench/torch_one_gpu.py --pow --b --mm $torch_shapes --iters "$ITERS" >"$OUT/torch.csv" 2>&1

# gpu_ms FILE VARIANT: the gpu-time of VARIANT in a coconet report
gpu_ms() {
    awk -v v="$2" '$1 == v { for (i = 3; i <= NF; i++) if ($i == "ms") { print $(i - 1); exit } }' "$1"
}
# run NAME ARGS...: one coconet run into OUT/NAME.txt and the log
run() {
    name=$1
    shift
    "$@" --backend cuda --ranks 1 --reference none --iters "$ITERS" >"$OUT/$name.txt" 2>&1
    cat "$OUT/$name.txt" >>"$OUT/matmul.log"
}
# line WHAT M K N OURS THEIRS: a row of the table, TFLOP/s and their ratio
line() {
    awk -v s="$1" -v m="$2" -v k="$3" -v n="$4" -v a="${5:-0}" -v b="${6:-0}" 'BEGIN {
        f = 2 * m * k * n / 1e9
        ta = (a > 0) ? f / a : 0; tb = (b > 0) ? f / b : 0
        sa = (a > 0) ? a : "failed"; sb = (b > 0) ? b : "failed"
        r = (ta > 0 && tb > 0) ? sprintf("%.3f", ta / tb) : "-"
        printf "| %s | %s | %.1f | %s | %.1f | %s |\n", s, sa, ta, sb, tb, r }' >>"$OUT/matmul.md"
}
{
    echo "| form: M x K x N | coconet ms | TFLOP/s | baseline ms | TFLOP/s | coconet / baseline TFLOP/s |"
    echo "|---|---|---|---|---|---|"
} >"$OUT/matmul.md"
for shape in $shapes; do
    form=${shape%%:*}
    dims=${shape#*:}
    m=${dims%%x*}
    rest=${dims#*x}
    k=${rest%%x*}
    n=${rest#*x}
    theirs=$(awk -F, -v s="$(echo "$shape" | sed 's/ag:/nn:/')" '$1 == "torch" && $2 == "mm_shape" && $3 == s { print $4 }' "$OUT/torch.csv")
    case $form in
    nn) prog=bench/matmul.coco ;;
    nt) prog=bench/matmul_nt.coco ;;
    tn) prog=bench/matmul_tn.coco ;;
    ag)
        run "ag_$dims" ./coconet run tests/gpu/gather_matmul.coco -D M="$m" -D H="$k" -D F="$n"
        COCONET_OVERLAP_CHUNKS=4 run "ag4_$dims" ./coconet run tests/gpu/gather_matmul.coco \
            -D M="$m" -D H="$k" -D F="$n" --schedule ol
        plain=$(gpu_ms "$OUT/ag_$dims.txt" program)
        line "$shape program (torch.matmul)" "$m" "$k" "$n" "$plain" "$theirs"
        line "$shape ol (the program)" "$m" "$k" "$n" "$(gpu_ms "$OUT/ag_$dims.txt" ol)" "$plain"
        line "$shape ol, 4 chunks (the program)" "$m" "$k" "$n" "$(gpu_ms "$OUT/ag4_$dims.txt" ol)" "$plain"
        continue ;;
    esac
    run "${form}_$dims" ./coconet run "$prog" -D M="$m" -D K="$k" -D N="$n"
    line "$shape (torch.matmul)" "$m" "$k" "$n" "$(gpu_ms "$OUT/${form}_$dims.txt" program)" "$theirs"
done
cat "$OUT/matmul.md"

#!/bin/sh
# bench/device/chunk_rule.sh: the overlap's default chunk count
# (coco_overlap_default_chunks, include/coconet_cuda.h: 4 chunks where the
# MatMul does 2048 to 4095 FLOP per collective byte, each rank's part has at
# least 4 x 512 rows and a chunk 16 GFLOP, else 1) against the CPU
# reference, at shapes at the rule's edges. The CLI's other checks force
# the count (COCONET_OVERLAP_CHUNKS); here it is left to the rule.
#
# At P ranks, FP16, B = 8: examples/mlp.coco's ol_MM_fuse_RS_C_AG with K a
# rank = 4H/P (P = 2: H = 1024, S = 512, 2048 FLOP/B and 512 rows a chunk
# but 4.3 GFLOP: one chunk; P = 4: H = 3072, S = 1024, 39 GFLOP: 4 chunks)
# and, at P = 2, examples/self_attention.coco's `paper` (K a rank = H/2:
# H = 4096, S = 512, 17 GFLOP a chunk: 4 chunks). Each runs twice, checked
# against the program's CPU run (--reference program) with --breakdown:
# with the rule's count (COCONET_OVERLAP_CHUNKS=0, the default; the
# breakdown's "overlap(MatMul, FusedAllReduce)" row says the chunked path
# ran) and with COCONET_OVERLAP_CHUNKS=1 (one MatMul, then one kernel).
# After `make`. Output: OUT/chunk-rule.txt (every run's output), and a
# table on stdout: layer, chunks, the check, the chunked row's presence, ms.
#
#   P=2 sh bench/device/chunk_rule.sh OUT
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-build/bench}
P=${P:-2}
mkdir -p "$OUT"
LOG=$OUT/chunk-rule.txt
: >"$LOG"
case $P in
2) runs="mlp ol_MM_fuse_RS_C_AG 8 512 1024
self_attention paper 8 512 4096" ;;
4) runs="mlp ol_MM_fuse_RS_C_AG 8 1024 3072" ;;
*) echo "chunk_rule.sh: P = $P: expected 2 or 4" >&2; exit 2 ;;
esac
status=0
echo "| layer | B, S, H | chunks | check | chunked path | ms |"
echo "|---|---|---|---|---|---|"
while read -r layer sched B S H; do
    for chunks in 0 1; do # 0: the rule's
        COCONET_OVERLAP_CHUNKS=$chunks ./coconet run "examples/$layer.coco" -D B="$B" \
            -D S="$S" -D H="$H" --ranks "$P" --backend cuda --all-schedules \
            --schedule "$sched" --reference program --iters 10 --breakdown \
            >"$OUT/run.out" 2>&1 || status=1
        { echo "==== $layer B=$B S=$S H=$H, chunks: $chunks"; cat "$OUT/run.out"; } >>"$LOG"
        row=$(grep -E "^$sched +" "$OUT/run.out" | head -n 1)
        check=$(echo "$row" | awk '{print $2}')
        ms=$(echo "$row" | grep -oE '[0-9.]+ ms' | head -n 1)
        grep -q 'overlap(MatMul, FusedAllReduce)' "$OUT/run.out" && path=yes || path=no
        [ "$chunks" = 0 ] && chunks=rule
        echo "| $layer | $B, $S, $H | $chunks | ${check:-none} | $path | ${ms:-?} |"
    done
done <<EOF
$runs
EOF
rm -f "$OUT/run.out"
exit $status

#!/bin/sh
# bench/device/fig6.sh: one lease's share of issue 5's benchmark on P = R
# GPUs: bench/fused.sh at N = 2^POWS (the schedules of bench/plot_fig6.py's
# series, every row checked against the CPU reference below 2^UNCHECKED_POW),
# then, with TORCH=1, PyTorch's all_reduce + optimizer at the same sizes,
# with SCATTERED=1 bench/scattered.sh, and the plot of what this call
# measured. Files under $OUT: fused.csv, fig6.svg, speedups.csv,
# scattered.txt, fig6-logs.tgz. Several calls on one warm machine share
# build/cache (built ahead by bench/device/final.sh's AHEAD=fused).
#
# Variables: R (4), POWS ("10 16 20 24"), PROGRAMS (fused.sh's, without
# torch), TORCH (0), TORCH_POWS (POWS), SCATTERED (0), DEADLINE (seconds,
# 565), ITERS (20).
#
#   R=4 POWS="26 28 30" TORCH=1 TORCH_POWS="10 16 20 24 26 28 30" sh bench/device/fig6.sh
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs fig6-logs # $W
lease_make
export RANKS=${R:-4} ITERS=${ITERS:-20}
export SCHEDULES="AR_Opt RS_Opt_AG fuse_RS_Opt_AG fuse_RS_Opt_AG_4"
PROGS=${PROGRAMS:-allreduce_fused16 allreduce_fused adam adam_fp32 lamb lamb_fp32}
POWS=${POWS:-10 16 20 24} PROGRAMS=$PROGS timeout "$(left 20)" sh bench/fused.sh "$W"
if [ "${TORCH:-0}" = 1 ]; then
    POWS=${TORCH_POWS:-${POWS:-10 16 20 24}} PROGRAMS=torch timeout "$(left 10)" \
        sh bench/fused.sh "$W"
fi
cp "$W/fused.csv" "$OUT/fused.csv"
if [ "${SCATTERED:-0}" = 1 ]; then
    timeout "$(left 5)" sh bench/scattered.sh "$W" >"$OUT/scattered.txt" 2>&1
    cat "$OUT/scattered.txt"
fi
python3 bench/plot_fig6.py "$OUT/fused.csv" -o "$OUT/fig6.svg" >"$OUT/speedups.csv" 2>"$W/plot.err"
grep -v -e ',bitwise,' -e ',rounding,' -e ',unchecked,' -e ',measured,' -e '^tool' "$OUT/fused.csv" |
    head -20 | sed 's/^/NOT OK: /'
cut -d, -f2,4,5,7,8,9 "$OUT/fused.csv" | cut -c1-110
echo "end at $(($(date +%s) - T0)) s"

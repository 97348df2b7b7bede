#!/bin/sh
# bench/device/ncu_layers.sh: Nsight Compute over the layers' pointwise
# kernels at P = 1 (issue 20's evidence): self_attention's and mlp's
# MM_AR_C pointwise kernel and paper's one-rank FusedAllReduce kernel (B =
# 8, S = 1024, H = 3072), each its third launch, caches flushed before it
# (ncu's default), clocks left alone (--clock-control none): duration, DRAM
# throughput and bytes, issue slots, warp stalls, occupancy. ncu.txt holds
# the lines that matter, logs.tgz the whole reports.
# Variables: COMMIT.
# shellcheck source=bench/device/lease.sh
. bench/device/lease.sh
lease_logs logs
lease_make
S=$W/mm_ar_c.sched
printf 'Schedule MM_AR_C {\n  fuse(dropout, out, ComputationFuse);\n}\n' >"$S"
A="-D B=8 -D S=1024 -D H=3072 --backend cuda --ranks 1 --reference none --iters 3"
for l in self_attention mlp; do
    for s in MM_AR_C paper; do
        # shellcheck disable=SC2086 # A: words
        ./coconet run examples/$l.coco $A --schedule-file "$S" --schedule $s --build-only \
            >/dev/null 2>&1 &
    done
done
wait
echo "built at $(($(date +%s) - T0)) s (commit ${COMMIT:-?})"
: >"$OUT/ncu.txt"
for l in self_attention mlp; do
    for s in MM_AR_C paper; do
        # shellcheck disable=SC2086 # A: words
        timeout "$(left 20)" ncu --clock-control none --target-processes all \
            --kernel-name regex:'v1_(k|f)0' --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section WarpStateStats --section Occupancy \
            --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
            ./coconet run examples/$l.coco $A --schedule-file "$S" --schedule $s \
            >"$W/ncu-$l-$s.txt" 2>&1
        { echo "== $l $s (exit $?)"
          grep -E '^  void v1_|Duration|DRAM Throughput|dram__bytes|inst_executed|Issue Slots Busy|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued|Grid Size|Block Size|Stall' \
              "$W/ncu-$l-$s.txt" | cut -c 1-160 | head -24; } >>"$OUT/ncu.txt"
    done
done
grep -E '^==|^  void|Duration|DRAM Throughput|dram__bytes|Issue Slots Busy' "$OUT/ncu.txt" | cut -c 1-110

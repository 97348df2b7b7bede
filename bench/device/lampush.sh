#!/bin/sh
# bench/device/lampush.sh: the fused kernels' reduce-scatter by loads
# (COCONET_FUSED=twoshot) against push, for LAMB (two kernels: the norms
# between) and Adam (one kernel), fuse_RS_Opt_AG_4 at N = 2^26 and 2^28 on
# P = 2 GPUs, unchecked (--reference none: both are checked at these sizes
# by tests/gpu/run.sh). One line per run: program, N, algorithm, ms.
. bench/device/lease.sh # T0, lease_make
lease_make
for f in bench/lamb_fp32.coco examples/lamb.coco examples/adam.coco; do
  ./coconet run $f --all-schedules --schedule fuse_RS_Opt_AG_4 --backend cuda --ranks 2 --build-only >/dev/null 2>&1 &
done; wait
echo "built at $(($(date +%s) - T0)) s"
for f in bench/lamb_fp32.coco examples/lamb.coco examples/adam.coco; do
 for p in 26 28; do
  for a in twoshot push; do
   ms=$(COCONET_FUSED=$a ./coconet run $f -D N=$((1<<p)) --all-schedules --schedule fuse_RS_Opt_AG_4 --backend cuda --ranks 2 --iters 20 --reference none 2>&1 | awk '$1=="fuse_RS_Opt_AG_4" {for(i=2;i<=NF;i++) if($i=="ms") print $(i-1)}')
   echo "$f 2^$p $a $ms"
  done
 done
done
echo "end $(($(date +%s) - T0)) s"

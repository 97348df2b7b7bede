#!/bin/sh
# bench/device/pointwise_ab.sh: the generated pointwise kernels at P = 1,
# this tree against BASE's, in one command on a one-GPU machine (issue 20):
#   1. make here and in build/base (BASE's files, put there before the
#      lease: git archive BASE | tar -x -C build/base; carried);
#   2. for each tree: bench/one_gpu.sh over the layers (self_attention,
#      mlp; B = 8, S = 1024, H = 3072; the program, paper, MM_AR_C,
#      MM_fuse_RS_C_AG) with --breakdown, PyTorch's layer beside them (this
#      tree's run only);
#   3. for each tree: Nsight Compute (--clock-control none) over MM_AR_C's
#      pointwise kernel and paper's one-rank FusedAllReduce kernel of
#      self_attention: speed of light, compute workload, warp states.
# Under $OUT: summary-new.md, summary-base.md, the reports and ncu's in
# logs.tgz, ncu.txt (the lines that matter); a short table last.
# Variables: COMMIT, BASE (the base's commit, for the tables), ITERS (50),
# PROGRAMS and POWS (bench/one_gpu.sh's optimizers and sizes beside the
# layers in step 2; none by default). The base may be this tree with one
# setting changed, e.g. COCO_ONE_RANK_BLOCKS (rt/kernels/coco_lsa.cuh):
#   git archive HEAD | tar -x -C build/base
#   sed -i 's/define COCO_ONE_RANK_BLOCKS 2/define COCO_ONE_RANK_BLOCKS 4/' \
#       build/base/rt/kernels/coco_lsa.cuh
# shellcheck source=bench/device/lease.sh
. bench/device/lease.sh
ITERS=${ITERS:-50}
PROGRAMS=${PROGRAMS:- }
POWS=${POWS:- }
lease_logs logs
[ -f build/base/Makefile ] || { echo "build/base is missing: carry BASE's files there"; exit 2; }
lease_make
(cd build/base && make -j8 coconet build/libcoconet_cuda.so >"$W/make-base.log" 2>&1) ||
    { tail -20 "$W/make-base.log"; exit 1; }
A="-D B=8 -D S=1024 -D H=3072 --backend cuda --ranks 1 --reference none"
for tree in new base; do
    dir=.
    [ $tree = base ] && dir=build/base
    (cd $dir && for s in MM_AR_C paper; do
        # shellcheck disable=SC2086 # A: words
        COCONET_HOME=$PWD COCONET_CACHE=$PWD/build/cache ./coconet run examples/self_attention.coco \
            $A --schedule $s --build-only >/dev/null 2>&1 &
    done
    PROGRAMS=$PROGRAMS POWS=$POWS B_SIZES=8 BUILD_ONLY=1 COCONET_HOME=$PWD \
        COCONET_CACHE=$PWD/build/cache sh bench/one_gpu.sh "$W/build-$tree" >/dev/null 2>&1
    wait) &
done
wait
echo "built at $(($(date +%s) - T0)) s"
for tree in new base; do
    dir=.
    [ $tree = base ] && dir=build/base
    torch=0
    [ $tree = new ] && torch=1
    (cd $dir && PROGRAMS=$PROGRAMS POWS=$POWS B_SIZES=8 ITERS=$ITERS ARGS=--breakdown TORCH=$torch \
        COCONET_HOME=$PWD COCONET_CACHE=$PWD/build/cache timeout "$(left 200)" \
        sh bench/one_gpu.sh "$W/$tree" >"$W/one-gpu-$tree.out" 2>&1)
    cp "$W/$tree/summary.md" "$OUT/summary-$tree.md" 2>/dev/null
done
: >"$OUT/ncu.txt"
for tree in new base; do
    dir=.
    [ $tree = base ] && dir=build/base
    for s in MM_AR_C paper; do
        # the program runs too, as v0: the schedule's kernels are v1's
        # shellcheck disable=SC2086 # A: words
        (cd $dir && COCONET_HOME=$PWD COCONET_CACHE=$PWD/build/cache timeout "$(left 30)" \
            ncu --clock-control none --target-processes all \
            --kernel-name regex:'v1_(k|f)0' --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
            --section LaunchStats --section Occupancy \
            ./coconet run examples/self_attention.coco $A --schedule $s --iters 3 \
            >"$W/ncu-$tree-$s.txt" 2>&1)
        { echo "== $tree $s"
          grep -E '  v[0-9]+_(k0|f0)|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|SM Busy|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued|Stall' \
              "$W/ncu-$tree-$s.txt" | head -40; } >>"$OUT/ncu.txt"
    done
done
echo "commit ${COMMIT:-?} against base ${BASE:-?}"
for tree in new base; do
    echo "== $tree"
    grep -E '^\|' "$OUT/summary-$tree.md" 2>/dev/null | head -20
    grep -E '^(== |limits|[A-Za-z_]+ +[0-9]+ +(computation|FusedAllReduce) +kernel)' \
        "$W/$tree/coconet.log" 2>/dev/null | cut -c 1-120
done
grep -E '^==|Duration|DRAM Throughput|Issue Slots Busy' "$OUT/ncu.txt"

#!/bin/sh
# one device run: build, MPI path, paper part, conv check (logs to $OUT)
export COCONET_HOME=$PWD
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
make -j16 >$OUT/make.log 2>&1 || { tail -30 $OUT/make.log; exit 1; }
el built
. build/cuda.conf
( $NVCC -O3 -std=c++17 -arch=sm_90 -Iinclude -Irt/kernels -I"$NCCL_INCLUDE" -o build/conv_check \
   tests/gpu/conv_check.cu -L"$NCCL_LIB" -Xlinker -rpath="$NCCL_LIB" $NCCL_LINK -lcublasLt \
   >$OUT/conv_build.log 2>&1; echo "conv build status $?" >>$OUT/conv_build.log ) &
CB=$!
timeout 120 mpirun --allow-run-as-root -np 4 ./coconet run examples/adam.coco --backend cuda \
   --all-schedules >$OUT/mpi.log 2>&1; echo "mpirun status $?" >>$OUT/mpi.log
el "mpi: $(tail -1 $OUT/mpi.log)"; grep -E 'bitwise|rounding|WRONG|FAILED' $OUT/mpi.log | head -20
RANKS=${PRANKS:-4} PARTS=paper TIMEOUT=240 ITERS=20 timeout ${PTIME:-330} sh tests/gpu/run.sh $OUT/paper.md \
   >$OUT/paper.out 2>&1
el "paper part done: $(grep -c '^ok' $OUT/paper.out) ok, $(grep -c '^FAIL' $OUT/paper.out) fail"
grep FAIL -A2 $OUT/paper.out | head
wait $CB; tail -2 $OUT/conv_build.log
[ -x build/conv_check ] && timeout 90 ./build/conv_check --reps 10 >$OUT/conv.log 2>&1; echo "conv status $?"
tail -25 $OUT/conv.log
el end

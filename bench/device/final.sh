#!/bin/sh
# bench/device: the commands given to the lent GPU machine, kept with the results they made.
# device run: selftest+faults, examples (merged code), paper P=4 (logs to $OUT)
export COCONET_HOME=$PWD
T0=$(date +%s)
left() { echo $((${DEADLINE:-565} - $(date +%s) + T0)); }
make -j16 >$OUT/make.log 2>&1 || { tail -30 $OUT/make.log; exit 1; }
echo "built in $(( $(date +%s) - T0 )) s"
RANKS=${R:-4} PARTS="selftest examples" JOBS=12 TIMEOUT=150 timeout $(($(left) - ${PAPERT:-330})) sh tests/gpu/run.sh $OUT/ex.md >$OUT/ex.out 2>&1
tail -2 $OUT/ex.out | head -1; grep -A2 FAIL $OUT/ex.out | cut -c1-200 | head -20
RANKS=${R:-4} PARTS=paper B_SIZES=" " N_POW="${NP:-20 24 28}" JOBS=12 TIMEOUT=200 timeout $(left) sh tests/gpu/run.sh $OUT/paper.md >$OUT/paper.out 2>&1
grep -A2 FAIL $OUT/paper.out | cut -c1-200 | head -20
grep -E '^(ok|FAIL)' $OUT/ex.out $OUT/paper.out | sed 's/--reference program --backend cuda//; s/--iters 20//' | cut -c1-140
echo "end at $(( $(date +%s) - T0 )) s"

#!/bin/sh
# device run (2 GPUs): the paper part at P=2 (logs to $OUT)
export COCONET_HOME=$PWD
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
make -j16 >$OUT/make.log 2>&1 || { tail -30 $OUT/make.log; exit 1; }
el built
RANKS=2 PARTS=paper N_POW="${NPOW:-10 16 20 24 28}" TIMEOUT=300 timeout $((560 - $(date +%s) + T0)) sh tests/gpu/run.sh $OUT/paper2.md >$OUT/paper2.out 2>&1
el "P=2: $(tail -2 $OUT/paper2.out | head -1)"; grep -A2 FAIL $OUT/paper2.out | head -20
grep -E '^(ok|FAIL)' $OUT/paper2.out | cut -c1-150

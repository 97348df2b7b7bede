#!/bin/sh
# bench/device/recheck.sh: one lease after the fix of NCCL collectives over
# uneven slices (every rank's buffers at one offset of the symmetric window):
# first what failed in verify.sh (N = 1001, scattered parts at W = 41, the
# ragged program), then the paper's optimizers at 2^28 and odd N, then every
# example and test program again (the generated code of all changed). All
# logs go into $OUT/logs.tgz (a lease returns at most 8 files); a short table
# last. Variables: R (ranks, 2), DEADLINE (seconds, 565), COMMIT, N_POW (28).
#
#   COMMIT=$(git rev-parse --short HEAD) R=2 sh bench/device/recheck.sh
export COCONET_HOME=$PWD
R=${R:-2}
T0=$(date +%s)
left() { echo $((${DEADLINE:-565} - $(date +%s) + T0)); }
LOGS=$OUT/logs
mkdir -p "$LOGS"
pack() { tar -C "$OUT" -czf "$OUT/logs.tgz" logs; }
trap pack EXIT
make -j16 >"$LOGS/make.log" 2>&1 || { tail -30 "$LOGS/make.log"; exit 1; }

: >"$OUT/summary"
one() { # NAME [VAR=VALUE...] COMMAND...: one run on the GPUs, its status in the summary
    name=$1; shift
    env "$@" --backend cuda --ranks "$R" --all-schedules --iters 5 >"$LOGS/$name.log" 2>&1
    echo "$name status $? $(grep -c -E ' (WRONG|FAILED|GUARD|REPEAT|REPLICAS) ' "$LOGS/$name.log") bad rows $(($(date +%s) - T0)) s" \
        >>"$OUT/summary"
}
# 1. what failed before, built in parallel first
for f in adam lamb sgd_momentum; do
    ./coconet run "examples/$f.coco" --backend cuda --ranks "$R" --all-schedules --build-only \
        >>"$LOGS/build.log" 2>&1 &
done
./coconet run examples/adam_scattered.coco --backend cuda --ranks "$R" --all-schedules \
    --build-only >>"$LOGS/build.log" 2>&1 &
./coconet run tests/gpu/lamb_scattered.coco --backend cuda --ranks "$R" --all-schedules \
    --build-only >>"$LOGS/build.log" 2>&1 &
./coconet run tests/oracle/programs/ragged.coco --backend cuda --ranks "$R" --all-schedules \
    --build-only >>"$LOGS/build.log" 2>&1 &
wait
for f in adam lamb sgd_momentum; do
    one "$f-1001" ./coconet run "examples/$f.coco" -D N=1001 --reference program
    one "$f-1001-nccl" COCONET_FUSED=nccl ./coconet run "examples/$f.coco" -D N=1001 --reference program
done
for f in examples/adam_scattered.coco tests/gpu/lamb_scattered.coco; do
    one "$(basename "$f" .coco)-w41" COCONET_FUSED=twoshot ./coconet run "$f" -D W=41
done
one ragged ./coconet run tests/oracle/programs/ragged.coco

# 2. the paper's optimizers at 2^28 and odd N (2^28 traced: where the time goes)
COCONET_TRACE=1 RANKS=$R PARTS=paper B_SIZES=" " N_POW="${N_POW:-28}" JOBS=12 TIMEOUT=240 \
    timeout $(($(left) - 150)) sh tests/gpu/run.sh "$OUT/paper.md" >"$LOGS/paper.out" 2>&1
echo "paper status $? $(($(date +%s) - T0)) s" >>"$OUT/summary"

# 3. every example and test program x every schedule
RANKS=$R PARTS="selftest examples" JOBS=12 TIMEOUT=120 timeout $(($(left) - 5)) \
    sh tests/gpu/run.sh "$OUT/examples.md" >"$LOGS/examples.out" 2>&1
echo "examples status $? $(($(date +%s) - T0)) s" >>"$OUT/summary"

cp "$OUT/paper.md.log" "$OUT/examples.md.log" "$LOGS/" 2>/dev/null
rm -f "$OUT/paper.md.log" "$OUT/examples.md.log" "$OUT"/*.build
grep -h -E '^(ok|FAIL)' "$LOGS/paper.out" "$LOGS/examples.out" | cut -c1-140
cat "$OUT/summary"
echo "end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/recheck.sh: one lease after the fix of NCCL collectives over
# uneven slices (each rank's block moved by itself when the blocks are not
# whole multiples of 16 bytes):
# first what failed in verify.sh (N = 1001, scattered parts at W = 41, the
# ragged program; and N = 1002, whose blocks are whole but not a multiple of
# 16 bytes), then Adam and NCCL AllReduce alone at 2^28, then every example
# and test program again (the generated code of all changed). All
# logs go into $OUT/logs.tgz (a lease returns at most 8 files); a short table
# last. Variables: R (ranks, 2), DEADLINE (seconds, 565), COMMIT, N_POW (28).
#
#   COMMIT=$(git rev-parse --short HEAD) R=2 sh bench/device/recheck.sh
export COCONET_HOME=$PWD
R=${R:-2}
. bench/device/deadline.sh # T0, left
LOGS=$(mktemp -d)/logs # packed into $OUT/logs.tgz at the end
mkdir -p "$LOGS"
pack() { tar -C "$(dirname "$LOGS")" -czf "$OUT/logs.tgz" logs; }
trap pack EXIT
make -j16 >"$LOGS/make.log" 2>&1 || { tail -30 "$LOGS/make.log"; exit 1; }

: >"$OUT/summary"
IT=5 # timed runs of each variant
one() { # NAME [VAR=VALUE...] COMMAND...: one run on the GPUs, its status in the summary
    name=$1; shift
    timeout "$(left)" env "$@" --backend cuda --ranks "$R" --all-schedules --iters "$IT" \
        >"$LOGS/$name.log" 2>&1
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
./coconet run tests/gpu/allreduce.coco --backend cuda --ranks "$R" --all-schedules \
    --build-only >>"$LOGS/build.log" 2>&1 &
wait
for n in 1001 1002 1000003; do
    for f in adam lamb sgd_momentum; do
        one "$f-$n" ./coconet run "examples/$f.coco" -D "N=$n" --reference program
        one "$f-$n-nccl" COCONET_FUSED=nccl ./coconet run "examples/$f.coco" -D "N=$n" --reference program
    done
done
for f in examples/adam_scattered.coco tests/gpu/lamb_scattered.coco; do
    one "$(basename "$f" .coco)-w41" COCONET_FUSED=twoshot ./coconet run "$f" -D W=41
done
one ragged ./coconet run tests/oracle/programs/ragged.coco

# 2. Adam at 2^28, traced (where the time goes), and NCCL AllReduce alone
for e in ${N_POW:-28}; do
    [ "$(left)" -gt 200 ] || break
    IT=20
    one "adam-2p$e" COCONET_TRACE=1 ./coconet run examples/adam.coco -D "N=$((1 << e))" --reference program
    one "allreduce-2p$e" ./coconet run tests/gpu/allreduce.coco -D "N=$((1 << e))"
done

# 3. every example and test program x every schedule
RANKS=$R PARTS="selftest examples" JOBS=12 TIMEOUT=120 timeout "$(left 5)" \
    sh tests/gpu/run.sh "$OUT/examples.md" >"$LOGS/examples.out" 2>&1
echo "examples status $? $(($(date +%s) - T0)) s" >>"$OUT/summary"

mv "$OUT/examples.md.log" "$LOGS/" 2>/dev/null
rm -f "$OUT"/*.build
grep -h -E '^(ok|FAIL)' "$LOGS/examples.out" | cut -c1-140
grep -h -E '^(schedule|AR_Opt|RS_Opt_AG|fuse_RS_Opt_AG_4|program|allreduce) ' "$LOGS"/adam-2p*.log "$LOGS"/allreduce-2p*.log
cat "$OUT/summary"
echo "end at $(($(date +%s) - T0)) s"

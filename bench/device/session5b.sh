#!/bin/sh
# bench/device/session5b.sh: one lease on P = 4 after a run that did not
# exit (adam_scattered at W = 41, two-shot): that run under
# bench/device/hang.sh, the examples' knobs part (tests/gpu/run.sh
# PARTS=knobs) and the paper's optimizers at N = 2^20, 2^24 and odd N, the
# later parts' code built in the background from the start. Files under $OUT:
# hang.txt, knobs.md, paper.md, logs.tgz. DEADLINE (seconds, 565), COMMIT.
export COCONET_HOME=$PWD
export COCONET_CACHE=$PWD/build/cache
. bench/device/deadline.sh # T0, left
LOGS=$(mktemp -d)/logs
mkdir -p "$LOGS"
trap 'mv "$OUT"/*.log "$OUT"/*.build "$LOGS/" 2>/dev/null; tar -C "$(dirname "$LOGS")" -czf "$OUT/logs.tgz" logs' EXIT
make -j16 >"$LOGS/make.log" 2>&1 || { tail -30 "$LOGS/make.log"; exit 1; }
echo "built in $(($(date +%s) - T0)) s"
export RANKS=4 JOBS=12 B_SIZES=" " N_POW="20 24" N_ODD="1001 1048577"
BUILD_ONLY=1 PARTS=paper nice -n 5 sh tests/gpu/run.sh "$LOGS/ahead-paper.md" >/dev/null 2>&1 &
BUILD_ONLY=1 PARTS=knobs sh tests/gpu/run.sh "$LOGS/ahead-knobs.md" >/dev/null 2>&1
echo "knobs' code built at $(($(date +%s) - T0)) s"
COCONET_FUSED=twoshot NCCL_DEBUG=WARN sh bench/device/hang.sh 45 ./coconet run \
    examples/adam_scattered.coco -D W=41 --all-schedules --backend cuda --ranks 4 --iters 20 \
    >"$OUT/hang.txt" 2>&1
grep -v -E '^[A-Za-z0-9_]+ +bitwise ' "$OUT/hang.txt" | cut -c1-160 | head -90
PARTS=knobs TIMEOUT=90 timeout "$(left 200)" sh tests/gpu/run.sh "$OUT/knobs.md" \
    >"$LOGS/knobs.out" 2>&1
wait
PARTS=paper TIMEOUT=120 timeout "$(left)" sh tests/gpu/run.sh "$OUT/paper.md" >"$LOGS/paper.out" 2>&1
grep -h -A2 FAIL "$LOGS/knobs.out" "$LOGS/paper.out" | cut -c1-200 | head -20
grep -h -E '^(ok|FAIL)' "$LOGS/knobs.out" "$LOGS/paper.out" |
    sed 's/--reference program --backend cuda//; s/--all-schedules//; s/--iters 20//' | cut -c1-120
echo "end at $(($(date +%s) - T0)) s"

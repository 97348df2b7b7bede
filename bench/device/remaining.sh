#!/bin/sh
# bench/device/remaining.sh: the first command of the next lease of
# nvidia-h200-x4, for what issues 4 and 5 still lack after the P = 2 runs
# (bench/results/2026-11-22-h200x2-push.md, -p2check.md, -lamb.md and
# -fig6.md), in order of need:
#   1. NCCL AllReduce with and without the arena's window by size
#      (bench/device/window.sh): the default of COCONET_NCCL_WINDOW_BYTES
#      at P = 4;
#   2. the push algorithm against two-shot by loads (bench/device/push.sh):
#      the default of COCONET_FUSED_PUSH_BYTES at P = 4;
#   3. tests/oracle/programs/ragged.coco at P = 4, every schedule;
#   4. lamb and sgd_momentum at 2^28 at P = 4, every schedule, checked;
#   5. bench/scattered.sh at P = 4 (the 3 % goal).
# Every program is built first, at once. Then, on the same warm machine:
#   COMMIT=... R=4 EXR=4 SKIP_PAPER=1 PAPERT=10 sh bench/device/final.sh
#   (examples, knobs and push instances at P = 4), and the Figure 6
#   benchmark with the new defaults: bench/device/fig6.sh (its header).
# Files under $OUT: remaining.txt (the short list, also printed), logs.tgz.
# Variables: DEADLINE (seconds, 565), COMMIT.
. bench/device/lease.sh # T0, left, lease_logs, lease_make
lease_logs logs # $W
say() { echo "$*" | tee -a "$OUT/remaining.txt"; }
lease_make
./coconet run tests/oracle/programs/ragged.coco --backend cuda --ranks 4 --all-schedules \
    --build-only >"$W/build-ragged.log" 2>&1 &
for f in examples/lamb.coco examples/sgd_momentum.coco; do # as step 4 runs them
    ./coconet run "$f" --backend cuda --ranks 4 --all-schedules --build-only \
        >>"$W/build.log" 2>&1 &
done
for f in bench/allreduce_fused.coco bench/bert_adam_scattered.coco bench/bert_adam.coco; do
    ./coconet run "$f" --backend cuda --ranks 4 --build-only >>"$W/build.log" 2>&1 & # 1, 5
done
P=4 BUILD_ONLY=1 sh bench/device/push.sh >"$W/build-push.log" 2>&1 &
wait
say "built at $(($(date +%s) - T0)) s (commit ${COMMIT:-?})"
# 1, 2
P=4 POWS="16 18 20 22 24 26 28" DEADLINE=$(left 420) OUT=$W sh bench/device/window.sh >/dev/null 2>&1
tee -a "$OUT/remaining.txt" <"$W/window.txt"
P=4 DEADLINE=$(left 300) OUT=$W sh bench/device/push.sh >/dev/null 2>&1
tee -a "$OUT/remaining.txt" <"$W/push.txt"
# 3, 4
./coconet run tests/oracle/programs/ragged.coco --backend cuda --ranks 4 --all-schedules \
    --iters 20 --timeout 60 >"$W/ragged.out" 2>&1
say "ragged P=4: status $? ($(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$W/ragged.out") variants passed)"
for f in sgd_momentum lamb; do
    timeout "$(left 60)" ./coconet run examples/$f.coco -D N=268435456 --all-schedules \
        --backend cuda --ranks 4 --reference program --iters 10 --timeout 150 >"$W/$f.out" 2>&1
    say "$f 2^28 P=4: status $? ($(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$W/$f.out") variants passed)"
done
# 5
RANKS=4 timeout "$(left 5)" sh bench/scattered.sh "$W" >"$W/scattered.txt" 2>&1
tee -a "$OUT/remaining.txt" <"$W/scattered.txt"
say "end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/remaining.sh: one lease of nvidia-h200-x4 for what issues 4
# and 5 still lack after 2026-11-22 (bench/results/2026-11-22-h200x4-fig6.md,
# -final-p4.md), in order of need:
#   1. tests/oracle/programs/ragged.coco at P = 4, every schedule;
#   2. bench/scattered.sh (BERT-large's 398 tensors, the 3 % goal);
#   3. NCCL AllReduce alone at 2^26 and 2^28 with the arena a symmetric
#      window (default) and plain cudaMalloc memory (COCONET_FUSED=nccl):
#      is the window what makes it slower than PyTorch's at large N?
#   4. all-FP32 LAMB at 2^28, then Adam and LAMB at 2^29 and 2^30 (no CPU
#      reference), and PyTorch at 2^29 and 2^30, while time is left.
# Every program is built first, all at once. Files under $OUT: remaining.txt
# (the short list, also printed), fused.csv, logs.tgz. Variables: DEADLINE
# (seconds, 565), COMMIT.
export COCONET_HOME=$PWD
export COCONET_CACHE=$PWD/build/cache
export RANKS=4 SCHEDULES="AR_Opt RS_Opt_AG fuse_RS_Opt_AG fuse_RS_Opt_AG_4"
. bench/device/deadline.sh # T0, left
W=$(mktemp -d)/logs
mkdir -p "$W"
trap 'cp "$W/fused.csv" "$OUT/" 2>/dev/null; tar -C "$(dirname "$W")" -czf "$OUT/logs.tgz" logs' EXIT
say() { echo "$*" | tee -a "$OUT/remaining.txt"; }
make -j16 >"$W/make.log" 2>&1 || { tail -30 "$W/make.log"; exit 1; }
./coconet run tests/oracle/programs/ragged.coco --backend cuda --ranks 4 --all-schedules \
    --build-only >"$W/build-ragged.log" 2>&1 &
for f in bench/bert_adam_scattered.coco bench/bert_adam.coco; do
    ./coconet run "$f" --backend cuda --ranks 4 --build-only >>"$W/build-bert.log" 2>&1 &
done
for p in allreduce_fused adam adam_fp32 lamb lamb_fp32; do
    BUILD_ONLY=1 PROGRAMS=$p POWS=10 sh bench/fused.sh "$W/ahead-$p" >/dev/null 2>&1 &
done
wait
say "built at $(($(date +%s) - T0)) s (commit ${COMMIT:-?})"
# 1
./coconet run tests/oracle/programs/ragged.coco --backend cuda --ranks 4 --all-schedules \
    --iters 20 --timeout 60 >"$W/ragged.out" 2>&1
say "ragged P=4: status $? ($(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$W/ragged.out") variants passed)"
# 2
timeout "$(left 300)" sh bench/scattered.sh "$W" >"$W/scattered.txt" 2>&1
tee -a "$OUT/remaining.txt" <"$W/scattered.txt"
# 3
for n in 67108864 268435456; do
    for fused in "" nccl; do
        COCONET_FUSED=$fused ./coconet run bench/allreduce_fused.coco -D N=$n --backend cuda \
            --ranks 4 --iters 20 --schedule program >"$W/ar.out" 2>&1
        say "NCCL AllReduce FP32 N=$n arena=${fused:+plain}${fused:-window}: $(grep '^program ' "$W/ar.out")"
    done
done
# 4
timeout "$(left 170)" env PROGRAMS=lamb_fp32 POWS=28 sh bench/fused.sh "$W" >/dev/null 2>&1
for p in 29 30; do
    timeout "$(left 20)" env PROGRAMS="adam_fp32 adam lamb_fp32 lamb" POWS=$p \
        sh bench/fused.sh "$W" >/dev/null 2>&1
done
timeout "$(left 5)" python3 bench/torch_opt.py --ranks 4 --pow 29 30 --iters 20 \
    >>"$W/fused.csv" 2>"$W/torch.err"
say "fused.csv rows: $(grep -c '' "$W/fused.csv")"
cut -d, -f2,4,5,7,8,9 "$W/fused.csv" | tail -n 30
say "end at $(($(date +%s) - T0)) s"

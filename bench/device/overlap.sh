#!/bin/sh
# bench/device/overlap.sh: the model-parallel layers' FP16 collectives and
# overlap(MatMul, FusedAllReduce) chunk by chunk (src/cuda/emit_overlap.c),
# on P GPUs (4 unless set), in one lease:
#   1. correctness: self_attention and mlp, every schedule, at a small size
#      (B=8 S=16 H=64), at P (and at 2 last, time permitting), by default
#      and with 3 chunks keeping 0 (the default) and 16 SMs;
#      the FP16 AllReduce at an odd size; each checked against the CPU;
#   2. with ALL=1, times at the paper's size (B=8 S=1024 H=3072; B=16 with
#      BIG=1): every schedule of both layers at P, checked against the program;
#   3. the overlap's knobs on the overlapped schedule ol_MM_fuse_RS_C_AG
#      of both layers: chunks in CHUNKS x SMs kept in SMS.
#   COMMIT=<sha> P=4 sh bench/device/overlap.sh   (tables: $OUT/overlap.txt)
. bench/device/lease.sh # T0, left, lease_logs, lease_make
P=${P:-4}
CHUNKS=${CHUNKS:-1 2 4 8}
SMS=${SMS:-16 32 48}
lease_logs logs
lease_make
T=$OUT/overlap.txt
run() { # run LOG ARGS...: one coconet run, its table appended to $T
    log=$1
    shift
    echo "\$ $*" >>"$T"
    timeout "$(left 20)" "$@" >"$W/$log" 2>&1
    echo "status $?" >>"$T"
    grep -E '^(schedule|program|paper|[A-Za-z_0-9]+ +(bitwise|rounding|FAILED|wrong|unchecked))' "$W/$log" >>"$T"
    grep -E 'FAIL|error|wrong' "$W/$log" | head -5 >>"$T"
}
SMALL="-D B=8 -D S=16 -D H=64"
check() { # check P: correctness at P ranks
    for f in examples/self_attention.coco examples/mlp.coco; do
        n=$(basename "$f" .coco)
        run "check-$n-$1.log" ./coconet run "$f" $SMALL --all-schedules --backend cuda --ranks "$1" --iters 3
        for s in 0 16; do
            COCONET_OVERLAP_CHUNKS=3 COCONET_OVERLAP_SMS=$s run "check3-$n-$1-$s.log" ./coconet run "$f" \
                $SMALL --all-schedules --backend cuda --ranks "$1" --iters 3
        done
    done
    run "ar16-$1.log" ./coconet run tests/gpu/allreduce.coco -D N=1000003 --backend cuda --ranks "$1" --iters 3
}
check "$P"
echo "correctness done at $(($(date +%s) - T0)) s"
PAPER="-D B=8 -D S=1024 -D H=3072"
[ "${BIG:-0}" = 1 ] && PAPER="-D B=16 -D S=1024 -D H=3072"
if [ "${ALL:-0}" = 1 ]; then
    for f in examples/self_attention.coco examples/mlp.coco; do
        n=$(basename "$f" .coco)
        run "paper-$n.log" ./coconet run "$f" $PAPER --all-schedules --reference program --backend cuda \
            --ranks "$P" --iters 20
    done
fi
echo "paper sizes done at $(($(date +%s) - T0)) s"
for f in examples/self_attention.coco examples/mlp.coco; do
    n=$(basename "$f" .coco)
    ./coconet schedules "$f" >"$W/$n-schedules.coco" 2>/dev/null
    for c in $CHUNKS; do
        for s in $SMS; do
            [ "$(left 30)" -gt 30 ] || break 2
            COCONET_OVERLAP_CHUNKS=$c COCONET_OVERLAP_SMS=$s run "knob-$n-$c-$s.log" ./coconet run "$f" $PAPER \
                --schedule-file "$W/$n-schedules.coco" --schedule ol_MM_fuse_RS_C_AG --reference none \
                --backend cuda --ranks "$P" --iters 20
            echo "knobs $n chunks=$c sms=$s" >>"$T"
        done
    done
done
[ "$P" != 2 ] && [ "$(left 30)" -gt 120 ] && check 2
echo "overlap.sh: end at $(($(date +%s) - T0)) s"
tail -n 80 "$T"

#!/bin/sh
# bench/device/mp_overlap.sh: issue 21 in one lease of P GPUs (4 unless set):
#   1. bench/mp.sh at B = SIZES (8), FP16: every schedule of self_attention
#      and mlp, the FP16 AllReduce alone and the pipeline, beside PyTorch's
#      Megatron-style layer, async TP, NCCL all_reduce and pipeline step
#      (left out with SKIP_MP=1);
#   2. overlap(MatMul, FusedAllReduce) chunk by chunk: correctness of every
#      schedule of both layers at B=8 S=16 H=64 with 3 chunks (the kernel
#      keeping 16 SMs, and the default 32; by push, COCONET_FUSED=push; and
#      the last chunk on the whole grid, COCONET_OVERLAP_TAIL=1),
#      then ol_MM_fuse_RS_C_AG of LAYERS2 (both) at B = SIZES, S=1024,
#      H=3072 with chunks in CHUNKS x SMs kept in SMS x COCONET_FUSED in
#      ALGOS ("auto": loads; "push") x COCONET_OVERLAP_TAIL in TAILS ("0"),
#      unchecked (part 1 and the checks above checked the same code).
#   COMMIT=<sha> P=4 sh bench/device/mp_overlap.sh
. bench/device/lease.sh # T0, left, lease_logs, lease_make
P=${P:-4}
CHUNKS=${CHUNKS:-2 4 8}
SMS=${SMS:-16 32}
ALGOS=${ALGOS:-auto}
TAILS=${TAILS:-0}
lease_make
[ "${SKIP_MP:-0}" = 1 ] || OUT=$OUT P=$P SIZES=${SIZES:-8} DTYPES=fp16 PIPE_SIZES=1 ITERS=20 DEADLINE=${MP_DEADLINE:-330} \
    LAYERS=${LAYERS:-self_attention mlp allreduce pipeline} sh bench/mp.sh >"$OUT/mp.out" 2>&1
echo "mp.sh: status $? at $(($(date +%s) - T0)) s"
T=$OUT/overlap.txt
run() { # run LOG ARGS...: one coconet run, its table appended to $T
    log=$1
    shift
    echo "\$ $*" >>"$T"
    timeout "$(left 10)" "$@" >"$OUT/$log" 2>&1
    echo "status $?" >>"$T"
    grep -E '^(program|paper|[A-Za-z_0-9]+ +(bitwise|rounding|FAILED|wrong|unchecked))' "$OUT/$log" >>"$T"
    grep -E 'FAIL|error|wrong|trap' "$OUT/$log" | head -3 >>"$T"
    rm -f "$OUT/$log"
}
for f in examples/self_attention.coco examples/mlp.coco; do
    for s in 16 0 push tail; do
        a=auto t=0
        [ "$s" = push ] && a=push s=0
        [ "$s" = tail ] && t=1 s=0
        COCONET_FUSED=$a COCONET_OVERLAP_CHUNKS=3 COCONET_OVERLAP_SMS=$s COCONET_OVERLAP_TAIL=$t \
            run check.log ./coconet run "$f" -D B=8 -D S=16 -D H=64 --all-schedules --backend cuda \
            --ranks "$P" --iters 3
        echo "check $f chunks=3 sms=$s algo=$a tail=$t" >>"$T"
    done
done
for n in ${LAYERS2:-self_attention mlp}; do
    f=examples/$n.coco
    ./coconet schedules "$f" >"/tmp/$n-schedules.coco" 2>/dev/null
    for b in ${SIZES:-8}; do
        for c in $CHUNKS; do
            for s in $SMS; do
                for a in $ALGOS; do
                    for t in $TAILS; do
                        [ "$(left 15)" -gt 15 ] || break 6
                        COCONET_FUSED=$a COCONET_OVERLAP_CHUNKS=$c COCONET_OVERLAP_SMS=$s \
                            COCONET_OVERLAP_TAIL=$t run knob.log ./coconet run "$f" -D B="$b" \
                            -D S=1024 -D H=3072 --schedule-file "/tmp/$n-schedules.coco" \
                            --schedule ol_MM_fuse_RS_C_AG --reference none --backend cuda \
                            --ranks "$P" --iters 20
                        echo "knobs $n B=$b chunks=$c sms=$s algo=$a tail=$t" >>"$T"
                    done
                done
            done
        done
    done
done
echo "mp_overlap.sh: end at $(($(date +%s) - T0)) s"
grep -E "^(check|knobs)|FAILED|trap|ol_MM_fuse_RS_C_AG +unchecked" "$T" | tail -40
cat "$OUT/summary.md" 2>/dev/null | tail -30

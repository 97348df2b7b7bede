#!/bin/sh
# bench/device/rounds.sh: the push algorithm in rounds
# (COCONET_FUSED_PUSH_ROUND: a thread's steps between two barriers; 0: one
# round) against two-shot by loads, on P GPUs (2 unless set):
#   1. correctness: tests/gpu/run.sh's knobs part over adam, lamb,
#      sgd_momentum, mlp and norms (push with vectors, one element a step,
#      and one block of one warp in rounds of 1 and 3 steps: many rounds);
#   2. at N = 2^POW (28 unless set): fuse_RS_Opt_AG_4 of all-FP32 and mixed
#      LAMB and Adam and the FusedAllReduce (FP32) (PROGRAMS: those, in
#      this order), two-shot and push with rounds of ROUNDS steps ("0 16"
#      unless set), REPS turns (2 unless set); unchecked (--reference none)
#      but the first row of each program, checked.
# SKIP_KNOBS=1 leaves part 1 out. Tables in $OUT (knobs.md, rounds.txt),
# logs packed into $OUT/logs.tgz.
#   COMMIT=<sha> P=4 DEADLINE=560 sh bench/device/rounds.sh
. bench/device/lease.sh # T0, left, lease_make, lease_logs
P=${P:-2}
POW=${POW:-28}
lease_logs logs
lease_make
PROGRAMS=${PROGRAMS:-bench/lamb_fp32.coco examples/lamb.coco bench/adam_fp32.coco examples/adam.coco bench/allreduce_fused.coco}
for f in $PROGRAMS; do # the timed programs' builds, beside the correctness runs
    nice -n 19 ./coconet run "$f" --all-schedules --backend cuda --ranks "$P" --build-only \
        >>"$W/ahead.log" 2>&1 &
done
if [ "${SKIP_KNOBS:-0}" != 1 ]; then
    RANKS=$P PARTS=knobs JOBS=8 TIMEOUT=150 \
        EXAMPLES="examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco examples/mlp.coco tests/gpu/norms.coco" \
        timeout "$(left 200)" sh tests/gpu/run.sh "$OUT/knobs.md" >"$W/knobs.out" 2>&1
    echo "knobs: status $? at $(($(date +%s) - T0)) s, $(grep -c '^ok' "$W/knobs.out") runs passed"
    grep -A2 '^FAIL' "$W/knobs.out" | head -20
fi
wait
# row LABEL REFERENCE ENV=VALUE... COMMAND...: one run, its fused row
row() {
    label=$1 ref=$2
    shift 2
    timeout "$(left 5)" env "$@" --backend cuda --ranks "$P" --iters 20 --reference "$ref" \
        >"$W/one.txt" 2>&1
    { echo "== $label: $*"; cat "$W/one.txt"; } >>"$W/rounds.log"
    awk -v l="$label" '/^schedule +outputs/ { on = 1; next } /^gpu-time:/ { on = 0 }
        on && ($1 == "fused" || $1 == "fuse_RS_Opt_AG_4") && NF >= 4 {
            for (i = 2; i <= NF; i++) if ($i == "ms") printf "%-34s %-9s %s\n", l, $2, $(i - 1) }' \
        "$W/one.txt" | tee -a "$OUT/rounds.txt"
}
for f in $PROGRAMS; do
    name=$(basename "$f" .coco)
    sched="--all-schedules --schedule fuse_RS_Opt_AG_4"
    [ "$name" = allreduce_fused ] && sched=
    ref=program
    for rep in $(seq "${REPS:-2}"); do
        # shellcheck disable=SC2086 # the schedule's words
        row "$name 2^$POW twoshot #$rep" $ref COCONET_FUSED=twoshot ./coconet run "$f" -D N=$((1 << POW)) $sched
        ref=none
        for round in ${ROUNDS:-0 16}; do
            # shellcheck disable=SC2086
            row "$name 2^$POW push round $round #$rep" none COCONET_FUSED=push \
                COCONET_FUSED_PUSH_ROUND=$round ./coconet run "$f" -D N=$((1 << POW)) $sched
        done
    done
done
echo "rounds.sh: end at $(($(date +%s) - T0)) s"

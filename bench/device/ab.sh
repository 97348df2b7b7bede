#!/bin/sh
# bench/device/ab.sh: the fused AllReduce (bench/allreduce_fused.coco, FP32,
# N = 2^POW, 28 unless set) of this tree against another one's, on the
# same machine in the same lease: two-shot and push, the two trees taking
# turns REPS times (3 unless set), so that a change's effect is told from
# a machine's. The other tree (AB_OLD, ab-old unless set) is a copy made
# here before the lease (ignored by git: name it in the device tool's
# `carry`):
#   rm -rf ab-old && mkdir ab-old && git archive <commit> | tar -x -C ab-old
# Table in $OUT/ab.txt (label, tree, schedule, result, ms), logs in $OUT.
. bench/device/lease.sh # T0, left
OLD=${AB_OLD:-ab-old}
P=${P:-2}
POW=${POW:-28}
lease_make
(cd "$OLD" && make -j16 >"$OUT/make-old.log" 2>&1) || { tail -20 "$OUT/make-old.log"; exit 1; }
# tree DIR CMD...: CMD run in DIR with DIR's runtime and its own build cache
tree() {
    dir=$1
    shift
    (cd "$dir" && COCONET_HOME="$PWD" COCONET_CACHE="$PWD/build/cache" "$@")
}
for d in . "$OLD"; do
    tree "$d" ./coconet run bench/allreduce_fused.coco -D N=$((1 << POW)) --backend cuda \
        --ranks "$P" --build-only >>"$OUT/build.log" 2>&1 &
done
wait
for rep in $(seq "${REPS:-3}"); do
    for algo in twoshot push; do
        for d in . "$OLD"; do
            name=new
            [ "$d" = . ] || name=old
            tree "$d" timeout "$(left 10)" env COCONET_FUSED=$algo ./coconet run \
                bench/allreduce_fused.coco -D N=$((1 << POW)) --backend cuda --ranks "$P" \
                --iters 20 --reference program >"$OUT/one.txt" 2>&1
            cat "$OUT/one.txt" >>"$OUT/ab.log"
            awk -v l="AR 2^$POW $algo #$rep" -v t=$name '/^schedule +outputs/ { on = 1; next } /^gpu-time:/ { on = 0 }
                on && NF >= 7 { for (i = 2; i <= NF; i++) if ($i == "ms") printf "%-22s %-4s %-10s %-9s %s\n", l, t, $1, $2, $(i - 1) }' \
                "$OUT/one.txt" | tee -a "$OUT/ab.txt"
        done
    done
done
echo "ab.sh: end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/ab.sh: generated code of this tree against another one's, on
# the same machine in the same lease, the two trees taking turns REPS times
# (3 unless set), so that a change's effect is told from a machine's: each
# of PROGRAMS (bench/allreduce_fused.coco, the FusedAllReduce, unless set;
# others at their fuse_RS_Opt_AG_4 schedule) at N = 2^POW (28 unless set)
# with each fused algorithm of ALGOS ("twoshot push" unless set). The first
# turn is checked against the CPU (--reference program), the others not
# (--reference none). The other tree (AB_OLD, ab-old unless set) is a copy
# made here before the lease (ignored by git: name it in the device tool's
# `carry`):
#   rm -rf ab-old && mkdir ab-old && git archive <commit> | tar -x -C ab-old
# BUILD_ONLY=1 builds both trees and the programs, and runs nothing.
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
PROGRAMS=${PROGRAMS:-bench/allreduce_fused.coco}
# schedule FILE: the words that choose the variant timed
schedule() {
    case $1 in
    */allreduce_fused.coco) ;;
    *) echo "--all-schedules --schedule fuse_RS_Opt_AG_4" ;;
    esac
}
for f in $PROGRAMS; do
    for d in . "$OLD"; do
        # shellcheck disable=SC2046 # the schedule's words
        tree "$d" ./coconet run "$f" -D N=$((1 << POW)) $(schedule "$f") --backend cuda \
            --ranks "$P" --build-only >>"$OUT/build.log" 2>&1 &
    done
done
wait
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
for rep in $(seq "${REPS:-3}"); do
    ref=program
    [ "$rep" = 1 ] || ref=none
    for f in $PROGRAMS; do
        for algo in ${ALGOS:-twoshot push}; do
            for d in . "$OLD"; do
                name=new
                [ "$d" = . ] || name=old
                # shellcheck disable=SC2046
                tree "$d" timeout "$(left 10)" env COCONET_FUSED=$algo ./coconet run "$f" \
                    -D N=$((1 << POW)) $(schedule "$f") --backend cuda --ranks "$P" \
                    --iters 20 --reference $ref >"$OUT/one.txt" 2>&1
                cat "$OUT/one.txt" >>"$OUT/ab.log"
                awk -v l="$(basename "$f" .coco) 2^$POW $algo #$rep" -v t=$name \
                    '/^schedule +outputs/ { on = 1; next } /^gpu-time:/ { on = 0 }
                    on && NF >= 4 { for (i = 2; i <= NF; i++) if ($i == "ms") printf "%-30s %-4s %-17s %-9s %s\n", l, t, $1, $2, $(i - 1) }' \
                    "$OUT/one.txt" | tee -a "$OUT/ab.txt"
            done
        done
    done
done
echo "ab.sh: end at $(($(date +%s) - T0)) s"

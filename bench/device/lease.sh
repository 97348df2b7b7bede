# bench/device/lease.sh: sourced (from the repository root) by the lease
# scripts here. Sets the coconet environment (COCONET_HOME, the build cache
# kept while the machine stays warm) and the time budget (deadline.sh: T0,
# left), and gives
#   lease_logs NAME  a log folder $W, packed into $OUT/NAME.tgz on exit (a
#                    lease returns at most 8 files);
#   lease_make       builds coconet (log in $W, else $OUT) and says how long
#                    it took and the tree's sum (tree_sum.sh: the same sum
#                    here names the code a COMMIT typed by hand may not);
#                    stops the script on failure, with the log's tail;
#   lease_bert_ahead P LOG  builds bench/scattered.sh's two programs for P
#                    ranks into the cache, in the background, at low priority;
#   lease_bert_push_ahead P LOG  the same, and bench/device/push.sh's builds.
# COMMIT, which the scripts print and tests/gpu/run.sh writes into its
# tables, must be given literally (COMMIT=1c86090, the local
# `git rev-parse --short HEAD`): on the machine, git in the copy of the
# tree named an older commit (bench/results/2026-11-23-h200x2.md).
# shellcheck shell=sh source=bench/device/deadline.sh
export COCONET_HOME="$PWD"
export COCONET_CACHE="$PWD/build/cache"
. bench/device/deadline.sh # T0, left
lease_logs() {
    W=$(mktemp -d)/$1
    mkdir -p "$W"
    # shellcheck disable=SC2064 # the folder is known now
    trap "tar -C '$(dirname "$W")' -czf '$OUT/$1.tgz' '$1'" EXIT
}
lease_make() {
    log=${W:-$OUT}/make.log
    make -j16 >"$log" 2>&1 || { tail -30 "$log"; exit 1; }
    echo "built in $(($(date +%s) - T0)) s (commit ${COMMIT:-?}, tree sum $(sh bench/device/tree_sum.sh))"
}
lease_bert_ahead() {
    for f in bench/bert_adam_scattered.coco bench/bert_adam.coco; do
        nice -n 19 ./coconet run "$f" --backend cuda --ranks "$1" --build-only >>"$2" 2>&1 &
    done
}
lease_bert_push_ahead() {
    lease_bert_ahead "$1" "$2"
    P=$1 BUILD_ONLY=1 nice -n 19 sh bench/device/push.sh >>"$2" 2>&1 &
}

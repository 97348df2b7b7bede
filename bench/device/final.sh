#!/bin/sh
# bench/device/final.sh: one lease of issue 4's table: the runtime
# self-test and every example and test program x every schedule at P in EXR,
# then the paper's optimizers at N = 2^NP and odd N at P = R. Tables under
# $OUT (ex-pP.md, paper.md); every log packed into $OUT/logs.tgz (a lease
# returns at most 8 files); a short list last.
#
# Variables: R (4), EXR (the examples' ranks, "$R"), DEADLINE (seconds,
# 565), PAPERT (seconds kept for the paper part, 330), NP ("20 24 28"),
# N_ODD (run.sh's), COMMIT, SKIP_EXAMPLES=1 (the paper part alone),
# SKIP_PAPER=1 (the examples alone), AHEAD ("": run.sh parts, e.g. paper,
# "fused" for bench/device/fig6.sh, "scattered" for bench/scattered.sh:
# their code is built into
# the cache in the background, at low priority, for a later call on the same
# machine). The cache is build/cache (kept while the machine stays warm).
#
#   COMMIT=<sha> R=4 sh bench/device/final.sh   (COMMIT given literally: lease.sh says why)
. bench/device/lease.sh # T0, left, lease_make
LOGS=$(mktemp -d)/logs
mkdir -p "$LOGS"
pack() {
    mv "$OUT"/*.log "$OUT"/*.build "$LOGS/" 2>/dev/null
    tar -C "$(dirname "$LOGS")" -czf "$OUT/logs.tgz" logs
}
trap pack EXIT
W=$LOGS lease_make
for part in $AHEAD; do
    if [ "$part" = fused ]; then # bench/device/fig6.sh's runs
        BUILD_ONLY=1 RANKS=${R:-4} POWS=10 \
            SCHEDULES="AR_Opt RS_Opt_AG fuse_RS_Opt_AG fuse_RS_Opt_AG_4" \
            nice -n 19 sh bench/fused.sh "$LOGS/ahead-fused" >/dev/null 2>&1 &
    elif [ "$part" = scattered ]; then # bench/scattered.sh's runs
        lease_bert_ahead "${R:-4}" "$LOGS/ahead-scattered.log"
    else
        BUILD_ONLY=1 RANKS=${R:-4} PARTS=$part B_SIZES=" " N_POW="${NP:-20 24 28}" JOBS=8 \
            nice -n 19 sh tests/gpu/run.sh "$LOGS/ahead-$part.md" >/dev/null 2>&1 &
    fi
done
# the examples, one P after the other (the second reuses the first's builds)
[ "${SKIP_EXAMPLES:-0}" = 1 ] ||
    for p in ${EXR:-${R:-4}}; do
        RANKS=$p PARTS="selftest examples" JOBS=12 TIMEOUT=150 \
            timeout "$(left ${PAPERT:-330})" \
            sh tests/gpu/run.sh "$OUT/ex-p$p.md" >>"$LOGS/ex.out" 2>&1
    done
[ "${SKIP_PAPER:-0}" = 1 ] ||
    RANKS=${R:-4} PARTS=paper B_SIZES=" " N_POW="${NP:-20 24 28}" JOBS=12 TIMEOUT=300 \
        timeout "$(left)" sh tests/gpu/run.sh "$OUT/paper.md" >"$LOGS/paper.out" 2>&1
# the builds ahead: not past the deadline
while [ -n "$(jobs -p)" ] && [ "$(left)" -gt 5 ]; do sleep 2; done
touch "$LOGS/ex.out" "$LOGS/paper.out"
grep -h -A2 FAIL "$LOGS/ex.out" "$LOGS/paper.out" | cut -c1-200 | head -20
grep -h -E '^(ok|FAIL)' "$LOGS/ex.out" "$LOGS/paper.out" |
    sed 's/--reference program --backend cuda//; s/--iters 20//' | cut -c1-140
echo "end at $(($(date +%s) - T0)) s"

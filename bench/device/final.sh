#!/bin/sh
# bench/device/final.sh: one lease of issue 4's table at P = R (4): the
# runtime self-test, every example and test program x every schedule, then
# the paper's optimizers at N = 2^NP (20 24 28) and odd N. Tables under
# $OUT (ex.md, paper.md); every log packed into $OUT/logs.tgz (a lease
# returns at most 8 files); a short list last. Variables: R (4), DEADLINE
# (seconds, 565), PAPERT (seconds kept for the paper part, 330), NP, COMMIT,
# SKIP_EXAMPLES=1 (the paper part alone).
#
#   COMMIT=$(git rev-parse --short HEAD) R=4 sh bench/device/final.sh
export COCONET_HOME=$PWD
T0=$(date +%s)
left() { echo $((${DEADLINE:-565} - $(date +%s) + T0)); }
LOGS=$(mktemp -d)/logs
mkdir -p "$LOGS"
pack() {
    mv "$OUT"/*.log "$OUT"/*.build "$LOGS/" 2>/dev/null
    tar -C "$(dirname "$LOGS")" -czf "$OUT/logs.tgz" logs
}
trap pack EXIT
make -j16 >"$LOGS/make.log" 2>&1 || { tail -30 "$LOGS/make.log"; exit 1; }
echo "built in $(($(date +%s) - T0)) s"
[ "${SKIP_EXAMPLES:-0}" = 1 ] ||
    RANKS=${R:-4} PARTS="selftest examples" JOBS=12 TIMEOUT=150 timeout $(($(left) - ${PAPERT:-330})) \
        sh tests/gpu/run.sh "$OUT/ex.md" >"$LOGS/ex.out" 2>&1
RANKS=${R:-4} PARTS=paper B_SIZES=" " N_POW="${NP:-20 24 28}" JOBS=12 TIMEOUT=300 timeout "$(left)" \
    sh tests/gpu/run.sh "$OUT/paper.md" >"$LOGS/paper.out" 2>&1
touch "$LOGS/ex.out"
grep -h -A2 FAIL "$LOGS/ex.out" "$LOGS/paper.out" | cut -c1-200 | head -20
grep -h -E '^(ok|FAIL)' "$LOGS/ex.out" "$LOGS/paper.out" |
    sed 's/--reference program --backend cuda//; s/--iters 20//' | cut -c1-140
echo "end at $(($(date +%s) - T0)) s"

#!/bin/sh
# bench/device/tune_held.sh: one command on a lent machine with P GPUs for
# the tuner's time (issue 22) and the memory the ranks hold from variant to
# variant (rt/held.c):
#   1. make; then, at once: tests/gpu/run.sh's builds (selftest, examples
#      over EX), the warm tunes' builds (bench/tune.sh BUILD) and, with
#      TORCH=1, coconet.torch's test and optimizer programs;
#   2. bench/tune.sh WARM at P over WORKLOADS (alone on the machine);
#   3. tests/gpu/run.sh selftest and examples over EX at P (many variants in
#      one process: the held slab and pristine copies checked; SKIP_EX=1: not
#      built nor run);
#   4. COCONET_TRACE=1 coconet tune of self_attention (B=8 S=1024 H=3072)
#      and of adam (N=2^20): where the time goes, summed over the variants,
#      and each launch's opening and closing on every rank (trace.txt);
#   5. with EXH=1: bench/tune.sh's EXH and PRUNED parts over EXH_WORKLOADS
#      (each workload tuned --exhaustive, then pruned: how often pruning
#      loses the best; the optimizers at N = 2^k for k in POWS, the layers
#      at their one size), within what is left of DEADLINE;
#   6. with TORCH=1: bench/device/torch.sh PHASES="testsP optim" at P.
# Under $OUT: ex.md, summary.md (the tunes), trace.txt, quality.md (EXH=1),
# logs.tgz, and torch.sh's files. Variables: P (2), EX, SKIP_EX (0),
# WORKLOADS, EXH (0), EXH_WORKLOADS (the layers, then lamb and adam), POWS,
# COMMIT, TORCH (1).
# shellcheck source=bench/device/lease.sh
. bench/device/lease.sh
P=${P:-2}
EX=${EX:-examples/adam.coco examples/self_attention.coco tests/gpu/send.coco tests/gpu/norms.coco \
examples/pipeline.coco}
WORKLOADS=${WORKLOADS:-adam lamb self_attention mlp pipeline}
export NCCL_NVLS_ENABLE=0
lease_logs logs
lease_make
export PYTHONPATH="$PWD/python" COCONET_LIB="$PWD/build/libcoconet.so"
[ "${SKIP_EX:-0}" = 1 ] ||
    RANKS=$P BUILD_ONLY=1 PARTS="selftest examples" EXAMPLES=$EX sh tests/gpu/run.sh \
        "$W/ex-build.md" >"$W/ex-build.out" 2>&1 &
if [ "${TORCH:-1}" = 1 ]; then
    python3 tests/gpu/torch_check.py --build-only --ranks "$P" --jobs 4 >"$W/torch-build.log" 2>&1 &
    python3 bench/torch_optim_step.py --build-only --ranks "$P" >"$W/optim-build.log" 2>&1 &
fi
TW=/tmp/coconet-tune-held
P=$P OUT=$W/tune-build WORK=$TW BUDGET=$(left 300) WORKLOADS=$WORKLOADS OPT="" COLD=0 WARM=0 \
    EXH=0 PRUNED=0 sh bench/tune.sh >"$W/tune-build.out" 2>&1
wait
echo "builds done at $(($(date +%s) - T0)) s"
P=$P OUT=$W/tune WORK=$TW BUDGET=$(left 240) WORKLOADS=$WORKLOADS OPT="" COLD=0 BUILD=0 EXH=0 \
    PRUNED=0 sh bench/tune.sh >"$W/tune.out" 2>&1
echo "bench/tune.sh: exit status $?"
cp "$W/tune/summary.md" "$OUT/summary.md"
if [ "${SKIP_EX:-0}" != 1 ]; then
    RANKS=$P PARTS="selftest examples" EXAMPLES=$EX COMMIT=${COMMIT:-?} timeout "$(left 180)" \
        sh tests/gpu/run.sh "$OUT/ex.md" >"$W/ex.out" 2>&1
    echo "tests/gpu/run.sh: exit status $?"
    mv "$OUT/ex.md.log" "$W/" 2>/dev/null
    rm -f "$OUT"/*.log.build
    tail -n 2 "$W/ex.out"
fi
# trace_tune NAME ARGS...: a traced warm tune; rank 0's seconds by step summed
# over the variant runs, then each launch's own steps (every rank's opening
# and closing, the launcher's fork to exit), appended to $OUT/trace.txt
trace_tune() {
    name=$1
    shift
    COCONET_CACHE=$TW/cache COCONET_TRACE=1 timeout "$(left 150)" ./coconet tune "$@" \
        --log "$W/trace-$name.launches.log" >"$W/trace-$name.txt" 2>"$W/trace-$name.err"
    rc=$?
    e=$W/trace-$name.err
    {
        echo "# COCONET_TRACE=1 coconet tune $* (commit ${COMMIT:-?}): exit $rc"
        grep '^tune:' "$W/trace-$name.txt"
        echo "rank 0's seconds by step, summed over the variant runs:"
        grep 'coconet trace: rank 0: ' "$e" | grep ' s$' | grep -v 'host inputs\|runtime: \|launch: ' |
            sed -E 's/.*: ([A-Za-z][A-Za-z ]+) ([0-9.]+) s$/\1\t\2/' |
            awk -F'\t' '{s[$1] += $2; n[$1]++} END {for (k in s) printf "  %-42s %4d %7.2f\n", k, n[k], s[k]}'
        grep 'coconet trace: rank 0: ' "$e" | grep 'host inputs' |
            sed -E 's/.*host inputs ([0-9.]+) s, runtime ([0-9.]+) s, checks ([0-9.]+) s/\1 \2 \3/' |
            awk '{a += $1; b += $2; c += $3; n++} END {printf "  run_one: %d variant runs, host inputs %.2f s, runtime %.2f s, checks %.2f s\n", n, a, b, c}'
        echo "each launch: the launcher's fork to exit, every rank's opening and closing:"
        grep 'coconet trace: launch: \|coconet trace: rank [0-9]*: \(runtime\|launch\): ' "$e" |
            sed 's/^coconet trace: /  /'
    } >>"$OUT/trace.txt"
}
: >"$OUT/trace.txt"
trace_tune self_attention examples/self_attention.coco -D B=8 -D S=1024 -D H=3072 --ranks "$P" \
    --iters 10
trace_tune adam examples/adam.coco -D N=1048576 --ranks "$P" --iters 10
if [ "${EXH:-0}" = 1 ]; then
    EXH_WORKLOADS=${EXH_WORKLOADS:-self_attention mlp pipeline lamb adam}
    [ "$P" -ge 2 ] || EXH_WORKLOADS=$(echo "$EXH_WORKLOADS" | sed 's/pipeline//')
    keep=5
    [ "${TORCH:-1}" = 1 ] && keep=150
    P=$P OUT=$W/quality WORK=$TW BUDGET=$(left $keep) OPT=$EXH_WORKLOADS COLD=0 BUILD=0 WARM=0 \
        TUNE_MAX=${TUNE_MAX:-120} sh bench/tune.sh >"$W/quality.out" 2>&1
    echo "bench/tune.sh EXH PRUNED: exit status $?"
    cp "$W/quality/summary.md" "$OUT/quality.md"
fi
if [ "${TORCH:-1}" = 1 ]; then
    DEADLINE=$(left 5) P=$P PHASES="testsP optim" COMMIT=${COMMIT:-?} sh bench/device/torch.sh \
        >"$W/torch.out" 2>&1
    echo "torch.sh: exit status $?"
fi
cat "$OUT/trace.txt"
grep -A 12 '^| part' "$OUT/summary.md" | head -n 12
[ -f "$OUT/quality.md" ] && grep '^| ' "$OUT/quality.md"
[ -f "$OUT/torch-optim.md" ] && grep '^| ' "$OUT/torch-optim.md"
[ -f "$OUT/torch-tests-p$P.md" ] && grep -c '| PASS |' "$OUT/torch-tests-p$P.md" &&
    grep '| FAIL |' "$OUT/torch-tests-p$P.md" | cut -c 1-300
exit 0

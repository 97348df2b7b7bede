#!/bin/sh
# tests/run.sh: the coconet test suite, run by `make test` after it has built
# ./coconet and the unit tests (build/tests/*). This file is the driver: it
# defines the helpers below and runs each group in tests/groups/, one file a
# group, in the order of their names:
#   unit      every build/tests/* binary must exit 0;
#   errors    every tests/errors/*.coco (and the generated cases) must be
#             refused with status 1 and the expected message;
#   cli       the command line as a newcomer meets it: help, exit statuses,
#             schedule names and the GPU checked before anything runs,
#             messages that name paths and reasons, files that are not
#             regular, `make run`;
#   oracle    every example and tests/oracle/programs/*.coco, for P in 1 2 3 4 8
#             and two seeds, against a numpy re-implementation;
#   roundtrip `coconet print` output prints to itself and runs the same;
#   schedules every program x every enumerated schedule x P matches the program;
#   ragged    the optimizers at sizes not divisible by P (up to 524309),
#             every schedule;
#   fuzz      random programs (tests/fuzz/gen.py; also at uneven sizes) and
#             the kept regressions;
#   fuzz-api  libFuzzer over the C API (tests/fuzz/fuzz_api.c) for FUZZ_SECONDS
#             (60), and its kept crashers; skipped where clang has no libFuzzer;
#   tune      `coconet tune` against a fake timer (tests/tune/*.times): the
#             candidates, pruning, failed checks, the record, --schedule tuned;
#   sanitize  the examples, refusals and random programs under ASan and UBSan;
#   fused-gen the fused collectives and Sends each program's schedules generate
#             (expected kinds: tests/gen/fused/*.expect) and the rules every
#             generated fused kernel keeps;
#   bench     bench/*.coco with all schedules, and bench/plot_fig6.py;
#   scattered programs with Scattered[...] tensors equal their contiguous twins;
#   arith-gen the arithmetic of generated kernels (tests/gen/arith.expect);
#   cuda-gen  the CUDA of every example and schedule compiles (where nvcc is;
#             each variant that repeats another but for its names once);
#   gpu-faults the GPU fault tests' dying ranks (tests/gpu/faults.sh) on the
#             stand-in runtime, without a GPU;
#   pip       `pip install ./python` (the CPU package) into a fresh venv,
#             offline, and `python -m coconet.check` there;
#   layers    the compiler's files include and call one way (tests/layers.py);
#   paths     every repository path a comment or a document names exists
#             (tests/paths.py);
#   shell     every tracked shell script (*.sh, .ci/run) passes shellcheck
#             (skipped where shellcheck is not installed; .ci/run installs it).
# Each group file says more at its top. `ONLY="errors unit" sh tests/run.sh`
# runs the groups named (a new group: a file tests/groups/NN-name.sh whose
# checks call `group name`, then `ok` or `bad MESSAGE` per check, then
# `group_end`).
# The long groups run their cases on every core at once (lanes, below;
# TEST_JOBS=N for another number of lanes), and cuda-gen its nvcc jobs.
# Every coconet call runs under `timeout 60`: a hang or a crash (status >= 128)
# is a failure. Each failure prints one FAIL line; the last line of output is
# "N passed, N failed" and the exit status is non-zero on any failure.

cd "$(dirname "$0")/.." || exit 2
COCONET=./coconet
# These tests are of the CPU backend, also on a machine with GPUs (where the
# default, auto, would pick cuda); the GPU tests are `make test-gpu`.
COCONET_BACKEND=cpu
export COCONET_BACKEND
PYTHON=${PYTHON:-python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/coconet-test.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
# shellcheck disable=SC2034 # a group's counter (oracle)
skip=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# a line per group: "group NAME: N run, N failed[, NOTE] (S s)", S its seconds
group() { gname=$1; gpass=$pass; gfail=$fail; gstart=$(date +%s); }
group_end() {
    echo "group $gname: $((pass - gpass + fail - gfail)) run, $((fail - gfail)) failed${1:+, $1}" \
         "($(($(date +%s) - gstart)) s)"
}

# coco ARGS...: runs coconet under a time limit (and, when $ulimit_v is set,
# with that many KiB of address space: ulimit -v); stdout to $TMP/out, stderr
# to $TMP/err; sets $rc and, for a hang or a crash, $why.
coco() {
    if [ -n "${ulimit_v:-}" ]; then
        # shellcheck disable=SC3045 # dash, bash and busybox sh all have ulimit -v
        (ulimit -v "$ulimit_v" && exec timeout 60 $COCONET "$@") >"$TMP/out" 2>"$TMP/err"
    else
        timeout 60 $COCONET "$@" >"$TMP/out" 2>"$TMP/err"
    fi
    rc=$?
    why=
    if [ $rc -eq 124 ]; then why="timed out after 60 s"
    elif [ $rc -ge 128 ]; then why="crashed (status $rc)"; fi
}

# first line of stderr, for failure messages
err1() { head -n 1 "$TMP/err" | cut -c 1-300; }

# ---- cases on every core ----
# lanes FUNCTION [COUNTER...]: runs FUNCTION in $TEST_JOBS subshells at once
# (default: one a core), each with its own $TMP (under this one) and its
# counts from 0. FUNCTION's loops take each case with `mine || continue`: a
# case is the lane's that reaches it first (mkdir is atomic), so every case
# runs once, on whichever core is free (put the long cases first). When all
# are done, the lanes' output is printed one lane after the other, and their
# pass and fail counts, and the COUNTER variables, are added to this shell's.
TEST_JOBS=${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
lane_runs=0
lanes() {
    lane_fn=$1; shift
    lane_counts="pass fail $*"
    lane_runs=$((lane_runs + 1))
    lane_dir=$TMP/lanes$lane_runs
    mkdir -p "$lane_dir/claims"
    lane_pids=
    lane=0
    while [ $lane -lt "$TEST_JOBS" ]; do
        mkdir -p "$lane_dir/$lane"
        # shellcheck disable=SC2030 # the lane's own TMP, claims and ncase
        (
            TMP=$lane_dir/$lane claims=$lane_dir/claims ncase=0
            for lane_c in $lane_counts; do eval "$lane_c=0"; done
            $lane_fn
            for lane_c in $lane_counts; do eval "echo $lane_c=\$$lane_c"; done >"$TMP/counts"
        ) >"$lane_dir/$lane.log" 2>&1 &
        lane_pids="$lane_pids $!"
        lane=$((lane + 1))
    done
    for lane_pid in $lane_pids; do wait "$lane_pid"; done
    lane=0
    while [ $lane -lt "$TEST_JOBS" ]; do
        cat "$lane_dir/$lane.log"
        if [ -f "$lane_dir/$lane/counts" ]; then
            while IFS='=' read -r lane_c lane_n; do eval "$lane_c=\$(($lane_c + $lane_n))"; done <"$lane_dir/$lane/counts"
        else bad "$lane_fn (lane $lane): ended before its last case"; fi
        lane=$((lane + 1))
    done
    rm -rf "$lane_dir"
}
# shellcheck disable=SC2031 # a lane's claims and ncase
mine() { ncase=$((ncase + 1)); mkdir "$claims/$ncase" 2>/dev/null; }

# run_schedules FILE ARGS...: one check; adds the schedules run to $nsched.
nsched=0
# shellcheck disable=SC2031 # in a lane, the lane's TMP
run_schedules() {
    f=$1; shift
    coco run "$f" --all-schedules "$@"
    if [ -n "$why" ] || [ $rc -ne 0 ]; then
        bad "schedules $f $*: ${why:-exit status $rc}: $(grep -m 1 -e WRONG -e error "$TMP/out" "$TMP/err" | cut -c 1-200)"
        echo "  reproduce: ./coconet run $f --all-schedules $*"
        return
    fi
    nsched=$((nsched + $(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$TMP/out")))
    ok
}

# chained_layers N: a program of N chained Tanh(AllReduce("+", MatMul(x, w)
# * c)) statements, each AllReduce written inline: more schedules than the
# enumeration's cap from 7 layers on (groups schedules and scaling)
chained_layers() {
    awk -v n="$1" 'BEGIN {
        print "Tensor x(FP32, [8,8], Sliced(1), WORLD, RANK);"
        print "Tensor w(FP32, [8,8], Sliced(0), WORLD, RANK);"
        print "Scalar c(FP32, 0.5);"
        print "Var v0 = Tanh(AllReduce(\"+\", MatMul(x, w) * c));"
        for (i = 1; i < n; i++)
            printf "Var v%d = Tanh(AllReduce(\"+\", MatMul(Slice(v%d, 1), w) * c));\n", i, i - 1
        printf "Execute f({x,w}, {v%d});\n", n - 1 }'
}

for g in tests/groups/*.sh; do
    name=$(basename "$g" .sh)
    name=${name#[0-9][0-9]-}
    if [ -n "${ONLY:-}" ]; then
        case " $ONLY " in *" $name "*) ;; *) continue ;; esac
    fi
    # shellcheck disable=SC1090 # one file per group
    . "$g"
done

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]

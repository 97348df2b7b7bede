#!/bin/sh
# tests/run.sh: the coconet test suite, run by `make test` after it has built
# ./coconet and the unit tests (build/tests/*). Four groups:
#   unit      every build/tests/* binary must exit 0;
#   errors    every tests/errors/*.coco (and the generated cases below) must be
#             refused by `coconet check` with status 1 and the expected message;
#   oracle    every examples/*.coco (and tests/oracle/programs/*.coco), for
#             P in 1 2 3 4 8 and two seeds, is run with --dump and compared
#             with an independent numpy re-implementation (tests/oracle/check.py);
#   roundtrip `coconet print` output prints to itself and runs the same;
#   schedules every program x every enumerated schedule x P in 1 2 3 4 8 runs
#             and matches the program (bit for bit, or within rounding);
#   ragged    adam, lamb and sgd_momentum at N = 1 ... 1000003 (not divisible
#             by P: uneven and empty slices) x P in 2 3 4 8 x every schedule;
#   fuzz      200 random programs (tests/fuzz/gen.py) x all their schedules,
#             and the kept regressions (tests/fuzz/regressions/);
#   sanitize  the examples with all their schedules, the refused programs
#             and schedules, and 30 random programs, under ASan and UBSan;
#   fused-gen which fused collectives of adam, lamb, tests/gpu/norms.coco and
#             the scattered adam_scattered, tests/gpu/lamb_scattered.coco and
#             bench/bert_adam_scattered.coco are generated as kernels over the
#             peers' memory (one or two; scattered: over buckets, no gather;
#             each with an instance for one rank, over local memory),
#             and which fused Sends of pipeline and tests/gpu/send.coco as one
#             kernel storing into the receiver (with barriers and the NCCL path);
#   bench     bench/*.coco (but BERT) with all schedules, and bench/plot_fig6.py on a
#             synthetic CSV (tests/bench/check_plot.py, where python3 is) and
#             on unchecked rows (--reference none);
#   scattered programs with Scattered[...] tensors equal their contiguous
#             twins bit for bit (every schedule); their CUDA compiles;
#   cuda-gen  the CUDA source of every example (and tests/gpu/norms.coco,
#             tests/gpu/send.coco, tests/gpu/lamb_scattered.coco,
#             tests/oracle/programs/ragged.coco) and all its schedules has one
#             workspace layout on every rank (tests/gen/workspace.py) and,
#             where nvcc is installed, compiles (object code only); the PTX
#             of four (a one-shot AllReduce, scattered tensors, LAMB) loads
#             and stores every vector whole (tests/gen/split_vectors.py).
# Every coconet call runs under `timeout 60`: a hang or a crash (status >= 128)
# is a failure. Each failure prints one FAIL line; the last line of output is
# "N passed, N failed" and the exit status is non-zero on any failure.
#
# Error test headers (first lines of the file):
#   // expect: SUBSTRING    required: stderr must contain it
#   // args: ARGS           optional: extra coconet arguments (-D N=0 --ranks 3)
#   // line: N              optional: stderr must contain "FILE:N:"
#   // noline               the message has no position (command-line errors)
#   // command: run         optional: run `coconet run` instead of `coconet check`
# Without "line" or "noline", stderr must start with "FILE:LINE:COL: error: ".

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
skip=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# a line per group: "group NAME: N run, N failed"
group() { gname=$1; gpass=$pass; gfail=$fail; }
group_end() {
    echo "group $gname: $((pass - gpass + fail - gfail)) run, $((fail - gfail)) failed${1:+, $1}"
}

# coco ARGS...: runs coconet under a time limit; stdout to $TMP/out, stderr to
# $TMP/err; sets $rc and, for a hang or a crash, $why.
coco() {
    timeout 60 $COCONET "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    why=
    if [ $rc -eq 124 ]; then why="timed out after 60 s"
    elif [ $rc -ge 128 ]; then why="crashed (status $rc)"; fi
}

# first line of stderr, for failure messages
err1() { head -n 1 "$TMP/err" | cut -c 1-300; }

# ---- unit tests ----
group unit
for t in build/tests/*; do
    if [ ! -f "$t" ] || [ ! -x "$t" ]; then continue; fi
    timeout 60 "$t" >"$TMP/unit.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then ok; else
        bad "unit $t exited with status $rc:"
        grep -i 'fail' "$TMP/unit.out" | head -n 20
    fi
done
group_end

# ---- error tests ----
check_error() {
    f=$1
    head -n 5 "$f" >"$TMP/head"
    expect=$(sed -n '1s|^// expect: ||p' "$TMP/head")
    args=$(sed -n 's|^// args: ||p' "$TMP/head")
    line=$(sed -n 's|^// line: ||p' "$TMP/head")
    noline=$(grep -c '^// noline' "$TMP/head")
    cmd=$(sed -n 's|^// command: ||p' "$TMP/head")
    if [ -z "$expect" ]; then bad "$f: the first line is not '// expect: MESSAGE'"; return; fi
    set -f
    # shellcheck disable=SC2086 # args are words
    coco "${cmd:-check}" "$f" $args
    set +f
    if [ -n "$why" ]; then bad "$f: coconet ${cmd:-check} $why: $(err1)"; return; fi
    if [ $rc -ne 1 ]; then bad "$f: exit status $rc, expected 1 ($(err1))"; return; fi
    if ! grep -F -q -- "$expect" "$TMP/err"; then
        bad "$f: expected '$expect', got: $(err1)"; return
    fi
    if [ -n "$line" ]; then
        if ! head -n 1 "$TMP/err" | grep -F -q -- "$f:$line:"; then
            bad "$f: expected the error at line $line, got: $(err1)"; return
        fi
    elif [ "$noline" -eq 0 ]; then
        if ! head -n 1 "$TMP/err" | grep -q "^$f:[0-9][0-9]*:[0-9][0-9]*: error: "; then
            bad "$f: the message has no FILE:LINE:COL: position: $(err1)"; return
        fi
    fi
    ok
}

# repeat STRING COUNT: STRING written COUNT times
repeat() { awk -v s="$1" -v n="$2" 'BEGIN { for (i = 0; i < n; i++) printf "%s", s }'; }

gen=$TMP/errors
mkdir -p "$gen"
# binary garbage: bytes that are not text, after a valid first statement
printf '// expect: unexpected byte 0xff (is this a text file?)\n// line: 4\nSize N = 4;\n\377\376\001\200\233garbage\n' >"$gen/binary_garbage.coco"
printf '// expect: unexpected byte 0x01\n// line: 3\n\001\002\003\004\005\006\007\010\016\017\020\021\022\023\024\025\026\027\030\031\032\033\034\035\036\037\177\n' >"$gen/binary_control.coco"
printf '// expect: unexpected byte 0xc3\n// line: 3\nTensor caf\303\251(FP32, [4], Replicated, WORLD);\n' >"$gen/binary_utf8_name.coco"
# a NUL byte: the whole file is refused, with no position
printf '// expect: the file contains a NUL byte\n// noline\nSize N\000 = 4;\nTensor x(FP32, [N], Replicated, WORLD);\nExecute p({x}, {x});\n' >"$gen/binary_nul.coco"
# nesting 10000 deep: a clean error, not a stack overflow
deep() { # name prefix open close
    { printf '// expect: nested too deeply\n// line: 4\nTensor x(FP32, [4], Replicated, WORLD);\n'
      printf 'Var y = %s' "$2"; repeat "$3" 10000; printf 'x'; repeat "$4" 10000
      printf ';\nExecute p({x}, {y});\n'; } >"$gen/$1.coco"
}
deep deep_parentheses '' '(' ')'
deep deep_unary_minus '' '-' ''
deep deep_calls '' 'Tanh(' ')'
deep deep_mixed '1 + ' '(x * -' ')'
{ printf '// expect: nested too deeply\n// line: 3\nTensor x(FP32, ['; repeat '(' 10000; printf '4'; repeat ')' 10000
  printf '], Replicated, WORLD);\nExecute p({x}, {x});\n'; } >"$gen/deep_size.coco"
# a name of 100000 characters
{ printf '// expect: name is too long (100000 characters, at most 63)\n// line: 4\nTensor x(FP32, [4], Replicated, WORLD);\nVar '
  repeat 'abcdefghij' 10000; printf ' = x + 1;\nExecute p({x}, {x});\n'; } >"$gen/name_huge.coco"

group errors
for f in tests/errors/*.coco "$gen"/*.coco; do
    check_error "$f"
done
group_end

# ---- oracle: examples (and extra programs) against numpy ----
group oracle
if ! $PYTHON -c 'import numpy' 2>/dev/null; then
    # (a Debian python refuses pip installs unless told to: PEP 668)
    $PYTHON -m pip install --quiet -r tests/requirements.txt >"$TMP/pip.out" 2>&1 ||
        PIP_BREAK_SYSTEM_PACKAGES=1 $PYTHON -m pip install --quiet -r tests/requirements.txt \
            >"$TMP/pip.out" 2>&1 ||
        { echo "pip install numpy failed:"; tail -n 5 "$TMP/pip.out"; }
fi
if $PYTHON -c 'import numpy' 2>/dev/null; then
    mkdir -p "$TMP/oracle"
    for f in examples/*.coco tests/oracle/programs/*.coco; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .coco)
        for P in 1 2 3 4 8; do
            coco check "$f" --ranks "$P"
            if [ $rc -eq 1 ] && grep -q -e 'divisible' -e 'does not divide' -e 'is not a rank of' "$TMP/err"; then
                skip=$((skip + 1)); continue
            fi
            if [ -n "$why" ] || [ $rc -ne 0 ]; then
                bad "$f --ranks $P: check failed ${why:-with status $rc}: $(err1)"; continue
            fi
            for seed in 1 20240611; do
                dir=$TMP/oracle/$name.p$P.s$seed
                repro="./coconet run $f --ranks $P --seed $seed --dump /tmp/dump && $PYTHON tests/oracle/check.py $f /tmp/dump --seed $seed"
                coco run "$f" --ranks "$P" --seed "$seed" --dump "$dir"
                if [ -n "$why" ] || [ $rc -ne 0 ]; then
                    bad "$f --ranks $P --seed $seed: run ${why:-exited with status $rc}: $(err1)"
                    echo "  reproduce: $repro"; continue
                fi
                if $PYTHON tests/oracle/check.py "$f" "$dir" --seed "$seed" >"$TMP/oracle.out" 2>&1; then
                    ok
                else
                    bad "$f --ranks $P --seed $seed: the oracle disagrees:"
                    head -n 8 "$TMP/oracle.out" | sed 's/^/  /'
                    echo "  reproduce: $repro"
                fi
            done
        done
    done
else
    bad "oracle: python3 with numpy is not available (pip install -r tests/requirements.txt)"
fi
group_end "$skip program x P combinations skipped (P not allowed by the program's sizes, groups or roots)"

# ---- printer round trip ----
# What must agree: the run's summary up to its "time" line (the program name
# and one line per output); the time and any schedule comparison after it
# are left out (the printer does not print schedules).
summary() { sed -e '/^time /,$d' "$1"; }
group roundtrip
for f in examples/*.coco tests/oracle/programs/*.coco tests/roundtrip/*.coco; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .coco)
    a=$TMP/$name.a.coco
    b=$TMP/$name.b.coco
    coco print "$f"
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "roundtrip $f: print ${why:-exited with status $rc}: $(err1)"; continue; fi
    cp "$TMP/out" "$a"
    coco print "$a"
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "roundtrip $f: the printed program does not print: $(err1)"; continue; fi
    cp "$TMP/out" "$b"
    if ! cmp -s "$a" "$b"; then
        bad "roundtrip $f: printing the printed program changes it:"
        diff "$a" "$b" | head -n 10 | sed 's/^/  /'; continue
    fi
    coco run "$f"
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "roundtrip $f: run ${why:-exited with status $rc}: $(err1)"; continue; fi
    summary "$TMP/out" >"$TMP/run.f"
    coco run "$a"
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "roundtrip $f: run of the printed program ${why:-exited with status $rc}: $(err1)"; continue; fi
    summary "$TMP/out" >"$TMP/run.a"
    if cmp -s "$TMP/run.f" "$TMP/run.a"; then ok; else
        bad "roundtrip $f: the printed program runs differently:"
        diff "$TMP/run.f" "$TMP/run.a" | head -n 10 | sed 's/^/  /'
    fi
done

group_end

# ---- schedules: every program x every enumerated schedule x P ----
# `coconet run --all-schedules` runs the program and each schedule and exits 1
# when a schedule's outputs or Updated state differ from the program's beyond
# rounding (judged against an FP64 evaluation: see coco_run_compare).
# run_schedules FILE ARGS...: one check; adds the schedules run to $nsched.
nsched=0
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
group schedules
sskip=0
for f in examples/*.coco tests/oracle/programs/*.coco; do
    [ -f "$f" ] || continue
    for P in 1 2 3 4 8; do
        coco check "$f" --ranks "$P"
        if [ $rc -eq 1 ] && grep -q -e 'divisible' -e 'does not divide' -e 'is not a rank of' "$TMP/err"; then
            sskip=$((sskip + 1)); continue
        fi
        run_schedules "$f" --ranks "$P"
    done
done
group_end "$nsched schedule runs checked, $sskip program x P combinations skipped"

# ---- uneven slices: sizes that do not divide among the ranks ----
# Every schedule of the optimizers at sizes from 1 (fewer elements than
# ranks: empty slices) to 1000003, none divisible by every P: each must run
# and match the program, and as many schedules must apply as at N = 1008
# (divisible by 2, 3, 4 and 8): none may be refused for the size.
group ragged
nsched=0
for f in examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco; do
    for P in 2 3 4 8; do
        coco schedules "$f" -D N=1008 --ranks "$P"
        want=$(grep -c '^Schedule ' "$TMP/out")
        for N in 1 2 3 5 1001 1000003; do
            coco schedules "$f" -D "N=$N" --ranks "$P"
            got=$(grep -c '^Schedule ' "$TMP/out")
            if [ "$got" -eq "$want" ] && [ "$want" -gt 1 ]; then ok; else
                bad "schedules $f -D N=$N --ranks $P: $got schedules, $want at N=1008"
            fi
            run_schedules "$f" -D "N=$N" --ranks "$P"
        done
    done
done
group_end "$nsched schedule runs checked"

# ---- fuzz: random well-formed programs x all their schedules ----
# tests/fuzz/gen.py SEED writes a program whose first line gives its ranks and
# data seed; failures found once are kept in tests/fuzz/regressions/.
group fuzz
nsched=0
mkdir -p "$TMP/fuzz"
for seed in $(seq 1 ${FUZZ_PROGRAMS:-200}); do
    f=$TMP/fuzz/seed$seed.coco
    $PYTHON tests/fuzz/gen.py "$seed" >"$f" || { bad "fuzz: gen.py $seed failed"; continue; }
    args=$(sed -n 's|^// args: ||p' "$f")
    set -f
    # shellcheck disable=SC2086 # args are words
    coco run "$f" --all-schedules $args
    set +f
    if [ -n "$why" ] || [ $rc -ne 0 ]; then
        bad "fuzz seed $seed: ${why:-exit status $rc}: $(grep -m 1 -e WRONG -e error "$TMP/out" "$TMP/err" | cut -c 1-200)"
        echo "  reproduce: $PYTHON tests/fuzz/gen.py $seed > /tmp/fuzz.coco && ./coconet run /tmp/fuzz.coco --all-schedules $args"
        continue
    fi
    nsched=$((nsched + $(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$TMP/out")))
    ok
done
for f in tests/fuzz/regressions/*.coco; do
    [ -f "$f" ] || continue
    args=$(sed -n 's|^// args: ||p' "$f")
    set -f
    # shellcheck disable=SC2086 # args are words
    run_schedules "$f" $args
    set +f
done
group_end "$nsched schedule runs checked"

# ---- sanitizers: the examples, their schedules and refusals under ASan/UBSan ----
group sanitize
if [ -x build/asan/coconet ]; then
    mkdir -p "$TMP/asan"
    for seed in $(seq 1 30); do
        $PYTHON tests/fuzz/gen.py "$seed" >"$TMP/asan/seed$seed.coco"
    done
    for f in examples/*.coco tests/errors/sched_*.coco tests/errors/shape_*.coco "$TMP"/asan/*.coco; do
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 UBSAN_OPTIONS=halt_on_error=1:exitcode=86 \
            timeout 120 build/asan/coconet run "$f" --all-schedules >"$TMP/out" 2>"$TMP/err"
        rc=$?
        if [ $rc -eq 86 ] || [ $rc -ge 124 ] || grep -q -e 'runtime error' -e 'Sanitizer' "$TMP/err"; then
            bad "sanitize $f: status $rc: $(grep -m 1 -e 'runtime error' -e 'Sanitizer' -e ERROR "$TMP/err" | cut -c 1-200)"
        else
            ok
        fi
    done
    group_end
else
    group_end "skipped: build/asan/coconet was not built"
fi

# ---- which fused collectives become kernels over the peers' memory ----
# (src/emit_lsa.c, src/emit_send.c; generation only, no nvcc): "VARIANT
# one|two" per FusedAllReduce and "VARIANT send" per fused Send generated so,
# compared with the expected list. Over scattered tensors nearly every
# variant has one: an AllReduce no schedule fused, or a ReduceScatter whose
# only reader is an AllGather, is generated as a FusedAllReduce with no
# computation (src/lower_scattered.c).
group fused-gen
fused_kinds() {
    awk '/^\/\/ =+ .*: .* =+$/ { v = $4 }
         /^\/\/ FusedAllReduce .* as two kernels/ { print v, "two" }
         /^\/\/ FusedAllReduce .* as one kernel/ { print v, "one" }
         /^\/\/ fused Send .* as one kernel/ { print v, "send" }' "$1"
}
for c in "examples/lamb.coco|fuse_RS_AG_Opt one,fuse_RS_Opt_AG two,fuse_RS_Opt_AG_2 two,fuse_RS_Opt_AG_3 two,fuse_RS_Opt_AG_4 two" \
         "tests/gpu/norms.coco|fuse_RS_AG_Opt one,fuse_RS_Opt_AG two" \
         "examples/adam.coco|paper one,fuse_RS_AG_Opt one,fuse_RS_Opt_AG one,fuse_RS_Opt_AG_2 one,fuse_RS_Opt_AG_3 one,fuse_RS_Opt_AG_4 one" \
         "examples/pipeline.coco|paper send,AR_fuse_C_P2P send,RS_AG_fuse_C_P2P send,AR_AG_fuse_C_P2P send,ol_AR_fuse_C_P2P send,RS_fuse_C_P2P_AG send,fuse_RS_AG_fuse_C_P2P send,RS_fuse_C_P2P_AG_2 send,fuse_RS_AG_fuse_C_P2P_2 send,ol_RS_AG_fuse_C_P2P send,ol_RS_AG_fuse_C_P2P_2 send,RS_ol_AG_fuse_C_P2P send,AR_fuse_C_P2P_AG send,AR_fuse_C_P2P_AG_2 send,AR_ol_AG_fuse_C_P2P send,RS_ol_fuse_C_P2P_AG send,ol_RS_fuse_C_P2P_AG send,ol_RS_fuse_C_P2P_AG_2 send,ol_fuse_RS_AG_fuse_C_P2P send,RS_ol_fuse_C_P2P_AG_2 send,ol_RS_fuse_C_P2P_AG_3 send,ol_RS_fuse_C_P2P_AG_4 send,ol_fuse_RS_AG_fuse_C_P2P_2 send,AR_ol_fuse_C_P2P_AG send,AR_ol_fuse_C_P2P_AG_2 send" \
         "tests/gpu/send.coco|both send,both send" \
         "examples/adam_scattered.coco|program one,paper one,AR_Opt one,RS_AG_Opt one,AR_AG_Opt one,fuse_RS_AG_Opt one,AR_Opt_AG one,fuse_RS_Opt_AG one,AR_Opt_AG_2 one,AR_Opt_AG_3 one,fuse_RS_Opt_AG_2 one,fuse_RS_Opt_AG_3 one,AR_Opt_AG_4 one,fuse_RS_Opt_AG_4 one" \
         "tests/gpu/lamb_scattered.coco|program one,AR_Opt one,RS_AG_Opt one,AR_AG_Opt one,fuse_RS_AG_Opt one,AR_Opt_AG one,fuse_RS_Opt_AG two,AR_Opt_AG_2 one,AR_Opt_AG_3 one,fuse_RS_Opt_AG_2 two,fuse_RS_Opt_AG_3 two,AR_Opt_AG_4 one,fuse_RS_Opt_AG_4 two" \
         "bench/bert_adam_scattered.coco|program one,fusedComp one,paper one,AR_Opt one,RS_AG_Opt one,AR_AG_Opt one,fuse_RS_AG_Opt one,AR_Opt_AG one,fuse_RS_Opt_AG one,AR_Opt_AG_2 one,AR_Opt_AG_3 one,fuse_RS_Opt_AG_2 one,fuse_RS_Opt_AG_3 one,AR_Opt_AG_4 one,fuse_RS_Opt_AG_4 one"; do
    f=${c%%|*}
    rm -rf "$TMP/fused"
    coco gen "$f" -o "$TMP/fused" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen $f: ${why:-exit status $rc}: $(err1)"; continue; fi
    cu=$(ls "$TMP"/fused/*.cu | head -n 1)
    got=$(fused_kinds "$cu" | paste -sd, -)
    if [ "$got" = "${c#*|}" ]; then ok; else bad "fused kernels of $f: got '$got', expected '${c#*|}'"; fi
    # every two-kernel fusion exchanges its ranks' folds and ends on a barrier
    two=$(grep -c 'as two kernels' "$cu")
    ex=$(grep -c 'coco_lsa_peer_fold<P>' "$cu")
    if [ "$two" -eq 0 ] || [ "$ex" -ge "$two" ]; then ok; else bad "$f: $two two-kernel fusions, $ex exchanges"; fi
    # one rank: every fused launch can take its kernels (no window, no
    # device communicator: coco_lsa_devcomm gives zeros), whose _go has an
    # instance for P = 1 at each V, and every kernel's barrier is
    # CocoLsaBarrier<P> (none at P = 1) and every peer address coco_lsa_ptr<P>
    fused_launches=$(grep -c '^    { /\* line [0-9]*: FusedAllReduce ' "$cu")
    one_rank=$(grep -c ' && (G_WORLD == 1 || G_WORLD == 2 || G_WORLD == 4 || G_WORLD == 8)) {$' "$cu")
    devcomms=$(grep -c '^        ncclDevComm dc = coco_lsa_devcomm(ctx);$' "$cu")
    gos=$(grep -c '^static int v[0-9]*_f[0-9]*_go(' "$cu")
    p1=$(awk '/^static int v[0-9]+_f[0-9]+_go\(/ { on = 1; n = 0 } on && /^    if \(V == [0-9]+ && P == 1\) \{$/ { n++ }
              on && /^}/ { on = 0; if (n >= 1) k++ } END { print k + 0 }' "$cu")
    fkernels=$(awk '/^__global__ void .*_f[0-9]+(_b)?\(/ { n++ } END { print n + 0 }' "$cu")
    bars=$(grep -c '^    CocoLsaBarrier<P> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};$' "$cu")
    direct=$(grep -c 'ncclGetLsaPointer\|ncclLsaBarrierSession' "$cu")
    if [ "$one_rank" -eq "$fused_launches" ] && [ "$devcomms" -eq "$fused_launches" ] &&
        [ "$p1" -eq "$gos" ] && [ "$bars" -eq "$fkernels" ] && [ "$direct" -eq 0 ]; then ok
    else bad "$f: $fused_launches fused launches, $one_rank for one rank, $devcomms with coco_lsa_devcomm; $gos dispatchers, $p1 with P = 1 instances; $fkernels kernels, $bars CocoLsaBarrier<P>; $direct direct NCCL peer addresses or barriers"; fi
    # the autotuner's knobs reach every fused launch: vector width and the
    # peers' loads in flight (ctx->fused_vec, ctx->fused_peers), each value
    # with a kernel instance
    launches=$(grep -c '^    { /\* line [0-9]*: FusedAllReduce ' "$cu")
    peers=$(grep -c '_go(V, (int)G_WORLD, one, \(fpush[0-9]* ? 0 : \)\{0,1\}ctx->fused_peers, ' "$cu")
    vecs=$(grep -c 'int V = .*ctx->fused_vec' "$cu")
    sends=$(grep -c '^// fused Send .* as one kernel' "$cu")
    u1=$(grep -c '&& U == 1 && PUSH == 0) {$' "$cu")
    if [ "$peers" -eq "$launches" ] && [ "$vecs" -eq $((launches + sends)) ] &&
        { [ "$launches" -eq 0 ] || [ "$u1" -gt 0 ]; }; then ok
    else bad "$f: $launches fused launches, $peers with fused_peers, $vecs V choices with fused_vec ($sends Sends), $u1 U=1 instances"; fi
    # the push algorithm: every launch over contiguous operands can take it
    # (its choice passed, an instance generated), one-kernel fusions by
    # size, two-kernel ones (cross-rank reductions) when asked
    # (COCONET_FUSED=push) and then in rounds (their steps passed:
    # coco_lsa_push_round; the next round's stores before a round's
    # elements, the barrier after); over scattered operands only when
    # asked, and not with cross-rank reductions
    pushes=$(grep -c '_go(V, (int)G_WORLD, one, fpush[0-9]* ? 0 : ctx->fused_peers, fpush[0-9]*, ' "$cu")
    instances=$(grep -c '&& PUSH == 1) {$' "$cu")
    by_size=$(grep -c 'coco_lsa_pushes(ctx, 1, ' "$cu")
    asked=$(grep -c 'coco_lsa_pushes(ctx, ctx->fused_algo == COCO_FUSED_PUSH, ' "$cu")
    rounds=$(grep -c '^    coco_lsa_rounds<V>(cs, rsteps, steps, rounds);$' "$cu")
    knobs=$(grep -c ', coco_lsa_push_round(ctx)[,)]' "$cu")
    ahead=$(awk '/^    if \(r \+ 1 < rounds\) \/\* round r \+ 1.s stores, while round r computes \*\/$/ { s = NR }
                 /^        coco_lsa_push_parts<V, [A-Z0-9_]+, P>\(win, o[0-9]+, ost, rank, cs, nall, r \+ 1, steps\);$/ && s == NR - 1 { p++ }
                 /^    if \(r \+ 1 < rounds\) \/\* round r \+ 1.s stores seen by the peers \*\/$/ { b = NR }
                 /^        bar.sync\(ncclCoopCta\(\), cuda::memory_order_acq_rel\);$/ && b == NR - 1 { q++ }
                 END { print (p < q ? p : q) + 0 }' "$cu")
    case $f in
    *scattered*) want=$((launches - two)) want_asked=$want want_rounds=0 ;;
    *) want=$launches want_asked=$two want_rounds=$two ;;
    esac
    if [ "$pushes" -eq "$want" ] && { [ "$want" -eq 0 ] || [ "$instances" -gt 0 ]; } &&
        [ "$asked" -eq "$want_asked" ] && [ "$by_size" -eq $((want - want_asked)) ] &&
        [ "$rounds" -eq "$want_rounds" ] && [ "$knobs" -eq "$want_rounds" ] && [ "$ahead" -eq "$want_rounds" ]; then ok
    else bad "$f: $launches fused launches, $pushes able to push (expected $want), $instances push instances, $by_size by size, $asked when asked (expected $want_asked), $rounds in rounds, $knobs given the round, $ahead pipelined (expected $want_rounds)"; fi
    # every one-kernel Send syncs before and after its stores, and keeps its
    # NCCL lowering (the run-time fallback) in the same entry point
    sends=$(grep -c '^// fused Send .* as one kernel' "$cu")
    bars=$(grep -c 'CocoSendSync<PEER> xfer(dc);' "$cu")
    ends=$(grep -c 'xfer.finish();' "$cu")
    falls=$(awk '/^    [{] [/][*] line [0-9]+: fused Send / { inb = 1; nccl = 0 }
                 inb && /ncclSend\(/ { nccl = 1 }
                 inb && /^    } [/][*] fused Send / { n += nccl; inb = 0 }
                 END { print n + 0 }' "$cu")
    if [ "$sends" -eq "$bars" ] && [ "$sends" -eq "$ends" ] && [ "$falls" -eq "$sends" ]; then ok
    else bad "$f: $sends one-kernel Sends, $bars start barriers, $ends end barriers, $falls fallbacks"; fi
    # over scattered tensors every kernel takes buckets through the one walk
    # (coco_lsa_scat_walk; each part's first bucket found on the host), and
    # the kernels' path copies nothing between members and one buffer (an
    # output that is an updated tensor's new value included: it is computed
    # into the members, and a caller's buffer is filled at the end)
    case $f in *scattered*)
        kernels=$(awk '/^__global__ void .*_f[0-9]+(_b)?\(/ { n++ } END { print n + 0 }' "$cu")
        buckets=$(grep -c 'coco_lsa_scat_walk<V>(sc, pb.first\[part\], base, n,$' "$cu")
        parts=$(grep -c 'CocoLsaParts pb = coco_lsa_parts(' "$cu")
        fcopies=$(awk '/FusedAllReduce .* \*\/$/ { on = 1 } on && /} else {$/ { on = 0 }
                       on && /coco_scat_copy\(/ { n++ } END { print n + 0 }' "$cu")
        if [ "$kernels" -gt 0 ] && [ "$buckets" -eq "$kernels" ] && [ "$parts" -ge 1 ] && [ "$fcopies" -eq 0 ]; then ok
        else bad "$f: $kernels fused kernels, $buckets over buckets, $parts part tables, $fcopies copies on the kernels' path"; fi
        # a ReduceScatter of a scattered tensor, or an AllGather into one,
        # outside fusions: one kernel over the members beside its NCCL path
        # (coco_lsa_scat_launch), whose path copies nothing
        blocks=$(grep -c '^    { /\* line [0-9]*: [A-Za-z0-9_]* = \(ReduceScatter\|AllGather\) \*/$' "$cu")
        launches=$(grep -c 'if (coco_lsa_scat_launch<' "$cu")
        copies=$(awk '/if [(]coco_lsa_scat_usable[(]/ { on = 1 } on && /} else [{]/ { on = 0 }
                      on && /coco_scat_copy[(]/ { n++ } END { print n + 0 }' "$cu")
        # nor does any entry point gather a member list at its start (an
        # FP32 gradient, lamb_scattered's, is gathered in the NCCL paths)
        starts=$(awk '/COCO_FAIL[(]ctx, "workspace"/ { on = 1; next } on && /^    ([{] )?[/][*] line/ { on = 0 }
                      on && /coco_scat_copy[(].*, 0[)][)]$/ { n++ } END { print n + 0 }' "$cu")
        if [ "$launches" -gt 0 ] && [ "$launches" -le "$blocks" ] && [ "$copies" -eq 0 ] && [ "$starts" -eq 0 ]; then ok
        else bad "$f: $blocks ReduceScatter/AllGather blocks, $launches over the members, $copies copies on their path, $starts gathers at the start"; fi ;;
    *)  if ! grep -q 'coco_lsa_scat_launch<' "$cu"; then ok
        else bad "$f: a ReduceScatter or AllGather over members in a program without scattered tensors"; fi
        # every element loop of a contiguous fused kernel starts at the
        # shift that aligns the peers' vectors (coco_lsa_first, or the
        # round's span from it: coco_lsa_round_span), and its part-local
        # arrays are read and written at any alignment
        loops=$(awk '/^__global__ void .*_f[0-9]+(_b)?\(/ { on = 1 } on && /^}/ { on = 0 }
                     on && /for \(long [ij]0 = / { n++ } END { print n + 0 }' "$cu")
        shifted=$(awk '/for \(long j0 = coco_lsa_first<V>\(base\); j0 < n; j0 \+= coco_lsa_stride<V>\(\)\) \{$/ { n++ }
                       /^        coco_lsa_round_span<V>\(base, n, r, steps, jb, je\);$/ { span = NR }
                       /^        for \(long j0 = jb; j0 < je; j0 \+= coco_lsa_stride<V>\(\)\) \{$/ && span == NR - 1 { n++ }
                       END { print n + 0 }' "$cu")
        locals=$(grep -c 'coco_[ls]tv<V, [A-Z0-9_]*>([xyc][0-9]*, i0, lim, ' "$cu")
        if { [ "$launches" -eq 0 ] || [ "$loops" -gt 0 ]; } && [ "$shifted" -eq "$loops" ] &&
            [ "$locals" -eq 0 ]; then ok
        else bad "$f: $loops element loops in fused kernels, $shifted from the shift, $locals part-local accesses needing alignment"; fi ;;
    esac
    rm -rf "$TMP/fused"
done
# an AllReduce over a scattered tensor that no schedule fuses, inline in a
# statement or not, is a FusedAllReduce kernel in the program itself
coco gen tests/gpu/scattered_inline.coco -o "$TMP/fused"
if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen scattered_inline.coco: ${why:-exit status $rc}: $(err1)"
else
    got=$(fused_kinds "$TMP/fused/twostep.cu" | paste -sd, -)
    if [ "$got" = "program one,program one" ]; then ok
    else bad "scattered_inline.coco: fused kernels '$got', expected 'program one,program one'"; fi
fi
rm -rf "$TMP/fused"
group_end
# ---- the benchmark's programs and plot ----
# bench/*.coco run with all their schedules on the CPU backend (P = 4) and
# match their programs; bench/plot_fig6.py draws the expected SVG from a
# synthetic CSV (tests/bench/check_plot.py, where python3 is installed) and
# takes unchecked rows (--reference none) as timings.
group bench
for f in bench/*.coco; do
    case $f in bench/bert_*) continue ;; esac # BERT-large's size: in group scattered, smaller
    coco run "$f" --ranks 4 --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "run $f --all-schedules: ${why:-exit status $rc}: $(err1)"
    else ok; fi
done
for sh in bench/fused.sh bench/scattered.sh; do
    if sh -n "$sh" 2>"$TMP/err"; then ok; else bad "$sh: $(err1)"; fi
done
if command -v "$PYTHON" >/dev/null 2>&1; then
    if timeout 60 "$PYTHON" tests/bench/check_plot.py >"$TMP/plot.out" 2>&1; then ok; else
        bad "tests/bench/check_plot.py:"; head -n 20 "$TMP/plot.out" | sed 's/^/  /'
    fi
    # rows timed with --reference none (result unchecked) are timings; a
    # failed check (REPLICAS) is not
    printf '%s\n' "tool,program,optimizer,precision,N,variant,schedule,result,ms" \
        "coconet,adam_fp32,adam,fp32,1073741824,AR_Opt,AR-Opt,unchecked,40.0" \
        "coconet,adam_fp32,adam,fp32,1073741824,fuse_RS_Opt_AG,fuse(RS-Opt-AG),REPLICAS,1.0" \
        "torch,torch_adam,adam,fp32,1073741824,allreduce+fused_adam,baseline,measured,80.0" \
        >"$TMP/unchecked.csv"
    timeout 60 "$PYTHON" bench/plot_fig6.py "$TMP/unchecked.csv" -o "$TMP/unchecked.svg" \
        >"$TMP/plot.out" 2>&1
    got=$(grep '^adam-fp32,' "$TMP/plot.out" | paste -sd ' ' -)
    if [ "$got" = "adam-fp32,2^30,AR-Opt,2.000" ]; then ok; else
        bad "plot_fig6.py with unchecked rows: got '$got', expected 'adam-fp32,2^30,AR-Opt,2.000'"
    fi
    group_end
else
    group_end "plot skipped: no $PYTHON"
fi
# ---- scattered tensors: the same results as one contiguous tensor ----
# Each program with Scattered[...] tensors runs, with all its schedules, bit
# for bit like its twin in which every scattered tensor is one tensor of the
# members' total size (Scattered[a, b, c] -> [a+b+c]).
group scattered
mkdir -p "$TMP/gen"
for spec in "examples/adam_scattered.coco" "examples/adam_scattered.coco -D W=41" \
            "tests/gpu/lamb_scattered.coco -D W=41" "bench/bert_adam_scattered.coco -D H=16 -D V=66 -D S=8" \
            "tests/gpu/scattered_inline.coco -D W=41"; do
    set -f
    # shellcheck disable=SC2086 # spec is words
    set -- $spec
    set +f
    f=$1; shift
    sed -E ':a; s/Scattered\[([^],]*),/Scattered[\1+/; ta; s/Scattered\[/[/g' "$f" >"$TMP/twin.coco"
    for P in 2 4; do
        coco run "$f" --ranks "$P" --all-schedules "$@"
        if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "scattered $f --ranks $P: ${why:-exit status $rc}: $(err1)"; continue; fi
        sed -n '1,/^time /p' "$TMP/out" | grep -v '^time ' >"$TMP/scat.sum"
        coco run "$TMP/twin.coco" --ranks "$P" --all-schedules "$@"
        if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "scattered twin of $f --ranks $P: ${why:-exit status $rc}: $(err1)"; continue; fi
        sed -n '1,/^time /p' "$TMP/out" | grep -v '^time ' >"$TMP/twin.sum"
        if cmp -s "$TMP/scat.sum" "$TMP/twin.sum"; then ok; else
            bad "scattered $f --ranks $P: differs from its contiguous twin:"; diff "$TMP/scat.sum" "$TMP/twin.sum" | head -n 6
        fi
    done
done
# the CUDA of a scattered program compiles (the cuda-gen group has the
# example), as the runtime builds it for a run on 4 ranks (COCO_ONLY_P,
# src/cuda_build.c): the fused kernels' and the scattered collectives'
# instances for 4 ranks, none for 1, 2 or 8; and LAMB's for one rank (its
# fused kernels, one and two of them, and collectives over members, over
# local memory), none for 2, 4 or 8
if command -v nvcc >/dev/null 2>&1; then
    coco gen bench/bert_adam_scattered.coco -o "$TMP/gen/bert" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen bench/bert_adam_scattered.coco: ${why:-exit status $rc}: $(err1)"
    elif (cd "$TMP/gen/bert" && timeout 300 nvcc -O1 -std=c++17 -Werror all-warnings \
            -DCOCO_ONLY_P=4 -c ./*.cu -o generated.o) >"$TMP/nvcc.out" 2>&1; then
        nm -C "$TMP/gen/bert/generated.o" >"$TMP/nm.out" 2>&1
        fused='_f[0-9]+(_b)?<[0-9]+, ' scat='coco_lsa_scat_collective<[0-9]+, [0-9]+, [0-9]+, '
        if grep -q -E "$fused"'4,' "$TMP/nm.out" && grep -q -E "$scat"'4,' "$TMP/nm.out" &&
            ! grep -q -E "($fused|$scat)[128]," "$TMP/nm.out"; then ok
        else bad "bench/bert_adam_scattered.coco with COCO_ONLY_P=4: other instances than for 4 ranks"; fi
    else bad "nvcc bench/bert_adam_scattered.coco:"; head -n 10 "$TMP/nvcc.out" | sed 's/^/  /'; fi
    coco gen tests/gpu/lamb_scattered.coco -o "$TMP/gen/lamb1" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen tests/gpu/lamb_scattered.coco: ${why:-exit status $rc}: $(err1)"
    elif (cd "$TMP/gen/lamb1" && timeout 300 nvcc -O1 -std=c++17 -Werror all-warnings \
            -DCOCO_ONLY_P=1 -c ./*.cu -o generated.o) >"$TMP/nvcc.out" 2>&1; then
        nm -C "$TMP/gen/lamb1/generated.o" >"$TMP/nm.out" 2>&1
        fused='_f[0-9]+(_b)?<[0-9]+, ' scat='coco_lsa_scat_collective<[0-9]+, [0-9]+, [0-9]+, '
        if grep -q -E "_f[0-9]+<[0-9]+, 1," "$TMP/nm.out" && grep -q -E "_f[0-9]+_b<[0-9]+, 1," "$TMP/nm.out" &&
            grep -q -E "$scat"'1,' "$TMP/nm.out" && ! grep -q -E "($fused|$scat)[248]," "$TMP/nm.out"; then ok
        else bad "tests/gpu/lamb_scattered.coco with COCO_ONLY_P=1: not the instances for one rank alone"; fi
    else bad "nvcc tests/gpu/lamb_scattered.coco (COCO_ONLY_P=1):"; head -n 10 "$TMP/nvcc.out" | sed 's/^/  /'; fi
fi
group_end

# ---- the arithmetic of generated kernels (src/emit_value.c) ----
# FP32 instructions where they round as the CPU's double does, double
# arithmetic elsewhere; tests/gpu/arith.coco runs each line on GPUs.
group arith-gen
rm -rf "$TMP/arith"
coco gen tests/gpu/arith.coco -o "$TMP/arith"
if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen tests/gpu/arith.coco: ${why:-exit status $rc}: $(err1)"; else
    F32='coco_ldf\([^)]*COCO_FP32\)' H16='coco_ldf\([^)]*COCO_FP16\)'
    for want in "FP32 of floats|float r[0-9]+ = __fdiv_rn\($F32, $F32\);" \
                "FP32 times a literal that is no float|float r[0-9]+ = coco_narrow\(__dmul_rn\(coco_ld\([^)]*COCO_FP32\), 0\.1[0-9]*\), COCO_FP32\);" \
                "FP16 of FP16 values|float r[0-9]+ = coco_roundf\(__fdiv_rn\($H16, $H16\), COCO_FP16\);" \
                "FP16 of an FP32 Scalar|float r[0-9]+ = coco_narrow\(__ddiv_rn\(s[0-9]+, coco_ld\([^)]*COCO_FP16\)\), COCO_FP16\);" \
                "FP32 of FP32 and FP16|float r[0-9]+ = __fmul_rn\($F32, $H16\);" \
                "a Cast of a float|float r[0-9]+ = coco_roundf\(\($F32\), COCO_FP16\);" \
                "BF16|float r[0-9]+ = coco_narrow\(__ddiv_rn\(coco_ld\([^)]*COCO_BF16\), coco_ld\([^)]*COCO_BF16\)\), COCO_BF16\);" \
                "FP64|double r[0-9]+ = coco_round\(__dmul_rn\(coco_ld\([^)]*COCO_FP64\), coco_ld\([^)]*COCO_FP32\)\), COCO_FP64\);" \
                "Tanh|float r[0-9]+ = coco_narrow\(coco_tanh\(coco_ld\([^)]*COCO_FP32\)\), COCO_FP32\);"; do
        if grep -q -E "${want#*|}" "$TMP/arith/arith.cu"; then ok
        else bad "tests/gpu/arith.coco: no statement for ${want%%|*} (${want#*|})"; fi
    done
fi
# all-FP32 LAMB's fused kernels: FP32 arithmetic, but Pow (and the reductions)
rm -rf "$TMP/arith"
coco gen bench/lamb_fp32.coco -o "$TMP/arith" --all-schedules --schedule fuse_RS_Opt_AG_4
if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen bench/lamb_fp32.coco: ${why:-exit status $rc}: $(err1)"
elif grep -n -E '(double|float) r[0-9]+ = .*__d(add|sub|mul|div|sqrt)_rn' "$TMP/arith/lamb.cu" >"$TMP/dbl"; then
    bad "bench/lamb_fp32.coco: double arithmetic in an all-FP32 step:"; head -n 3 "$TMP/dbl"
else ok; fi
group_end

# ---- CUDA code generation: every example x all schedules compiles ----
# Only where nvcc is installed; object code only (no GPU is needed).
group cuda-gen
mkdir -p "$TMP/gen"
for f in examples/*.coco tests/gpu/norms.coco tests/gpu/send.coco tests/gpu/lamb_scattered.coco \
         tests/gpu/arith.coco tests/oracle/programs/ragged.coco; do
    name=$(basename "$f" .coco)
    dir=$TMP/gen/$name
    coco gen "$f" -o "$dir" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen $f: ${why:-exit status $rc}: $(err1)"; continue; fi
    # one workspace layout on every rank (offsets in the symmetric window)
    if ! command -v "$PYTHON" >/dev/null 2>&1; then :
    elif "$PYTHON" tests/gen/workspace.py "$dir"/*.cu >"$TMP/ws.out" 2>&1; then ok
    else bad "workspace of $f depends on the rank:"; head -n 5 "$TMP/ws.out" | sed 's/^/  /'; fi
    echo "$f" >"$dir/source"
done
# compiled on every core at once (one nvcc per program), then judged in order
if command -v nvcc >/dev/null 2>&1; then
    for dir in "$TMP"/gen/*/; do [ -f "$dir/source" ] && echo "$dir"; done |
        xargs -P "$(nproc 2>/dev/null || echo 2)" -I DIR sh -c \
            'cd DIR && timeout 300 nvcc -O1 -std=c++17 -Werror all-warnings -c ./*.cu \
                 -o generated.o >nvcc.out 2>&1; echo $? >nvcc.rc'
    for dir in "$TMP"/gen/*/; do
        [ -f "$dir/source" ] || continue
        if [ "$(cat "$dir/nvcc.rc" 2>/dev/null)" = 0 ]; then ok
        else bad "nvcc $(cat "$dir/source") (all schedules):"; head -n 10 "$dir/nvcc.out" | sed 's/^/  /'; fi
    done
    # every vector access stays one in the PTX (tests/gen/split_vectors.py),
    # built as the runtime builds it (-O3) for an H100/H200 (sm_90) and 4
    # ranks: a one-shot AllReduce, scattered tensors (FP16 and FP32), LAMB
    coco gen bench/allreduce_fused.coco -o "$TMP/gen/allreduce_fused" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen bench/allreduce_fused.coco: ${why:-exit status $rc}: $(err1)"; fi
    for name in allreduce_fused adam_scattered lamb_scattered lamb; do
        dir=$TMP/gen/$name
        command -v "$PYTHON" >/dev/null 2>&1 || break
        if [ ! -d "$dir" ]; then bad "vector accesses of $name: not generated"; continue; fi
        if (cd "$dir" && timeout 300 nvcc -O3 -arch=sm_90 -std=c++17 -DCOCO_ONLY_P=4 -ptx ./*.cu \
                -o generated.ptx) >"$TMP/ptx.out" 2>&1 &&
            "$PYTHON" tests/gen/split_vectors.py "$dir/generated.ptx" >"$TMP/split.out" 2>&1; then ok
        else bad "vector accesses of $name (PTX, sm_90):"; head -n 5 "$TMP/ptx.out" "$TMP/split.out" | sed 's/^/  /'; fi
    done
    group_end
else
    group_end "nvcc skipped: not installed"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]

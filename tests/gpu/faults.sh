# tests/gpu/faults.sh: the parts `faults` and `sanitize` of tests/gpu/run.sh,
# which sources this file (it uses run.sh's COCONET, TMP, OUT, LOG, RANKS,
# ngpu, PREBUILD, prebuild, heading and the counters pass and fail).
# shellcheck shell=sh
#
#   faults    A dying rank: at each P of RANKS, the last rank and then rank 0
#             kill themselves (SIGKILL, through the test hook COCONET_TEST_DIE,
#             doc/gpu.md) at each point of a run of FAULT_FILE (Adam, with
#             its schedule `paper`: a FusedAllReduce as one kernel): start,
#             init, upload, timed in the fused variant (the peers spin in its
#             barrier), timed in the program (the peers are inside
#             ncclAllReduce), exit; and (P > 1) during a fused Send
#             (tests/gpu/send.coco). Each must end with status 1 within
#             FAULT_BOUND seconds, name the dead rank and signal 9 (and, at
#             P > 1, that it failed first), and leave no process of the run
#             and no more GPU processes than before the part. Then coconet
#             itself is killed while its ranks run: they must die with it.
#             Then a normal run, which must pass. Bad run-time inputs: more
#             ranks than GPUs (and 2 ranks on one visible GPU), a program too large for the
#             host, a GPU whose memory another process holds
#             (tests/gpu/hog.cu), a run beside another run on the same GPUs,
#             an object that records another NCCL version
#             (tests/gpu/nccl_version.cu), and the NCCL of PyTorch's wheel
#             loaded instead of the build's (where there is one).
#   sanitize  compute-sanitizer at P = 1 (whatever RANKS says): memcheck over
#             SAN_MEMCHECK, racecheck and synccheck over SAN_RACECHECK, every
#             schedule (--all-schedules, --iters 0: the checked run and the
#             repeat run), SAN_JOBS runs at once spread over the GPUs. First,
#             for each tool, a control (tests/gpu/sanitize_control.cu) whose
#             kernel has a defect only that tool sees: it must be reported,
#             which shows that the tool reaches the rank's process (a forked
#             child of coconet; SAN_VIA=auto tries that, then mpirun, where
#             the process is the rank itself).
#
# Every case is a row of one table in OUT: case | expected | got | seconds |
# result; a FAIL row fails the run.
#
# Variables: FAULT_BOUND (60: seconds a failing run may take), FAULT_TIMEOUT
# (120: this script's limit per run; the ranks' own, --timeout, is 60 s, and
# coconet's for silent ranks 95 s), FAULT_FILE and FAULT_ARGS (the program
# the ranks die in: examples/adam.coco, "--schedule paper"), FAULT_FUSED (its
# variant with the fused collective: paper), FAULT_NCCL (its variant
# on NCCL calls: program), FAULT_SEND (the program with the fused Send, whose
# schedule `both` fuses them: tests/gpu/send.coco; empty: no such case),
# FAULT_CASES (which of the faults part's cases: "die parent inputs", the
# dying ranks and the normal run after them, coconet killed, the bad inputs),
# SANITIZER (compute-sanitizer's path), SAN_VIA (auto, fork or mpirun),
# SAN_JOBS (8), SAN_TIMEOUT (480 s a run), SAN_TOOLS ("memcheck racecheck
# synccheck"), SAN_MEMCHECK and SAN_RACECHECK (programs, each a file and its
# arguments joined by commas; every example and the GPU test programs with
# fused collectives, scattered tensors and fused Sends, the same for both),
# SAN_ARGS (after each program's arguments: --all-schedules), SAN_FLAGS
# (compute-sanitizer's own: "--require-cuda-init no": coconet itself never
# initializes CUDA, its ranks do; "--report-api-errors no": the runtime
# checks every call it makes, and what NCCL probes is not ours).

FAULT_BOUND=${FAULT_BOUND:-60}
FAULT_TIMEOUT=${FAULT_TIMEOUT:-120}
FAULT_FILE=${FAULT_FILE:-examples/adam.coco}
FAULT_ARGS=${FAULT_ARGS:---schedule paper}
FAULT_FUSED=${FAULT_FUSED:-paper}
FAULT_NCCL=${FAULT_NCCL:-program}
FAULT_SEND=${FAULT_SEND-tests/gpu/send.coco}
FAULT_CASES=${FAULT_CASES:-die parent inputs}
SAN_VIA=${SAN_VIA:-auto}
SAN_JOBS=${SAN_JOBS:-8}
SAN_TIMEOUT=${SAN_TIMEOUT:-480}
SAN_TOOLS=${SAN_TOOLS:-memcheck racecheck synccheck}
SAN_ARGS=${SAN_ARGS---all-schedules}
SAN_FLAGS=${SAN_FLAGS---require-cuda-init no --report-api-errors no}
SAN_MEMCHECK=${SAN_MEMCHECK:-examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco \
examples/adam_scattered.coco tests/gpu/lamb_scattered.coco tests/gpu/norms.coco \
tests/gpu/send.coco,--group-size,1 examples/pipeline.coco,--group-size,1 \
examples/pipeline_linear.coco,--group-size,1 examples/self_attention.coco examples/mlp.coco \
examples/conv2d.coco examples/reduce_broadcast.coco examples/transformer_sp.coco \
examples/transformer_sp_backward.coco examples/rmsnorm_sp.coco examples/softmax.coco \
tests/gpu/rows_ln.coco tests/gpu/rows_bwd.coco tests/gpu/rows_ln.coco,-D,S=3,-D,H=5000}
SAN_RACECHECK=${SAN_RACECHECK:-$SAN_MEMCHECK}

# ---- rows ----

# frow CASE EXPECTED GOT SECONDS STATUS: a row (STATUS 0: PASS)
frow() {
    if [ "$5" = 0 ]; then res=PASS; pass=$((pass + 1)); else res=FAIL; fail=$((fail + 1)); fi
    got=$(printf '%s' "$3" | tr '|\n' '/ ' | cut -c 1-400)
    printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$got" "$4" "$res" >>"$OUT"
    printf '%-4s %s (%s s): %s\n' "$res" "$1" "$4" "$got"
}

ftable() {
    ftable_at=$(($(wc -l <"$OUT") + 1))
    printf '| case | expected | got | seconds | result |\n|---|---|---|---|---|\n' >>"$OUT"
    : >"$TMP/notes"
}

# fnote TEXT: a line said now and written under the table
fnote() {
    echo "note: $1"
    echo "$1" >>"$TMP/notes"
}

# ftable_end: the notes under the table, then the table again on stdout
ftable_end() {
    echo >>"$OUT"
    [ -s "$TMP/notes" ] && { cat "$TMP/notes"; echo; } >>"$OUT"
    echo
    tail -n +"$ftable_at" "$OUT"
}

# ---- one run, and what it leaves behind ----

# gpu_apps: the compute processes nvidia-smi lists (0 without it)
gpu_apps() {
    timeout 20 nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c "[0-9]"
}

# leftovers MARK: the processes whose environment holds COCONET_FAULT_MARK=MARK
leftovers() {
    grep -lzx "COCONET_FAULT_MARK=$1" /proc/[0-9]*/environ 2>/dev/null |
        sed 's,^/proc/\([0-9]*\)/environ$,\1,' | tr '\n' ' '
}

# settled MARK: 0 once (within 10 s) no process of the run is left and the
# GPUs hold no more compute processes than before the part; else what is
# left, in $left
settled() {
    i=0
    while :; do
        left=$(leftovers "$1")
        extra=$(($(gpu_apps) - apps0))
        [ -z "$left" ] && [ "$extra" -le 0 ] && { left=; return 0; }
        [ $i -ge 20 ] && break
        sleep 0.5
        i=$((i + 1))
    done
    left="left: ${left:+processes $left}${left:+ }$([ "$extra" -gt 0 ] && echo "$extra more GPU processes")"
    return 1
}

# fcase CMD...: runs CMD, its processes marked, under FAULT_TIMEOUT: its
# status in rc, its seconds in secs, its output in $TMP/out and $TMP/err,
# its mark in mark; then waits for it to settle (ok_left 0 when nothing
# is left)
fault_seq=0
fcase() {
    fault_seq=$((fault_seq + 1))
    mark="$$-$fault_seq"
    echo "==== $*" >>"$LOG"
    t0=$(date +%s.%N)
    timeout -k 10 "$FAULT_TIMEOUT" env COCONET_FAULT_MARK="$mark" "$@" >"$TMP/out" 2>"$TMP/err" &
    child=$!
    wait "$child"
    rc=$?
    child=
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    cat "$TMP/out" "$TMP/err" >>"$LOG"
    settled "$mark"
    ok_left=$?
}

# within: is secs under FAULT_BOUND?
within() {
    awk -v s="$secs" -v b="$FAULT_BOUND" 'BEGIN { exit !(s < b) }'
}

# first_error: the first line of coconet's own messages on stderr
first_error() {
    grep -m 1 -e '^coconet: ' -e 'error' "$TMP/err" | cut -c 1-300
}

# ---- a dying rank ----

# die P RANK POINT WHAT FILE ARGS...: rank RANK of P ranks kills itself at
# POINT (COCONET_TEST_DIE=RANK:POINT) in a run of FILE
die() {
    p=$1; r=$2; point=$3; what=$4; shift 4
    # shellcheck disable=SC2086 # the command's words
    fcase env COCONET_TEST_DIE="$r:$point" $COCONET run "$@" --backend cuda --ranks "$p" \
        --iters 3 --timeout 60
    killed=$(grep -m 1 "^coconet: rank $r was killed by signal 9 " "$TMP/err")
    first=$(grep -m 1 "^coconet: rank [0-9]* failed first" "$TMP/err")
    # from the hook's own line: how long coconet took to end after the death
    after=$(sed -n 's/^coconet: test hook: rank .* (at \([0-9.]*\) s)$/\1/p' "$TMP/err" | head -n 1)
    [ -n "$after" ] && after=$(awk -v a="$after" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    ok=1
    if [ $rc -eq 1 ] && [ -n "$killed" ] && within && [ $ok_left -eq 0 ] &&
        { [ "$p" = 1 ] || [ "$first" = "coconet: rank $r failed first" ]; }; then
        ok=0
    fi
    got="status $rc${after:+, $after s after the death}; ${killed:-no rank named killed: $(first_error)}${first:+; ${first#coconet: }}${left:+; $left}"
    frow "P=$p: rank $r killed at $point, $what" \
        "status 1, 'rank $r was killed by signal 9'$([ "$p" = 1 ] || echo ", first"), < $FAULT_BOUND s, nothing left" \
        "$got" "$secs" $ok
}

# passes P FILE ARGS...: a normal run afterwards: it must pass
passes() {
    p=$1; shift
    # shellcheck disable=SC2086
    fcase $COCONET run "$@" --backend cuda --ranks "$p" --iters 3
    rows=$(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$TMP/out")
    ok=1
    [ $rc -eq 0 ] && [ "$rows" -gt 0 ] && [ $ok_left -eq 0 ] && ok=0
    frow "P=$p: a normal run after them" "status 0, every variant right, nothing left" \
        "status $rc, $rows variants right$( [ $rc -eq 0 ] || echo "; $(first_error)")${left:+; $left}" \
        "$secs" $ok
}

# parent_killed P FILE ARGS...: coconet itself killed (SIGKILL) while its
# ranks run: none may outlive it (they die with it: PR_SET_PDEATHSIG)
parent_killed() {
    p=$1; shift
    fault_seq=$((fault_seq + 1))
    mark="$$-$fault_seq"
    echo "==== (killed) $COCONET run $* --backend cuda --ranks $p --iters 100000" >>"$LOG"
    # shellcheck disable=SC2086
    timeout -k 10 "$FAULT_TIMEOUT" env COCONET_FAULT_MARK="$mark" $COCONET run "$@" --backend cuda \
        --ranks "$p" --iters 100000 >"$TMP/out" 2>"$TMP/err" &
    tpid=$!
    i=0 # until coconet and its P ranks are there, at most 30 s; then 2 s into the runs
    while [ $i -lt 60 ] && [ "$(leftovers "$mark" | wc -w)" -lt $((p + 1)) ] && kill -0 $tpid 2>/dev/null; do
        sleep 0.5
        i=$((i + 1))
    done
    sleep 2
    parent=$(ps -o pid= --ppid "$tpid" | tr -d ' ')
    running=$(($(leftovers "$mark" | wc -w) - 1))
    t0=$(date +%s.%N)
    [ -n "$parent" ] && kill -KILL "$parent"
    wait "$tpid"
    rc=$?
    settled "$mark"
    ok_left=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    cat "$TMP/out" "$TMP/err" >>"$LOG"
    ok=1
    [ -n "$parent" ] && [ "$running" -eq "$p" ] && [ $rc -eq 137 ] && [ $ok_left -eq 0 ] && within && ok=0
    frow "P=$p: coconet itself killed (SIGKILL) while its ranks run" \
        "its $p ranks gone with it, no GPU process left" \
        "${parent:+coconet $parent killed with $running ranks running, }status $rc${left:+; $left}" "$secs" $ok
}

# has_case WORD: is WORD one of FAULT_CASES?
has_case() {
    case " $FAULT_CASES " in *" $1 "*) return 0 ;; esac
    return 1
}

dying_ranks() {
    for p in $RANKS; do
        victims=$((p - 1))
        [ "$p" -gt 1 ] && victims="$victims 0"
        has_case die || victims=
        for r in $victims; do
            # shellcheck disable=SC2086 # FAULT_ARGS' words
            {
                die "$p" "$r" start "before NCCL" $FAULT_FILE $FAULT_ARGS
                die "$p" "$r" init "WORLD joined, the peers in NCCL calls" $FAULT_FILE $FAULT_ARGS
                die "$p" "$r" upload "inputs on the GPU, the peers in the first collective" \
                    $FAULT_FILE $FAULT_ARGS
                die "$p" "$r" "timed:$FAULT_FUSED" "the peers spinning in the fused kernel's barrier" \
                    $FAULT_FILE $FAULT_ARGS
                die "$p" "$r" "timed:$FAULT_NCCL" "the peers inside an NCCL kernel" \
                    $FAULT_FILE $FAULT_ARGS
                die "$p" "$r" exit "after its last report" $FAULT_FILE $FAULT_ARGS
            }
        done
        if has_case die && [ "$p" -gt 1 ] && [ -n "$FAULT_SEND" ]; then # two groups: the Sends cross them
            die "$p" $((p - 1)) timed:both "the peer inside the fused Send kernel" \
                "$FAULT_SEND" --schedule both --group-size $((p / 2))
        fi
        # shellcheck disable=SC2086
        has_case parent && parent_killed "$p" $FAULT_FILE $FAULT_ARGS
        # shellcheck disable=SC2086
        passes "$p" $FAULT_FILE $FAULT_ARGS
    done
}

# ---- bad run-time inputs ----

# refused CASE EXPECTED PATTERN: the last run must have ended with status 1
# within FAULT_BOUND, a line matching PATTERN (grep -E) on stderr, nothing left
refused() {
    said=$(grep -m 1 -E "$3" "$TMP/err" | cut -c 1-300)
    ok=1
    [ "$rc" -eq 1 ] && [ -n "$said" ] && within && [ "$ok_left" -eq 0 ] && ok=0
    frow "$1" "$2" "status $rc; ${said:-$(first_error)}${left:+; $left}" "$secs" $ok
}

too_many_ranks() {
    if [ "${ngpu:-0}" -lt 1 ]; then
        return
    fi
    p=$((ngpu + 1))
    # shellcheck disable=SC2086
    fcase $COCONET run $FAULT_FILE $FAULT_ARGS --backend cuda --ranks $p
    refused "--ranks $p on $ngpu GPUs" "status 1, the counts named" \
        "$p ranks need $p GPUs, this machine shows $ngpu"
    if [ "$ngpu" -gt 1 ]; then
        # shellcheck disable=SC2086
        fcase env CUDA_VISIBLE_DEVICES=0 $COCONET run $FAULT_FILE $FAULT_ARGS --backend cuda --ranks 2
        refused "--ranks 2 with CUDA_VISIBLE_DEVICES=0" "status 1, the counts named" \
            "2 ranks need 2 GPUs, this machine shows 1"
    fi
}

too_large() {
    # 2^36 elements: refused before the build and the ranks, by the host's check
    # shellcheck disable=SC2086
    fcase $COCONET run $FAULT_FILE $FAULT_ARGS -D N=68719476736 --backend cuda --ranks 1
    refused "N = 2^36 (-D N=68719476736)" "status 1, the need and the limit named" \
        'needs .* GiB .*more than|too large'
    # shellcheck disable=SC2086
    fcase $COCONET run $FAULT_FILE $FAULT_ARGS -D N=68719476736 --backend cuda --ranks 1 \
        --reference none
    refused "N = 2^36, --reference none" "status 1, the need and the limit named" \
        'need .* GiB.*too large'
}

# A GPU whose memory another process holds (all but 2 GiB): Adam at
# N = 2^27 needs 3.5 GiB for its buffers
memory_taken() {
    what="N = 2^27 on GPU 0, its memory held by another process (tests/gpu/hog.cu)"
    if [ ! -x "$TMP/hog" ]; then
        frow "$what" "the holder built" "not built: $(tail -n 1 "$TMP/hog.log" 2>/dev/null)" 0 1
        return
    fi
    "$TMP/hog" 2048 >"$TMP/hog.out" 2>&1 &
    hog=$!
    i=0
    while [ $i -lt 60 ] && ! grep -q '^held ' "$TMP/hog.out" && kill -0 $hog 2>/dev/null; do
        sleep 0.5
        i=$((i + 1))
    done
    if ! grep -q '^held ' "$TMP/hog.out"; then
        kill $hog 2>/dev/null
        wait $hog 2>/dev/null
        frow "$what" "the holder holding" "it did not: $(head -c 200 "$TMP/hog.out")" 0 1
        return
    fi
    apps0=$((apps0 + 1)) # the holder itself
    # shellcheck disable=SC2086
    fcase $COCONET run $FAULT_FILE $FAULT_ARGS -D N=134217728 --backend cuda --ranks 1 --iters 0 \
        --reference none
    apps0=$((apps0 - 1))
    kill $hog 2>/dev/null
    wait $hog 2>/dev/null
    refused "$what: $(head -n 1 "$TMP/hog.out")" "status 1, the need and what is free named" \
        'of GPU memory for its buffers|out of memory'
}

# Two runs at once on the same GPUs: the second must pass (GPUs in the
# Default compute mode are shared), or fail saying the GPU is busy (in an
# exclusive mode); the first, stopped by SIGTERM afterwards, must stop.
beside_another() {
    p=$(echo "$RANKS" | tr ' ' '\n' | sort -n | tail -n 1)
    mode=$(timeout 20 nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | sort -u | paste -sd, -)
    # coconet itself in the background (not under timeout(1), which would
    # take the SIGTERM below and exit 143 whatever coconet did), with a
    # watchdog of its own
    # shellcheck disable=SC2086
    env COCONET_FAULT_MARK="$$-other" $COCONET run $FAULT_FILE \
        $FAULT_ARGS -D N=4194304 --reference none --backend cuda --ranks "$p" --iters 100000 \
        >"$TMP/other.out" 2>"$TMP/other.err" &
    other=$!
    (sleep 600 && kill -KILL $other) 2>/dev/null &
    watchdog=$!
    i=0 # until the other run's ranks are on the GPUs (nvidia-smi lists them), at most 20 s
    while [ $i -lt 40 ] && [ $(($(gpu_apps) - apps0)) -lt "$p" ] && kill -0 $other 2>/dev/null; do
        sleep 0.5
        i=$((i + 1))
    done
    apps0=$((apps0 + p))
    # shellcheck disable=SC2086
    fcase $COCONET run $FAULT_FILE $FAULT_ARGS --backend cuda --ranks "$p" --iters 3
    apps0=$((apps0 - p))
    rows=$(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$TMP/out")
    busy=$(grep -m 1 -i 'busy or unavailable' "$TMP/err")
    running=0
    kill -0 $other 2>/dev/null && running=1
    kill -TERM $other 2>/dev/null
    wait $other
    other_rc=$?
    pkill -P $watchdog 2>/dev/null # its sleep
    kill $watchdog 2>/dev/null
    cat "$TMP/other.out" "$TMP/other.err" >>"$LOG"
    stopped=$(grep -c 'received signal 15' "$TMP/other.err")
    second_left=$ok_left
    settled "$$-other"
    ok=1
    case $mode in
    *Exclusive*) [ $rc -eq 1 ] && [ -n "$busy" ] && ok=0 ;;
    *) [ $rc -eq 0 ] && [ "$rows" -gt 0 ] && ok=0 ;;
    esac
    { [ $running = 1 ] && [ $other_rc -eq 1 ] && [ "$stopped" -gt 0 ] && [ $second_left -eq 0 ] &&
        [ -z "$left" ]; } || ok=1
    frow "P=$p beside another coconet run on the same GPUs (compute mode ${mode:-unknown})" \
        "Default mode: status 0, every variant right (exclusive: status 1, busy named); the other run, still going, stopped by SIGTERM" \
        "status $rc, $rows variants right${busy:+, $busy}; the other run $([ $running = 1 ] && echo "still going, then" || echo "had ended:") status $other_rc after SIGTERM, $stopped ranks said stopped${left:+; $left}" \
        "$secs" $ok
}

# An object that records another NCCL version, and (where PyTorch's wheel
# brings one) another NCCL library loaded
nccl_versions() {
    # shellcheck disable=SC2086
    fcase $COCONET run tests/gpu/selftest.coco --cuda-source tests/gpu/nccl_version.cu --backend cuda \
        --ranks 1
    refused "an object built for NCCL 2.19.3 (tests/gpu/nccl_version.cu)" \
        "status 1, both versions named, before NCCL starts" \
        'NCCL version mismatch: the generated code was built with NCCL 2\.19\.[34] headers but this process loaded NCCL [0-9]+\.[0-9]+\.[0-9]+'
    wheel=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null)
    if [ -z "$wheel" ] || [ ! -e "$wheel/libnccl.so.2" ]; then
        fnote "No NCCL of a PyTorch wheel (python3 -c 'import nvidia.nccl'): that case is left out."
        return
    fi
    # shellcheck disable=SC2086
    fcase env LD_LIBRARY_PATH="$wheel${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" $COCONET run $FAULT_FILE \
        $FAULT_ARGS --backend cuda --ranks 1
    if [ $rc -eq 0 ] && grep -q 'NCCL' "$TMP/out"; then
        fnote "The NCCL of PyTorch's wheel ($wheel) is the build's version: nothing to refuse."
        return
    fi
    refused "the NCCL of PyTorch's wheel loaded (LD_LIBRARY_PATH=$wheel)" \
        "status 1, both versions named" \
        'NCCL version mismatch: the generated code was built with NCCL [0-9.]+ headers but this process loaded NCCL [0-9.]+'
}

part_faults() {
    if [ "$PREBUILD" = 1 ]; then
        for p in 1 $RANKS; do # P = 1: the bad inputs' runs
            # shellcheck disable=SC2086
            prebuild $FAULT_FILE $FAULT_ARGS --ranks "$p"
            [ "$p" -gt 1 ] && [ -n "$FAULT_SEND" ] &&
                prebuild "$FAULT_SEND" --schedule both --group-size $((p / 2)) --ranks "$p"
        done
        has_case inputs || return 0
        prebuild tests/gpu/selftest.coco --cuda-source tests/gpu/nccl_version.cu --ranks 1
        nvcc=$(sed -n 's/^NVCC=//p' build/cuda.conf 2>/dev/null)
        ${nvcc:-nvcc} -o "$TMP/hog" tests/gpu/hog.cu >"$TMP/hog.log" 2>&1 &
        return
    fi
    heading "## Faults: a dying rank, bad run-time inputs"
    apps0=$(gpu_apps)
    {
        echo "Each rank killed by the test hook COCONET_TEST_DIE=RANK:POINT[:VARIANT] (doc/gpu.md)"
        echo "in \`coconet run $FAULT_FILE $FAULT_ARGS --backend cuda --ranks P --iters 3\`; 'nothing left':"
        echo "no process of the run, no more GPU processes than before ($apps0). Whole outputs: $LOG."
        echo
    } >>"$OUT"
    ftable
    dying_ranks
    if has_case inputs; then
        too_many_ranks
        too_large
        memory_taken
        beside_another
        nccl_versions
    fi
    ftable_end
}

# ---- compute-sanitizer ----

find_sanitizer() {
    cuda_home=${CUDA_HOME:-/usr/local/cuda}
    for s in "$SANITIZER" "$(command -v compute-sanitizer 2>/dev/null)" "$cuda_home/bin/compute-sanitizer" \
        "$cuda_home/compute-sanitizer/compute-sanitizer"; do
        [ -n "$s" ] && [ -x "$s" ] && { echo "$s"; return 0; }
    done
    return 1
}

# san_start ID TOOL VIA GPU ARGS...: one sanitized run in the background,
# its output in $TMP/san.ID.out, status in .rc, seconds in .secs
san_start() {
    id=$1; tool=$2; via=$3; gpu=$4; shift 4
    prefix=
    [ "$via" = mpirun ] && prefix="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 1"
    (
        [ -n "$gpu" ] && export CUDA_VISIBLE_DEVICES="$gpu"
        t0=$(date +%s)
        # shellcheck disable=SC2086 # the words of the prefix and the command
        timeout -k 20 "$SAN_TIMEOUT" $prefix "$san" --tool "$tool" --target-processes all \
            --error-exitcode 86 $SAN_FLAGS $COCONET run "$@" --backend cuda --ranks 1 --iters 0 \
            >"$TMP/san.$id.out" 2>&1 </dev/null
        echo $? >"$TMP/san.$id.rc"
        echo $(($(date +%s) - t0)) >"$TMP/san.$id.secs"
    ) &
    san_pids="$san_pids $!"
}

# san_errors ID: the errors the sanitizer reported: its ERROR SUMMARY lines
# summed, else its RACECHECK SUMMARY's; at least 1 when it exited with its
# error status (86); -1 when it said nothing (it did not run to the end)
san_errors() {
    awk -v rc="$(cat "$TMP/san.$1.rc")" '
        /ERROR SUMMARY: [0-9]+ error/ {
            for (i = 1; i < NF; i++) if ($i == "SUMMARY:") { n += $(i + 1); seen = 1 }
        }
        /RACECHECK SUMMARY: .*\([0-9]+ error/ {
            s = $0; sub(/.*\(/, "", s); race += s + 0; rseen = 1
        }
        END {
            if (!seen && rseen) { n = race; seen = 1 }
            if (rc == 86 && n < 1) { n = 1; seen = 1 }
            print seen ? n : -1
        }' "$TMP/san.$1.out"
}

# san_control TOOL VIA: runs the control of TOOL; 0 when the tool reported it
san_control() {
    san_pids=
    COCO_SANITIZE_CONTROL=$1
    export COCO_SANITIZE_CONTROL
    san_start "control-$1-$2" "$1" "$2" "" tests/gpu/selftest.coco --cuda-source \
        tests/gpu/sanitize_control.cu --schedule program
    unset COCO_SANITIZE_CONTROL
    wait
    n=$(san_errors "control-$1-$2")
    [ "$n" -gt 0 ]
}

# san_wait_slot: until fewer than SAN_JOBS runs are going
san_wait_slot() {
    while :; do
        alive=
        for pid in $san_pids; do
            kill -0 "$pid" 2>/dev/null && alive="$alive $pid"
        done
        san_pids=$alive
        [ "$(echo "$san_pids" | wc -w)" -lt "$SAN_JOBS" ] && return
        sleep 1
    done
}

san_entries() { # the programs of TOOL
    case $1 in memcheck) echo "$SAN_MEMCHECK" ;; *) echo "$SAN_RACECHECK" ;; esac
}

part_sanitize() {
    if [ "$PREBUILD" = 1 ]; then
        find_sanitizer >/dev/null || return 0 # nothing to build for
        for e in $SAN_MEMCHECK $SAN_RACECHECK; do
            # shellcheck disable=SC2046 # the entry's words
            # shellcheck disable=SC2086
            prebuild $(echo "$e" | tr ',' ' ') $SAN_ARGS --ranks 1
        done
        prebuild tests/gpu/selftest.coco --cuda-source tests/gpu/sanitize_control.cu --schedule program \
            --ranks 1
        return
    fi
    heading "## compute-sanitizer, P = 1"
    ftable
    if ! san=$(find_sanitizer); then
        frow "compute-sanitizer" "found" "not in SANITIZER, PATH, ${CUDA_HOME:-/usr/local/cuda}/bin or .../compute-sanitizer" \
            0 1
        ftable_end
        return
    fi
    echo "$san: $("$san" --version 2>&1 | tail -n 1)" >>"$LOG"
    # the controls: each tool must see its defect in the rank's process
    tools=
    for tool in $SAN_TOOLS; do
        via=$SAN_VIA
        [ "$via" = auto ] && via=fork
        seen=1
        san_control "$tool" "$via" && seen=0
        if [ $seen = 1 ] && [ "$SAN_VIA" = auto ] && command -v mpirun >/dev/null; then
            via=mpirun
            san_control "$tool" "$via" && seen=0
        fi
        out="$TMP/san.control-$tool-$via.out"
        said=$(grep -m 1 -E '^=+ +(Invalid|Race|Barrier|Error)' "$out" | sed 's/^=* *//')
        [ -n "$said" ] || said=$(head -n 1 "$out")
        frow "$tool control: a defect only $tool sees (tests/gpu/sanitize_control.cu), run via $via" \
            "reported (at least 1 error)" \
            "$(san_errors "control-$tool-$via") errors, status $(cat "$TMP/san.control-$tool-$via.rc"): $said" \
            "$(cat "$TMP/san.control-$tool-$via.secs")" $seen
        [ $seen = 0 ] || fnote "$tool did not see the control's defect: its runs of the programs are left out."
        cat "$TMP/san.control-$tool-$via.out" >>"$LOG"
        [ $seen = 0 ] && tools="$tools $tool:$via"
    done
    # the programs, SAN_JOBS at once, over the GPUs in turn
    san_pids=
    k=0
    for tv in $tools; do
        tool=${tv%%:*}
        via=${tv#*:}
        for e in $(san_entries "$tool"); do
            san_wait_slot
            gpu=
            [ "${ngpu:-0}" -gt 0 ] && gpu=$((k % ngpu))
            # shellcheck disable=SC2046 # the entry's words
            # shellcheck disable=SC2086
            san_start "$k" "$tool" "$via" "$gpu" $(echo "$e" | tr ',' ' ') $SAN_ARGS
            echo "$tool $e" >"$TMP/san.$k.what"
            k=$((k + 1))
        done
    done
    wait
    i=0
    while [ $i -lt $k ]; do
        read -r tool e <"$TMP/san.$i.what"
        n=$(san_errors "$i")
        src=$(cat "$TMP/san.$i.rc")
        rows=$(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$TMP/san.$i.out")
        ok=1
        [ "$src" -eq 0 ] && [ "$n" -eq 0 ] && [ "$rows" -gt 0 ] && ok=0
        {
            echo "==== $tool: $e"
            cat "$TMP/san.$i.out"
        } >>"$LOG"
        what="status $src, $n errors, $rows variants right"
        [ "$n" -ne 0 ] && what="$what: $(grep -m 1 -E '^=+ +[A-Z]' "$TMP/san.$i.out" | sed 's/^=* *//')"
        [ "$src" -ne 0 ] && [ "$n" -le 0 ] && what="$what: $(grep -m 1 -e '^coconet: ' -e 'error' "$TMP/san.$i.out")"
        frow "$tool: $(echo "$e" | tr ',' ' ') $SAN_ARGS" "status 0, 0 errors, every variant right" \
            "$what" "$(cat "$TMP/san.$i.secs")" $ok
        i=$((i + 1))
    done
    ftable_end
}

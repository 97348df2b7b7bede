# ---- the autotuner, `coconet tune`, without GPUs ----
# The candidates (variants x knob sets) of the paper's workloads (--plan);
# the search, its pruning and its failed checks against the fake timer
# replaying tests/tune/adam_p4.times (COCONET_TUNE_FAKE), its launches (a
# point's knob sets in one) and its summary; the record it writes, served to
# `run --schedule tuned` (exact and nearest sizes), which finds the tuner's
# object in the build cache, and never to another program text, P or
# machine; the command line's refusals. The
# parts are unit-tested in tests/unit/test_tune.c (group unit).
# shellcheck shell=sh # sourced by tests/run.sh
group tune
tune_cache=$TMP/tune-cache
COCONET_CACHE=$tune_cache
export COCONET_CACHE
fixture=tests/tune/adam_p4.times

# tune_expect WHAT PATTERN: the last coconet call exited 0 and its stdout
# (stderr with a third argument, err) has a line matching PATTERN
tune_expect() {
    out=$TMP/out
    [ "${3:-}" = err ] && out=$TMP/err
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "tune: $1: ${why:-exit status $rc}: $(err1)"
    elif grep -E -q -- "$2" "$out"; then ok
    else bad "tune: $1: no line matches '$2'"; sed -n '1,12p' "$out" | sed 's/^/  /'; fi
}

# tune_refused WHAT STATUS MESSAGE: the last call exited STATUS, saying MESSAGE
tune_refused() {
    if [ -n "$why" ] || [ "$rc" -ne "$2" ]; then
        bad "tune: $1: ${why:-exit status $rc}, expected $2: $(err1)"
    elif grep -F -q -- "$3" "$TMP/err"; then ok
    else bad "tune: $1: expected '$3', got: $(err1)"; fi
}

# enumeration x knob sets (P = 1: the default set, and twoshot where a
# FusedAllReduce with a computation is one kernel over contiguous operands,
# its elementwise form or not: adam's 5 fused optimizers, none of lamb's
# (Norms) or adam_scattered's, mlp's 2 fused layers; FP16 AllReduces are
# FusedAllReduces on the backend: every algorithm; overlapped MatMuls: chunks,
# with a FusedAllReduce and, by its blocks, with a ReduceScatter: the
# layers' ol(MM,RS)-C-AG
for c in "adam 4 19 59" "adam 1 19 24" "lamb 4 18 56" "lamb 1 18 18" "self_attention 4 18 81" \
         "mlp 4 17 76" "mlp 1 17 19" "adam_scattered 1 19 19" "pipeline 4 27 51"; do
    # shellcheck disable=SC2086 # the case's words
    set -- $c
    coco tune "examples/$1.coco" --ranks "$2" --plan
    tune_expect "$1 at P = $2" ", $2 ranks?: $3 variants, $4 candidates;"
done
coco tune examples/adam.coco --ranks 4 --plan
tune_expect "paper's knob sets" "^paper +nccl "
coco tune examples/adam.coco --ranks 4 --plan
if grep -q '^paper  *oneshot' "$TMP/out"; then bad "tune: paper has no one-shot knob set"; else ok; fi
tune_expect "the program's knob sets (its FP16 AllReduce fused)" "^program +oneshot "
coco tune examples/self_attention.coco --ranks 4 --plan
tune_expect "chunks of an overlapped MatMul" "^paper +chunks4 "
tune_expect "chunks of a MatMul by a ReduceScatter's blocks" "^ol_MM_RS_C_AG +chunks4 "
# the overlaps by a collective's blocks (src/gen/emit_overlap_blocks.c):
# chunks1 and chunks4 beside default at P > 1, with or without a fused
# collective; none on one rank (the MatMul alone) nor where a MatMul follows
# a FusedAllReduce (nothing chunks it)
coco tune tests/gpu/overlap_blocks.coco --ranks 4 --plan
tune_expect "overlap_blocks at P = 4" ", 4 ranks: 12 variants, 36 candidates;"
tune_expect "the MatMuls by both collectives' blocks" "^ol_both +chunks4 "
tune_expect "by the AllGather's blocks" "^ol_ag +chunks1 "
if grep -q '^MM_ol_fuse_RS_C_AG_MM  *chunks' "$TMP/out"; then
    bad "tune: chunks for a MatMul after its FusedAllReduce"; else ok; fi
coco tune tests/gpu/overlap_blocks.coco --ranks 1 --plan
tune_expect "overlap_blocks at P = 1" ", 1 rank: 12 variants, 16 candidates;"
if grep -q '^ol_both  *chunks' "$TMP/out"; then bad "tune: chunks on one rank"; else ok; fi

# the search against recorded times; pruning at 1.5 finds the best (paper
# through NCCL, which the model ranks slowest), at 1.1 it prunes it and picks
# push; --exhaustive times all 59 and says what pruning would pick. Each
# candidate takes its knobs with it into a launch: --exhaustive times every
# (variant x knob set) of a point in one launch of the ranks; pruning, in
# one, and one more for what the calibrated model does not prune. By
# default, as with --launch-cost 0, no launch is weighed (the ranks stay up
# from one round to the next) and pruning alone decides; a candidate checked
# in place costs 0.03 s and 25 ns a value its rank checks (4.2 M values:
# 0.13 s), so where a launch costs 5 s, more than the 33 candidates beyond
# the model's reach at 2^20, the first round times them all
COCONET_TUNE_FAKE=$fixture
export COCONET_TUNE_FAKE
coco tune examples/adam.coco --ranks 4 --sizes N=2^20
tune_expect "at 2^20, checks weighed: pruned" "59 candidates .*: 39 timed, 20 pruned, 0 failed, in 2 rounds$"
coco tune examples/adam.coco --ranks 4 --sizes N=2^20 --launch-cost 5
tune_expect "at 2^20, a launch weighed: all in one" "59 candidates .*: 59 timed, 0 pruned, 0 failed, in 1 round$"
tune_expect "at 2^20, a launch weighed: the summary" "^tune: [0-9.]+ s, 1 launch of the ranks: "
coco tune examples/adam.coco --ranks 4 --sizes N=2^20 --launch-cost 0
tune_expect "at 2^20" "^best at N=1048576: paper with knobs nccl"
tune_expect "at 2^20: pruned" "59 candidates .*: 39 timed, 20 pruned, 0 failed, in 2 rounds"
tune_expect "at 2^20: the summary (2 rounds on ranks started once)" "^tune: [0-9.]+ s, 1 launch of the ranks: building [0-9.]+ s \(from the cache\), CPU reference and inputs [0-9.]+ s, checking [0-9.]+ s \(0 launches\), timing [0-9.]+ s \(1 launch\), closing the ranks [0-9.]+ s, the rest [0-9.]+ s$"
coco tune examples/adam.coco --ranks 4 --sizes N=2^20 --prune 1.1
tune_expect "--prune 1.1" "^best at N=1048576: paper with knobs push"
coco tune examples/adam.coco --ranks 4 --sizes N=2^20 --exhaustive --launch-cost 0
tune_expect "--exhaustive: every knob set in one launch" "59 timed, 0 pruned, 0 failed, in 1 round$"
tune_expect "--exhaustive: one launch of the ranks" "^tune: [0-9.]+ s, 1 launch of the ranks: "
tune_expect "--exhaustive's replay" "^pruning at 1.5 would pick paper with knobs nccl \(the best, 0.0 % slower than the best\), timing 39 of 59 candidates in 2 rounds"
coco tune examples/adam.coco --ranks 4 --sizes N=2^20 --exhaustive --prune 1.1
tune_expect "--exhaustive --prune 1.1" "^pruning at 1.1 would pick paper with knobs push \(37.5 % slower"
# the best confirmed: paper under NCCL measured 0.030 ms once, then 0.050;
# paper under push 0.031 (within 5 %): both timed twice more, each keeping
# its median, and push wins; --confirm 0 keeps the first time (another
# machine's name: a record of its own)
{ echo "gpu fake confirm (54-tune.sh)"
  echo "time N=1048576 nccl paper 0.030,0.050"
  echo "time N=1048576 push paper 0.031"
  grep -v '^gpu ' "$fixture"; } >"$TMP/confirm.times"
COCONET_TUNE_FAKE=$TMP/confirm.times coco tune examples/adam.coco --ranks 4 --sizes N=2^20 \
    --exhaustive --launch-cost 0
tune_expect "confirmed: the median wins" "^best at N=1048576: paper with knobs push"
tune_expect "confirmed: what the table says" "^confirmed: the 2 candidates within 5 % \(or 0.002 ms\) of the best timed 3 times each, in 2 more rounds; each row's time the median of its times, \[the least, the most\] after the prediction$"
tune_expect "confirmed: the median in the row, and its spread" "^ +2 +paper +nccl +0.0500 ms .* \[0.0300, 0.0500\]"
tune_expect "confirmed: the best's times overlap another's" "^best at N=1048576: paper with knobs push, [0-9.]+x the program's speed, its times overlap those of paper/nccl$"
COCONET_TUNE_FAKE=$TMP/confirm.times coco tune examples/adam.coco --ranks 4 --sizes N=2^20 \
    --exhaustive --launch-cost 0 --confirm 0
tune_expect "--confirm 0: the first time wins" "^best at N=1048576: paper with knobs nccl"
if grep -q '^confirmed:' "$TMP/out"; then bad "tune: --confirm 0 confirmed"; else ok; fi
if grep -q 'its times overlap' "$TMP/out"; then bad "tune: --confirm 0: a spread without confirmation"; else ok; fi
# larger sizes: checked at N = 1008 first, where paper fails under push; it
# is never chosen (the recorded best at 2^24 is paper push, 0.383 ms); a
# launch of 1.5 s (3 s with the check point's): at 2^28 some candidates cost
# more
coco tune examples/adam.coco --ranks 4 --sizes N=1008,2^24,2^28 --launch-cost 1.5
tune_expect "2^24, a launch weighed: all timed in one" "^adam at N=16777216, .*: 57 timed, 0 pruned, 2 failed, in 1 round$"
tune_expect "2^28, a launch weighed: candidates dearer than a launch pruned" "^adam at N=268435456, .*: 53 timed, 4 pruned, 2 failed, in 2 rounds$"
coco tune examples/adam.coco --ranks 4 --sizes N=1008,2^24,2^28 --launch-cost 0
tune_expect "a failed check" "^ +- +paper +push +WRONG: at the check point N=1008"
tune_expect "at 2^24" "^best at N=16777216: fuse_RS_Opt_AG_4 with knobs push"
tune_expect "at N=1008: the program" "^best at N=1008: program with knobs oneshot"
tune_expect "a crash in a launch: the rest run again" "^adam at N=1008, .*: 56 timed, 1 pruned, 2 failed, in 2 rounds"
tune_expect "2^24: checked at the check point, timed in one launch" "^adam at N=16777216, .*: 37 timed, 20 pruned, 2 failed, in 1 round$"
tune_expect "the launches: one as each slot opens, one more after each crash" "^tune: [0-9.]+ s, 6 launches of the ranks: .* checking [0-9.]+ s \(2 launches\), timing [0-9.]+ s \(4 launches\)"
tune_expect "the crash's row" "^ +- +paper +twoshot +CRASH"
tune_expect "the record" "^record: .*tune-[0-9a-f]*.txt \(4 size points\)"
coco tune examples/adam.coco --ranks 4 --sizes N=2^20
coco tune examples/adam.coco --ranks 4 --show
tune_expect "--show" "^N=268435456 +N +fuse_RS_Opt_AG_4 +push +5.4040 ms +15.6000 ms"
if [ "$(grep -c '^N=' "$TMP/out")" = 4 ]; then ok; else bad "tune: --show: not 4 entries"; fi

# the record served: exact sizes (the program: no schedule runs), nearest
coco run examples/adam.coco --ranks 4 --schedule tuned
tune_expect "run --schedule tuned at 1008" "^coconet: tuned: schedule program, knobs COCONET_FUSED=oneshot" err
if grep -q '^schedule ' "$TMP/out"; then bad "tune: the program chosen, yet schedules ran"; else ok; fi
coco run examples/adam.coco --ranks 4 -D N=200000 --schedule tuned
tune_expect "run --schedule tuned, nearest" "not tuned at N=200000: .* nearest tuned sizes, N=1048576" err
tune_expect "run --schedule tuned, its row" "^paper +(bitwise|rounding) "
tune_expect "run --schedule tuned, its knobs" "COCONET_FUSED=nccl matters on GPUs only" err
rm -rf "$TMP/tune-gen"
coco gen examples/adam.coco --ranks 4 -D N=16777216 --schedule tuned -o "$TMP/tune-gen"
if [ "$rc" -ne 0 ]; then bad "tune: gen --schedule tuned: exit $rc: $(err1)"
elif grep -q 'coco_run__fuse_RS_Opt_AG_4' "$TMP/tune-gen/adam.h" 2>/dev/null; then ok
else bad "tune: gen --schedule tuned at 2^24: no entry point fuse_RS_Opt_AG_4"; fi

# run --schedule tuned runs the object tune built (one source at every size:
# the program and all its schedules, enumerated too), found in the build
# cache, not a build of its own; shown with a stand-in nvcc that makes
# empty objects and counts its builds (its -shared calls: a build in parts
# compiles each with -c, then links them; only where build/cuda.conf names
# the NCCL headers the cache key reads)
if [ -f build/cuda.conf ] && [ -f build/fake/libfake_rt.so ]; then
    fake=$TMP/fake-nvcc
    mkdir -p "$fake"
    grep -v '^NVCC=' build/cuda.conf >"$fake/cuda.conf"
    echo "NVCC=$fake/nvcc" >>"$fake/cuda.conf"
    cp build/fake/libfake_rt.so "$fake/libcoconet_cuda.so"
    cat >"$fake/nvcc" <<'NVCC'
#!/bin/sh
[ "$1" = --version ] && { echo "stand-in nvcc for the tests"; exit 0; }
case " $* " in *" -shared "*) shared=1 ;; esac
while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done
: >"$out" || exit 1
[ -z "$shared" ] || echo build >>"$(dirname "$0")/builds"
NVCC
    chmod +x "$fake/nvcc"
    export COCONET_CUDA_RUNTIME="$fake/libcoconet_cuda.so"
    coco run examples/adam.coco --ranks 4 --backend cuda --build-only --all-schedules
    tune_expect "the tuner's source built (run --all-schedules)" "^cuda: built .*\.so in"
    so=$(sed -n 's/^cuda: built \(.*\.so\) in .*/\1/p' "$TMP/out")
    coco run examples/adam.coco --ranks 4 -D N=1048576 --backend cuda --build-only --all-schedules
    tune_expect "at another size: the same source, the same object" "^cuda: cached $so\$"
    COCONET_TUNE_FAKE=$fixture coco run examples/adam.coco --ranks 4 -D N=16777216 --backend cuda \
        --build-only --schedule tuned
    tune_expect "run --schedule tuned finds the tuner's object" "^cuda: cached $so\$"
    tune_expect "run --schedule tuned: its choice" "tuned: schedule fuse_RS_Opt_AG_4, knobs COCONET_FUSED=push" err
    coco run examples/adam.coco --ranks 4 --backend cuda --build-only --schedule paper
    tune_expect "--schedule paper: a source of its own" "^cuda: built "
    if [ "$(wc -l <"$fake/builds")" = 2 ]; then ok
    else bad "tune: the stand-in nvcc built $(wc -l <"$fake/builds") times, not 2"; fi
    unset COCONET_CUDA_RUNTIME
fi

# a changed key is never served: another P, program text, GPU, NCCL
coco run examples/adam.coco --ranks 2 --schedule tuned
tune_refused "another P" 1 "no tuning record for this program at 2 ranks"
{ cat examples/adam.coco; echo "// one more line"; } >"$TMP/adam_edited.coco"
coco run "$TMP/adam_edited.coco" --ranks 4 --schedule tuned
tune_refused "another text" 1 "no tuning record"
sed 's/^gpu .*/gpu another GPU/' "$fixture" >"$TMP/other_gpu.times"
COCONET_TUNE_FAKE=$TMP/other_gpu.times coco run examples/adam.coco --ranks 4 --schedule tuned
tune_refused "another GPU" 1 "no tuning record for this program at 4 ranks on this machine (another GPU"
sed 's/^nccl .*/nccl 22900/' "$fixture" >"$TMP/other_nccl.times"
COCONET_TUNE_FAKE=$TMP/other_nccl.times coco run examples/adam.coco --ranks 4 --schedule tuned
tune_refused "another NCCL" 1 "NCCL 22900"
echo "Schedule extra { fuse(m_, v_, m1, v1, p_, ComputationFuse); }" >"$TMP/extra.sched"
coco run examples/adam.coco --ranks 4 --schedule tuned --schedule-file "$TMP/extra.sched"
tune_refused "a schedule file added" 1 "no tuning record"
# a record naming a knob set this coconet does not have (one of an older
# version: chunks2, now chunks1) is refused, naming it; the file is kept
for rec in "$tune_cache"/tune-*.txt; do
    cp "$rec" "$TMP/record.kept"
    sed 's/ knobs=[a-z0-9]* / knobs=chunks2 /' "$TMP/record.kept" >"$rec"
    coco run examples/adam.coco --ranks 4 --schedule tuned
    grep -q "knob set 'chunks2'" "$TMP/err" && break
    cp "$TMP/record.kept" "$rec" # another key's record
done
tune_refused "a knob set of another version" 1 "names the knob set 'chunks2', which this coconet does not have (its sets: default, oneshot, twoshot, push, nccl, chunks1, chunks4): it was tuned by another version; run coconet tune again"
cp "$TMP/record.kept" "$rec"
coco run examples/adam.coco --ranks 4 --schedule tuned
tune_expect "the record restored" "^coconet: tuned: schedule" err
unset COCONET_TUNE_FAKE

# the command line
coco tune examples/adam.coco --sizes N=1,x
tune_refused "bad --sizes" 2 "--sizes 'N=1,x': expected NAME=v1,v2,..."
coco tune examples/adam.coco --sizes N
tune_refused "--sizes without values" 2 "expected NAME=v1,v2"
coco tune examples/adam.coco --sizes M=4
tune_refused "--sizes of no size" 2 "has no size named M"
coco tune examples/adam.coco --check-size N=4,8
tune_refused "--check-size with two values" 2 "--check-size '8': expected NAME=v"
coco tune examples/adam.coco --prune 0.5
tune_refused "--prune below 1" 2 "--prune expects a factor of at least 1"
coco tune examples/adam.coco --launch-cost -1
tune_refused "--launch-cost below 0" 2 "--launch-cost expects seconds from 0 to 3600, not '-1'"
coco run examples/adam.coco --launch-cost 2
tune_refused "--launch-cost on run" 2 "go with \`coconet tune\`"
coco tune examples/adam.coco --confirm 11
tune_refused "--confirm above 10" 2 "--confirm"
coco run examples/adam.coco --confirm 2
tune_refused "--confirm on run" 2 "go with \`coconet tune\`"
coco run examples/adam.coco --sizes N=4
tune_refused "--sizes on run" 2 "go with \`coconet tune\`"
coco tune examples/adam.coco --schedule paper
tune_refused "tune --schedule" 2 "tune explores every schedule itself"
COCONET_CUDA_RUNTIME=/nonexistent/libcoconet_cuda.so coco tune examples/adam.coco --ranks 4
tune_refused "no GPU runtime" 1 "coconet tune: cannot time on GPUs: the CUDA runtime /nonexistent/libcoconet_cuda.so is not built"
coco run examples/adam.coco --ranks 3 --schedule tuned
tune_refused "no record" 1 "run \`coconet tune examples/adam.coco --ranks 3 --sizes ...\` first"
# the GPU benchmark's script parses, and its tables read tune's output (the
# fixture's exhaustive and pruned runs at three sizes, TABLES_ONLY=1)
if sh -n bench/tune.sh 2>"$TMP/err"; then ok; else bad "bench/tune.sh: $(err1)"; fi
bw=$TMP/bench-work
rm -rf "$bw"
mkdir -p "$bw/runs"
: >"$bw/times.txt"
for m in exhaustive pruned; do
    opt=
    [ $m = exhaustive ] && opt=--exhaustive
    COCONET_TUNE_FAKE=$fixture coco tune examples/adam.coco --ranks 4 --sizes N=2^20,2^24,2^28 \
        --launch-cost 0 $opt
    cp "$TMP/out" "$bw/runs/adam.$m.txt"
    echo "$m adam 0.5 $rc $(grep '^tune: ' "$TMP/out")" >>"$bw/times.txt"
done
echo "warm lamb - SKIPPED" >>"$bw/times.txt"
WORK=$bw OUT=$TMP/bench-out TABLES_ONLY=1 OPT=adam sh bench/tune.sh >"$TMP/out" 2>"$TMP/err"
rc=$?
why=
tune_expect "bench tables: a tune's time and where it went" "^\| exhaustive \| adam \| 0.5 \| 0 \| 5 \| 0.0 s \(from the cache\) \| 0.0 s \| 0.0 s \(2 launches\) \| 0.0 s \(3 launches\) \|$"
tune_expect "bench tables: a skipped part" "^\| warm \| lamb \| - \| SKIPPED \|"
tune_expect "bench tables: pruning against exhaustive" "^\| adam \| N=1048576 \| paper/nccl \| 0.0400 \| paper/nccl \| 0.0 % \| yes \| 39 of 59 candidates in 2 rounds \| paper/nccl \(1.000 x best\) \|$"
tune_expect "bench tables: the tuned choice against the best fixed one" "^\| adam \| N=1048576 \| 0.0400 ms \| paper/nccl: 0.0400 ms \| fuse_RS_Opt_AG_4/push: 0.0560 ms \| 0.714 \|$"
# bench/tune_turns.py: the picks over turns, at each candidate's median over
# the turns' exhaustive tables; a second turn where paper/nccl timed 0.080
# at 2^20 (median 0.060) makes paper/push (0.055) the best, and the picks of
# paper/nccl 9.1 % slower
tt=$TMP/turns
rm -rf "$tt"
mkdir -p "$tt/a/runs" "$tt/b/runs"
cp "$bw/runs/adam.exhaustive.txt" "$bw/runs/adam.pruned.txt" "$tt/a/runs/"
cp "$bw/runs/adam.exhaustive.txt" "$bw/runs/adam.pruned.txt" "$tt/b/runs/"
sed -i '/N=1048576, 4/,/^best/ s/^\(   1  paper  *nccl  *\)0.0400 ms/\10.0800 ms/' \
    "$tt/b/runs/adam.exhaustive.txt"
$PYTHON bench/tune_turns.py "$tt/a" "$tt/a" >"$TMP/out" 2>"$TMP/err"
rc=$?
tune_expect "tune_turns.py: one turn twice" "^\| adam \| N=1048576 \| paper/nccl \| 0.0400 \| paper/nccl 1.000, paper/nccl 1.000 \| yes \|$"
$PYTHON bench/tune_turns.py "$tt/a" "$tt/b" >"$TMP/out" 2>"$TMP/err"
rc=$?
tune_expect "tune_turns.py: the medians move the best" "^\| adam \| N=1048576 \| paper/push \| 0.0550 \| paper/nccl 1.091, paper/nccl 1.091 \| no \|$"
tune_expect "tune_turns.py: 2^24 alike" "^\| adam \| N=16777216 \| fuse_RS_Opt_AG_4/push \| [0-9.]+ \| .* \| yes \|$"
unset COCONET_CACHE
group_end

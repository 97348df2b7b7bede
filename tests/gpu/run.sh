#!/bin/sh
# tests/gpu/run.sh OUT: the GPU tests (`make test-gpu`), on a machine with
# GPUs, after `make` has built ./coconet and build/libcoconet_cuda.so.
#
#   selftest  the runtime alone, with CUDA written by hand (tests/gpu/*.cu):
#             AllReduce, ReduceScatter + AllGather, an Update, GROUP communicators;
#             and faults.cu, which must be caught (a GUARD and a REPEAT row);
#   examples  every examples/*.coco (and tests/gpu/norms.coco: cross-rank
#             reductions in a fused collective; tests/gpu/lamb_scattered.coco:
#             the same over scattered tensors; tests/gpu/scattered_inline.coco,
#             the program alone: AllReduces over scattered tensors, one inline,
#             as kernels over the members; tests/gpu/send.coco: fused
#             Sends; tests/gpu/arith.coco: elementwise arithmetic over every
#             pairing of types; tests/gpu/transformer_ops.coco: reductions that
#             keep their dimension, Exp, Erf..., Transposes read in place by
#             cuBLASLt; tests/oracle/programs/ragged.coco: uneven slices along
#             dimensions 0 and 1; tests/gpu/overlap_blocks.coco,
#             overlap_blocks_t.coco and gather_matmul.coco: MatMuls by the
#             blocks of an AllGather or a ReduceScatter, also in 3 chunks a
#             block and in order, COCONET_OVERLAP_CHUNKS=3 and 1;
#             tests/gpu/rows_overlap.coco: a MatMul overlapped with a fused
#             computation that reduces within rows; tests/gpu/rows_*.coco: row
#             kernels, a LayerNorm, RMSNorm, softmax, LayerNorm backward, one
#             overlapped with its MatMul; tests/gpu/optim_lamb_tensor.coco:
#             LAMB's step with a trust ratio per parameter tensor, Norm(x, Members),
#             and clipping; tests/oracle/programs/members.coco: Norm(x, Members) in
#             every type, Local, and Sliced across the ranks) x every schedule x P,
#             at the examples' sizes
#             (pipeline.coco and send.coco at every group size, also with
#             COCONET_FUSED=nccl; the fused kernels' other instances with
#             COCONET_FUSED_VEC=1, COCONET_FUSED_PEERS=1 and COCONET_FUSED=push);
#   knobs     the last runs of examples alone (scattered W = 41, also on the
#             NCCL paths, and 401, and COCONET_FUSED_VEC=1 /
#             COCONET_FUSED_PEERS=1 / COCONET_FUSED=push; at P = 1
#             COCONET_ONE_RANK_FUSED=1; row kernels on the NCCL path, in each
#             shape, with long rows, overlapped in chunks);
#   tune      `coconet tune` of examples/adam.coco and self_attention.coco at
#             their own sizes (checked where timed), then adam's
#             `run --schedule tuned` (its knob set in the ranks' environment,
#             the tuner's object found in the build cache);
#   paper     self_attention and mlp at B = 8 and 16, S = 1024, H = 3072 (mlp's
#             input is then 4H = 12288 wide); adam, lamb and sgd_momentum at
#             N = 2^10 ... 2^28 and at odd N (every schedule; uneven
#             slices at odd N); NCCL
#             AllReduce alone (tests/gpu/allreduce.coco) at the same sizes;
#   faults    a rank killed at each point of a run (start, NCCL init, upload,
#             inside a fused kernel's barrier, inside NCCL, a fused Send, exit),
#             and bad run-time inputs (more ranks than GPUs, too large, GPU
#             memory held by another process, two runs at once, another NCCL);
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck at P = 1.
#             Both in tests/gpu/faults.sh, which says what each row expects;
#   torch     coconet.torch under torchrun (tests/gpu/torch.sh: examples vs
#             run_cpu, the optimizers vs torch's AdamW, RowParallelLinear vs
#             torch, CUDA graphs), at each P of RANKS; not in the default
#             PARTS (it needs torch): PARTS="... torch". Its table goes to
#             OUT.torch.md, one row per P here.
# Each run checks every output and updated tensor against the CPU reference
# (and Replicated values across ranks), the guard bytes around every buffer
# and a repeat run's bits (GUARD, REPEAT rows); the table of every variant (example,
# sizes, P, schedule, result, max error, GPU time) goes to OUT (markdown),
# every run's whole output to OUT.log. Exit status non-zero on any failure.
#
# Variables: RANKS (default "1 2 4"; one rank: every fused collective one
# kernel over local memory, no device communicator), PARTS (default "selftest examples tune paper
# faults sanitize"),
# BUILD_ONLY=1 (the parts' builds into the cache, no runs and no table: to
# build ahead while other work runs), EXAMPLES (the examples and knobs parts'
# programs: those of them named here, e.g. "examples/adam.coco
# tests/gpu/send.coco"; all by default),
# B_SIZES ("8 16"), N_POW ("10 16 20 24 28"), N_ODD ("1 3 7 1001 1002 1048577":
# uneven slices, empty ones for the smallest, and at P = 2 whole slices of
# 2004 bytes, not a multiple of 16),
# ITERS (20), TIMEOUT (seconds per coconet run, 3600; coconet's own limits,
# `--timeout`, are set to a third of it, at most 300 s, so that a run that
# hangs is stopped by coconet, which names the rank, the variant and the
# operation, before this script's limit; at its limit coconet gets SIGTERM,
# stops its ranks and prints its table and where each rank was),
# BUILD_TIMEOUT (seconds per build, 1200: nvcc takes minutes for a program
# of many schedules, e.g. ragged.coco's 27, when many build at once), JOBS
# (builds at once, 8), REFERENCE (for the paper sizes: program, i.e. every schedule checked
# against the program's CPU run, which is cheaper than each schedule's own;
# "each" for that), COMMIT (the commit named in the table, where the copy
# run has no git repository).

cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-build/gpu-results.md}
LOG=$OUT.log
RANKS=${RANKS:-1 2 4}
PARTS=${PARTS:-selftest examples tune paper faults sanitize}
B_SIZES=${B_SIZES:-8 16}
N_POW=${N_POW:-10 16 20 24 28}
N_ODD=${N_ODD:-1 3 7 1001 1002 1048577}
ITERS=${ITERS:-20}
TIMEOUT=${TIMEOUT:-3600}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-1200}
LIMIT=$((TIMEOUT / 3))
[ $LIMIT -gt 300 ] && LIMIT=300
[ $LIMIT -lt 20 ] && LIMIT=20
JOBS=${JOBS:-8}
REFERENCE=${REFERENCE:-program}
COCONET=${COCONET:-./coconet}
mkdir -p "$(dirname "$OUT")"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/coconet-gpu.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT
# killed (a time limit): stop the running coconet too, at once
child=
trap '[ -n "$child" ] && kill "$child" 2>/dev/null; exit 2' INT TERM

# timed CMD...: runs CMD under the time limit, in the background so that a
# signal is handled at once; its status in rc, its seconds in secs
timed() {
    t0=$(date +%s)
    timeout -k 20 "$TIMEOUT" "$@" >"$TMP/out" 2>"$TMP/err" &
    child=$!
    wait "$child"
    rc=$?
    child=
    secs=$(($(date +%s) - t0))
}
pass=0
fail=0
skip=0

gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c |
       sed 's/^ *//' | paste -sd ';' -)
{
    echo "# coconet GPU results"
    echo
    echo "Made by \`make test-gpu\` (tests/gpu/run.sh) on $(date -u '+%Y-%m-%d %H:%M UTC'),"
    echo "$(hostname): ${gpus:-GPUs not listed by nvidia-smi}; commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}."
    echo "Every row: one variant (the program, or a schedule) run on P GPUs, one process"
    echo "each, checked against the CPU reference executor on the same data: \`bitwise\`,"
    echo "or \`rounding\` (every element within the tolerance of the README's GPU section);"
    echo "max-abs and max-rel are the largest differences from the CPU values; gpu ms is"
    echo "the median of $ITERS timed runs (CUDA events, after 3 warm-up runs) of the"
    echo "slowest rank. The command of each group of rows is given above it."
    echo
} >"$OUT"
: >"$LOG"
: >"$LOG.build"

# allowed FILE P ARGS...: does the program accept P ranks (sizes, groups, roots)?
allowed() {
    f=$1; p=$2; shift 2
    if $COCONET check "$f" --ranks "$p" "$@" >"$TMP/check" 2>&1; then return 0; fi
    if grep -q -e 'divisible' -e 'does not divide' -e 'is not a rank of' "$TMP/check"; then
        return 1
    fi
    return 0 # another error: let the run report it
}

# chosen FILE: is FILE one of the examples and knobs parts' programs to run?
chosen() {
    [ -z "$EXAMPLES" ] && return 0
    for e in $EXAMPLES; do
        [ "$e" = "$1" ] && return 0
    done
    return 1
}

# heading TEXT: a section title in the table (not while prebuilding)
heading() {
    [ "$PREBUILD" = 1 ] && return
    printf '%s\n\n' "$1" >>"$OUT"
}

# prebuild ARGS...: builds the code of one run into the cache in the
# background (`--build-only`), at most JOBS builds at once, each source once
# (runs that differ only in a size -D N=... share it when their schedules do)
built_keys=" "
nbuilding=0
prebuild() {
    key=$(echo "$*" | sed 's/-D N=[0-9]*//' | tr ' ' '_')
    case "$built_keys" in *" $key "*) return ;; esac
    built_keys="$built_keys$key "
    # shellcheck disable=SC2086 # the command's words
    timeout "$BUILD_TIMEOUT" $COCONET run "$@" --backend cuda --build-only >>"$LOG.build" 2>&1 &
    nbuilding=$((nbuilding + 1))
    if [ $nbuilding -ge "$JOBS" ]; then wait; nbuilding=0; fi
}

# table NAME SIZES P: the rows of $TMP/out as markdown
table() {
    awk -v ex="$1" -v sizes="$2" -v p="$3" '
        /^schedule +outputs/ { on = 1; next }
        /^gpu-(time|checks):/ { on = 0 }
        on && NF >= 7 {
            printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                   ex, sizes, p, $1, $2, $3, $4, $6, $7
        }' "$TMP/out" >>"$OUT"
}

# run NAME SIZES P ARGS...: one coconet run, its rows in the table
run() {
    name=$1; sizes=$2; p=$3; shift 3
    if [ "$PREBUILD" = 1 ]; then prebuild "$@" --ranks "$p"; return; fi
    cmd="$COCONET run $* --backend cuda --ranks $p --iters $ITERS --timeout $LIMIT"
    {
        echo "\`$cmd\`"
        echo
        echo "| example | sizes | P | schedule | result | max-abs | max-rel | outside | gpu ms |"
        echo "|---|---|---|---|---|---|---|---|---|"
    } >>"$OUT"
    echo "==== $cmd" >>"$LOG"
    # shellcheck disable=SC2086 # the command's words
    timed $cmd
    cat "$TMP/out" "$TMP/err" >>"$LOG"
    table "$name" "$sizes" "$p"
    echo >>"$OUT"
    rows=$(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding|WRONG|REPLICAS|GUARD|REPEAT|FAILED) ' "$TMP/out")
    if [ $rc -eq 0 ] && [ "$rows" -gt 0 ]; then
        pass=$((pass + 1))
        echo "ok   $cmd ($rows variants, $secs s)"
    else
        fail=$((fail + 1))
        why=$(grep -h -m 3 -e WRONG -e REPLICAS -e GUARD -e REPEAT -e FAILED -e error -e 'rank ' \
              "$TMP/out" "$TMP/err" |
              cut -c 1-300)
        [ $rc -eq 124 ] && why="timed out after $TIMEOUT s: $(grep -h -m 2 -e ' stopped ' \
            -e ' killed by ' "$TMP/err" | tr '\n' ' ')"
        echo "FAIL $cmd (status $rc)"
        echo "$why" | sed 's/^/     /'
        echo "**failed** (status $rc): $(echo "$why" | head -n 1)" >>"$OUT"
        echo >>"$OUT"
    fi
}

# faults P: tests/gpu/faults.cu writes past a buffer (program) and changes
# its results after the first run (rsag): the run must fail with a GUARD and
# a REPEAT row, each explained under the table.
faults() {
    [ "$PREBUILD" = 1 ] && return
    cmd="$COCONET run tests/gpu/selftest.coco --cuda-source tests/gpu/faults.cu --backend cuda --ranks $1 --iters 2"
    echo "==== $cmd (must fail: GUARD, REPEAT)" >>"$LOG"
    # shellcheck disable=SC2086 # the command's words
    timed $cmd
    cat "$TMP/out" "$TMP/err" >>"$LOG"
    if [ $rc -eq 1 ] && grep -q '^program  *GUARD ' "$TMP/out" && grep -q '^rsag  *REPEAT ' "$TMP/out" &&
        grep -q "rank 0: program: output 'avg' (2048 bytes) was written outside: the guard after it is damaged, first at byte 0 past its end" "$TMP/err" &&
        grep -q "rank 0: rsag: output 'p_': a repeat run on the same inputs gave other bits" "$TMP/err"; then
        pass=$((pass + 1))
        echo "ok   $cmd (GUARD and REPEAT caught)"
        echo "Guard bytes and the repeat run, P = $1 (\`tests/gpu/faults.cu\`): GUARD and REPEAT caught." >>"$OUT"
    else
        fail=$((fail + 1))
        echo "FAIL $cmd (status $rc): expected a GUARD and a REPEAT row"
        echo "**failed**: tests/gpu/faults.cu at P = $1: GUARD and REPEAT not both caught (status $rc)" >>"$OUT"
    fi
    echo >>"$OUT"
}

part_selftest() {
    heading "## Runtime self-test (CUDA written by hand)"
    for p in $RANKS; do
        run selftest "N=1024" "$p" tests/gpu/selftest.coco --cuda-source tests/gpu/selftest.cu
        if [ "$p" = 1 ]; then # GROUP(2) does not divide one rank: groups of one
            run group "N=512, G=1" "$p" tests/gpu/group.coco --cuda-source tests/gpu/group.cu \
                --group-size 1
        else
            run group "N=512, G=2" "$p" tests/gpu/group.coco --cuda-source tests/gpu/group.cu
        fi
        faults "$p"
    done
}

part_examples() {
    heading "## Examples at their own sizes, every schedule"
    for f in examples/*.coco tests/gpu/norms.coco tests/gpu/send.coco tests/gpu/lamb_scattered.coco \
             tests/gpu/scattered_inline.coco tests/gpu/arith.coco tests/gpu/transformer_ops.coco \
             tests/oracle/programs/ragged.coco tests/gpu/overlap_blocks.coco \
             tests/gpu/overlap_blocks_t.coco tests/gpu/gather_matmul.coco tests/gpu/rows_overlap.coco \
             tests/gpu/rows_ln.coco tests/gpu/rows_rms.coco tests/gpu/rows_softmax.coco \
             tests/gpu/rows_bwd.coco tests/gpu/rows_bwd16.coco tests/gpu/rows_mm.coco \
             tests/gpu/optim_lamb_tensor.coco tests/oracle/programs/members.coco; do
        chosen "$f" || continue
        name=$(basename "$f" .coco)
        for p in $RANKS; do
            # pipeline and send: each group size is checked below (the
            # file's GROUP(2) does not divide one rank; groups of one do)
            if [ "$name" != pipeline ] && [ "$name" != send ] && ! allowed "$f" "$p"; then
                [ "$PREBUILD" = 1 ] || skip=$((skip + 1))
                continue
            fi
            if [ "$name" = pipeline ] || [ "$name" = send ]; then
                for g in 1 2 4 8; do
                    [ $((p % g)) -eq 0 ] || continue
                    allowed "$f" "$p" --group-size "$g" || continue
                    run "$name" "G=$g" "$p" "$f" --all-schedules --group-size "$g"
                    # the fused Sends' NCCL lowering (the run-time fallback) too
                    plain=$COCONET
                    COCONET="env COCONET_FUSED=nccl $plain"
                    run "$name" "G=$g, COCONET_FUSED=nccl" "$p" "$f" --all-schedules --group-size "$g"
                    COCONET=$plain
                done
            elif [ "$name" = scattered_inline ]; then # 90 schedules: the program alone
                run "$name" "file's" "$p" "$f"
            else
                run "$name" "file's" "$p" "$f" --all-schedules
            fi
        done
    done
    scattered_fused
    tuning_knobs
    row_knobs
}

# the fused collectives' scattered and tuning runs of the examples part alone
part_knobs() {
    heading "## Fused collectives over scattered tensors, and the fused kernels' other instances"
    scattered_fused
    tuning_knobs
    row_knobs
}

# Row kernels (src/gen/emit_rows.c), the schedule `rows` of
# tests/gpu/rows_ln.coco: on the NCCL path (COCONET_FUSED=nccl: ReduceScatter
# + one row kernel + AllGather), one element a step (COCONET_FUSED_VEC=1:
# the streaming form), each shape of COCO_ROWS_SHAPES (COCONET_ROWS_SHAPE:
# one warp of 1 vector, two of 6, four of 16, the streaming form) at rows of
# 64, then rows of 3072, 5000 (two warps), 12288 (four) and 40000 (the
# streaming form); tests/gpu/rows_mm.coco's MatMul overlapped with the row
# kernel in 3 chunks of uneven rows.
row_knobs() {
    f=tests/gpu/rows_ln.coco
    chosen "$f" || return 0
    for p in $RANKS; do
        allowed "$f" "$p" || continue
        for knob in FUSED=nccl FUSED_VEC=1 ROWS_SHAPE=1,1 ROWS_SHAPE=6,2 ROWS_SHAPE=16,4 \
                    ROWS_SHAPE=stream; do
            export "COCONET_$knob"
            run rows_ln "$knob" "$p" "$f" --schedule rows
            unset "COCONET_${knob%%=*}"
        done
        for h in 3072 5000 12288 40000; do
            run rows_ln "S=4 H=$h" "$p" "$f" --schedule rows -D S=4 -D H="$h"
        done
        COCONET_OVERLAP_CHUNKS=3
        export COCONET_OVERLAP_CHUNKS
        run rows_mm "OVERLAP_CHUNKS=3" "$p" tests/gpu/rows_mm.coco --schedule rows_ol
        unset COCONET_OVERLAP_CHUNKS
    done
}

# The fused kernels' other instances, which the autotuner may pick: one
# element a step instead of 16-byte vectors, and one peer's loads in flight
# instead of all (COCONET_FUSED_VEC=1, COCONET_FUSED_PEERS=1), in both
# algorithms, at a size whose slices are uneven at P = 2 and 4.
tuning_knobs() {
    # overlap(MatMul, FusedAllReduce) chunk by chunk (src/gen/emit_overlap.c):
    # 3 chunks of uneven rows, with and without an SM split, by push (each
    # chunk's parts stored into the peers' staging slots), and with the last
    # chunk on the whole grid after the MatMul (COCONET_OVERLAP_TAIL=1)
    for f in examples/self_attention.coco examples/mlp.coco; do
        chosen "$f" || continue
        name=$(basename "$f" .coco)
        for p in $RANKS; do
            allowed "$f" "$p" || continue
            for knob in OVERLAP_SMS=0 OVERLAP_SMS=16 FUSED=push OVERLAP_TAIL=1; do
                export COCONET_OVERLAP_CHUNKS=3 "COCONET_$knob"
                run "$name" "B=8 S=16 H=64, OVERLAP_CHUNKS=3, $knob" "$p" "$f" -D B=8 -D S=16 -D H=64 \
                    --all-schedules
                unset COCONET_OVERLAP_CHUNKS "COCONET_${knob%%=*}"
            done
        done
    done
    # overlap(AllGather, MatMul) and overlap(MatMul, ReduceScatter) by the
    # collective's blocks (src/gen/emit_overlap_blocks.c): 3 chunks a block
    # (on one rank too: its own block in 3, each chunk by the whole
    # product's algorithm), and none (the two in order)
    for f in tests/gpu/overlap_blocks.coco tests/gpu/overlap_blocks_t.coco tests/gpu/gather_matmul.coco; do
        chosen "$f" || continue
        name=$(basename "$f" .coco)
        for p in $RANKS; do
            allowed "$f" "$p" || continue
            for c in 3 1; do
                export COCONET_OVERLAP_CHUNKS=$c
                run "$name" "file's, OVERLAP_CHUNKS=$c" "$p" "$f" --all-schedules
                unset COCONET_OVERLAP_CHUNKS
            done
        done
    done
    # one rank: the fused kernels' own instance where their elementwise form
    # runs by default (COCONET_ONE_RANK_FUSED=1, src/gen/emit_lsa.c)
    case " $RANKS " in *" 1 "*)
        for f in examples/adam.coco examples/sgd_momentum.coco examples/self_attention.coco \
                 examples/mlp.coco; do
            chosen "$f" || continue
            name=$(basename "$f" .coco)
            size="-D B=8 -D S=16 -D H=64"
            case $name in adam | sgd_momentum) size="-D N=1001" ;; esac
            COCONET_ONE_RANK_FUSED=1
            export COCONET_ONE_RANK_FUSED
            # shellcheck disable=SC2086 # the size's words
            run "$name" "$(echo $size | sed 's/-D //g'), ONE_RANK_FUSED=1" 1 "$f" $size --all-schedules
            unset COCONET_ONE_RANK_FUSED
        done ;;
    esac
    for f in examples/adam.coco examples/lamb.coco examples/adam_scattered.coco; do
        chosen "$f" || continue
        name=$(basename "$f" .coco)
        for p in $RANKS; do
            allowed "$f" "$p" || continue
            size=
            case $name in adam | lamb) size="-D N=1001" ;; esac
            for algo in oneshot twoshot; do
                COCONET_FUSED=$algo COCONET_FUSED_VEC=1 COCONET_FUSED_PEERS=1
                export COCONET_FUSED COCONET_FUSED_VEC COCONET_FUSED_PEERS
                # shellcheck disable=SC2086 # the size's words
                run "$name" "${size:+${size#-D } }$algo, VEC=1, PEERS=1" "$p" "$f" $size --all-schedules
                COCONET_FUSED_VEC=0
                # shellcheck disable=SC2086
                run "$name" "${size:+${size#-D } }$algo, PEERS=1" "$p" "$f" $size --all-schedules
                unset COCONET_FUSED COCONET_FUSED_VEC COCONET_FUSED_PEERS
            done
        done
    done
    # the push algorithm (contiguous operands), with vectors and one
    # element a step; Dropout (mlp) inside; lamb's and norms' fusions with
    # cross-rank Norms (two kernels) too, in rounds. Then, for those two,
    # one block of one warp in rounds of 1 and 3 steps (17 and 6 rounds at
    # N = 4128, P = 2)
    for f in examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco examples/mlp.coco \
             tests/gpu/norms.coco; do
        chosen "$f" || continue
        name=$(basename "$f" .coco)
        for p in $RANKS; do
            allowed "$f" "$p" || continue
            sizes=-
            # 3: empty parts; 4128: whole 16-byte vectors in every part but
            # parts not whole 256-byte lines, so the staging slots' shift
            # (coco_lsa_slot) with vectors
            case $name in adam | lamb | sgd_momentum) sizes="3 1001 4128" ;; esac
            for n in $sizes; do
                size=
                [ "$n" = - ] || size="-D N=$n"
                for vec in 0 1; do
                    COCONET_FUSED=push COCONET_FUSED_VEC=$vec
                    export COCONET_FUSED COCONET_FUSED_VEC
                    # shellcheck disable=SC2086 # the size's words
                    run "$name" "${size:+${size#-D } }push, VEC=$vec" "$p" "$f" $size --all-schedules
                    unset COCONET_FUSED COCONET_FUSED_VEC
                done
                case $name in lamb | norms) rounds="1 3" ;; *) rounds= ;; esac
                for round in $rounds; do
                    COCONET_FUSED=push COCONET_FUSED_BLOCKS=1 COCONET_FUSED_THREADS=32
                    COCONET_FUSED_PUSH_ROUND=$round
                    export COCONET_FUSED COCONET_FUSED_BLOCKS COCONET_FUSED_THREADS COCONET_FUSED_PUSH_ROUND
                    # shellcheck disable=SC2086 # the size's words
                    run "$name" "${size:+${size#-D } }push, 1 x 32 threads, ROUND=$round" "$p" "$f" \
                        $size --all-schedules
                    unset COCONET_FUSED COCONET_FUSED_BLOCKS COCONET_FUSED_THREADS COCONET_FUSED_PUSH_ROUND
                done
            done
        done
    done
    chosen tests/gpu/send.coco || return 0
    for p in $RANKS; do # the fused Send: only the vector width applies
        if [ "$p" = 1 ]; then # groups of one: each rank sends to itself
            set -- --group-size 1
        else
            set --
        fi
        allowed tests/gpu/send.coco "$p" "$@" || continue
        COCONET_FUSED_VEC=1
        export COCONET_FUSED_VEC
        run send "${1:+G=1, }file's group, VEC=1" "$p" tests/gpu/send.coco --all-schedules "$@"
        unset COCONET_FUSED_VEC
    done
}

# Fused collectives over scattered tensors, and ReduceScatters and
# AllGathers over them (kernels over the peers' memory addressing members
# through the bucket table), two-shot: at W = 41 (P = 4: uneven parts whose
# edges cut members and buckets; member starts at odd offsets, so vector
# and single-element paths), and at W = 401 on one block of 3 warps (every
# warp takes many buckets) and with buckets of 64 elements
# (COCONET_SCATTER_BUCKET); push (COCONET_FUSED=push: the stores into the
# peers' staging slots walk the buckets as the element loop does) at both;
# their NCCL paths at W = 41 (COCONET_FUSED=nccl: the members gathered into
# one buffer where NCCL needs it); and at W = 41 an output buffer for the
# new parameters (COCONET_NO_ALIAS=1), filled from the members.
scattered_fused() {
    for f in examples/adam_scattered.coco tests/gpu/lamb_scattered.coco; do
        chosen "$f" || continue
        name=$(basename "$f" .coco)
        for p in $RANKS; do
            COCONET_FUSED=twoshot
            export COCONET_FUSED
            run "$name" "W=41, twoshot" "$p" "$f" -D W=41 --all-schedules
            COCONET_FUSED=push
            run "$name" "W=41, push" "$p" "$f" -D W=41 --all-schedules
            COCONET_FUSED=nccl
            run "$name" "W=41, nccl" "$p" "$f" -D W=41 --all-schedules
            # an output buffer for the new parameters, filled from the
            # members at the end (by default the runtime gives none)
            COCONET_FUSED=auto
            COCONET_NO_ALIAS=1
            export COCONET_NO_ALIAS
            run "$name" "W=41, COCONET_NO_ALIAS=1" "$p" "$f" -D W=41 --all-schedules
            unset COCONET_NO_ALIAS
            COCONET_FUSED=twoshot
            COCONET_FUSED_BLOCKS=1
            COCONET_FUSED_THREADS=96
            export COCONET_FUSED_BLOCKS COCONET_FUSED_THREADS
            run "$name" "W=401, twoshot, 1 block of 96" "$p" "$f" -D W=401 --all-schedules
            COCONET_FUSED=push
            run "$name" "W=401, push, 1 block of 96" "$p" "$f" -D W=401 --all-schedules
            unset COCONET_FUSED_BLOCKS COCONET_FUSED_THREADS
            # buckets of 64 elements (COCONET_SCATTER_BUCKET): many a
            # member, many a warp, parts cutting them
            COCONET_SCATTER_BUCKET=64
            export COCONET_SCATTER_BUCKET
            COCONET_FUSED=twoshot
            run "$name" "W=401, twoshot, buckets of 64" "$p" "$f" -D W=401 --all-schedules
            COCONET_FUSED=push
            run "$name" "W=401, push, buckets of 64" "$p" "$f" -D W=401 --all-schedules
            unset COCONET_FUSED COCONET_SCATTER_BUCKET
        done
    done
}

# optimizer FILE N P: every schedule, at any N (uneven slices when P does
# not divide N: doc/language.md, section 6)
optimizer() {
    f=$1; n=$2; p=$3
    run "$(basename "$f" .coco)" "N=$n" "$p" "$f" -D "N=$n" --all-schedules --reference "$REFERENCE"
}

part_paper() {
    heading "## The paper's sizes"
    for p in $RANKS; do
        for b in $B_SIZES; do
            sizes="B=$b S=1024 H=3072"
            for f in examples/self_attention.coco examples/mlp.coco; do
                run "$(basename "$f" .coco)" "$sizes" "$p" "$f" -D "B=$b" -D S=1024 -D H=3072 \
                    --all-schedules --reference "$REFERENCE"
            done
            run allreduce "N=B*S*H=$((b * 1024 * 3072))" "$p" tests/gpu/allreduce.coco \
                -D "N=$((b * 1024 * 3072))"
        done
        for e in $N_POW; do
            n=$((1 << e))
            for f in examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco; do
                optimizer "$f" "$n" "$p"
            done
            run allreduce "N=2^$e" "$p" tests/gpu/allreduce.coco -D "N=$n"
        done
        for n in $N_ODD; do
            for f in examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco; do
                optimizer "$f" "$n" "$p"
            done
        done
    done
}

# tuned FILE P: `coconet tune` of FILE at its sizes must pick a variant,
# its timed runs after the L2 is emptied; for adam, `run --schedule tuned`
# must then run it (its table in the results), also with COCONET_COLD_L2=1
tuned() {
    cmd="$COCONET tune $1 --ranks $2 --iters 5 --timeout $LIMIT"
    echo "==== $cmd" >>"$LOG"
    # shellcheck disable=SC2086 # the command's words
    timed $cmd
    cat "$TMP/out" "$TMP/err" >>"$LOG"
    best=$(grep -m 1 '^best at ' "$TMP/out")
    # the tuner's ranks time with the L2 emptied (COCONET_COLD_L2, rt/run.c)
    grep -q '^timed runs start with the L2 emptied' "$TMP/out" || best=
    if [ $rc -eq 0 ] && [ -n "$best" ]; then
        pass=$((pass + 1))
        echo "ok   $cmd ($best; $secs s)"
        # shellcheck disable=SC2016 # markdown's backquotes
        printf '`%s`: %s (%s s)\n\n' "$cmd" "$best" "$secs" >>"$OUT"
    else
        fail=$((fail + 1))
        echo "FAIL $cmd (status $rc): $(head -n 2 "$TMP/err" | tr '\n' ' ')"
        # shellcheck disable=SC2016 # markdown's backquotes
        printf '**failed** `%s` (status %s)\n\n' "$cmd" "$rc" >>"$OUT"
        return
    fi
    case $1 in
    */adam.coco)
        run adam "tuned" "$2" "$1" --schedule tuned
        export COCONET_COLD_L2=1
        run adam "tuned, COCONET_COLD_L2=1" "$2" "$1" --schedule tuned
        unset COCONET_COLD_L2
        # the tuner's object, found in the cache: no build of its own
        if grep -q '^cuda: cached ' "$TMP/out"; then
            pass=$((pass + 1))
            echo "ok   run --schedule tuned at P = $2 runs the tuner's object (cached)"
        else
            fail=$((fail + 1))
            echo "FAIL run --schedule tuned at P = $2 built its own object: $(grep -m 1 '^cuda: ' "$TMP/out")"
        fi ;;
    esac
}

part_tune() {
    heading "## coconet tune, examples at their own sizes"
    for p in $RANKS; do
        for f in examples/adam.coco examples/self_attention.coco; do
            chosen "$f" || continue
            allowed "$f" "$p" || continue
            if [ "$PREBUILD" = 1 ]; then prebuild "$f" --all-schedules --ranks "$p"; else tuned "$f" "$p"; fi
        done
    done
}

# the parts faults and sanitize
. tests/gpu/faults.sh

# the part torch: tests/gpu/torch.sh, its own table in $OUT.torch.md
part_torch() {
    [ "$PREBUILD" = 1 ] && return # torch.sh builds its programs itself, in parallel
    [ "${BUILD_ONLY:-0}" = 1 ] && return
    RANKS="$RANKS" sh tests/gpu/torch.sh "$OUT.torch.md" >"$TMP/torch.out" 2>&1
    rc=$?
    n=$(grep -c '| PASS |' "$OUT.torch.md")
    m=$(grep -c '| FAIL |' "$OUT.torch.md")
    echo "torch (tests/gpu/torch.sh, P in $RANKS): $n checks passed, $m failed: $OUT.torch.md" |
        tee -a "$OUT"
    if [ $rc -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}

# P beyond the GPUs of this machine cannot run: left out, and said so
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
# CUDA_VISIBLE_DEVICES, where set, names the GPUs coconet's ranks may see
# shellcheck disable=SC2031 # the caller's (faults.sh sets its own in a subshell)
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    seen=$(printf '%s\n' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    [ "$seen" -lt "${ngpu:-0}" ] && ngpu=$seen
fi
if [ "${ngpu:-0}" -gt 0 ]; then
    kept=
    for p in $RANKS; do
        if [ "$p" -le "$ngpu" ]; then kept="$kept $p"; else
            echo "P=$p left out: this machine has $ngpu GPUs" | tee -a "$OUT"
        fi
    done
    RANKS=$kept
fi

# Each part twice: its builds first, in parallel (nvcc is the slow step of a
# first run), then its runs one after another.
for part in $PARTS; do
    PREBUILD=1
    "part_$part"
    wait
    nbuilding=0
    [ "${BUILD_ONLY:-0}" = 1 ] && continue
    PREBUILD=0
    "part_$part"
done
[ "${BUILD_ONLY:-0}" = 1 ] && { echo "built (BUILD_ONLY=1): $LOG.build"; exit 0; }
echo "$pass runs passed, $fail failed, $skip example x P combinations skipped (P not allowed)" |
    tee -a "$OUT"
echo "table: $OUT, every run's output: $LOG"
[ $fail -eq 0 ]

#!/bin/sh
# bench/mp.sh: the paper's Figure 10, on one machine with P GPUs, in one run:
# every schedule of the model-parallel layers (examples/self_attention.coco,
# K = H; examples/mlp.coco, K = 4H; at B in SIZES, S = 1024, H = 3072) and of
# the pipeline (examples/pipeline.coco, 2 groups of P/2 ranks, at B in
# PIPE_SIZES, S = 2048, H = 12288: GPT-3's S and H, the paper's section 6.3),
# each checked against the program's CPU run (`--all-schedules --reference
# program`), beside the PyTorch baselines of bench/torch_mp.py (Megatron-style
# layer and its parts, async TP's fused_matmul_reduce_scatter, the
# Megatron-style pipeline step), in FP16 and BF16 (a copy of each example with
# its FP16 written BF16). Builds first (`make`, then every run's generated
# code at once). NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
#
#   OUT=/tmp/mp P=4 sh bench/mp.sh
#   OUT=/tmp/mp P=2 SIZES=8 DTYPES=fp16 LAYERS="mlp pipeline" ITERS=10 sh bench/mp.sh
#   OUT=/tmp/mp P=4 BUILD_ONLY=1 sh bench/mp.sh      # build everything, time nothing
#
# Variables: OUT (build/mp), P (4), SIZES (B of the layers: "8 16"), S (1024),
# H (3072), LAYERS ("self_attention mlp pipeline allreduce"; allreduce is
# bench/allreduce_fused16.coco at N = B*S*H, its program and its FusedAllReduce
# beside NCCL's all_reduce; pipeline_linear may be added: its MatMul is
# K = H), PIPE_SIZES (B of the pipeline: "1 2"), PIPE_S
# (2048), PIPE_H (12288), DTYPES ("fp16 bf16"), ITERS (timed runs, 20),
# OL_CHUNKS ("1 4 8": ol_MM_fuse_RS_C_AG of self_attention and mlp run again
# with COCONET_OVERLAP_CHUNKS at each value, checked as the others, its rows
# named ol_MM_fuse_RS_C_AG/chunksC; the summary's ol column takes the
# fastest of its chunk counts, as `coconet tune` would; "": none),
# REFERENCE (coconet's --reference: program, the default, checks every
# schedule against the program's CPU run; none: times only, rows "unchecked"),
# DEADLINE (seconds from the start after which no run starts, the rest
# recorded SKIPPED; 0, the default: none), RUN_TIMEOUT (seconds of one
# coconet run, 300),
# BUILD_TIMEOUT (seconds of one build of generated code, 600),
# TORCH_TIMEOUT (seconds of all PyTorch baselines, 300), JOBS (builds at
# once, 8), TORCH (0: no PyTorch baselines), BUILD_ONLY (1: build only),
# COMMIT (the commit to name where the copy has no git repository), COCONET
# (the command, ./coconet).
#
# Writes under OUT: mp.log (the
# header: commit, GPUs, NCCL, torch; every command and its output, written as
# the run goes), mp.csv (bench/mp_merge.py: the rows with ratio_to_megatron),
# summary.md (its tables, printed last), fig10.svg (bench/plot_fig10.py),
# mp-logs.tgz (made on exit: build.log, torch.log, runs/*.txt, each coconet
# run's whole output, raw-*.txt, the rows, layer|B|S|H|K|P|G|dtype|variant|
# ms|check|notation, cpu/*.txt) and, when make fails, build.log. The BF16
# copies of the examples are build/mp-src/*_bf16.coco. Exit status: 0 when every run and check passed;
# 1 when anything failed (named on stderr and in mp.log); 2 for a missing
# tool or a bad variable, before anything runs; 3 when runs were skipped at
# the deadline but nothing failed.
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-build/mp}
P=${P:-4}
SIZES=${SIZES:-8 16}
S=${S:-1024}
H=${H:-3072}
LAYERS=${LAYERS:-self_attention mlp pipeline allreduce}
PIPE_SIZES=${PIPE_SIZES:-1 2}
PIPE_S=${PIPE_S:-2048}
PIPE_H=${PIPE_H:-12288}
DTYPES=${DTYPES:-fp16 bf16}
ITERS=${ITERS:-20}
REFERENCE=${REFERENCE:-program}
OL_CHUNKS=${OL_CHUNKS-1 4 8}
OL=ol_MM_fuse_RS_C_AG
DEADLINE=${DEADLINE:-0}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-600}
TORCH_TIMEOUT=${TORCH_TIMEOUT:-300}
JOBS=${JOBS:-8}
TORCH=${TORCH:-1}
BUILD_ONLY=${BUILD_ONLY:-0}
COCONET=${COCONET:-./coconet}
PIPE_GROUPS=2
# NVLink multicast off, for coconet and PyTorch alike
NCCL_NVLS_ENABLE=0
TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NVSHMEM_DISABLE_NVLS=1
export NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS
T0=$(date +%s)
failed=0
skipped=0

die() { echo "bench/mp.sh: $*" >&2; exit 2; }
fail() { echo "bench/mp.sh: FAILED: $*" >&2; echo "FAILED: $*" >>"$LOG"; failed=$((failed + 1)); }
elapsed() { echo $(($(date +%s) - T0)); }
# status RC: an exit status in words
status() { if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then echo "exit status $1 (timed out)"; else echo "exit status $1"; fi; }
say() { echo "[$(elapsed) s] $*"; echo "[$(elapsed) s] $*" >>"$LOG"; }

# ---- the variables and the tools, before anything runs ----
for v in "$P" "$S" "$H" "$PIPE_S" "$PIPE_H" "$ITERS" "$DEADLINE" "$RUN_TIMEOUT" "$BUILD_TIMEOUT" "$JOBS"; do
    case $v in '' | *[!0-9]*) die "'$v' is not a whole number (P, S, H, PIPE_S, PIPE_H, ITERS, DEADLINE, RUN_TIMEOUT, BUILD_TIMEOUT, JOBS)" ;; esac
done
for b in $SIZES $PIPE_SIZES; do
    case $b in '' | *[!0-9]* | 0) die "B = '$b' in SIZES or PIPE_SIZES is not a positive whole number" ;; esac
done
for d in $DTYPES; do
    case $d in fp16 | bf16) ;; *) die "unknown element type '$d' in DTYPES (fp16, bf16)" ;; esac
done
case $REFERENCE in program | each | none) ;; *) die "REFERENCE=$REFERENCE: program, each or none" ;; esac
# example LAYER: its program's file, FP16 (allreduce: bench/allreduce_fused16.coco)
example() {
    case $1 in allreduce) echo bench/allreduce_fused16.coco ;; *) echo "examples/$1.coco" ;; esac
}
for l in $LAYERS; do
    [ -f "$(example "$l")" ] || die "unknown layer '$l' in LAYERS: no $(example "$l")"
done
# shellcheck disable=SC2015 # die when either test fails
[ "$P" -ge 2 ] && [ $((P % PIPE_GROUPS)) -eq 0 ] || die "P = $P: needs an even P >= 2 (2 pipeline groups)"
for tool in make nvidia-smi python3 timeout awk sed; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed (or not on PATH)"
done
command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] ||
    die "nvcc is not on PATH nor in ${CUDA_HOME:-/usr/local/cuda}/bin: the CUDA runtime cannot be built"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$gpus" -ge "$P" ] || die "P = $P GPUs asked, nvidia-smi lists $gpus"
if [ "$TORCH" = 1 ] && [ "$BUILD_ONLY" != 1 ]; then
    python3 -c 'import torch' 2>/dev/null || die "python3 cannot import torch (the baselines need it)"
    python3 -c 'import matplotlib' 2>/dev/null ||
        echo "bench/mp.sh: python3 cannot import matplotlib: everything runs, but fig10.svg will not be drawn (a failure at the end)" >&2
    if command -v torchrun >/dev/null 2>&1; then TORCHRUN=torchrun
    else TORCHRUN="python3 -m torch.distributed.run"; fi
fi
mkdir -p "$OUT" || die "cannot create $OUT"
# OUT gets mp.log, mp.csv, summary.md, fig10.svg, mp-logs.tgz (the work
# folder W: every run's output, the rows, the BF16 programs) and build.log on
# a failed make
W=$(mktemp -d "${TMPDIR:-/tmp}/mp.XXXXXX") || die "mktemp failed"
mkdir -p "$W/runs" "$W/cpu" || die "cannot create $W"
# shellcheck disable=SC2064 # the folders are known now
trap "tar -C '$W' -czf '$OUT/mp-logs.tgz' . 2>/dev/null; rm -rf '$W'" EXIT
trap 'exit 1' INT TERM
LOG=$OUT/mp.log
: >"$LOG"
rm -f "$OUT/mp.csv" "$OUT/summary.md" "$OUT/fig10.svg" "$OUT/mp-logs.tgz" "$OUT/build.log"
# coconet's home and build cache: this tree's
COCONET_HOME=${COCONET_HOME:-$PWD}
COCONET_CACHE=${COCONET_CACHE:-$PWD/build/cache}
export COCONET_HOME COCONET_CACHE

# ---- build: coconet and the CUDA runtime (what make test-gpu builds) ----
say "make -j16 coconet build/libcoconet_cuda.so build/cuda.conf"
make -j16 coconet build/libcoconet_cuda.so build/cuda.conf >"$W/build.log" 2>&1 || {
    cp "$W/build.log" "$OUT/build.log"
    tail -n 30 "$W/build.log" >&2
    die "make failed (the whole log: $OUT/build.log)"
}
# shellcheck disable=SC2015 # when either is missing
[ -x ./coconet ] && [ -f build/libcoconet_cuda.so ] || {
    cp "$W/build.log" "$OUT/build.log"
    die "make built no ./coconet or build/libcoconet_cuda.so (nvcc or NCCL missing? see $OUT/build.log)"
}

# ---- the header ----
nccl_h=$(sed -n 's/^NCCL_INCLUDE=//p' build/cuda.conf)/nccl.h
nccl=$(awk '$1 == "#define" && $2 ~ /^NCCL_(MAJOR|MINOR|PATCH)$/ { v = v (v == "" ? "" : ".") $3 }
            END { print v }' "$nccl_h" 2>/dev/null)
# COMMIT as given (a copied tree's git may name an older commit)
if [ -n "${COMMIT:-}" ]; then commit="$COMMIT (COMMIT)"
elif commit=$(git rev-parse HEAD 2>/dev/null); then
    commit="$commit (git here, $(git status --porcelain 2>/dev/null | grep -c .) files differ; COMMIT unset)"
else commit="unknown (no git repository here; COMMIT unset)"; fi
HEADER=$W/header.txt
{
    echo "# bench/mp.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
    echo "command: OUT=$OUT P=$P SIZES=\"$SIZES\" S=$S H=$H LAYERS=\"$LAYERS\" PIPE_SIZES=\"$PIPE_SIZES\"" \
         "PIPE_S=$PIPE_S PIPE_H=$PIPE_H DTYPES=\"$DTYPES\" ITERS=$ITERS REFERENCE=$REFERENCE" \
         "DEADLINE=$DEADLINE sh bench/mp.sh"
    echo "commit: $commit"
    nvidia-smi -L
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
    # shellcheck disable=SC2015 # the CUDA_HOME nvcc where PATH's is missing or fails
    echo "nvcc: $( (command -v nvcc >/dev/null && nvcc --version || "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version) | tail -n 1)"
    echo "NCCL (coconet's, $nccl_h): ${nccl:-not read}"
    if [ "$TORCH" = 1 ] && [ "$BUILD_ONLY" != 1 ]; then
        python3 -c 'import torch; print("torch", torch.__version__, "with NCCL",
            ".".join(map(str, torch.cuda.nccl.version())), "(its own)")' 2>&1
    fi
    env | grep -E '^(NCCL_|COCONET_|TORCH_SYMM_MEM_|NVSHMEM_)' | sort
    echo
} >"$HEADER"
cat "$HEADER" >>"$LOG"
cat "$HEADER"

# ---- the programs: FILE of LAYER in DTYPE ----
# program LAYER DTYPE: the file (the example, or its BF16 copy in SRC: a
# path that stays the same from run to run, for the generated code names it
# and the build cache's key covers it)
SRC=build/mp-src
mkdir -p "$SRC" || die "cannot create $SRC"
program() {
    if [ "$2" = fp16 ]; then example "$1"; else echo "$SRC/$1_bf16.coco"; fi
}
group_size() { # LAYER: ranks of each group
    case $1 in pipeline*) echo $((P / PIPE_GROUPS)) ;; *) echo "$P" ;; esac
}
group_args() { # LAYER: the option that sets GROUP, for the pipelines
    case $1 in pipeline*) echo "--group-size $((P / PIPE_GROUPS))" ;; esac
}
for l in $LAYERS; do
    for d in $DTYPES; do
        f=$(program "$l" "$d")
        if [ "$d" = bf16 ]; then
            sed 's/\bFP16\b/BF16/g' "$(example "$l")" >"$f"
            # shellcheck disable=SC2015 # die when either check fails
            grep -q BF16 "$f" && ! grep -q '\bFP16\b' "$f" || die "$f: FP16 not rewritten BF16"
        fi
        # shellcheck disable=SC2046 # the option's words
        $COCONET run "$f" --ranks "$P" $(group_args "$l") --backend cpu --all-schedules \
            >"$W/cpu/$l-$d.txt" 2>&1 ||
            die "the CPU backend refuses $f at P = $P: $(grep -m 1 -e error -e WRONG "$W/cpu/$l-$d.txt")"
    done
done
say "programs checked on the CPU backend at their own sizes (P = $P): $LAYERS x $DTYPES"

# sizes LAYER: the B values of the layer
sizes() { case $1 in pipeline) echo "$PIPE_SIZES" ;; *) echo "$SIZES" ;; esac; }
# defs LAYER B: its -D options
defs() {
    case $1 in
    pipeline) echo "-D B=$2 -D S=$PIPE_S -D H=$PIPE_H" ;;
    allreduce) echo "-D N=$(($2 * S * H))" ;;
    *) echo "-D B=$2 -D S=$S -D H=$H" ;;
    esac
}
# width LAYER: K, the MatMul's inner dimension (empty without a MatMul)
width() {
    case $1 in
    mlp) echo $((4 * H)) ;;
    pipeline | allreduce) echo "" ;;
    *) echo "$H" ;;
    esac
}
# shape LAYER B: the raw row's layer|B|S|H|K|P|G
shape() {
    case $1 in
    pipeline) echo "$1|$2|$PIPE_S|$PIPE_H||$P|$(group_size "$1")" ;;
    *) echo "$1|$2|$S|$H|$(width "$1")|$P|$(group_size "$1")" ;;
    esac
}

# ---- build every run's generated code at once (sizes are run-time arguments) ----
say "building the generated code ($JOBS at once)"
pids=
n=0
broken=" " # LAYER-DTYPE whose build failed: not run
chunked() { case $1 in self_attention | mlp) return 0 ;; *) return 1 ;; esac; }
# built PIDS: waits for the builds PIDS ("pid:LAYER-DTYPE ..."), noting failures
built() {
    for pj in $1; do
        wait "${pj%%:*}" && continue
        fail "build of ${pj#*:}: $(grep -m 1 -i error "$W/runs/build-${pj#*:}.txt" | cut -c 1-200) (runs/build-${pj#*:}.txt in mp-logs.tgz)"
        broken="$broken${pj#*:} "
    done
}
for l in $LAYERS; do
    for d in $DTYPES; do
        # shellcheck disable=SC2046 # the sizes, one a word
        set -- $(sizes "$l")
        # shellcheck disable=SC2046,SC2086 # the options' words; COCONET, a command
        timeout "$BUILD_TIMEOUT" $COCONET run "$(program "$l" "$d")" $(defs "$l" "$1") --all-schedules \
            --backend cuda --ranks "$P" $(group_args "$l") --build-only >"$W/runs/build-$l-$d.txt" 2>&1 &
        pids="$pids $!:$l-$d"
        n=$((n + 1))
        if [ -n "$OL_CHUNKS" ] && chunked "$l"; then # its own source: the one schedule
            # shellcheck disable=SC2046,SC2086 # the options' words; COCONET, a command
            timeout "$BUILD_TIMEOUT" $COCONET run "$(program "$l" "$d")" $(defs "$l" "$1") \
                --all-schedules --schedule "$OL" --backend cuda --ranks "$P" --build-only \
                >"$W/runs/build-$l-$d-ol.txt" 2>&1 &
            pids="$pids $!:$l-$d-ol"
            n=$((n + 1))
        fi
        if [ $n -ge "$JOBS" ]; then
            built "$pids"
            pids=
            n=0
        fi
    done
done
built "$pids"
cat "$W"/runs/build-*.txt >>"$W/build.log"
say "built"
if [ "$BUILD_ONLY" = 1 ]; then
    [ $failed -eq 0 ] || exit 1
    echo "BUILD_ONLY=1: built, nothing timed (build.log in $OUT/mp-logs.tgz)"
    exit 0
fi

# ---- PyTorch's baselines ----
if [ "$TORCH" = 1 ]; then
    torch_layers=
    for l in $LAYERS; do
        case $l in self_attention | mlp | pipeline | pipeline_linear | allreduce) torch_layers="$torch_layers $l" ;; esac
    done
    # shellcheck disable=SC2086 # lists of words
    set -- --out "$W/raw-torch.txt" --batch $SIZES --seq "$S" --hidden "$H" --layers $torch_layers \
        --pipe-batch $PIPE_SIZES --pipe-seq "$PIPE_S" --pipe-hidden "$PIPE_H" \
        --pipe-groups "$PIPE_GROUPS" --dtypes $DTYPES --iters "$ITERS"
    say "PyTorch: $TORCHRUN --standalone --nproc_per_node=$P bench/torch_mp.py $*"
    # shellcheck disable=SC2086 # TORCHRUN may be two words
    timeout -k 20 "$TORCH_TIMEOUT" $TORCHRUN --standalone --nproc_per_node="$P" bench/torch_mp.py "$@" \
        >"$W/torch.log" 2>&1
    rc=$?
    cat "$W/torch.log" >>"$LOG"
    [ $rc -eq 0 ] || fail "PyTorch baselines: $(status $rc) (torch.log in mp-logs.tgz; its output is in mp.log): $(grep -m 1 -e Error -e error "$W/torch.log" | cut -c 1-300)"
    [ -s "$W/raw-torch.txt" ] || fail "PyTorch baselines wrote no row (see mp.log)"
    grep '|NA|' "$W/raw-torch.txt" | sed 's/^/  NA: /' >>"$LOG"
    say "PyTorch done: $(grep -c . "$W/raw-torch.txt" 2>/dev/null || echo 0) rows"
fi

# ---- coconet: every schedule, checked against the program's CPU run ----
RAW=$W/raw-coconet.txt
: >"$RAW"
limit=$((RUN_TIMEOUT / 2))
[ $limit -gt 300 ] && limit=300
# rows LAYER B DTYPE FILE: the table of FILE (coconet's output) as raw rows
rows() { awk -v pre="$(shape "$1" "$2")" -v dtype="$3" -f bench/mp_rows.awk "$4"; }
for d in $DTYPES; do
    for l in $LAYERS; do
        for b in $(sizes "$l"); do
            f=$(program "$l" "$d")
            rel=runs/$l-$d-B$b.txt
            txt=$W/$rel
            case $broken in *" $l-$d "*)
                echo "$(shape "$l" "$b")|$d|coconet|NA|FAILED|not run: its build failed" >>"$RAW"
                continue ;;
            esac
            if [ "$DEADLINE" -gt 0 ] && [ "$(elapsed)" -ge "$DEADLINE" ]; then
                echo "$(shape "$l" "$b")|$d|coconet|NA|SKIPPED|not run: past the deadline of $DEADLINE s" >>"$RAW"
                say "SKIPPED $l $d B=$b: past the deadline of $DEADLINE s"
                skipped=$((skipped + 1))
                continue
            fi
            # shellcheck disable=SC2046 # the options' words
            set -- run "$f" $(defs "$l" "$b") --all-schedules --backend cuda --ranks "$P" \
                $(group_args "$l") --iters "$ITERS" --reference "$REFERENCE" --timeout "$limit"
            say "$COCONET $*"
            # the table from stdout alone: no stderr line inside it
            # shellcheck disable=SC2086 # COCONET, a command
            timeout -k 20 "$RUN_TIMEOUT" $COCONET "$@" >"$W/run.out" 2>"$W/run.err"
            rc=$?
            { echo "==== $COCONET $*"; cat "$W/run.out"; echo "---- stderr"; cat "$W/run.err"
              echo "exit status $rc"; } >"$txt"
            cat "$txt" >>"$LOG"
            rows "$l" "$b" "$d" "$W/run.out" >"$W/rows.tmp"
            cat "$W/rows.tmp" >>"$RAW"
            nrows=$(grep -c . "$W/rows.tmp")
            if [ "$nrows" -eq 0 ]; then
                why=$(grep -h -m 1 -e error -e 'rank ' -e FAILED "$W/run.err" "$W/run.out" | head -n 1 | tr '|' '/' | cut -c 1-200)
                echo "$(shape "$l" "$b")|$d|coconet|NA|FAILED|$(status $rc): $why" >>"$RAW"
                fail "$l $d B=$b: no variant reported ($(status $rc): $why; $rel in mp-logs.tgz)"
            elif [ $rc -ne 0 ]; then
                fail "$l $d B=$b: $(status $rc): $(awk -F'|' '$11 != "bitwise" && $11 != "rounding" { printf "%s:%s ", $9, $11 }' "$W/rows.tmp")($rel in mp-logs.tgz)"
            fi
            say "$l $d B=$b: $nrows variants, $(status $rc)"
            chunked "$l" || continue
            for c in $OL_CHUNKS; do
                case $broken in *" $l-$d-ol "*) continue ;; esac
                # shellcheck disable=SC2046 # the options' words
                set -- run "$f" $(defs "$l" "$b") --all-schedules --schedule "$OL" --backend cuda \
                    --ranks "$P" --iters "$ITERS" --reference "$REFERENCE" --timeout "$limit"
                say "COCONET_OVERLAP_CHUNKS=$c $COCONET $*"
                # shellcheck disable=SC2086 # COCONET, a command
                COCONET_OVERLAP_CHUNKS=$c timeout -k 20 "$RUN_TIMEOUT" $COCONET "$@" \
                    >"$W/run.out" 2>"$W/run.err"
                rc=$?
                { echo "==== COCONET_OVERLAP_CHUNKS=$c $COCONET $*"; cat "$W/run.out"
                  echo "---- stderr"; cat "$W/run.err"; echo "exit status $rc"; } \
                    >"$W/runs/$l-$d-B$b-chunks$c.txt"
                cat "$W/runs/$l-$d-B$b-chunks$c.txt" >>"$LOG"
                rows "$l" "$b" "$d" "$W/run.out" | grep "|$OL|" |
                    sed "s/|$OL|/|$OL\/chunks$c|/" >"$W/rows.tmp"
                cat "$W/rows.tmp" >>"$RAW"
                if [ ! -s "$W/rows.tmp" ] || [ $rc -ne 0 ]; then
                    fail "$l $d B=$b, $OL with $c chunks: $(status $rc) (runs/$l-$d-B$b-chunks$c.txt in mp-logs.tgz)"
                fi
                say "$l $d B=$b: $OL with $c chunks, $(status $rc)"
            done
        done
    done
done
rm -f "$W/rows.tmp" "$W/run.out" "$W/run.err"

# ---- the CSV, the summary and the plot ----
say "python3 bench/mp_merge.py raw-*.txt -o $OUT/mp.csv"
python3 bench/mp_merge.py "$W"/raw-*.txt -o "$OUT/mp.csv" --summary "$OUT/summary.md" \
    >"$W/merge.log" 2>&1 || fail "bench/mp_merge.py: $(grep mp_merge.py "$W/merge.log" | head -n 3)"
cat "$W/merge.log" >>"$LOG"
python3 bench/plot_fig10.py "$OUT/mp.csv" -o "$OUT/fig10.svg" >"$W/plot.log" 2>&1 ||
    fail "bench/plot_fig10.py: $(tail -n 1 "$W/plot.log")"
cat "$W/plot.log" >>"$LOG"
say "done: $OUT/mp.csv, $OUT/fig10.svg, $OUT/summary.md, $LOG"
echo
cat "$W/merge.log"
if [ $failed -gt 0 ]; then
    echo "bench/mp.sh: $failed FAILED (see above and $LOG)"
    exit 1
fi
if [ $skipped -gt 0 ]; then
    echo "bench/mp.sh: $skipped runs SKIPPED at the deadline of $DEADLINE s (rerun with fewer SIZES, LAYERS or DTYPES)"
    exit 3
fi
exit 0

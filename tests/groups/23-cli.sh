# ---- cli: the coconet command as a newcomer meets it ----
# `coconet help` prints the help as --help does.
# shellcheck shell=sh # sourced by tests/run.sh
group cli

# cli_status WHAT STATUS EXPECT ARGS...: `coconet ARGS` exits STATUS with
# EXPECT in its stderr (stdout for status 0)
cli_status() {
    what=$1; status=$2; expect=$3; shift 3
    coco "$@"
    out=$TMP/err
    [ "$status" -eq 0 ] && out=$TMP/out
    if [ -n "$why" ]; then bad "cli $what: $why: $(err1)"
    elif [ "$rc" -ne "$status" ]; then bad "cli $what: exit status $rc, expected $status ($(err1))"
    elif ! grep -F -q -- "$expect" "$out"; then
        bad "cli $what: expected '$expect', got: $(head -n 1 "$out" | cut -c 1-300)"
    else ok; fi
}

# help: the command prints what --help prints
cli_status "help" 0 "usage: coconet COMMAND FILE [options]" help
cp "$TMP/out" "$TMP/help.out"
coco --help
if cmp -s "$TMP/out" "$TMP/help.out"; then ok; else bad "cli help: not what --help prints"; fi

# --schedule program: the program alone, with no schedule after it
cli_status "run --schedule program" 0 "adam: 4 simulated ranks" run examples/adam.coco --schedule program
if grep -q '^schedule ' "$TMP/out"; then bad "cli run --schedule program ran schedules"; else ok; fi
cli_status "print --schedule program" 0 "Execute adam(" print examples/adam.coco --schedule program
# a misspelt --schedule is refused before anything runs (nothing on stdout,
# even at a size whose run takes seconds) or is written, naming the schedules
cli_status "run --schedule papr" 1 \
    "examples/adam.coco: error: no schedule named 'papr' (its schedules: paper; --all-schedules adds" \
    run examples/adam.coco --schedule papr -D N=16777216
if [ -s "$TMP/out" ]; then bad "cli run --schedule papr: the program ran before the refusal"; else ok; fi
cli_status "run --schedule papr --all-schedules" 1 "(its schedules: paper, AR_Opt, " \
    run examples/adam.coco --schedule papr --all-schedules
cli_status "gen --schedule papr" 1 "no schedule named 'papr'" \
    gen examples/adam.coco --schedule papr -o "$TMP/gen-papr"
if [ -e "$TMP/gen-papr" ]; then bad "cli gen --schedule papr wrote $TMP/gen-papr"; else ok; fi

# run --backend cuda where the driver shows no GPU: refused at once, before
# nvcc builds anything (only on a machine without GPUs: elsewhere the
# driver's files are there); --build-only still builds (group tune)
if [ ! -d /proc/driver/nvidia/gpus ] && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    : >"$TMP/libcoconet_cuda.so"
    COCONET_CUDA_RUNTIME=$TMP/libcoconet_cuda.so
    export COCONET_CUDA_RUNTIME
    cli_status "run --backend cuda without GPUs" 1 \
        "coconet: --backend cuda: the NVIDIA driver shows no GPUs" run examples/adam.coco --backend cuda
    unset COCONET_CUDA_RUNTIME
    if [ -s "$TMP/out" ]; then bad "cli run --backend cuda without GPUs: it built or ran: $(head -n 1 "$TMP/out")"
    else ok; fi
fi

# one grammar for sizes: -D, tune's --sizes and --check-size read a size as
# decimal digits or 2^k, from 1 to 10^13 (the file's own limit), whole
# (a --sizes list of any length), and refuse the rest alike, as a bad
# command line (exit status 2); N/N*4: a program where N may be that large
printf 'Size N;\nTensor x(FP32, [N/N*4], Replicated, WORLD);\nVar y = x + 1;\nExecute f({x}, {y});\n' \
    >"$TMP/sizes.coco"
for v in 8 2^20 2^43 10000000000000; do
    cli_status "-D N=$v" 0 "ok" check "$TMP/sizes.coco" -D "N=$v"
done
cli_status "-D N=10000000000001" 2 "-D N=10000000000001: a size is at most 10^13" \
    check "$TMP/sizes.coco" -D N=10000000000001
cli_status "-D N=2^44" 2 "-D N=2^44: a size is at most 10^13" check "$TMP/sizes.coco" -D N=2^44
cli_status "--sizes N=2^44" 2 "'2^44': a size is at most 10^13" \
    tune "$TMP/sizes.coco" --plan --sizes N=2^44
for v in +8 " 16" 2^-0 "8 " 0x10 1e3 2^ 8.0; do
    cli_status "-D N='$v'" 2 "-D N=$v: a size must be a positive integer or 2^k" \
        check "$TMP/sizes.coco" -D "N=$v"
    cli_status "--sizes N='$v'" 2 "'$v': a size must be a positive integer or 2^k" \
        tune "$TMP/sizes.coco" --plan --sizes "N=8,$v"
    cli_status "--check-size N='$v'" 2 "'$v': a size must be a positive integer or 2^k" \
        tune "$TMP/sizes.coco" --plan --sizes N=8 --check-size "N=$v"
done
cli_status "tune --sizes N=2^40" 0 "adam at N=1099511627776, 4 ranks: " \
    tune examples/adam.coco --plan --sizes N=2^40
long=$(awk 'BEGIN { for (i = 0; i < 53; i++) printf "000000000000001008,"; printf "000000000000001008x" }')
cli_status "--sizes over 1023 characters" 2 "'000000000000001008x': a size must be" \
    tune examples/adam.coco --plan --sizes "N=$long"

# the structs that cross a module boundary (the public API's, the GPU
# runtime's, the tuner's timer's and the launcher's) are initialized by
# field name in src/: a positional list of a dozen fields maps a value onto
# the wrong field silently
types='coco_config|coco_cuda_options|coco_tune_options|coco_cuda_build|coco_roofline|coco_tensor'
types="$types|coco_summary|coco_comparison|struct coco_run|CocoRt[A-Za-z]*|TimerConfig|CudaRankPlace"
grep -rnE "(^|[^A-Za-z_])($types) +[A-Za-z_]+ *= *\{ *[^.} ]|\(($types)\) *\{ *[^.} ]" src \
    >"$TMP/positional"
if [ -s "$TMP/positional" ]; then bad "cli: positional initializers: $(head -n 3 "$TMP/positional")"
else ok; fi

# make run: a block per file headed by its name, every file run even after
# one failed, and one line at the end counting them (here on two files, the
# first refused); the build is already done, on every core and a line a step
make --no-print-directory run RUN_FILES="tests/errors/empty_file.coco examples/adam.coco" \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ]; then bad "cli make run: a failed file, yet exit status 0"
elif ! grep -q '^== examples/adam.coco$' "$TMP/out"; then
    bad "cli make run: no block for examples/adam.coco after a failed file"
elif [ "$(grep -c '^adam: 4 simulated ranks' "$TMP/out")" != 1 ]; then
    bad "cli make run: adam did not run once"
elif [ "$(tail -n 1 "$TMP/out")" != "make run: 2 examples ran, 1 failed: tests/errors/empty_file.coco" ]; then
    bad "cli make run: the last line is '$(tail -n 1 "$TMP/out")'"
else ok; fi
make --no-print-directory run RUN_FILES="examples/adam.coco examples/sgd_momentum.coco" >"$TMP/out" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ "$(tail -n 1 "$TMP/out")" != "make run: 2 examples ran, 0 failed" ]; then
    bad "cli make run: status $rc, last line '$(tail -n 1 "$TMP/out")'"
else ok; fi

# a FIFO or a directory is refused at once: opening a FIFO must not wait
# for a writer (as the program, a schedule file or a CUDA source)
mkfifo "$TMP/fifo.coco"
cli_status "a FIFO as the program" 1 "fifo.coco: error: cannot read a FIFO: a regular file is expected" \
    check "$TMP/fifo.coco"
cli_status "a FIFO as a schedule file" 1 "fifo.coco: error: cannot read a FIFO" \
    check examples/adam.coco --schedule-file "$TMP/fifo.coco"
cli_status "a directory as the program" 1 "error: cannot read a directory" check "$TMP"
rm -f "$TMP/fifo.coco"

# gen into a place it cannot write names the path and the reason: DIR/F.cu
# a directory (refused even to the superuser), or a read-only DIR (when not
# the superuser); nothing is left half written
mkdir -p "$TMP/gen/adam.cu"
cli_status "gen over a directory" 1 "coconet: cannot write $TMP/gen/adam.cu: Is a directory" \
    gen examples/adam.coco -o "$TMP/gen"
if [ "$(id -u)" -ne 0 ]; then
    mkdir -p "$TMP/gen-ro" && chmod 555 "$TMP/gen-ro"
    cli_status "gen into a read-only directory" 1 \
        "coconet: cannot write $TMP/gen-ro/adam.cu: Permission denied" gen examples/adam.coco -o "$TMP/gen-ro"
    chmod 755 "$TMP/gen-ro"
fi
rm -rf "$TMP/gen" "$TMP/gen-ro"
group_end

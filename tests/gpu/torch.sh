#!/bin/sh
# tests/gpu/torch.sh OUT: coconet.torch on GPUs (`make test-gpu`'s part
# torch, or alone), after `make` has built build/libcoconet.so and
# build/libcoconet_cuda.so, with python3, torch and torchrun there.
#
# For each P in RANKS (default "1 2"): builds the programs the checks use
# into the cache, in parallel (torch_check.py --build-only; where ONLY picks
# some checks, the examples', the tp layers' or the others' as it names
# them), then runs
# tests/gpu/torch_check.py under `torchrun --nproc_per_node=P`: every
# example under every schedule against run_cpu, the argument errors,
# coconet.torch.optim.Adam/LAMB (FP32, and Adam with BF16 parameters)
# against torch's AdamW and the LAMB formula, the optimizers' torch
# semantics (the optim:* checks: groups, schedulers, frozen parameters,
# checkpoints, the step overlapped with the backward), RowParallelLinear's
# forward and backward against torch, coconet.torch.tp's layers against torch
# (FP32, BF16, FP16) and their time at P = 1 beside torch, whose NCCL
# communicator the session's WORLD is (comm: PyTorch's, adopted), CUDA-graph capture,
# and the fused step's program variants (clipping, GradScaler, amsgrad,
# maximize, L2 decay, a captured step with a changing lr) against torch's fused
# optimizers (tests/gpu/torch_optstep.py: the optstep:* rows). Then
# tests/python/test_tp_torch.py (the tp layers on the CPU stand-ins, P = 1, 2
# and 4), and, at P = 1, whether a process that keeps PyTorch's own NCCL (no
# LD_PRELOAD) gets a session and a correct call (the "nccl" row).
#
# Which NCCL: by default the ranks start with LD_PRELOAD= the runtime's
# libnccl.so.2 (NCCL_LIB of build/cuda.conf), so that PyTorch and coconet
# share the NCCL the runtime was built with (python/coconet/torch says why);
# TORCH_PRELOAD="" runs them with PyTorch's own.
#
# The table (P, check, result, detail) goes to OUT (markdown), every run's
# output to OUT.log. Exit status non-zero on any FAIL.
# Variables: RANKS, TIMEOUT (seconds per torchrun, 900), JOBS (builds at once,
# 8), ONLY (regular expressions: the checks to run), COCONET_CACHE (default
# build/cache, kept between runs), TORCHRUN (python3 -m torch.distributed.run).
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-build/torch-results.md}
LOG=$OUT.log
RANKS=${RANKS:-1 2}
TIMEOUT=${TIMEOUT:-900}
JOBS=${JOBS:-8}
mkdir -p "$(dirname "$OUT")"
export COCONET_HOME="$PWD" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export COCONET_LIB="$PWD/build/libcoconet.so" COCONET_CACHE="${COCONET_CACHE:-$PWD/build/cache}"
NCCL_LIB=$(sed -n 's/^NCCL_LIB=//p' build/cuda.conf 2>/dev/null)
PRELOAD=${TORCH_PRELOAD-$NCCL_LIB/libnccl.so.2}
TORCHRUN=${TORCHRUN:-python3 -m torch.distributed.run}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/coconet-torch.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT

fail=0
{
    echo "# coconet.torch on GPUs"
    echo
    echo "Made by tests/gpu/torch.sh on $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname):"
    echo "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -);"
    echo "torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1),"
    echo "LD_PRELOAD=${PRELOAD:-"(none: PyTorch's NCCL)"}; commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}."
    echo
    echo "| P | check | result | detail |"
    echo "|---|---|---|---|"
} >"$OUT"
: >"$LOG"

for P in $RANKS; do
    echo "== P = $P: building" | tee -a "$LOG"
    # shellcheck disable=SC2086 # ONLY: a list of expressions
    python3 tests/gpu/torch_check.py --build-only --ranks "$P" --jobs "$JOBS" \
        ${ONLY:+--only $ONLY} >>"$LOG" 2>&1
    echo "== P = $P: torchrun" | tee -a "$LOG"
    # shellcheck disable=SC2086 # ONLY: a list of expressions
    # shellcheck disable=SC2086 # TORCHRUN: a command and its arguments
    LD_PRELOAD=$PRELOAD timeout -k 30 "$TIMEOUT" $TORCHRUN --standalone --nproc_per_node="$P" \
        tests/gpu/torch_check.py ${ONLY:+--only $ONLY} >"$TMP/out" 2>&1
    rc=$?
    cat "$TMP/out" >>"$LOG"
    grep '^RESULT|' "$TMP/out" | while IFS='|' read -r _ name status detail; do
        echo "| $P | $name | $status | $detail |"
    done >>"$OUT"
    n=$(grep -c '^RESULT|' "$TMP/out")
    if [ "$rc" -ne 0 ] || grep -q '^RESULT|[^|]*|FAIL|' "$TMP/out" || [ "$n" -eq 0 ]; then
        fail=1
        [ "$rc" -ne 0 ] && echo "| $P | (torchrun) | FAIL | exit status $rc after $n checks; see $LOG |" >>"$OUT"
    fi
done

# coconet.torch.tp on the CPU stand-ins (tests/python/test_tp_torch.py, which
# CI skips without torch): every program run by the reference executor, P = 1, 2, 4
echo "== coconet.torch.tp on the CPU stand-ins" | tee -a "$LOG"
if python3 -c 'import pytest' 2>/dev/null; then
    python3 -m pytest -q -p no:cacheprovider tests/python/test_tp_torch.py >"$TMP/out" 2>&1
    rc=$?
    cat "$TMP/out" >>"$LOG"
    res=$([ "$rc" -eq 0 ] && echo PASS || echo FAIL)
    [ "$rc" -eq 0 ] || fail=1
    echo "| 1, 2, 4 | tp: CPU stand-ins (test_tp_torch.py) | $res | $(tail -n 1 "$TMP/out") |" >>"$OUT"
else
    echo "| 1, 2, 4 | tp: CPU stand-ins (test_tp_torch.py) | SKIP | no pytest |" >>"$OUT"
fi

# PyTorch's own NCCL in the process: the session's choice of headers
echo "== P = 1: PyTorch's own NCCL (no LD_PRELOAD)" | tee -a "$LOG"
# shellcheck disable=SC2086 # TORCHRUN: a command and its arguments
timeout -k 30 "$TIMEOUT" $TORCHRUN --standalone --nproc_per_node=1 tests/gpu/torch_check.py \
    --only 'example:adam.coco:paper' >"$TMP/out" 2>&1
rc=$?
cat "$TMP/out" >>"$LOG"
line=$(grep '^RESULT|' "$TMP/out" | head -n 1)
why=$(grep -m 1 -o "this process loaded NCCL.*" "$TMP/out" | cut -c 1-300)
if [ -n "$line" ]; then
    echo "$line" | { IFS='|' read -r _ name status detail
        echo "| 1 | nccl: PyTorch's own NCCL, $name | $status | $detail |"; } >>"$OUT"
else
    echo "| 1 | nccl: PyTorch's own NCCL | FAIL | exit status $rc: ${why:-see $LOG} |" >>"$OUT"
fi

cat "$OUT"
exit $fail

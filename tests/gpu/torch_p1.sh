#!/bin/sh
# tests/gpu/torch_p1.sh OUT: every coconet.torch check and figure at P = 1 in
# one command, for a machine lent for a short time: after `make`, in the
# background at once, tests/gpu/torch.sh (every check, RANKS=1, NCCL
# preloaded), tests/gpu/torch_pip.sh (the install, coconet.check, the first
# call, then PIP_ONLY's checks: by default `comm`, where the runtime built
# against PyTorch's NCCL adopts its communicator, and the compile, meta and
# export rows) and train_tp.py --check (200 steps, with and
# without fused norms); then, alone on the GPU, the timings:
# bench/torch_tp_layers.py, bench/torch_sp_boundary.py (B = 8, BF16),
# train_dp.py (torch, coconet overlapped, coconet plain, torch-zero,
# torch-fsdp2) and train_tp.py (torch, torch --compile, torch-tp,
# torch-dtensor, coconet, coconet --fused-norm, coconet --compile).
#
# OUT (a folder) gets summary.md (a line per part, the checks' failures and
# every timing) and logs.tar.gz (every log): two files, whatever a run's
# transfer limits. Each part has a time limit (LIMIT seconds in all for the
# checks, 300 by default), so a cut run still leaves its summary.
# Variables: PARTS ("checks timings" by default: either or both), ONLY
# (torch.sh's checks, as it takes them: all by default), PIP_ONLY, LIMIT,
# STEPS (timed training steps, 30), NCCL (the library to preload, default the
# NCCL_LIB the runtime was built with), COMMIT (recorded).
cd "$(dirname "$0")/../.." || exit 2
PARTS=${PARTS:-checks timings}
LIMIT=${LIMIT:-300}
STEPS=${STEPS:-30}
. bench/run_log.sh
run_log_start "${1:?usage: tests/gpu/torch_p1.sh OUT}" p1 "coconet.torch at P = 1"
TR="python3 -m torch.distributed.run --standalone --nproc_per_node=1"

# ---- the checks, side by side ----
case " $PARTS " in *" checks "*) ;; *) LIMIT=0 ;; esac
if [ "$LIMIT" -gt 0 ]; then
(RANKS=1 TIMEOUT=$((LIMIT - 60)) timeout "$LIMIT" \
    sh tests/gpu/torch.sh "$LOGS/torch.md" >"$LOGS/torch.out" 2>&1
 say "torch.sh: $(grep -c '| PASS |' "$LOGS/torch.md") PASS, $(grep -c '| FAIL |' "$LOGS/torch.md") FAIL") &
(PYTHON=python3 RANKS=1 AHEAD=0 ONLY="${PIP_ONLY:-comm compile meta export}" TIMEOUT=$((LIMIT - 60)) \
    timeout "$LIMIT" sh tests/gpu/torch_pip.sh "$LOGS/pip.md" >"$LOGS/pip.out" 2>&1
 say "torch_pip.sh: $(grep -c '| PASS |' "$LOGS/pip.md") PASS, $(grep -c '| FAIL |' "$LOGS/pip.md") FAIL") &
(for o in "" "--fused-norm"; do
     # shellcheck disable=SC2086 # TR: a command and its arguments; o: an option
     LD_PRELOAD=$NCCL timeout $((LIMIT / 2)) $TR examples/torch/train_tp.py --check --steps 200 \
         --every 50 $o >"$LOGS/tpcheck$o.log" 2>&1
     say "train_tp.py --check $o: exit $?; $(grep -h 'check:' "$LOGS/tpcheck$o.log")"
 done) &
wait
{
    echo
    echo "Checks that did not pass:"
    echo
    grep -h '| FAIL |\|| SKIP |' "$LOGS/torch.md" "$LOGS/pip.md" 2>/dev/null | cut -c 1-400
    echo
} >>"$SUM"
fi
case " $PARTS " in *" timings "*) ;; *) cat "$SUM"; exit 0 ;; esac
printf 'Timings (alone on the GPU):\n\n' >>"$SUM"

# ---- the timings, one at a time ----
export LD_PRELOAD="$NCCL"
timeout 120 python3 bench/torch_tp_layers.py >"$LOGS/tp_layers.txt" 2>&1
say "bench/torch_tp_layers.py: exit $?"
grep '^tp,' "$LOGS/tp_layers.txt" | sed 's/^/    /' >>"$SUM"
# shellcheck disable=SC2086 # TR: a command and its arguments
timeout 240 $TR bench/torch_sp_boundary.py --out "$LOGS/sp_boundary.txt" --batch 8 \
    --dtypes bf16 --iters 10 >"$LOGS/sp_boundary.log" 2>&1
say "bench/torch_sp_boundary.py: exit $?"
sed 's/^/    /' "$LOGS/sp_boundary.txt" >>"$SUM" 2>/dev/null
i=0
for o in "--optimizer torch" "--optimizer coconet" "--optimizer coconet --no-overlap" \
    "--optimizer torch-zero" "--optimizer torch-fsdp2"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # TR: a command and its arguments; o: options
    timeout 90 $TR examples/torch/train_dp.py $o --steps "$STEPS" --every 10 >"$LOGS/dp$i.log" 2>&1
    say "train_dp.py $o: exit $?; $(grep -h 'median' "$LOGS/dp$i.log")"
done
for o in "--impl torch" "--impl torch --compile" "--impl torch-tp" "--impl torch-dtensor" \
    "--impl coconet" "--impl coconet --fused-norm" "--impl coconet --compile"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # TR: a command and its arguments; o: options
    timeout 120 $TR examples/torch/train_tp.py $o --steps "$STEPS" --every 10 >"$LOGS/tp$i.log" 2>&1
    say "train_tp.py $o: exit $?; $(grep -h 'median' "$LOGS/tp$i.log")"
done
cat "$SUM"

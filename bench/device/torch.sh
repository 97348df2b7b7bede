#!/bin/sh
# bench/device/torch.sh: coconet.torch on a lent GPU machine (issue 23).
# Builds coconet (make -j16), then, as PHASES says (default "tests1 testsP optim"):
#   tests1 tests/gpu/torch.sh at P = 1 (examples vs run_cpu, the optimizers
#          vs torch's AdamW and LAMB's formula, RowParallelLinear vs torch,
#          CUDA graphs, and PyTorch's own NCCL);
#   testsP the same at P (its builds begin in the background with tests1);
#   optim  bench/torch_optim_step.py at P: coconet.torch.optim.Adam's step
#          against all_reduce + torch.optim.AdamW(fused=True) on GPT-2 124M's
#          parameter shapes (its program built in the background from the
#          start), once for each bucket size in BUCKETS (COCONET_SCATTER_BUCKET;
#          default 0: the runtime's);
#   train  examples/torch/train_dp.py at P, STEPS steps (200) each: coconet
#          Adam, DDP + AdamW(fused), DDP + AdamW(foreach) (the control: how
#          far two correct runs drift apart), coconet LAMB, DDP + torch LAMB;
#          the loss curves compared (coconet vs fused, foreach vs fused, the
#          LAMBs), then the largest micro-batch of coconet Adam and of DDP;
#          train.md (the comparisons and each run's last line);
#   infer  examples/torch/infer_tp.py at P, at the widths WIDTHS (GPT-2
#          small's 768 and the paper's layer's 3072: 12 layers, 24 heads) and
#          batches BATCHES (1 2 4 8 16): infer.md; with PROFILE=1 also
#          torch.profiler's kernel tables at the largest batch,
#          infer-profile-WIDTH.txt; with GRAPHS=1 the forwards timed as
#          CUDA graphs' replays (--graphs).
# The ranks start with LD_PRELOAD= the runtime's NCCL (tests/gpu/torch.sh
# says why). Tables under $OUT: torch-tests-p1.md, torch-tests-pP.md,
# torch-optim.md; logs in
# torch-logs.tgz; the tables printed last. A first lease builds many
# programs (nvcc, about 20 for each P): split it over commands on one warm
# machine, whose build/cache keeps what the ones before built:
#
#   COMMIT=<sha> P=2 PHASES=tests1 sh bench/device/torch.sh
#   COMMIT=<sha> P=2 PHASES=testsP sh bench/device/torch.sh
#   COMMIT=<sha> P=2 PHASES=optim sh bench/device/torch.sh
#
# Variables: P (1), PHASES, ITERS (20), BUCKETS (0), STEPS (200), BATCH (train's
# micro-batch, 8), AMP (train's --amp: bf16, or none: FP32 without TF32),
# TRAIN_ARGS (more of train_dp.py's options), TRAIN_RUNS (train's optimizers,
# all five), MAXB (1: train's largest micro-batches; 0: not), WIDTHS, BATCHES,
# PROFILE, GRAPHS, JOBS (nvcc builds at once, 12),
# TORCH_PRELOAD (what LD_PRELOAD names; "" for none: PyTorch's own NCCL),
# COMMIT, DEADLINE (565).
# shellcheck source=bench/device/lease.sh
. bench/device/lease.sh
P=${P:-1}
PHASES=${PHASES:-tests1 testsP optim}
JOBS=${JOBS:-12}
ITERS=${ITERS:-20}
lease_logs torch-logs
lease_make
NCCL_LIB=$(sed -n 's/^NCCL_LIB=//p' build/cuda.conf)
PRELOAD=${TORCH_PRELOAD-$NCCL_LIB/libnccl.so.2}
export TORCH_PRELOAD="$PRELOAD" # tests/gpu/torch.sh's too
export PYTHONPATH="$PWD/python" COCONET_LIB="$PWD/build/libcoconet.so"
bg=
case " $PHASES " in *" optim "*)
    nice -n 10 python3 bench/torch_optim_step.py --build-only --ranks "$P" >"$W/optim-build.log" 2>&1 &
    ahead=$!
    bg="$bg $ahead" ;;
esac
case " $PHASES " in *" tests1 "*)
    if [ "$P" != 1 ]; then # P's builds, beside P = 1's run
        nice -n 10 python3 tests/gpu/torch_check.py --build-only --ranks "$P" --jobs 4 \
            >"$W/build-p$P.log" 2>&1 &
        bg="$bg $!"
    fi
    RANKS=1 JOBS=$JOBS TIMEOUT=$(left 60) COMMIT=$COMMIT timeout "$(left 30)" \
        sh tests/gpu/torch.sh "$OUT/torch-tests-p1.md" >"$W/torch-tests-p1.out" 2>&1
    echo "tests/gpu/torch.sh at P = 1: exit status $?"
    mv "$OUT/torch-tests-p1.md.log" "$W/" 2>/dev/null ;;
esac
case " $PHASES " in *" testsP "*)
    [ "$P" = 1 ] || {
        RANKS=$P JOBS=$JOBS TIMEOUT=$(left 60) COMMIT=$COMMIT timeout "$(left 30)" \
            sh tests/gpu/torch.sh "$OUT/torch-tests-p$P.md" >"$W/torch-tests-p$P.out" 2>&1
        echo "tests/gpu/torch.sh at P = $P: exit status $?"
        mv "$OUT/torch-tests-p$P.md.log" "$W/" 2>/dev/null
    } ;;
esac
case " $PHASES " in *" optim "*)
    wait "$ahead"
    : >"$OUT/torch-optim.md"
    for bk in ${BUCKETS:-0}; do # COCONET_SCATTER_BUCKET (0: the default)
        COCONET_SCATTER_BUCKET=$bk LD_PRELOAD=$PRELOAD timeout "$(left 10)" \
            python3 -m torch.distributed.run --standalone --nproc_per_node="$P" \
            bench/torch_optim_step.py --iters "$ITERS" --out "$W/torch-optim-$bk.md" \
            >"$W/torch-optim-$bk.out" 2>&1
        echo "bench/torch_optim_step.py (buckets: $bk): exit status $?"
        cat "$W/torch-optim-$bk.md" >>"$OUT/torch-optim.md" 2>/dev/null
    done ;;
esac
TR="python3 -m torch.distributed.run --standalone --nproc_per_node=$P"
case " $PHASES " in *" train "*)
    T=$OUT/train.md
    echo "# examples/torch/train_dp.py at P = $P, ${STEPS:-200} steps, micro-batch ${BATCH:-8}," \
        "--amp ${AMP:-bf16} ${TRAIN_ARGS:-} (commit ${COMMIT:-?})" >"$T"
    for o in ${TRAIN_RUNS:-coconet torch torch-foreach coconet-lamb torch-lamb}; do
        # shellcheck disable=SC2086 # TR: a command and its arguments; TRAIN_ARGS: options
        LD_PRELOAD=$PRELOAD timeout "$(left 60)" $TR examples/torch/train_dp.py --optimizer "$o" \
            ${TRAIN_ARGS:-} --steps "${STEPS:-200}" --batch "${BATCH:-8}" --amp "${AMP:-bf16}" \
            --csv "$W/$o.csv" >"$W/train-$o.out" 2>&1
        echo "- $o (exit $?): $(tail -n 1 "$W/train-$o.out")" >>"$T"
    done
    for pair in "coconet torch" "torch-foreach torch" "coconet-lamb torch-lamb"; do
        # shellcheck disable=SC2086 # pair: two names
        set -- $pair
        if [ ! -f "$W/$1.csv" ] || [ ! -f "$W/$2.csv" ]; then continue; fi
        echo "- $1 vs $2: $(python3 examples/torch/train_dp.py --compare "$W/$1.csv" "$W/$2.csv" 2>&1 | tail -n 1)" >>"$T"
    done
    [ "${MAXB:-1}" = 1 ] && for o in coconet torch; do
        # shellcheck disable=SC2086 # TR: a command and its arguments
        LD_PRELOAD=$PRELOAD timeout "$(left 30)" $TR examples/torch/train_dp.py --optimizer "$o" \
            --max-batch >"$W/maxb-$o.out" 2>&1
        rc=$?
        echo "- $(grep 'largest micro-batch' "$W/maxb-$o.out" || echo "$o: --max-batch exit $rc")" >>"$T"
    done ;;
esac
case " $PHASES " in *" infer "*)
    for w in ${WIDTHS:-768 3072}; do
        heads=$((w / 64 > 12 ? w / 128 : 12))
        prof=
        [ "${PROFILE:-0}" = 1 ] && prof="--profile $OUT/infer-profile-$w.txt"
        [ "${GRAPHS:-0}" = 1 ] && prof="$prof --graphs"
        # shellcheck disable=SC2086 # TR: a command and its arguments; prof: an option or none
        LD_PRELOAD=$PRELOAD timeout "$(left 20)" $TR examples/torch/infer_tp.py --width "$w" \
            --heads "$heads" --batches ${BATCHES:-1 2 4 8 16} $prof >"$W/infer-$w.out" 2>&1
        { echo "## width $w (exit $?)"; grep -v '^\*\|OMP_NUM_THREADS\|UserWarning\|warnings.warn' "$W/infer-$w.out"; } >>"$OUT/infer.md"
    done ;;
esac
# builds ahead still running at the deadline are stopped (a later command on
# the same machine finds in the cache what they finished)
alive() {
    for p in $bg; do kill -0 "$p" 2>/dev/null && return 0; done
    return 1
}
while [ "$(left 5)" -gt 1 ] && alive; do
    sleep 2
done
for p in $bg; do kill "$p" 2>/dev/null; done
for f in "$OUT/torch-tests-p1.md" "$OUT/torch-tests-p$P.md" "$OUT/torch-optim.md" "$OUT/train.md" \
    "$OUT/infer.md"; do
    [ -f "$f" ] && { echo; cat "$f"; }
done
# the status: a table with a FAIL row fails the command (absent tables do not)
! grep -qs '| FAIL |' "$OUT/torch-tests-p1.md" "$OUT/torch-tests-p$P.md"

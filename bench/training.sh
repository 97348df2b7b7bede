#!/bin/sh
# bench/training.sh OUT: the whole-step training figures at P GPUs of one
# machine, one run after another alone on the GPUs, every ratio beside its
# baseline in the same command:
#
#   dp     examples/torch/train_dp.py for each model of DP_MODELS: coconet
#          overlapped, coconet after the backward (--no-overlap), DDP + AdamW
#          (fused), ZeroRedundancyOptimizer, FSDP2 (ZeRO-2); the step time,
#          the optimizer's share, the peak memory (the arena counted)
#   batch  train_dp.py --max-batch of each optimizer on each model: the
#          largest micro-batch that fits (the paper's Table 4)
#   tp     examples/torch/train_tp.py for each model of TP_MODELS, with
#          sequence parallelism: Megatron-style torch (torch-tp), torch's
#          parallelize_module (torch-dtensor), async-TP (torch-async-tp),
#          coconet, coconet with its norms fused (--fused-norm), coconet
#          through torch.compile; torch.optim.AdamW for every one
#   check  train_tp.py --check at P (200 steps, FP32, TF32 off, with and
#          without sequence parallelism and fused norms): the loss within
#          1e-3 of the single-GPU model at every step
#   sp     bench/torch_sp_boundary.py: the sequence-parallel layer boundary,
#          forward and backward, in every implementation
#
# OUT (a folder) gets summary.md (a line per run, its median or result) and
# logs.tar.gz (every log). Each run has a time limit, so a cut run still
# leaves its line. NVLink multicast stays off.
#
#   P=4 sh bench/training.sh OUT
#   P=8 PARTS="dp batch" DP_MODELS=gpt-1.5b sh bench/training.sh OUT
#
# Variables: P (GPUs, 2), PARTS ("dp batch tp check sp"), DP_MODELS ("gpt2
# gpt-1.5b"), TP_MODELS ("gpt2-medium gpt-1.5b"), STEPS (timed steps, 30),
# BATCH (the micro-batch of the dp and tp runs, 8, of 1024 tokens),
# SP_ARGS (torch_sp_boundary.py's options, as "--hidden 8192 --seq 4096"),
# RUN_TIMEOUT (seconds of one run, 300), NCCL (the library to preload:
# default the NCCL_LIB the runtime was built with), COMMIT (recorded).
cd "$(dirname "$0")/.." || exit 2
P=${P:-2}
PARTS=${PARTS:-dp batch tp check sp}
DP_MODELS=${DP_MODELS:-gpt2 gpt-1.5b}
TP_MODELS=${TP_MODELS:-gpt2-medium gpt-1.5b}
STEPS=${STEPS:-30}
BATCH=${BATCH:-8}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. bench/run_log.sh
run_log_start "${1:?usage: bench/training.sh OUT}" training "Training at P = $P"
export LD_PRELOAD="$NCCL"
i=0

# one run: its options, the line of its log to report
run() {
    script=$1 what=$2
    shift 2
    i=$((i + 1))
    timeout -k 30 "$RUN_TIMEOUT" python3 -m torch.distributed.run --standalone \
        --nproc_per_node="$P" "$script" "$@" >"$LOGS/run$i.log" 2>&1
    rc=$?
    say "$(basename "$script") $*: exit $rc; $(grep -h "$what" "$LOGS/run$i.log" | tail -n 1)"
}

has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

if has dp; then
    for m in $DP_MODELS; do
        for o in "coconet" "coconet --no-overlap" "torch" "torch-zero" "torch-fsdp2"; do
            # shellcheck disable=SC2086 # o: an optimizer and its options
            run examples/torch/train_dp.py median --model "$m" --optimizer $o --steps "$STEPS" \
                --batch "$BATCH"
        done
    done
fi
if has batch; then
    for m in $DP_MODELS; do
        for o in coconet torch torch-zero torch-fsdp2; do
            run examples/torch/train_dp.py "largest micro-batch" --model "$m" --optimizer "$o" \
                --max-batch
        done
    done
fi
if has tp; then
    for m in $TP_MODELS; do
        for o in "--impl torch-tp" "--impl torch-dtensor" "--impl torch-async-tp" \
            "--impl coconet" "--impl coconet --fused-norm" "--impl coconet --compile"; do
            # shellcheck disable=SC2086 # o: an implementation and its options
            run examples/torch/train_tp.py median --model "$m" --sp $o --optimizer torch \
                --steps "$STEPS" --batch "$BATCH"
        done
    done
fi
if has check; then
    for o in "" "--sp" "--fused-norm" "--sp --fused-norm"; do
        # shellcheck disable=SC2086 # o: options
        run examples/torch/train_tp.py "check:" --check --steps 200 --every 50 $o
    done
fi
if has sp; then
    # shellcheck disable=SC2086 # SP_ARGS: options
    run bench/torch_sp_boundary.py "sp_boundary" --out "$LOGS/sp_boundary.txt" $SP_ARGS
    sed 's/^/    /' "$LOGS/sp_boundary.txt" >>"$SUM" 2>/dev/null
fi
cat "$SUM"

#!/bin/sh
# bench/device/torch.sh: coconet.torch on a lent GPU machine (issue 23).
# Builds coconet (make -j16), then, as PHASES says (default "tests optim"):
#   tests  tests/gpu/torch.sh at P = 1 and P (examples vs run_cpu, the
#          optimizers vs torch's AdamW and LAMB's formula, RowParallelLinear
#          vs torch, CUDA graphs, and PyTorch's own NCCL at P = 1);
#   optim  bench/torch_optim_step.py at P: coconet.torch.optim.Adam's step
#          against all_reduce + torch.optim.AdamW(fused=True) on GPT-2 124M's
#          parameter shapes (its program built in the background from the start).
# The ranks start with LD_PRELOAD= the runtime's NCCL (tests/gpu/torch.sh
# says why). Tables under $OUT: torch-tests.md, torch-optim.md; logs in
# torch-logs.tgz; the tables printed last. A first lease builds many
# programs (nvcc): split it over two commands on one warm machine, whose
# build/cache keeps what the first built:
#
#   COMMIT=<sha> P=2 PHASES=tests sh bench/device/torch.sh
#   COMMIT=<sha> P=2 PHASES=optim sh bench/device/torch.sh
#
# Variables: P (1), PHASES, ITERS (20), COMMIT, DEADLINE (565).
# shellcheck source=bench/device/lease.sh
. bench/device/lease.sh
P=${P:-1}
PHASES=${PHASES:-tests optim}
ITERS=${ITERS:-20}
lease_logs torch-logs
lease_make
NCCL_LIB=$(sed -n 's/^NCCL_LIB=//p' build/cuda.conf)
export PYTHONPATH="$PWD/python" COCONET_LIB="$PWD/build/libcoconet.so"
case " $PHASES " in *" optim "*)
    nice -n 10 python3 bench/torch_optim_step.py --build-only --ranks "$P" >"$W/optim-build.log" 2>&1 &
    ahead=$! ;;
esac
case " $PHASES " in *" tests "*)
    ranks=1
    [ "$P" != 1 ] && ranks="1 $P"
    RANKS=$ranks TIMEOUT=$(left 60) COMMIT=$COMMIT timeout "$(left 30)" \
        sh tests/gpu/torch.sh "$OUT/torch-tests.md" >"$W/torch-tests.out" 2>&1
    echo "tests/gpu/torch.sh: exit status $?"
    cp "$OUT/torch-tests.md.log" "$W/" 2>/dev/null && rm -f "$OUT/torch-tests.md.log" ;;
esac
case " $PHASES " in *" optim "*)
    wait "$ahead"
    LD_PRELOAD=$NCCL_LIB/libnccl.so.2 timeout "$(left 10)" python3 -m torch.distributed.run --standalone \
        --nproc_per_node="$P" bench/torch_optim_step.py --iters "$ITERS" \
        --out "$OUT/torch-optim.md" >"$W/torch-optim.out" 2>&1
    echo "bench/torch_optim_step.py: exit status $?" ;;
esac
for f in "$OUT/torch-tests.md" "$OUT/torch-optim.md"; do
    [ -f "$f" ] && { echo; cat "$f"; }
done

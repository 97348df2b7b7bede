"""bench/torch_adam.py: the baseline a PyTorch user has for data-parallel Adam:
torch.distributed.all_reduce of the gradients, then torch._fused_adam_ (one
multi-tensor kernel). One process per GPU (NCCL), timed like coconet: CUDA
events, 3 warm-up runs, the median of ITERS runs, slowest rank.

    python3 bench/torch_adam.py --ranks 4 --pow 20 24 28 [--iters 20]

Prints CSV lines: torch,<precision>,<N>,<allreduce ms>,<allreduce+adam ms>
for precision fp32 (FP32 gradients and state) and mixed (FP16 gradients
all-reduced, cast to FP32, FP32 parameters and state)."""
import argparse
import os
import statistics

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def timed(fn, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(3 + iters):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(stop))
    t = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def run(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.ranks,
                            device_id=torch.device("cuda", rank))
    for p in args.pow:
        n = 1 << p
        for precision in ("fp32", "mixed"):
            gtype = torch.float32 if precision == "fp32" else torch.float16
            g = torch.randn(n, device="cuda", dtype=gtype)
            par = torch.randn(n, device="cuda")
            m = torch.zeros(n, device="cuda")
            v = torch.zeros(n, device="cuda")
            steps = torch.tensor([1.0], device="cuda")

            def allreduce():
                dist.all_reduce(g)

            def step():
                dist.all_reduce(g)
                grad = g if precision == "fp32" else g.float()
                torch._fused_adam_([par], [grad], [m], [v], [], [steps], lr=1e-3, beta1=0.9,
                                   beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False,
                                   maximize=False)

            ar = timed(allreduce, args.iters)
            both = timed(step, args.iters)
            if rank == 0:
                print(f"torch,{precision},{n},{ar:.4f},{both:.4f}", flush=True)
            del g, par, m, v
            torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--pow", type=int, nargs="+", default=[20, 24])
    ap.add_argument("--iters", type=int, default=20)
    mp.spawn(run, args=(ap.parse_args(),), nprocs=ap.parse_args().ranks)

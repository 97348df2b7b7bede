"""bench/torch_overlap_timeline.py: where the time of one overlapped
model-parallel layer goes, kernel by kernel, under torchrun.

Runs coconet's row-parallel layer (coconet.programs.row_parallel, FP16,
out = AllReduce(x @ W) + b + r; the `paper` schedule, ol(MM,fuse(RS-C-AG)))
at B x 1024 tokens, input width K (sliced over the ranks), output width H,
and records one call, after a few, with torch.profiler (CUPTI: every
kernel of the process, coconet's included). Prints, for each rank, the
call's kernels in start order: stream, start and end in microseconds from the
call's first kernel, duration and name (the MatMul's chunks, the chunk
signals, the fused collective), then the call's span. The overlap's knobs
come from the environment as coconet reads it (COCONET_OVERLAP_CHUNKS,
COCONET_OVERLAP_SMS, COCONET_OVERLAP_TAIL, COCONET_FUSED).

    torchrun --nproc_per_node=P bench/torch_overlap_timeline.py [--batch 8]
        [--k 12288] [--h 3072] [--out FILE]
    python3 bench/torch_overlap_timeline.py --build-only --ranks P   (its program, into the cache)"""
import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("COCONET_LIB", os.path.join(ROOT, "build", "libcoconet.so"))
os.environ.setdefault("COCONET_HOME", ROOT)


def kernels(trace_path):
    """The trace's GPU kernels: (start us, duration us, stream, name)."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    out = [(e["ts"], e["dur"], e.get("args", {}).get("stream", e.get("tid")), e["name"])
           for e in events if e.get("cat") == "kernel"]
    return sorted(out)


def build_only(ranks):
    """The layer's program built into the cache (no GPU needed to start)."""
    import coconet
    from coconet import _session as S, programs
    cache = os.environ.get("COCONET_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                             "coconet")
    path = programs.write(programs.row_parallel("FP16", 0.0, True), "row_parallel",
                          os.path.join(cache, "torch-programs"))
    print(S.build(coconet.load(path, ranks=ranks), "paper"), flush=True)


def main(a):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    import coconet.torch as ct
    from coconet import programs
    sess = ct.session()
    P, rank = sess.nranks, sess.rank
    path = programs.write(programs.row_parallel("FP16", 0.0, True), "row_parallel",
                          os.path.join(ct._cache_dir(), "torch-programs"))
    B, S, K, H = a.batch, 1024, a.k, a.h
    fn = ct.compile(path, schedule="paper", sizes={"B": B, "S": S, "K": K, "H": H})
    g = torch.Generator(device="cuda").manual_seed(1 + rank)
    x = torch.randn(B, S, K // P, device="cuda", dtype=torch.float16, generator=g)
    w = torch.randn(K // P, H, device="cuda", dtype=torch.float16, generator=g) * 0.02
    b = ct.zeros([H], torch.float16)
    r = ct.zeros([B, S, H], torch.float16)
    out = ct.empty([B, S, H], torch.float16)
    args = {"x": x, "w": w, "b": b, "r": r}
    for _ in range(5):
        fn(args, out={"out": out})
    torch.cuda.synchronize()
    if dist.is_initialized():
        dist.barrier()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(args, out={"out": out})
        torch.cuda.synchronize()
    trace = os.path.join(tempfile.mkdtemp(), "trace-%d.json" % rank)
    prof.export_chrome_trace(trace)
    call = kernels(trace)
    if not call:
        raise SystemExit("rank %d: the profiler recorded no kernel" % rank)
    t0 = call[0][0]
    knobs = " ".join("%s=%s" % (k, os.environ[k]) for k in sorted(os.environ)
                     if k.startswith("COCONET_OVERLAP") or k == "COCONET_FUSED")
    lines = ["rank %d of %d, B=%d S=%d K=%d H=%d, %s" % (rank, P, B, S, K, H, knobs or "defaults"),
             "| stream | start us | end us | us | kernel |", "|---|---|---|---|---|"]
    for ts, dur, stream, name in call:
        lines.append("| %s | %.1f | %.1f | %.1f | %s |" % (stream, ts - t0, ts - t0 + dur, dur,
                                                         name[:60]))
    span = max(ts + dur for ts, dur, _, _ in call) - t0
    lines.append("call span: %.1f us (%d kernels)" % (span, len(call)))
    text = "\n".join(lines) + "\n"
    gathered = [None] * P
    if dist.is_initialized():
        dist.all_gather_object(gathered, text)
    else:
        gathered = [text]
    if rank == 0:
        print("\n".join(gathered), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write("\n".join(gathered) + "\n")
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--k", type=int, default=12288, help="the input's width (all ranks')")
    ap.add_argument("--h", type=int, default=3072, help="the output's width")
    ap.add_argument("--out", help="appends the tables to FILE")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--ranks", type=int, default=1, help="with --build-only")
    a = ap.parse_args()
    if a.build_only:
        build_only(a.ranks)
    else:
        main(a)

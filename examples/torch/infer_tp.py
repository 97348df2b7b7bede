"""infer_tp.py: tensor-parallel inference of a GPT-2-style model (Megatron-LM's
layout: attention heads and the MLP's hidden units split over the ranks),
its row-parallel layers (attention output and MLP output projections, with
bias and residual) either coconet's RowParallelLinear (one program: the
MatMul overlapped with a FusedAllReduce that adds bias and residual, the
`paper` schedule, ol(MM,fuse(RS-C-AG))) or torch.matmul + NCCL all_reduce +
bias + residual. FP16, eval mode (no dropout), the same weights on both.

    torchrun --nproc_per_node=P examples/torch/infer_tp.py [--batches 1 2 4 8 16]
        [--seq 1024] [--iters 10] [--schedule paper|fused|program]
        [--width 768 --layers 12 --heads 12] [--arena-gib G] [--all-logits]
        [--graphs] [--profile FILE]

Prints, for each batch size, the forward pass's (prefill: B x seq tokens)
time and tokens per second with each implementation, the speed-up, and how
far coconet's results are from torch's (relative to their largest): the
final hidden states at every position and the logits; then the
row-parallel layer alone at each batch size (attention's, K = width, and the
MLP's, K = 4 width). With --graphs each forward is captured once in a CUDA
graph per implementation and batch, and timed as its replays (checked equal
to the eager forward): the GPU's time, where eager forwards at small batches
are bound by the host's launches.

The head (tied to the token embedding, not split over the ranks) computes
the logits of the last position only, as a prefill for generation does:
over every position (--all-logits) its MatMul, B x seq x 50257 wide with a
vocabulary that is not a multiple of 8, ran on a slow GEMM kernel of torch's
and took half the forward's time on both implementations (torch.profiler,
--profile)."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("COCONET_LIB", os.path.join(ROOT, "build", "libcoconet.so"))
os.environ.setdefault("COCONET_HOME", ROOT)

import gpt2  # noqa: E402


def row(layer, x, resid, impl):
    """A row-parallel projection with bias and residual."""
    if impl == "coconet":
        return layer(x, resid)
    y = torch.matmul(x, layer.weight)
    if dist.is_initialized():
        dist.all_reduce(y)
    return y + layer.bias + resid


class TPBlock(torch.nn.Module):
    def __init__(self, full, P, rank, heads, schedule, max_tokens):
        super().__init__()
        from coconet.torch.nn import RowParallelLinear
        C = full.c_proj.weight.shape[0]
        c = C // P
        self.heads, self.c = heads // P, c
        self.ln_1, self.ln_2 = full.ln_1, full.ln_2
        w, b = full.c_attn.weight.data, full.c_attn.bias.data  # [3C, C]: q, k, v rows
        rows = torch.cat([torch.arange(i * C + rank * c, i * C + (rank + 1) * c) for i in range(3)])
        self.qkv = torch.nn.Linear(C, 3 * c).to(w.device, w.dtype)
        self.qkv.weight.data.copy_(w[rows])
        self.qkv.bias.data.copy_(b[rows])
        f = full.c_fc.weight.shape[0] // P
        self.fc = torch.nn.Linear(C, f).to(w.device, w.dtype)
        self.fc.weight.data.copy_(full.c_fc.weight.data[rank * f:(rank + 1) * f])
        self.fc.bias.data.copy_(full.c_fc.bias.data[rank * f:(rank + 1) * f])
        kw = dict(p_drop=0.1, schedule=schedule, max_tokens=max_tokens)
        self.attn_out = RowParallelLinear.from_full(full.c_proj.weight.data.t().contiguous(),
                                                    full.c_proj.bias.data, **kw)
        self.mlp_out = RowParallelLinear.from_full(full.mlp_proj.weight.data.t().contiguous(),
                                                   full.mlp_proj.bias.data, **kw)

    def forward(self, x, impl):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(self.c, dim=2)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = row(self.attn_out, y.transpose(1, 2).reshape(B, T, self.c), x, impl)
        h = F.gelu(self.fc(self.ln_2(x)), approximate="tanh")
        return row(self.mlp_out, h, x, impl)


class TPModel(torch.nn.Module):
    def __init__(self, full, P, rank, heads, schedule, max_tokens):
        super().__init__()
        import coconet.torch as ct
        self.wte, self.wpe, self.ln_f = full.wte, full.wpe, full.ln_f
        self.h = torch.nn.ModuleList(TPBlock(b, P, rank, heads, schedule, max_tokens)
                                     for b in full.h)
        C = full.wte.weight.shape[1]
        # the residual stream's first value, in the arena, where the fused
        # collectives reach the peers' copies
        self.x0 = ct.empty([max_tokens * C], full.wte.weight.dtype)

    def hidden(self, idx, impl):
        """The final LayerNorm's output at every position."""
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        if impl == "coconet":
            x = self.x0[:x.numel()].view(x.shape).copy_(x)
        for b in self.h:
            x = b(x, impl)
        return self.ln_f(x)

    def forward(self, idx, impl, all_logits=False):
        """The prefill's logits: of the last position (what generation
        samples the next token from), or of every position."""
        h = self.hidden(idx, impl)
        return F.linear(h if all_logits else h[:, -1], self.wte.weight)


def timed(fn, iters, calls=1):
    """The median over iters of the time between CUDA events around `calls`
    calls of fn (after a synchronisation and a barrier), per call; the
    slowest rank's. calls=1: a call's latency, its host work included;
    more: calls enqueued back to back, the GPU's time (the host's hidden
    where it is shorter)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for i in range(3 + iters):
        torch.cuda.synchronize()
        if dist.is_initialized():
            dist.barrier()
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        e.synchronize()
        if i >= 3:
            ms.append(s.elapsed_time(e) / calls)
    m = torch.tensor([statistics.median(ms)], device="cuda", dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
    return float(m)


def graphed(fn):
    """fn captured in a CUDA graph (after a warm-up call on a side stream,
    as torch asks): (the graph, the output tensor it writes)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph, out


def host_ms(fn, iters):
    """The median host time of one call of fn (the GPU drained first)."""
    ms = []
    for i in range(3 + iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms[3:])


def profile(model, layer, x, r, idx, path, rank, all_logits):
    """torch.profiler's GPU kernel table (rank 0's) of 3 forwards of the
    model and of 10 calls of the layer, with each implementation, to path."""
    from torch.profiler import ProfilerActivity, profile as prof
    out = []
    for what, fn in (("model", lambda impl: model(idx, impl, all_logits)),
                     ("layer", lambda impl: [row(layer, x, r, impl) for _ in range(10)])):
        for impl in ("torch", "coconet"):
            fn(impl)
            torch.cuda.synchronize()
            if dist.is_initialized():
                dist.barrier()
            with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                for _ in range(3 if what == "model" else 1):
                    fn(impl)
                torch.cuda.synchronize()
            out.append("## %s, %s (%s)\n\n%s\n" % (
                what, impl, "3 forwards" if what == "model" else "10 calls back to back",
                p.key_averages().table(sort_by="cuda_time_total", row_limit=18,
                                       max_name_column_width=70)))
    if rank == 0:
        with open(path, "w") as f:
            f.write("\n".join(out))


def main(a):
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank() if dist.is_initialized() else 0
    P = dist.get_world_size() if dist.is_initialized() else 1
    torch.manual_seed(a.seed)
    cfg = dict(gpt2.GPT2_SMALL, ctx=max(a.seq, 1024), width=a.width, layers=a.layers,
               heads=a.heads)
    full = gpt2.GPT(**cfg).cuda().half().eval()
    max_tokens = max(a.batches) * a.seq
    # the arena: each row-parallel layer's output and the residual stream's
    # first value (max_tokens x width FP16 each), and room for the programs'
    # workspaces, one per shape called (--arena-gib decides instead)
    import coconet.torch as ct
    need = (2 * a.layers + 1) * max_tokens * a.width * 2 + (4 << 30)
    ct.session(arena_bytes=int(a.arena_gib * 2 ** 30) if a.arena_gib else need)
    model = TPModel(full, P, rank, a.heads, a.schedule, max_tokens).eval()
    del full.h
    say = print if rank == 0 else (lambda *x, **k: None)
    say("GPT-2-style model: width %d, %d layers, %d heads; P = %d; FP16; seq %d; schedule %s; "
        "logits of %s; %s; %s" % (a.width, a.layers, a.heads, P, a.seq, a.schedule,
                                  "every position" if a.all_logits else "the last position",
                                  "forwards replayed from CUDA graphs" if a.graphs
                                  else "eager forwards", torch.cuda.get_device_name()))
    say("| batch | torch ms | coconet ms | torch tokens/s | coconet tokens/s | speed-up | "
        "hidden states rel. diff | logits rel. diff |")
    say("|---|---|---|---|---|---|---|---|")
    g = torch.Generator(device="cpu").manual_seed(a.seed)
    with torch.no_grad():
        for B in a.batches:
            idx = torch.randint(0, cfg["vocab"], (B, a.seq), generator=g).cuda()
            diff = []
            for fn in (model.hidden, model):  # every position's state, the logits
                ref = fn(idx, "torch").float()
                got = fn(idx, "coconet").float()
                diff.append(float((got - ref).abs().max() / ref.abs().max()))
            run = {impl: (lambda impl=impl: model(idx, impl, a.all_logits))
                   for impl in ("torch", "coconet")}
            graphs = []
            if a.graphs:  # each forward captured once, timed as its replays
                for impl in run:
                    want = run[impl]().float()
                    graph, got = graphed(run[impl])
                    graphs.append(graph)
                    run[impl] = graph.replay
                    replay = float((got.float() - want).abs().max())
                    if replay != 0.0:
                        say("%s's replay differs from its eager forward by %.2e at batch %d"
                            % (impl, replay, B))
            t_torch = timed(run["torch"], a.iters)
            t_coco = timed(run["coconet"], a.iters)
            # a live graph holding torch's all_reduce makes NCCL's communicator
            # destruction wait forever (destroy_process_group at the end)
            for graph in graphs:
                graph.reset()
            tok = B * a.seq
            say("| %d | %.3f | %.3f | %.0f | %.0f | %.2f x | %.1e | %.1e |"
                % (B, t_torch, t_coco, tok / t_torch * 1e3, tok / t_coco * 1e3,
                   t_torch / t_coco, diff[0], diff[1]), flush=True)
        say("\nThe row-parallel layer alone (first block's), ms: one call's latency (from a "
            "synchronised start: its host work included), and a call's share of 10 enqueued "
            "back to back (the GPU's time); coconet's host time of a call:")
        say("| batch | layer | K | torch | coconet | speed-up | torch, 10 calls | "
            "coconet, 10 calls | speed-up | coconet host |")
        say("|---|---|---|---|---|---|---|---|---|---|")
        blk = model.h[0]
        for B in a.batches:
            r = model.x0[:B * a.seq * a.width].view(B, a.seq, a.width)
            for name, layer in (("attention out", blk.attn_out), ("MLP out", blk.mlp_out)):
                x = torch.randn(B, a.seq, layer.weight.shape[0], device="cuda",
                                dtype=torch.float16)
                tt = timed(lambda: row(layer, x, r, "torch"), a.iters)
                tc = timed(lambda: row(layer, x, r, "coconet"), a.iters)
                tt10 = timed(lambda: row(layer, x, r, "torch"), a.iters, calls=10)
                tc10 = timed(lambda: row(layer, x, r, "coconet"), a.iters, calls=10)
                hc = host_ms(lambda: row(layer, x, r, "coconet"), a.iters)
                say("| %d | %s | %d | %.3f | %.3f | %.2f x | %.3f | %.3f | %.2f x | %.3f |"
                    % (B, name, layer.in_features, tt, tc, tt / tc, tt10, tc10, tt10 / tc10,
                       hc), flush=True)
        if a.profile:
            B = max(a.batches)
            idx = torch.randint(0, cfg["vocab"], (B, a.seq), generator=g).cuda()
            r = model.x0[:B * a.seq * a.width].view(B, a.seq, a.width)
            x = torch.randn(B, a.seq, blk.mlp_out.weight.shape[0], device="cuda",
                            dtype=torch.float16)
            profile(model, blk.mlp_out, x, r, idx, a.profile, rank, a.all_logits)
            say("\nthe profile of batch %d (the model, the MLP's row-parallel layer): %s"
                % (B, a.profile))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--schedule", default="paper", choices=["paper", "fused", "program"])
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--all-logits", action="store_true",
                    help="the head over every position (default: the last one's, as generation "
                    "needs)")
    ap.add_argument("--graphs", action="store_true",
                    help="time each forward as the replay of a CUDA graph captured once (both "
                    "implementations): the GPU's time, without the host's launches")
    ap.add_argument("--profile", metavar="FILE",
                    help="torch.profiler's kernel tables at the largest batch, to FILE (rank 0's)")
    ap.add_argument("--arena-gib", type=float, default=0,
                    help="coconet's arena (default: the layers' outputs and 4 GiB)")
    main(ap.parse_args())

"""bench/torch_mp.py: the PyTorch baselines of bench/mp.sh (the paper's Figure 10), one
process per GPU under torchrun, the same shapes and element type per rank as
coconet's examples/self_attention.coco (K = H), examples/mlp.coco (K = 4H)
and examples/pipeline.coco:

  model-parallel layer, x [B*S, K/P] and w [K/P, H] on each rank:
    torch_megatron        y = x @ w; all_reduce(y); dropout(y + b, 0.1) + r
                          (Megatron-LM's row-parallel output layer, eager)
    torch_matmul          x @ w alone
    torch_allreduce       NCCL all_reduce of the layer's output [B*S, H] alone
    torch_pointwise       dropout(y + b, 0.1) + r alone
    torch_async_tp        torch.ops.symm_mem.fused_matmul_reduce_scatter(x, w)
                          alone (PyTorch's async tensor parallelism)
    torch_async_tp_layer  the same, then dropout(. + b, 0.1) + r on the slice
                          and all_gather_into_tensor: the whole layer
  pipeline (examples/pipeline.coco), 2 groups of G = P/2 ranks, x [B*S, H]
  on each rank (--pipe-batch, --pipe-seq, --pipe-hidden):
    torch_megatron        all_reduce(x) in the group; s = dropout(x + b, 0.1)
                          + r; send s whole to the same rank of the next group
                          and receive the previous group's (a ring), in one
                          batch_isend_irecv
    torch_allreduce       the group's all_reduce alone
    torch_pointwise       the pointwise part alone
    torch_send            the send and receive of the whole output alone
  allreduce (bench/allreduce_fused16.coco at N = B*S*H):
    torch_allreduce       NCCL all_reduce of [B*S, H] alone
  pipeline_linear (examples/pipeline_linear.coco), the same groups, at the
  layers' B, S and H: x [B*S, H/G] @ w [H/G, H] first (torch_matmul too),
  and a linear pipeline: the last group sends nothing, the first receives
  nothing.

Timed as coconet times: CUDA events around each run, ranks lined up on the
GPU before it (a one-element all_reduce the start event follows in the
stream, the run queued behind it without the host waiting), 3 warm-up runs, the median of ITERS runs, the slowest
rank's median (all_reduce MAX). Async TP comes last: where the op is missing
or fails on any rank, its rows are NA with the reason.

    torchrun --standalone --nproc_per_node=4 bench/torch_mp.py --out rows.txt \
        --batch 8 16 --pipe-batch 1 2 --dtypes fp16 bf16 --iters 20

(Option names are whole words: torchrun's parser takes a prefix of its own
options, such as --s, for one of them.)

Writes (rank 0, one line a measurement, flushed) rows of bench/mp.sh's raw
format: layer|B|S|H|K|P|G|dtype|variant|ms|check|notation, check "measured"
(or "NA", ms "NA", the reason in notation). --device cpu runs the same code
with gloo on the CPU at any sizes (a check of the script itself, no timings
worth reading; async TP NA)."""
import argparse
import datetime
import os
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# the layers, and each model-parallel layer's K over H (the pipelines: None)
LAYERS = {"self_attention": 1, "mlp": 4, "pipeline": None, "pipeline_linear": None,
          "allreduce": None}
DROP = 0.1
WARMUP = 3


class Bench:
    """The process group, the device and the timing of one run."""

    def __init__(self, args):
        self.args = args
        self.cuda = args.device == "cuda"
        self.rank = int(os.environ["RANK"])
        self.size = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        timeout = datetime.timedelta(seconds=args.timeout)
        if self.cuda:
            if torch.cuda.device_count() <= local:
                sys.exit(f"torch_mp.py: rank {self.rank} needs GPU {local}, "
                         f"but {torch.cuda.device_count()} are visible")
            torch.cuda.set_device(local)
            self.dev = torch.device("cuda", local)
            dist.init_process_group("nccl", timeout=timeout, device_id=self.dev)
        else:
            self.dev = torch.device("cpu")
            dist.init_process_group("gloo", timeout=timeout)
        self.out = open(args.out, "a") if self.rank == 0 else None
        self.name = "torch_mp"  # the script, in the rows it prints

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def free(self):
        """Give the last size's buffers back before the next."""
        if self.cuda:
            torch.cuda.empty_cache()

    def timed(self, fn):
        """The slowest rank's median time of fn in ms."""
        times = []
        line = torch.zeros(1, device=self.dev)
        for i in range(WARMUP + self.args.iters):
            if self.cuda:
                # lined up on the GPU, as coconet's runs: the start event
                # follows a one-element all_reduce in the stream and the
                # host queues fn behind it without waiting (rt/run.c)
                self.sync()
                dist.all_reduce(line)
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                ms = start.elapsed_time(stop)
            else:
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                ms = (time.perf_counter() - t0) * 1e3
            if i >= WARMUP:
                times.append(ms)
        t = torch.tensor([statistics.median(times)], dtype=torch.float64, device=self.dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def row(self, shape, variant, ms, notation, check="measured"):
        """One raw row (rank 0); shape: layer, B, S, H, K, G, dtype."""
        if self.out is None:
            return
        layer, b, s, h, k, g, dtype = shape
        value = "NA" if ms is None else f"{ms:.4f}"
        note = notation.replace("|", "/").replace("\n", " ")[:300]
        fields = [layer, b, s, h, k, self.size, g, dtype, variant, value, check, note]
        self.out.write("|".join(str(f) for f in fields) + "\n")
        self.out.flush()
        print(f"{self.name}: {layer} B={b} {dtype} {variant}: {value} ms", flush=True)

    def agree(self, ok):
        """Whether every rank says ok (a MIN over the ranks)."""
        t = torch.tensor([1 if ok else 0], dtype=torch.int32, device=self.dev)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())


def randn(bench, shape, dtype, scale=1.0):
    return (torch.randn(*shape, device=bench.dev, dtype=torch.float32) * scale).to(dtype)


def megatron_layer(bench, layer, b, k, dtype_name):
    """The model-parallel layer and its parts."""
    a, p = bench.args, bench.size
    dtype = DTYPES[dtype_name]
    m = b * a.seq
    shape = (layer, b, a.seq, a.hidden, k, p, dtype_name)
    x = randn(bench, (m, k // p), dtype)
    w = randn(bench, (k // p, a.hidden), dtype, 1.0 / k ** 0.5)
    bias, r = randn(bench, (a.hidden,), dtype), randn(bench, (m, a.hidden), dtype)
    y = torch.matmul(x, w)
    z = torch.zeros_like(y)

    def whole():
        torch.matmul(x, w, out=y)
        dist.all_reduce(y)
        return F.dropout(y + bias, DROP) + r

    bench.row(shape, "torch_megatron", bench.timed(whole),
              "x @ w; all_reduce; dropout(y + b) + r")
    bench.row(shape, "torch_matmul", bench.timed(lambda: torch.matmul(x, w, out=y)),
              f"[{m}, {k // p}] x [{k // p}, {a.hidden}]")
    bench.row(shape, "torch_allreduce", bench.timed(lambda: dist.all_reduce(z)),
              f"NCCL all_reduce of [{m}, {a.hidden}]")
    bench.row(shape, "torch_pointwise", bench.timed(lambda: F.dropout(y + bias, DROP) + r),
              "dropout(y + b) + r")


def allreduce(bench, b, dtype_name):
    """NCCL's all_reduce of the layers' output alone, as the baseline of
    bench/allreduce_fused16.coco at N = B*S*H."""
    a = bench.args
    m = b * a.seq
    shape = ("allreduce", b, a.seq, a.hidden, "", bench.size, dtype_name)
    z = torch.zeros(m, a.hidden, device=bench.dev, dtype=DTYPES[dtype_name])
    bench.row(shape, "torch_allreduce", bench.timed(lambda: dist.all_reduce(z)),
              f"NCCL all_reduce of [{m}, {a.hidden}]")


def async_tp_op(bench):
    """PyTorch's fused MatMul + reduce-scatter and the group's name, or
    (None, why)."""
    if not bench.cuda:
        return None, "needs CUDA"
    try:
        import torch.distributed._symmetric_memory as symm_mem
    except Exception as e:  # an old or CPU-only torch
        return None, f"torch.distributed._symmetric_memory: {type(e).__name__}: {e}"
    ops = getattr(torch.ops, "symm_mem", None)
    if ops is None or not hasattr(ops, "fused_matmul_reduce_scatter"):
        return None, "torch.ops.symm_mem.fused_matmul_reduce_scatter does not exist"
    name = dist.group.WORLD.group_name
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None:  # needed before torch 2.9, deprecated and harmless since
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                enable(name)
        except Exception as e:
            return None, f"enable_symm_mem_for_group failed: {type(e).__name__}: {e}"
    return ops.fused_matmul_reduce_scatter, name


def async_tp_layer(bench, layer, b, k, dtype_name):
    """fused_matmul_reduce_scatter alone and as the whole layer; NA rows
    where it is missing or fails on any rank."""
    a, p = bench.args, bench.size
    dtype = DTYPES[dtype_name]
    m = b * a.seq
    shape = (layer, b, a.seq, a.hidden, k, p, dtype_name)
    op, name = async_tp_op(bench)
    why = None if op is not None else name
    if why is None and m % p:
        why = f"B*S = {m} rows are not divisible by P = {p}"
    if why is None:
        x = randn(bench, (m, k // p), dtype)
        w = randn(bench, (k // p, a.hidden), dtype, 1.0 / k ** 0.5)
        bias, r = randn(bench, (a.hidden,), dtype), randn(bench, (m // p, a.hidden), dtype)
        full = torch.empty(m, a.hidden, device=bench.dev, dtype=dtype)

        def alone():
            return op(x, w, "sum", 0, name)

        def whole():
            part = op(x, w, "sum", 0, name)
            dist.all_gather_into_tensor(full, F.dropout(part + bias, DROP) + r)
            return full
        try:
            got = alone()
            bench.sync()
            if tuple(got.shape) != (m // p, a.hidden):
                why = f"fused_matmul_reduce_scatter gave shape {tuple(got.shape)}"
        except Exception as e:
            why = f"fused_matmul_reduce_scatter failed: {type(e).__name__}: {e}"
    if not bench.agree(why is None):
        why = why or "failed on another rank"
    if why is not None:
        if bench.rank == 0:
            print(f"torch_mp: async TP at {layer} B={b} {dtype_name}: NA: {why}", flush=True)
        bench.row(shape, "torch_async_tp", None, f"unavailable: {why}", "NA")
        bench.row(shape, "torch_async_tp_layer", None, f"unavailable: {why}", "NA")
        return
    bench.row(shape, "torch_async_tp", bench.timed(alone),
              "symm_mem.fused_matmul_reduce_scatter")
    bench.row(shape, "torch_async_tp_layer", bench.timed(whole),
              "fused_matmul_reduce_scatter; dropout(y + b) + r; all_gather")


def pipeline_groups(bench):
    """Groups of G = P / pipe_groups consecutive ranks (every rank creates
    every group): this rank's group, G, its group's index, and the ranks it
    sends to and receives from (the same rank of the next and of the
    previous group, modulo the number of groups)."""
    p, groups = bench.size, bench.args.pipe_groups
    if groups < 2 or p % groups:
        sys.exit(f"torch_mp.py: {groups} pipeline groups: needs 2 or more that divide P = {p}")
    g = p // groups
    mine = None
    for j in range(groups):
        pg = dist.new_group(list(range(j * g, j * g + g)))
        if j == bench.rank // g:
            mine = pg
    j, i = bench.rank // g, bench.rank % g
    return mine, g, j, ((j + 1) % groups) * g + i, ((j - 1) % groups) * g + i


def exchange(t, got, to, frm):
    """Send t to rank `to` and receive `got` from rank `frm` (None: no such
    transfer), in one batch."""
    ops = []
    if to is not None:
        ops.append(dist.P2POp(dist.isend, t, to))
    if frm is not None:
        ops.append(dist.P2POp(dist.irecv, got, frm))
    for req in dist.batch_isend_irecv(ops) if ops else []:
        req.wait()


def pipeline(bench, b, dtype_name, groups):
    """examples/pipeline.coco's step, Megatron-style (a ring of groups), and
    its parts."""
    a = bench.args
    dtype = DTYPES[dtype_name]
    group, g, _, nxt, prv = groups
    m = b * a.pipe_seq
    shape = ("pipeline", b, a.pipe_seq, a.pipe_hidden, "", g, dtype_name)
    # x is all-reduced in place run after run: zeros keep it finite (NCCL's
    # and the kernels' times do not depend on the values)
    x = torch.zeros(m, a.pipe_hidden, device=bench.dev, dtype=dtype)
    bias, r = randn(bench, (a.pipe_hidden,), dtype), randn(bench, (m, a.pipe_hidden), dtype)
    got = torch.empty(m, a.pipe_hidden, device=bench.dev, dtype=dtype)
    z = torch.zeros_like(x)

    def whole():
        dist.all_reduce(x, group=group)
        exchange(F.dropout(x + bias, DROP) + r, got, nxt, prv)
        return got

    bench.row(shape, "torch_megatron", bench.timed(whole),
              "all_reduce in the group; dropout(x + b) + r; send whole to the next group")
    pipeline_parts(bench, shape, x, bias, r, lambda t: exchange(t, got, nxt, prv))
    bench.row(shape, "torch_allreduce", bench.timed(lambda: dist.all_reduce(z, group=group)),
              f"NCCL all_reduce of [{m}, {a.pipe_hidden}] in groups of {g}")


def pipeline_parts(bench, shape, y, bias, r, send):
    """The pointwise part alone, and the send (and receive) alone."""
    bench.row(shape, "torch_pointwise", bench.timed(lambda: F.dropout(y + bias, DROP) + r),
              "dropout(y + b) + r")
    bench.row(shape, "torch_send", bench.timed(lambda: send(r)),
              f"send [{r.shape[0]}, {r.shape[1]}] to the next group, receive the previous group's")


def pipeline_linear(bench, b, dtype_name, groups):
    """examples/pipeline_linear.coco's step, Megatron-style: each group's
    row-parallel MatMul (K = H), all_reduce in the group, the pointwise part,
    the whole output sent to the next stage (the last sends nothing, the
    first receives nothing); and its parts."""
    a = bench.args
    dtype = DTYPES[dtype_name]
    group, g, j, nxt, prv = groups
    to = nxt if j < a.pipe_groups - 1 else None
    frm = prv if j > 0 else None
    m, k = b * a.seq, a.hidden
    shape = ("pipeline_linear", b, a.seq, a.hidden, k, g, dtype_name)
    x = randn(bench, (m, k // g), dtype)
    w = randn(bench, (k // g, a.hidden), dtype, 1.0 / k ** 0.5)
    bias, r = randn(bench, (a.hidden,), dtype), randn(bench, (m, a.hidden), dtype)
    y, got = torch.matmul(x, w), torch.empty(m, a.hidden, device=bench.dev, dtype=dtype)
    z = torch.zeros_like(y)

    def whole():
        torch.matmul(x, w, out=y)
        dist.all_reduce(y, group=group)
        exchange(F.dropout(y + bias, DROP) + r, got, to, frm)
        return got

    bench.row(shape, "torch_megatron", bench.timed(whole),
              "x @ w; all_reduce in the group; dropout(y + b) + r; send whole to the next stage")
    bench.row(shape, "torch_matmul", bench.timed(lambda: torch.matmul(x, w, out=y)),
              f"[{m}, {k // g}] x [{k // g}, {a.hidden}]")
    bench.row(shape, "torch_allreduce", bench.timed(lambda: dist.all_reduce(z, group=group)),
              f"NCCL all_reduce of [{m}, {a.hidden}] in groups of {g}")
    pipeline_parts(bench, shape, y, bias, r, lambda t: exchange(t, got, to, frm))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="raw rows, appended (rank 0)")
    ap.add_argument("--batch", type=int, nargs="*", default=[8, 16], help="B of the layers")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=3072)
    ap.add_argument("--layers", nargs="*", default=["self_attention", "mlp", "pipeline"])
    ap.add_argument("--pipe-batch", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--pipe-seq", type=int, default=2048)
    ap.add_argument("--pipe-hidden", type=int, default=12288)
    ap.add_argument("--pipe-groups", type=int, default=2)
    ap.add_argument("--dtypes", nargs="*", default=["fp16", "bf16"], choices=sorted(DTYPES))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=120, help="seconds of a collective")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    for layer in a.layers:
        if layer not in LAYERS:
            sys.exit(f"torch_mp.py: unknown layer '{layer}' ({', '.join(LAYERS)})")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_mp.py: torch sees no CUDA device (torch.cuda.is_available() is False)")
    bench = Bench(a)
    if bench.rank == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if bench.cuda else "-"
        name = torch.cuda.get_device_name() if bench.cuda else "cpu"
        print(f"torch_mp: torch {torch.__version__}, NCCL {nccl} (torch's), {bench.size} x "
              f"{name}, TORCH_SYMM_MEM_DISABLE_MULTICAST="
              f"{os.environ.get('TORCH_SYMM_MEM_DISABLE_MULTICAST', 'unset')}", flush=True)
    mp_layers = [(l, LAYERS[l] * a.hidden) for l in a.layers if LAYERS[l] is not None]
    for layer, k in mp_layers:
        if k % bench.size:
            sys.exit(f"torch_mp.py: K = {k} of {layer} is not divisible by P = {bench.size}")
    # the plain baselines first, async TP last (it may fail or hang)
    for dtype in a.dtypes:
        for b in a.batch:
            for layer, k in mp_layers:
                megatron_layer(bench, layer, b, k, dtype)
                bench.free()
    if any(l.startswith("pipeline") for l in a.layers):
        groups = pipeline_groups(bench)
        if a.hidden % groups[1]:
            sys.exit(f"torch_mp.py: K = H = {a.hidden} is not divisible by G = {groups[1]}")
        for dtype in a.dtypes:
            if "pipeline" in a.layers:
                for b in a.pipe_batch:
                    pipeline(bench, b, dtype, groups)
                    bench.free()
            if "pipeline_linear" in a.layers:
                for b in a.batch:
                    pipeline_linear(bench, b, dtype, groups)
                    bench.free()
    if "allreduce" in a.layers:
        for dtype in a.dtypes:
            for b in a.batch:
                allreduce(bench, b, dtype)
                bench.free()
    for dtype in a.dtypes:
        for b in a.batch:
            for layer, k in mp_layers:
                async_tp_layer(bench, layer, b, k, dtype)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

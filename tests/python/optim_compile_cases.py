"""optim_compile_cases.py: training with coconet.torch.optim's step under
torch.compile(fullgraph=True) against the same training run eagerly: the
graph breaks torch._dynamo.explain counts, and the parameters after the
steps, which must be equal bit for bit (the compiled step is one custom
op that runs the eager step: coconet.torch._optim_compile). Run on the CPU
stand-ins (test_optim_compile.py, optim_ranks.py) and on GPUs
(tests/gpu/torch_check.py)."""
import torch


def batch(step, rank=0, device="cpu", dtype=torch.float32):
    """A batch of the optim_standins model (6 features in, 3 classes)."""
    g = torch.Generator().manual_seed(step * 10 + rank)
    x = torch.randn(5, 6, generator=g)
    return x.to(device, dtype), torch.randint(0, 3, (5,), generator=g).to(device)


def graph_breaks(fn, *args):
    """(graph breaks, graphs, the first break's reason) of fn(*args)."""
    explain = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    why = str(explain.break_reasons[0].reason) if explain.break_reasons else ""
    return explain.graph_break_count, explain.graph_count, why


def step_apart(model, opt, backend):
    """The compiled model and the compiled opt.step apart (torch's
    compiled-optimizer pattern): a training step's function; eager where
    backend is None. Under inductor the model is compiled by aot_eager:
    inductor's own kernels for the model's torch ops round otherwise than
    eager's, and the step is what is compared."""
    fwd = model if backend is None else torch.compile(
        model, fullgraph=True, backend="aot_eager" if backend == "inductor" else backend)
    stepf = opt.step if backend is None else torch.compile(opt.step, fullgraph=True,
                                                           backend=backend)

    def train_step(x, y):
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(fwd(x).float(), y).backward()
        stepf()
    return train_step


def train(make, fn, steps=5, rank=0, device="cpu", sched=None):
    """A fresh model and optimizer (make() -> (model, opt)), fn(model, opt)
    called once for the training step's function, run `steps` times
    (sched: a function of opt giving an lr scheduler, stepped after each
    step); the model's parameters after the steps."""
    model, opt = make()
    train_step = fn(model, opt)
    s = sched(opt) if sched else None
    dtype = next(model.parameters()).dtype
    for step in range(1, steps + 1):
        train_step(*batch(step, rank, device, dtype))
        if s is not None:
            s.step()
    return [p.detach().clone() for p in model.parameters()]


def differ(want, got):
    """The indices of the parameters that differ; [] if all are equal bit for bit."""
    return [i for i, (a, b) in enumerate(zip(want, got)) if not torch.equal(a, b)]

"""tp_compile_cases.py: models built from coconet.torch.tp's layers under
torch.compile(fullgraph=True) against the same models run eagerly: the
graph breaks torch._dynamo.explain counts, and the outputs and the
gradients of the inputs and of every parameter, which must be equal bit for
bit (the compiled model runs the same programs on the same values, and
draws the same Dropout seeds). Run on the CPU stand-ins (test_tp_torch.py,
tp_ranks.py) and on GPUs (tests/gpu/torch_check.py)."""
import torch

from coconet.torch import tp


class MLP(torch.nn.Module):
    """ColumnParallelLinear -> GELU (tanh; none if not gelu) -> RowParallelLinear."""

    def __init__(self, width, hidden, sequence_parallel=False, gelu=True, dtype=torch.float32,
                 gather=False):
        super().__init__()
        self.gelu = gelu
        self.fc = tp.ColumnParallelLinear(width, hidden, sequence_parallel=sequence_parallel,
                                          gather_output=gather, dtype=dtype)
        self.proj = tp.RowParallelLinear(hidden, width, sequence_parallel=sequence_parallel,
                                         input_is_parallel=not gather, dtype=dtype)

    def forward(self, x):
        h = self.fc(x)
        return self.proj(torch.nn.functional.gelu(h, approximate="tanh") if self.gelu else h)


def inputs(model, shape, dtype=torch.float32, device="cpu", seed=7):
    """The model's inputs: x of `shape` (its last dimension this rank's
    features), and for a RowParallelLinearNorm the residual; the same
    values on every rank (where an input is whole, every rank holds it)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g).to(device, dtype)
    if not isinstance(model, tp.RowParallelLinearNorm):
        return [x]
    r = torch.randn(*shape[:-1], model.out_features, generator=g).to(device, dtype)
    return [x, r]


def graph_breaks(model, xs):
    """(graph breaks, graphs, the first break's reason) torch._dynamo.explain
    counts for model(*xs)."""
    explain = torch._dynamo.explain(model)(*xs)
    torch._dynamo.reset()
    why = str(explain.break_reasons[0]) if explain.break_reasons else ""
    return explain.graph_break_count, explain.graph_count, why


def step(model, fn, xs, seed=3):
    """fn(*xs) (the model or its compiled form) with the generator at `seed`,
    and the backward of the outputs' sum of squares: the outputs, then the
    gradients of xs and of the model's parameters (its gradients zeroed
    first)."""
    model.zero_grad(set_to_none=True)
    xs = [x.clone().requires_grad_() for x in xs]
    torch.manual_seed(seed)
    out = fn(*xs)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    sum((o.float() ** 2).sum() for o in out).backward()
    grads = [x.grad for x in xs] + [p.grad.clone() for p in model.parameters()]
    return [o.detach() for o in out], grads


def compare(model, xs, backend, seed=3):
    """The names of the results (outputs, then input and parameter
    gradients) that differ between model(*xs) and its compiled form
    (backend None: a second eager run); [] if every one is equal bit for
    bit."""
    torch._dynamo.reset()
    compiled = model if backend is None else torch.compile(model, fullgraph=True,
                                                           backend=backend)
    want, got = step(model, model, xs, seed), step(model, compiled, xs, seed)
    names = ["out%d" % i for i in range(len(want[0]))] + \
        ["d_input%d" % i for i in range(len(xs))] + ["d_" + n for n, _ in model.named_parameters()]
    pairs = zip(want[0] + want[1], got[0] + got[1])
    return [n for n, (a, b) in zip(names, pairs) if a.shape != b.shape or not torch.equal(a, b)]


CASES = ("mlp sp=0", "mlp sp=1", "mlp gather_output", "layernorm sp=0 p=0.3",
         "rmsnorm sp=1 p=0.3")
CPU_DIMS = (4, 2, 8, 16)  # sequence S, batch B, width, hidden (S, hidden multiples of P)


def model(case, P, dtype=torch.float32, dims=CPU_DIMS, gelu=True):
    """(the model, its input's shape) of a case: the MLP (width -> hidden
    -> width) with and without sequence parallelism and with gather_output
    (the row layer slicing its input), and RowParallelLinearNorm (hidden ->
    width) with LayerNorm and RMSNorm, with Dropout and with and without
    sequence parallelism. The weights are drawn from torch's generator,
    seeded here: the same on every rank."""
    S, B, width, hidden = dims
    torch.manual_seed(0)
    if case.startswith("mlp"):
        sp, gather = case == "mlp sp=1", case == "mlp gather_output"
        mlp = MLP(width, hidden, sp, gelu=gelu, dtype=dtype, gather=gather)
        return mlp, (S // P if sp else S, B, width)
    kind, sp = case.split()[0], case.split()[1] == "sp=1"
    layer = tp.RowParallelLinearNorm(hidden, width, norm=kind, p_drop=0.3, sequence_parallel=sp,
                                     dtype=dtype)
    return layer, (S, B, hidden // P)


def check_all(P, backends, dtype=torch.float32, device="cpu", dims=CPU_DIMS, gelu=True):
    """Each case under each backend: [(case, graph breaks, [results that
    differ from the eager run], [results that differ between two eager
    runs: where the programs are not bit for bit reproducible])]."""
    out = []
    for case in CASES:
        m, shape = model(case, P, dtype, dims, gelu)
        xs = inputs(m, shape, dtype, device)
        breaks, again = graph_breaks(m, xs)[0], compare(m, xs, None)
        for backend in backends:
            out.append(("%s %s" % (case, backend), breaks, compare(m, xs, backend), again))
    return out

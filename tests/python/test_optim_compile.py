"""test_optim_compile.py: coconet.torch.optim's step under torch.compile
on the CPU stand-ins (optim_standins.py: the real optimizer programs on the
reference executor): compiled with fullgraph=True, with no graph break, the
step is one custom op (coconet::optimizer_step) whose parameters after five
steps equal the eager optimizer's bit for bit, with groups, a scheduler's
lr read at each step, overlap=True, 16-bit masters, a gradient changed in
the same graph, GradScaler's tensors, and at two ranks (optim_ranks.py)."""
import os

import pytest

torch = pytest.importorskip("torch")

from coconet.torch import _optim_compile, optim  # noqa: E402

import gloo_ranks  # noqa: E402
import optim_compile_cases as K  # noqa: E402
import optim_standins  # noqa: E402
from optim_standins import model, groups  # noqa: E402

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def standins(monkeypatch, tmp_path):
    monkeypatch.setenv("COCONET_CACHE", str(tmp_path / "cache"))
    torch._dynamo.reset()
    yield optim_standins.install(monkeypatch.setattr)
    torch._dynamo.reset()


def adamw(**kw):
    def make():
        m = model(dtype=kw.pop("dtype", torch.float32))
        return m, optim.AdamW(groups(m), lr=1e-2, **kw)
    return make


def lambda_lr(opt):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))


def test_step_is_one_op_without_breaks():
    m, opt = adamw()()
    K.step_apart(m, opt, None)(*K.batch(1))
    breaks, graphs, why = K.graph_breaks(opt.step)
    assert (breaks, graphs) == (0, 1), why
    explain = torch._dynamo.explain(opt.step)()
    ops = [str(n.target) for g in explain.graphs for n in g.graph.nodes
           if n.op == "call_function"]
    assert "coconet.optimizer_step" in ops, ops


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_step_equals_eager(backend):
    """Groups and a scheduler whose lr the step reads when the graph runs."""
    want = K.train(adamw(), lambda m, o: K.step_apart(m, o, None), sched=lambda_lr)
    got = K.train(adamw(), lambda m, o: K.step_apart(m, o, backend), sched=lambda_lr)
    assert K.differ(want, got) == []


@pytest.mark.parametrize("kw", [dict(overlap=True, bucket_mb=1e-4), dict(dtype=torch.bfloat16),
                                dict(amsgrad=True, weight_decay=0.1)],
                         ids=["overlap", "bf16-masters", "amsgrad"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_variants_equal_eager(kw, backend):
    want = K.train(adamw(**kw), lambda m, o: K.step_apart(m, o, None))
    got = K.train(adamw(**kw), lambda m, o: K.step_apart(m, o, backend))
    assert K.differ(want, got) == []


def compiled(fn, backend):
    """fn compiled with fullgraph=True (backend None: fn itself)."""
    return fn if backend is None else torch.compile(fn, fullgraph=True, backend=backend)


def halved(backend):
    """A training step whose gradients are halved before step(), in the
    step's graph."""
    def fn(m, opt):
        def step():
            for p in m.parameters():
                p.grad.mul_(0.5)
            opt.step()
        stepf = compiled(step, backend)

        def train_step(x, y):
            opt.zero_grad(set_to_none=False)
            torch.nn.functional.cross_entropy(m(x), y).backward()
            stepf()
        return train_step
    return fn


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_gradient_changed_in_the_graph(backend):
    """A change of the gradients before step() in the same graph (written
    back at its end by a functionalizing backend) is the step's input."""
    want = K.train(adamw(), halved(None))
    assert K.differ(want, K.train(adamw(), halved(backend))) == []
    assert K.differ(want, K.train(adamw(), lambda m, o: K.step_apart(m, o, None))) != []


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_gradscaler_tensors_reach_the_step(backend):
    """GradScaler's grad_scale and found_inf, set on the optimizer around
    step() as torch.amp.GradScaler does, are the eager step's when the
    graph runs (the CPU stand-ins have no device scalars to run them)."""
    m, opt = adamw()()
    K.step_apart(m, opt, None)(*K.batch(1))
    seen = []
    opt._eager_step = lambda: seen.append((opt.grad_scale.item(), opt.found_inf.item()))
    stepf = torch.compile(opt.step, fullgraph=True, backend=backend)
    for scale in (0.5, 0.25):
        opt.grad_scale, opt.found_inf = torch.tensor(scale), torch.tensor(scale * 2)
        stepf()
        del opt.grad_scale, opt.found_inf
    assert seen == [(0.5, 1.0), (0.25, 0.5)]
    assert not hasattr(opt, "grad_scale") and not hasattr(opt, "found_inf")


def test_closure_refused():
    m, opt = adamw()()
    K.step_apart(m, opt, None)(*K.batch(1))
    stepf = torch.compile(opt.step, fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="step\\(closure\\) is refused under torch.compile"):
        stepf(lambda: 0.0)


def test_eager_step_takes_no_op(monkeypatch):
    """An eager step() keeps the direct path (no dispatcher, no op)."""
    m, opt = adamw()()
    called = []
    monkeypatch.setattr(_optim_compile, "traced_step", lambda *a: called.append(a))
    K.step_apart(m, opt, None)(*K.batch(1))
    assert called == []


def test_ranks_compiled_step(tmp_path):
    """At two ranks (gloo): the compiled step equals the eager one."""
    env = dict(os.environ, COCONET_OPTIM_TIMEOUT="60")
    got = gloo_ranks.spawn("optim_ranks.py", "compiled", 2, tmp_path, env)
    assert all(g.startswith("OK") for g in got), got

"""coconet.torch.tp's layers on the CPU (the stand-ins of tp_standins.py run
each compiled program on the reference executor): forward and backward
against torch on whole tensors at P = 1 here, at P = 2 and 4 as gloo
processes (tp_ranks.py); one build per program over token counts; Dropout
reproduced under activation checkpointing; autocast; Megatron checkpoints
in and out; models of the layers under torch.compile(fullgraph=True) with
no graph break, equal to eager runs bit for bit (tp_compile_cases.py).
Skipped without torch."""

import copy
import sys

import pytest

torch = pytest.importorskip("torch")

import gloo_ranks  # noqa: E402
import optim_standins as O  # noqa: E402
import tp_cases as C  # noqa: E402
import tp_compile_cases as K  # noqa: E402
import tp_standins as T  # noqa: E402
from coconet.torch import CocoError  # noqa: E402
from coconet.torch import tp  # noqa: E402


@pytest.fixture(autouse=True)
def standins(monkeypatch, tmp_path):
    monkeypatch.setenv("COCONET_CACHE", str(tmp_path / "cache"))
    return T.install(monkeypatch.setattr)


def test_every_layer_at_one_rank():
    assert len(C.every_layer(0, 1)) == 18


@pytest.mark.parametrize("impl", ["coconet", "torch-tp"])
@pytest.mark.parametrize("sp", [False, True])
def test_gpt_tp_at_one_rank(impl, sp):
    """examples/torch/gpt_tp.py against the plain model it is made from"""
    assert C.gpt(0, 1, impl, sp) <= 1e-5


@pytest.mark.parametrize("sp", [False, True])
def test_gpt_tp_fused_norm_at_one_rank(sp):
    assert C.gpt(0, 1, "coconet", sp, fused_norm=True) <= 1e-5


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("fused_norm", [False, True])
def test_train_tp_with_coconet_optimizer_at_one_rank(monkeypatch, sp, fused_norm):
    """examples/torch/train_tp.py's coconet AdamW against torch's"""
    O.install(monkeypatch.setattr)
    assert C.train(0, 1, sp, fused_norm) <= 1e-5


def test_a_deep_copy_is_its_own_layer():
    """copy.deepcopy (an EMA or a reference model): the copy has its own
    parameters and key, shares the session, and its traced calls find it"""
    import gc
    from coconet.torch import ops
    layer = tp.ColumnParallelLinear(C.CPU.IN, C.CPU.OUT)
    twin = copy.deepcopy(layer)
    assert twin._key != layer._key and ops._target(twin._key) is twin
    assert twin.sess is layer.sess and twin.weight is not layer.weight
    x = torch.randn(4, 2, C.CPU.IN)
    assert torch.equal(twin(x), layer(x))
    with torch.no_grad():
        twin.weight.add_(1.0)
    assert not torch.equal(twin(x), layer(x))
    compiled = torch.compile(twin, backend="aot_eager", fullgraph=True)
    del layer
    gc.collect()
    assert torch.equal(compiled(x), twin(x))


@pytest.mark.parametrize("sp", [False, True])
def test_prebuild_builds_what_a_step_calls(monkeypatch, sp):
    """tp.prebuild asks for the programs a training step calls, and binds
    them: the step then builds and binds nothing more"""
    asked = []
    monkeypatch.setattr(tp, "_build_programs", lambda todo, jobs: asked.extend(todo))
    col = tp.ColumnParallelLinear(C.CPU.IN, C.CPU.OUT, sequence_parallel=sp)
    row = tp.RowParallelLinear(C.CPU.OUT, C.CPU.IN, sequence_parallel=sp)
    norm = tp.RowParallelLinearNorm(C.CPU.OUT, C.CPU.IN, sequence_parallel=sp)
    model = torch.nn.ModuleList([col, row, norm])
    s, b = 4, 2
    assert tp.prebuild(model, s * b) == 6  # 3 layers, forward and backward
    assert sorted((path, sch) for path, sch, *_ in asked) == sorted(T.Compiled.built)
    built, bound = list(T.Compiled.built), len(tp._bound)
    x = torch.randn(s, b, C.CPU.IN, requires_grad=True)
    h = col(x)
    out, z = norm(h, row(h))
    (out.sum() + z.sum()).backward()
    assert T.Compiled.built == built and len(tp._bound) == bound
    assert tp.prebuild(model, s * b) == 0 and len(asked) == 6
    model.eval()
    assert tp.prebuild(model, 2 * s * b) == 3  # forward only


@pytest.mark.parametrize("overlap", [False, True])
def test_prebuild_builds_the_optimizers_first_step(monkeypatch, overlap):
    """tp.prebuild(optimizer=) asks for the programs of the optimizer's
    first step with the layers' own: that step compiles those and no other.
    Overlapped, the buckets follow the gradients' order: nothing is asked
    for before a backward pass has shown it."""
    from coconet.torch import optim
    O.install(monkeypatch.setattr)
    asked = []
    monkeypatch.setattr(tp, "_build_programs", lambda todo, jobs: asked.extend(todo))
    col = tp.ColumnParallelLinear(C.CPU.IN, C.CPU.OUT)
    row = tp.RowParallelLinear(C.CPU.OUT, C.CPU.IN)
    model = torch.nn.Sequential(col, row)
    opt = optim.AdamW(model.parameters(), lr=1e-3, overlap=overlap, bucket_mb=1e-4)
    assert tp.prebuild(model, 8, optimizer=opt) == 4
    steps = sorted((path, schedule) for path, schedule, sizes, *_ in asked if sizes == {})
    assert len(steps) == (0 if overlap else 1)
    model(torch.randn(4, 2, C.CPU.IN)).sum().backward()
    if overlap:  # the order seen: several buckets' programs
        asked.clear()
        tp.prebuild(model, 8, optimizer=opt)
        steps = sorted((path, schedule) for path, schedule, *_ in asked)
        assert len(steps) > 1
    opt.step()
    assert sorted({(c.path, c.schedule) for c in O.Compiled.built}) == steps
    with pytest.raises(CocoError, match="not a coconet.torch.optim optimizer"):
        tp.prebuild(model, 8, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))


def test_one_build_per_program_over_token_counts():
    layer = tp.ColumnParallelLinear(C.CPU.IN, C.CPU.OUT, sequence_parallel=True)
    for s in (4, 8, 12):
        layer(torch.randn(s, 2, C.CPU.IN, requires_grad=True)).sum().backward()
    assert len(T.Compiled.built) == 2  # the forward and the backward, each once
    assert {sch for _, sch in T.Compiled.built} == {"program"}  # one rank: no overlap
    assert len(tp._compiled) == 2


def _norm_grads(layer, x, r, checkpoint=None):
    torch.manual_seed(5)
    xl, rl = x.clone().requires_grad_(), r.clone().requires_grad_()

    def f(a, b):
        out, z = layer(a, b)
        return (out * out).sum() + z.sum()
    loss = f(xl, rl) if checkpoint is None else \
        torch.utils.checkpoint.checkpoint(f, xl, rl, use_reentrant=checkpoint)
    loss.backward()
    return [xl.grad, rl.grad, layer.weight.grad.clone()]


@pytest.mark.parametrize("reentrant", [True, False])
def test_dropout_reproduced_under_checkpointing(reentrant):
    layer = tp.RowParallelLinearNorm(C.CPU.OUT, C.CPU.IN, p_drop=0.5, sequence_parallel=True)
    x, r = torch.randn(4, 2, C.CPU.OUT), torch.randn(4, 2, C.CPU.IN)
    want = _norm_grads(layer, x, r)
    layer.zero_grad()
    got = _norm_grads(layer, x, r, checkpoint=reentrant)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    torch.manual_seed(6)  # another seed: another mask
    other = layer(x, r)[1]
    torch.manual_seed(5)
    assert not torch.equal(other, layer(x, r)[1])


def test_eval_has_no_dropout():
    layer = tp.RowParallelLinearNorm(C.CPU.OUT, C.CPU.IN, p_drop=0.5).eval()
    x, r = torch.randn(4, 2, C.CPU.OUT), torch.randn(4, 2, C.CPU.IN)
    torch.manual_seed(1)
    a = layer(x, r)[1]
    torch.manual_seed(2)
    assert torch.equal(a, layer(x, r)[1])


def test_autocast_bf16():
    layer = tp.ColumnParallelLinear(C.CPU.IN, C.CPU.OUT)
    x = torch.randn(4, 2, C.CPU.IN, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    want = x.detach() @ layer.weight.detach().T + layer.bias.detach()
    assert torch.allclose(y.float(), want, rtol=3e-2, atol=3e-2)
    assert torch.allclose(x.grad, layer.weight.detach().sum(0).expand_as(x), rtol=3e-2, atol=3e-2)


def test_megatron_attributes_and_round_trip():
    layer = tp.RowParallelLinear(C.CPU.OUT, C.CPU.IN, sequence_parallel=True)
    assert layer.weight.tensor_model_parallel and layer.weight.partition_dim == 1
    assert not layer.bias.tensor_model_parallel and not layer.bias.sequence_parallel
    back = tp.RowParallelLinear.from_megatron(layer.to_megatron(), sequence_parallel=True)
    assert torch.equal(back.weight, layer.weight) and torch.equal(back.bias, layer.bias)


def test_megatron_bias_on_some_ranks_only_is_refused():
    sds = tp.ColumnParallelLinear(C.CPU.IN, C.CPU.OUT).to_megatron(ranks=2)
    del sds[1]["bias"]
    with pytest.raises(CocoError, match=r"ColumnParallelLinear.from_megatron: 1 of the 2 state "
                                        r"dicts have a bias: all or none must"):
        tp.ColumnParallelLinear.from_megatron(sds)
    no_bias = [{"weight": sd["weight"]} for sd in sds]
    assert tp.ColumnParallelLinear.from_megatron(no_bias).bias is None


def test_argument_errors():
    with pytest.raises(CocoError, match="gather_output and sequence_parallel"):
        tp.ColumnParallelLinear(8, 16, gather_output=True, sequence_parallel=True)
    with pytest.raises(CocoError, match="sequence_parallel needs input_is_parallel"):
        tp.RowParallelLinear(16, 8, input_is_parallel=False, sequence_parallel=True)
    with pytest.raises(CocoError, match="input of 7 features; expected 8"):
        tp.ColumnParallelLinear(8, 16)(torch.randn(2, 7))
    with pytest.raises(CocoError, match="dtype torch.float64"):
        tp.ColumnParallelLinear(8, 16, dtype=torch.float64)
    with pytest.raises(CocoError, match="norm 'batchnorm'"):
        tp.RowParallelLinearNorm(16, 8, norm="batchnorm")


# ---- torch.compile (tp_compile_cases.py) ----

@pytest.mark.parametrize("case", K.CASES)
def test_compiled_equals_eager(case):
    """fullgraph=True, no graph break; outputs and gradients bit for bit
    under the eager and aot_eager backends (the latter traces the custom
    ops' fake implementations, forward and backward)"""
    model, shape = K.model(case, 1)
    xs = K.inputs(model, shape)
    assert K.graph_breaks(model, xs)[:2] == (0, 1)
    for backend in ("eager", "aot_eager"):
        assert K.compare(model, xs, backend) == [], backend


def test_compiled_with_inductor():
    """inductor (C++ on the CPU): the layers' passes are the custom ops, so
    with no GELU between them everything is equal bit for bit; with it, the
    results the GELU's own code (inductor's, not eager's) does not reach"""
    model, shape = K.model("mlp sp=1", 1, gelu=False)
    xs = K.inputs(model, shape)
    assert K.compare(model, xs, "inductor") == []
    model.gelu = True
    assert set(K.compare(model, xs, "inductor")) <= {"d_input0", "d_fc.weight", "d_fc.bias"}


def test_compiled_under_autocast():
    model = K.MLP(8, 16, sequence_parallel=True)
    xs = K.inputs(model, (4, 2, 8))

    def bf16(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)
    assert K.graph_breaks(bf16, xs)[:2] == (0, 1)
    torch._dynamo.reset()
    want, got = K.step(model, bf16, xs), K.step(model, torch.compile(bf16, fullgraph=True,
                                                                     backend="aot_eager"), xs)
    assert want[0][0].dtype == torch.bfloat16
    assert all(torch.equal(a, b) for a, b in zip(want[0] + want[1], got[0] + got[1]))


def test_compiled_dropout_seeds():
    """a compiled RowParallelLinearNorm draws its Dropout seed from torch's
    generator as an eager call does: another seed, another mask; the same
    seed, the same mask"""
    layer = tp.RowParallelLinearNorm(16, 8, p_drop=0.5)
    x, r = K.inputs(layer, (4, 2, 16))
    fn = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.manual_seed(5)
    a = fn(x, r)[1]
    torch.manual_seed(6)
    assert not torch.equal(a, fn(x, r)[1])
    torch.manual_seed(5)
    assert torch.equal(a, layer(x, r)[1])


def test_exported_model():
    """torch.export holds each pass as coconet::tp_pass; the exported
    module's output equals the model's"""
    model, shape = K.model("mlp gather_output", 1)
    xs = K.inputs(model, shape)
    ep = torch.export.export(model, tuple(xs))
    ops = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert ops.count("coconet.tp_pass.default") == 2
    assert "coconet.tp_gather_last.default" in ops
    assert torch.equal(ep.module()(*xs), model(*xs))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_dropout_under_checkpointing(backend):
    """a checkpointed RowParallelLinearNorm compiled: the recomputation in
    the backward reuses the forward's seed (tp_seed is never recomputed),
    so outputs and gradients equal the eager checkpointed run's"""
    layer, shape = K.model("layernorm sp=0 p=0.3", 1)
    xs = K.inputs(layer, shape)

    def f(x, r):
        return torch.utils.checkpoint.checkpoint(layer, x, r, use_reentrant=False)
    want = K.step(layer, f, xs)
    torch._dynamo.reset()
    got = K.step(layer, torch.compile(f, fullgraph=True, backend=backend), xs)
    assert all(torch.equal(a, b) for a, b in zip(want[0] + want[1], got[0] + got[1]))


# ---- several ranks: processes joined by gloo (tp_ranks.py) ----

def ranks(scenario, P, d):
    """Runs tp_ranks.py's scenario at P ranks; each rank's result line."""
    return gloo_ranks.spawn("tp_ranks.py", scenario, P, d)


@pytest.mark.parametrize("P", [2, 4])
def test_every_layer_at_several_ranks(tmp_path, P):
    got = ranks("layers", P, tmp_path)
    assert all(g.startswith("OK") for g in got), got


@pytest.mark.parametrize("P", [2, 4])
def test_gpt_tp_at_several_ranks(tmp_path, P):
    got = ranks("gpt", P, tmp_path)
    assert all(g.startswith("OK") for g in got), got


@pytest.mark.parametrize("P", [2, 4])
def test_train_tp_with_coconet_optimizer_at_several_ranks(tmp_path, P):
    """each rank's shards stepped by its own one-rank group"""
    got = ranks("train", P, tmp_path)
    assert all(g.startswith("OK") for g in got), got


def _train_tp():
    C._examples()
    import train_tp
    return train_tp


@pytest.mark.parametrize("P", [1, 2])
def test_train_tp_torch_dtensor(tmp_path, P):
    """--impl torch-dtensor: parallelize_module's model against the plain one"""
    why = _train_tp().lacks("torch-dtensor")
    if why:
        pytest.skip(why)
    got = ranks("dtensor", P, tmp_path)
    assert all(g.startswith("OK") for g in got), got


def test_train_tp_refuses_what_torch_lacks(monkeypatch):
    import types
    train_tp = _train_tp()
    monkeypatch.setitem(sys.modules, "torch.distributed._symmetric_memory",
                        types.ModuleType("torch.distributed._symmetric_memory"))
    monkeypatch.setitem(sys.modules, "torch.distributed.tensor.parallel",
                        types.ModuleType("torch.distributed.tensor.parallel"))
    why = train_tp.lacks("torch-async-tp")
    assert "_symmetric_memory.{enable_symm_mem_for_group}" in why
    assert "parallelize_module,ColwiseParallel" in why and "\n" not in why
    assert train_tp.lacks("coconet") is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(SystemExit) as e:
        train_tp.parse(["--impl", "torch-dtensor"])
    assert e.value.code == train_tp.lacks("torch-dtensor")


@pytest.mark.parametrize("argv, message", [
    (["--impl", "torch-async-tp"], "torch-async-tp needs --sp"),
    (["--impl", "torch-dtensor", "--optimizer", "coconet"], "not the DTensor parameters"),
    (["--impl", "torch-dtensor", "--fused-norm"], "--fused-norm needs --impl coconet"),
    (["--impl", "torch", "--sp"], "--sp needs a tensor-parallel --impl"),
])
def test_train_tp_argument_errors(capsys, argv, message):
    with pytest.raises(SystemExit):
        _train_tp().parse(argv)
    assert message in capsys.readouterr().err


def test_train_tp_dtensor_needs_torchrun(capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit):
        _train_tp().parse(["--impl", "torch-dtensor"])
    assert "needs torchrun" in capsys.readouterr().err


def test_train_tp_optimizer_defaults():
    assert _train_tp().parse([]).optimizer == "coconet"


def test_megatron_checkpoints_at_two_ranks(tmp_path):
    got = ranks("megatron", 2, tmp_path)
    assert all(g.startswith("OK") for g in got), got


def test_compiled_at_two_ranks(tmp_path):
    got = ranks("compile_models", 2, tmp_path)
    assert all(g.startswith("OK") for g in got), got


@pytest.mark.parametrize("sp", [False, True])
def test_gpt_tp_compiles_whole(sp):
    """train_tp.py --compile: the whole tensor-parallel GPT (embeddings,
    attention, every layer) under torch.compile(fullgraph=True), forward and
    backward equal to the eager model's bit for bit"""
    import copy
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "examples", "torch"))
    import gpt2
    import gpt_tp
    torch.manual_seed(0)
    plain = gpt2.GPT(vocab=64, ctx=16, width=32, layers=2, heads=4)
    eager = gpt_tp.TPGPT(copy.deepcopy(plain), 4, impl="coconet", sequence_parallel=sp)
    model = gpt_tp.TPGPT(copy.deepcopy(plain), 4, impl="coconet", sequence_parallel=sp)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    idx = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(5))
    for m in (eager, compiled):
        torch.nn.functional.cross_entropy(m(idx).reshape(-1, 64), idx.reshape(-1)).backward()
    for (name, a), b in zip(eager.named_parameters(), model.parameters()):
        assert torch.equal(a.grad, b.grad), name

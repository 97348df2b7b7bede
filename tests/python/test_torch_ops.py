"""test_torch_ops.py: coconet.torch.ops, the custom op coconet::call, on
the CPU with a stand-in for a Compiled variant (its spec, the outputs'
aliases, an eager call on CPU tensors): under torch.compile(fullgraph=True)
no graph break, the compiled results equal the eager ones bit for bit
(an updated input, an output given in `out`, a new one, a scattered
input), a Scalar given as a tensor changes without a recompile, and a call
on meta tensors gives outputs of the right shapes without running.

Skipped without torch (the GPU checks are tests/gpu/torch_check.py)."""
import types

import pytest

torch = pytest.importorskip("torch")
S = pytest.importorskip("coconet._session")
from coconet.torch import ops  # noqa: E402


class Variant:
    """Inputs x [4], p [4] (updated: output p_), s (scattered, members of 2
    and 3 elements), a (Scalar); outputs p_ = p + a x, y = 2 x (into the
    variant's own buffer, as the arena's), z = cat(s) + a."""

    def __init__(self):
        self.variant = "stand-in"
        f32 = "FP32"
        self.spec = types.SimpleNamespace(
            variant=self.variant, expect=lambda spec: "what it is",
            inputs=[S.InputSpec("x", "tensor", f32, (4,), ()),
                    S.InputSpec("p", "tensor", f32, (4,), ()),
                    S.InputSpec("s", "scattered", f32, (5,), (2, 3)),
                    S.InputSpec("a", "scalar", "FP64", (), ())],
            outputs=[S.OutputSpec("p_", f32, (4,)), S.OutputSpec("y", f32, (4,)),
                     S.OutputSpec("z", f32, (5,))])
        self._call = types.SimpleNamespace(alias=[1, -1, -1])
        self.group = types.SimpleNamespace(device=torch.device("cpu"))
        self._key = ops.register(self)
        self.own = {"y": torch.zeros(4), "z": torch.zeros(5)}
        self.eager_calls = 0

    def __call__(self, inputs=None, seed=None, out=None, **named):  # as Compiled's
        given = dict(inputs or {}, **named)
        if ops.traced(given.values()):
            return ops.call(self, given, seed, out)
        self.eager_calls += 1
        x, p, s, a = given["x"], given["p"], given["s"], given["a"]
        assert isinstance(a, float) and type(x) is torch.Tensor
        p.add_(a * x)
        res = dict(self.own, **(out or {}))
        res["y"].copy_(2 * x)
        res["z"].copy_(torch.cat(s) + a)
        return {"p_": p, "y": res["y"], "z": res["z"]}


def inputs():
    return (torch.arange(4.0), torch.ones(4), [torch.tensor([1.0, 2.0]), torch.arange(3.0)])


def step(f, x, p, s, a, z):
    r = f({"x": x, "p": p, "s": s}, out={"z": z}, a=a)
    return r["y"] * 1, r["z"], r["p_"]


def test_compiled_equals_eager():
    f = Variant()
    eager, compiled = inputs(), inputs()
    ze, zc = torch.zeros(5), torch.zeros(5)
    explain = torch._dynamo.explain(lambda *a: step(f, *a))(*inputs(), torch.tensor(0.5),
                                                             torch.zeros(5))
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    fn = torch.compile(lambda *a: step(f, *a), fullgraph=True, backend="aot_eager")
    for a in (0.5, 0.25, -1.5):
        want = step(f, *eager, a, ze)
        got = fn(*compiled, torch.tensor(a, dtype=torch.float64), zc)
        for w, g in zip(want, got):
            assert torch.equal(w, g)
        assert torch.equal(eager[1], compiled[1])  # p updated in place
        assert torch.equal(ze, zc)  # written into the given out
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # a: no recompile


def test_meta():
    f = Variant()
    x, p, s = [t.to("meta") if not isinstance(t, list) else [m.to("meta") for m in t]
               for t in inputs()]
    r = f({"x": x, "p": p, "s": s, "a": 1.0})
    assert f.eager_calls == 0
    assert r["p_"] is p and r["y"].shape == (4,) and r["z"].shape == (5,) and r["z"].is_meta


def test_inductor_in_place():
    """Inductor gives the op the caller's own tensors, not copies: an
    updated input and an `out` tensor in the arena stay there, where the
    peers' fused kernels reach them."""
    seen = []

    class Watched(Variant):
        def __call__(self, given, seed=None, out=None, **named):
            if not ops.traced(given.values()):
                seen.append((given["p"].data_ptr(), out["z"].data_ptr()))
            return super().__call__(given, seed, out, **named)

    f = Watched()
    x, p, s = inputs()
    z = torch.zeros(5)
    fn = torch.compile(lambda *a: step(f, *a), fullgraph=True)
    fn(x, p, s, torch.tensor(0.5, dtype=torch.float64), z)
    assert seen == [(p.data_ptr(), z.data_ptr())]
    assert torch.equal(z, torch.tensor([1.5, 2.5, 0.5, 1.5, 2.5]))

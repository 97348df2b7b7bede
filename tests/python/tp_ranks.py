"""tp_ranks.py: one rank of coconet.torch.tp's layers on the CPU stand-ins
(tp_standins.py), joined to the others by gloo (gloo_ranks.py); run by test_tp_torch.py as
P processes:

    python3 tp_ranks.py SCENARIO RANK P DIR

Writes DIR/result.RANK: "OK" and a detail, or "ERROR" and the message."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gloo_ranks  # noqa: E402
import tp_cases as C  # noqa: E402
import tp_compile_cases as K  # noqa: E402
import tp_standins as T  # noqa: E402
from coconet import tp_layout as L  # noqa: E402
from coconet.torch import tp  # noqa: E402


def layers(rank, P, d):
    return "; ".join("%s %.1e" % kv for kv in C.every_layer(rank, P))


def gpt(rank, P, d):
    out = ["%s sp=%d %.1e" % (impl, sp, C.gpt(rank, P, impl, sp))
           for impl in ("coconet", "torch-tp") for sp in (False, True)]
    out += ["fused_norm sp=%d %.1e" % (sp, C.gpt(rank, P, "coconet", sp, fused_norm=True))
            for sp in (False, True)]
    return "; ".join(out)


def train(rank, P, d):
    """train_tp.py's coconet optimizer (each rank its own group) and step"""
    import optim_standins
    optim_standins.install(setattr)
    return "; ".join("sp=%d fused_norm=%d %.1e" % (sp, fused, C.train(rank, P, sp, fused))
                     for sp in (False, True) for fused in (False, True))


def dtensor(rank, P, d):
    """train_tp.py's --impl torch-dtensor (torch's parallelize_module)"""
    return "; ".join("sp=%d %.1e" % (sp, C.train(rank, P, sp, impl="torch-dtensor"))
                     for sp in (False, True))


def megatron(rank, P, d):
    """to_megatron at other sizes, and from_megatron of those at this one,
    give back this rank's parts."""
    g = torch.Generator().manual_seed(4)
    w, b = torch.randn(C.CPU.OUT, C.CPU.IN, generator=g), torch.randn(C.CPU.OUT, generator=g)
    layer = tp.ColumnParallelLinear.from_full(w, b, sequence_parallel=True)
    for saved in (1, 2, 4):
        sds = layer.to_megatron(saved)
        assert len(sds) == saved and sds[0]["weight"].shape[0] == C.CPU.OUT // saved
        back = tp.ColumnParallelLinear.from_megatron(sds, sequence_parallel=True)
        assert torch.equal(back.weight, layer.weight) and torch.equal(back.bias, layer.bias)
    r = tp.RowParallelLinear.from_full(w.T.contiguous(), b[:C.CPU.IN])
    sds = r.to_megatron(2)
    assert torch.equal(sds[1]["weight"], L.cut(torch.cat([s["weight"] for s in sds], 1), 1, 1, 2))
    back = tp.RowParallelLinear.from_megatron(sds)
    assert torch.equal(back.weight, r.weight) and torch.equal(back.bias, r.bias)
    return "column and row through Megatron's layout at 1, 2 and 4 ranks"


def compile_models(rank, P, d):
    """Each model of tp_compile_cases under torch.compile: no graph break,
    equal to the eager run bit for bit."""
    got = K.check_all(P, ("aot_eager",))
    bad = [(name, b, diff, again) for name, b, diff, again in got if b or diff or again]
    if bad:
        raise AssertionError("graph breaks or results that differ: %s" % bad)
    return "%d models compiled, equal to eager" % len(got)


if __name__ == "__main__":
    gloo_ranks.serve(globals(), T.install)

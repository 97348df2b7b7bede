"""test_optimizer_torch.py: the fused step's program variants on the CPU
reference executor against torch's own optimizers on the CPU
(torch.optim.AdamW / Adam with fused=True, given GradScaler's grad_scale
and found_inf, and torch.nn.utils.clip_grad_norm_), over many steps with
a changing lr and injected Infs, state carried from step to step (under
`paper`, each rank's slices). Skipped where torch is not installed (make
test needs no torch); the GPU twin is tests/gpu/torch_optstep.py."""
import numpy as np
import pytest

import coconet
from coconet import programs

torch = pytest.importorskip("torch")

COUNTS, P, STEPS, SCALE = [40, 7, 65, 1], 2, 30, 2.0 ** 10
HP = dict(beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01)
INJECT = (6, 19)


def lr_at(k):
    return 1e-2 * (1 + 0.5 * np.sin(k))


def ours(tmp_path, o, maxnorm):
    text = programs.optimizer("adam", COUNTS, "FP32", **o)
    run = coconet.load(programs.write(text, "adam", str(tmp_path)), ranks=P).schedule("paper")
    io = programs.step_inputs("adam", "FP32", **o)
    cut = np.cumsum([0] + [run.tensor_info("m", r).local_shape[0] for r in range(P)])
    n = sum(COUNTS)
    state = {s: [np.zeros(cut[r + 1] - cut[r], np.float32) for r in range(P)]
             for s in io["state"]}
    fixed = dict(HP, gscale=1.0 / P, maxnorm=maxnorm, gs=SCALE, fin=0.0)
    fixed = {k: v for k, v in fixed.items() if k in io["scalars"] or k in io["device"]}
    return run, state, fixed, n


@pytest.mark.parametrize("o", [dict(amp=True, capturable=True),
                               dict(amp=True, clip=True),
                               dict(decay="l2", amsgrad=True, maximize=True, amp=True)],
                         ids=["adamw-amp", "adamw-clip", "adam-l2-amsgrad-maximize"])
def test_against_torch(tmp_path, o):
    maxnorm = 1.0
    run, state, fixed, n = ours(tmp_path, o, maxnorm)
    rng = np.random.default_rng(2)
    p = rng.standard_normal(n).astype(np.float32)
    ref = torch.nn.Parameter(torch.from_numpy(p.copy()))
    cls = torch.optim.Adam if o.get("decay") == "l2" else torch.optim.AdamW
    opt = cls([ref], lr=1e-2, betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"],
              weight_decay=HP["wd"], amsgrad=o.get("amsgrad", False),
              maximize=o.get("maximize", False), fused=True)
    t, worst = 0.0, 0.0
    for k in range(1, STEPS + 1):
        g = [(rng.standard_normal(n) * SCALE).astype(np.float32) for _ in range(P)]
        if k in INJECT:
            g[k % P][k] = np.inf
        t += 1
        out, new = run.run_cpu(dict(fixed, g=g, p=p, lr=lr_at(k), t=t, **state),
                               with_inputs=True)
        t -= float(out["found"])
        p = out["p_"]
        state = {s: new[s] for s in state}
        mean = torch.from_numpy(sum(x.astype(np.float64) for x in g).astype(np.float32)) / P
        ref.grad = mean.clone()
        found = torch.tensor(0.0 if bool(torch.isfinite(mean).all()) else 1.0)
        opt.param_groups[0]["lr"] = lr_at(k)
        if o.get("clip"):
            ref.grad.mul_(1.0 / SCALE)
            norm = torch.nn.utils.clip_grad_norm_([ref], maxnorm)
            opt.grad_scale, opt.found_inf = None, found
            if bool(torch.isfinite(norm)):
                assert abs(float(out["gnorm"]) - float(norm)) <= 1e-5 * float(norm)
        else:
            opt.grad_scale, opt.found_inf = torch.tensor(SCALE), found
        opt.step()
        assert float(out["found"]) == float(found), k
        q = ref.detach().numpy()
        worst = max(worst, float(np.max(np.abs(p - q)) / np.max(np.abs(q))))
    assert t == float(opt.state[ref]["step"]) == STEPS - len(INJECT)
    assert worst <= 1e-5, worst

"""torch_optstep.py: the variants of the fused optimizer step's program
(coconet.programs.optimizer) on GPUs against torch's fused optimizers, for
tests/gpu/torch_check.py (its checks optstep:*). Each check compiles the
variant's program under `paper`, binds it to parameters, gradients and state
in the arena and to its 0-dimensional device inputs, and runs STEPS steps
with a learning rate that changes every step, gradients scaled by a
GradScaler-like power of two and an Inf injected at some steps, against:

  optstep:adamw_amp      torch.optim.AdamW(fused=True) given the same
                         grad_scale and found_inf (found_inf from the summed
                         gradient, as every rank finds it);
  optstep:adamw_clip     the same after GradScaler.unscale_'s division and
                         torch.nn.utils.clip_grad_norm_ (the norm returned by
                         the step against clip_grad_norm_'s);
  optstep:adam_l2        torch.optim.Adam(fused=True, amsgrad, maximize) with
                         L2 weight decay;
  optstep:graph          adamw_clip's step captured in a CUDA graph (the step
                         count's increment and the skipped step's decrement
                         included) and replayed with a new lr and new
                         gradients each time, against the same reference.

Each: the largest relative difference of the parameters over the steps
(max |p - q| / max |q|) within TOL, found and the step count equal to
torch's, the norm within 1e-5 relative. And through coconet.torch.optim:

  optstep:optim_amp_clip torch_check's small model trained by
                         coconet.torch.optim.AdamW with coconet.torch.GradScaler
                         and coconet.torch.clip_grad_norm_ (an Inf injected in
                         one rank's gradient at one step), against DDP-style
                         averaging, torch.amp.GradScaler, unscale_,
                         torch.nn.utils.clip_grad_norm_ and
                         torch.optim.AdamW(fused=True): the losses, the norms,
                         the skipped step, the scale and the parameters;
  optstep:optim_graph    a whole training step of that model (zero_grad,
                         forward, backward, step with capturable=True and a
                         tensor lr) captured in one CUDA graph and replayed
                         with new batches and a new lr each time, against
                         eager torch.optim.AdamW(capturable=True) under
                         DDP-style averaging."""
import os

import numpy as np

STEPS, SCALE, TOL = 50, 2.0 ** 12, 1e-5
COUNTS = [64 * 33, 33, 257, 1, 1000, 3]  # members of uneven sizes
INJECT = (9, 31)  # steps with an Inf in one rank's gradient
HP = dict(beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01)

VARIANTS = {"adamw_amp": dict(amp=True, capturable=True),
            "adamw_clip": dict(amp=True, clip=True, capturable=True),
            "adam_l2": dict(decay="l2", amsgrad=True, maximize=True, amp=True, capturable=True)}
VARIANTS["graph"] = VARIANTS["adamw_clip"]


def program_path(cache, name):
    from coconet import programs
    text = programs.optimizer("adam", COUNTS, "FP32", **VARIANTS[name])
    return programs.write(text, "adam", os.path.join(cache, "torch-programs"))


def programs_to_build(cache):
    """(path, schedule) of every program these checks compile, and the
    variants coconet.torch.optim builds for optim_amp_clip's and
    optim_graph's model."""
    from coconet import programs
    from torch_check import MODEL_COUNTS
    models = [programs.optimizer("adam", MODEL_COUNTS, "FP32", **o)
              for o in (dict(clip=True, amp=True), dict(capturable=True))]
    return [(program_path(cache, n), "paper") for n in sorted(set(VARIANTS) - {"graph"})] + \
        [(programs.write(m, "adam", os.path.join(cache, "torch-programs")), "paper")
         for m in models]


def lr_at(k):
    return 1e-3 * (1 + 0.5 * np.sin(k))


class Step:
    """The variant bound to its tensors: members of p and g, the state
    (this rank's slices under `paper`), the device scalars."""

    def __init__(self, c, name, cache, maxnorm):
        torch, ct = c["torch"], c["ct"]
        from coconet import programs
        self.c, self.o = c, VARIANTS[name]
        self.io = programs.step_inputs("adam", "FP32", **self.o)
        f = ct.compile(program_path(cache, name), schedule="paper")
        self.p = [ct.zeros([n], torch.float32) for n in COUNTS]
        self.g = [ct.zeros([n], torch.float32) for n in COUNTS]
        tensors = dict(p=self.p, g=self.g)
        for s in self.io["state"]:
            spec = f.spec.input(s)
            if spec.kind == "tensor":
                tensors[s] = ct.zeros(spec.shape, torch.float32)
            else:
                tensors[s] = [ct.zeros([n], torch.float32) for n in spec.members]
        self.dev = {d: ct.zeros([], torch.float32) for d in self.io["device"]}
        tensors.update(self.dev)
        scalars = dict(HP, gscale=1.0 / c["P"])
        if self.o.get("clip"):
            scalars["maxnorm"] = maxnorm
        self.bound = f.bind(tensors, **{k: scalars[k] for k in self.io["scalars"]})

    def __call__(self):
        """One step on the device alone (capturable): t counts it, found
        takes it back."""
        self.dev["t"].add_(1)
        res = self.bound()
        self.dev["t"].sub_(res["found"])
        return res


def gradients(c, k):
    """This rank's scaled gradients at step k (an Inf on rank k % P at the
    injected steps), and their sum over the ranks divided by P."""
    torch, dist, rank, P = c["torch"], c["dist"], c["rank"], c["P"]
    gen = torch.Generator(device="cpu").manual_seed(100 * k + rank)
    mine = [torch.randn(n, generator=gen).cuda() * SCALE for n in COUNTS]
    if k in INJECT and rank == k % P:
        mine[k % len(COUNTS)][0] = float("inf")
    total = [g.clone() for g in mine]
    if dist.is_initialized():
        for t in total:
            dist.all_reduce(t)
    return mine, [t / P for t in total]


def reference(c, name, init):
    torch = c["torch"]
    o = VARIANTS[name]
    ps = [torch.nn.Parameter(x.clone()) for x in init]
    cls = torch.optim.Adam if o.get("decay") == "l2" else torch.optim.AdamW
    opt = cls(ps, lr=1e-3, betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"],
              weight_decay=HP["wd"], amsgrad=o.get("amsgrad", False),
              maximize=o.get("maximize", False), fused=True)
    return ps, opt


def reference_step(c, name, ps, opt, mean, k, maxnorm):
    """torch's step on the mean gradient: GradScaler's found_inf and
    grad_scale given to the fused optimizer, or with clipping unscaled
    first (GradScaler.unscale_) and clipped by clip_grad_norm_."""
    torch = c["torch"]
    for p, g in zip(ps, mean):
        p.grad = g.clone()
    finite = all(bool(torch.isfinite(g).all()) for g in mean)
    found = torch.tensor(0.0 if finite else 1.0, device="cuda")
    opt.param_groups[0]["lr"] = lr_at(k)
    norm = None
    if VARIANTS[name].get("clip"):
        for p in ps:
            p.grad.mul_(1.0 / SCALE)
        norm = torch.nn.utils.clip_grad_norm_(ps, maxnorm)
        opt.grad_scale, opt.found_inf = None, found
    else:
        opt.grad_scale, opt.found_inf = torch.tensor(SCALE, device="cuda"), found
    opt.step()
    return found, norm


def run(c, name, cache):
    """STEPS steps of the variant against torch; (status, detail)."""
    torch = c["torch"]
    maxnorm = 1.0
    ours = Step(c, name, cache, maxnorm)
    gen = torch.Generator(device="cpu").manual_seed(5)
    init = [torch.randn(n, generator=gen).cuda() for n in COUNTS]
    for p, x in zip(ours.p, init):
        p.copy_(x)
    ps, opt = reference(c, name, init)
    graph = None
    worst, norm_err, found_bad, skipped = 0.0, 0.0, 0, 0
    for k in range(1, STEPS + 1):
        mine, mean = gradients(c, k)
        for g, x in zip(ours.g, mine):
            g.copy_(x)
        ours.dev["lr"].fill_(lr_at(k))
        ours.dev["gs"].fill_(SCALE)
        ours.dev["fin"].zero_()
        if name == "graph" and k > 1:  # captured after one eager step
            if graph is None:  # capture records the step without running it
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    res = ours()
            graph.replay()
        else:
            res = ours()
        found, norm = reference_step(c, name, ps, opt, mean, k, maxnorm)
        torch.cuda.synchronize()
        skipped += int(found)
        found_bad += int(float(res["found"]) != float(found))
        if norm is not None and bool(torch.isfinite(norm)):
            norm_err = max(norm_err, abs(float(res["gnorm"]) - float(norm)) / float(norm))
        worst = max(worst, max(float((p - q).abs().max()) / max(1e-30, float(q.abs().max()))
                               for p, q in zip(ours.p, ps)))
    t_ours = float(ours.dev["t"])
    t_torch = float(opt.state[ps[0]]["step"])
    from torch_check import max_over_ranks
    worst = max_over_ranks(c, worst)
    ok = worst <= TOL and found_bad == 0 and t_ours == t_torch and norm_err <= 1e-5
    return ("PASS" if ok else "FAIL"), (
        "%d steps, lr changing each step, %d skipped (Inf injected): params rel %.2e (tol %.0e); "
        "found differs from torch's at %d steps; step count %g (torch %g)%s"
        % (STEPS, skipped, worst, TOL, found_bad, t_ours, t_torch,
           "; norm rel %.2e" % norm_err if VARIANTS[name].get("clip") else ""))


def optim_amp_clip(c, steps=12, inject=5, maxnorm=0.5):
    """coconet.torch.optim.AdamW + coconet.torch.GradScaler +
    coconet.torch.clip_grad_norm_ against their torch twins under DDP-style
    averaging; (status, detail)."""
    torch, dist, ct, rank, P = c["torch"], c["dist"], c["ct"], c["rank"], c["P"]
    from coconet.torch import optim
    from torch_check import batch, max_over_ranks, model
    a, ref = model(torch, torch.float32), model(torch, torch.float32)
    opt = optim.AdamW(a.parameters(), lr=3e-3, weight_decay=0.01)
    ropt = torch.optim.AdamW(ref.parameters(), lr=3e-3, weight_decay=0.01, fused=True)
    scaler = ct.GradScaler(init_scale=2.0 ** 12, growth_interval=4)
    rscaler = torch.amp.GradScaler(init_scale=2.0 ** 12, growth_interval=4)
    worst_loss, worst_norm, skipped, scales = 0.0, 0.0, [], []
    for k in range(1, steps + 1):
        x, y = batch(torch, rank, k, torch.float32)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(a(x), y)
        scaler.scale(loss).backward()
        if k == inject and rank == k % P:
            next(a.parameters()).grad[0, 0] = float("inf")
        norm = ct.clip_grad_norm_(a.parameters(), maxnorm)
        scaler.step(opt)
        scaler.update()
        ropt.zero_grad()
        rloss = torch.nn.functional.cross_entropy(ref(x), y)
        rscaler.scale(rloss).backward()
        for p in ref.parameters():
            if dist.is_initialized():
                dist.all_reduce(p.grad)
            p.grad.div_(P)
        if k == inject:
            next(ref.parameters()).grad[0, 0] = float("inf")
        rscaler.unscale_(ropt)
        rnorm = torch.nn.utils.clip_grad_norm_(ref.parameters(), maxnorm)
        rscaler.step(ropt)
        rscaler.update()
        torch.cuda.synchronize()
        if bool(torch.isfinite(rnorm)):
            worst_norm = max(worst_norm, abs(float(norm) - float(rnorm)) / float(rnorm))
        else:
            skipped.append(k)
        scales.append((scaler.get_scale(), rscaler.get_scale()))
        l1, l2 = loss.detach().clone(), rloss.detach().clone()
        worst_loss = max(worst_loss, abs(float(l1) - float(l2)) / abs(float(l2)))
    pw = max(float((p - q).abs().max() / max(1e-3, float(q.abs().max())))
             for p, q in zip(a.parameters(), ref.parameters()))
    pw, worst_loss = max_over_ranks(c, pw), max_over_ranks(c, worst_loss)
    same_scales = all(s == r for s, r in scales)
    ok = pw <= 1e-4 and worst_loss <= 1e-4 and worst_norm <= 1e-4 and same_scales and \
        skipped == [inject]
    return ("PASS" if ok else "FAIL"), (
        "%d steps: loss rel %.2e, norm rel %.2e, params rel %.2e (tol 1e-4); skipped %s "
        "(want [%d]); scales equal to torch's at every step: %s (last %g, torch %g)"
        % (steps, worst_loss, worst_norm, pw, skipped, inject, same_scales, scales[-1][0],
           scales[-1][1]))


def optim_graph(c, steps=10):
    """A captured whole step of coconet.torch.optim.AdamW (capturable, a
    tensor lr written between replays) against eager torch; (status,
    detail)."""
    torch, dist, rank, P = c["torch"], c["dist"], c["rank"], c["P"]
    from coconet.torch import optim
    from torch_check import batch, max_over_ranks, model
    a, ref = model(torch, torch.float32), model(torch, torch.float32)
    lr, rlr = torch.tensor(3e-3, device="cuda"), torch.tensor(3e-3, device="cuda")
    opt = optim.AdamW([{"params": list(a.parameters()), "capturable": True}], lr=lr,
                      weight_decay=0.01)
    ropt = torch.optim.AdamW(ref.parameters(), lr=rlr, weight_decay=0.01, capturable=True)
    xs, ys = batch(torch, rank, 1, torch.float32)
    xs, ys = xs.clone(), ys.clone()  # the graph's static inputs

    def body():
        opt.zero_grad()
        out = torch.nn.functional.cross_entropy(a(xs), ys)
        out.backward()
        opt.step()
        return out

    def reference(k):
        ropt.zero_grad()
        out = torch.nn.functional.cross_entropy(ref(xs), ys)
        out.backward()
        for p in ref.parameters():
            if dist.is_initialized():
                dist.all_reduce(p.grad)
            p.grad.div_(P)
        rlr.fill_(lr_at(k) * 3)
        ropt.step()
        return out.detach()

    worst = 0.0
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    for k in range(1, steps + 1):
        x, y = batch(torch, rank, k, torch.float32)
        xs.copy_(x)
        ys.copy_(y)
        lr.fill_(lr_at(k) * 3)
        if k <= 2:  # eager warm-up on a side stream (the program's first call too)
            with torch.cuda.stream(side):
                loss = body()
            torch.cuda.current_stream().wait_stream(side)
        else:
            if k == 3:
                with torch.cuda.graph(graph):
                    loss = body()
            graph.replay()
        rl = reference(k)
        torch.cuda.synchronize()
        worst = max(worst, abs(float(loss) - float(rl)) / abs(float(rl)))
    pw = max(float((p - q).abs().max() / max(1e-3, float(q.abs().max())))
             for p, q in zip(a.parameters(), ref.parameters()))
    pw, worst = max_over_ranks(c, pw), max_over_ranks(c, worst)
    t = float(opt._units[0].scalars.tensors["t"])
    ok = pw <= 1e-4 and worst <= 1e-4 and t == steps
    return ("PASS" if ok else "FAIL"), (
        "%d steps (%d replays of one captured step, lr changed before each): loss rel %.2e, "
        "params rel %.2e (tol 1e-4); device step count %g (want %d)"
        % (steps, steps - 2, worst, pw, t, steps))

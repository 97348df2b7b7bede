"""dp_ranks.py: one rank of examples/torch/train_dp.py's torch baselines on
the CPU, joined to the others by gloo (gloo_ranks.py); run by
test_train_dp.py as P processes:

    python3 dp_ranks.py SCENARIO RANK P DIR

Writes DIR/result.RANK: "OK" and a detail, or "ERROR" and the message."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "torch"))
import gloo_ranks  # noqa: E402
import gpt2  # noqa: E402
import train_dp  # noqa: E402

VOCAB, STEPS, ACCUM = 64, 4, 2


def run(optimizer, rank, P):
    """train_dp.py's wrap, micro-batches and step over a small GPT on the
    CPU: the mean loss of each step and the whole parameters after it."""
    torch.manual_seed(0)
    model = gpt2.GPT(vocab=VOCAB, ctx=16, width=32, layers=2, heads=4)
    args = argparse.Namespace(optimizer=optimizer, lr=1e-2, beta2=0.95, wd=0.01,
                              accum=ACCUM, no_overlap=False)
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    model, net, opt = train_dp.wrap(model, args, P)
    data = gpt2.corpus(4096, VOCAB, seed=1)
    losses = []
    for step in range(1, STEPS + 1):
        batches = [tuple(t.contiguous() for t in gpt2.batches(data, 2, 8, rank, P,
                                                              step * ACCUM + k))
                   for k in range(ACCUM)]  # contiguous, as train_dp.load's copies to the GPU
        opt.zero_grad(set_to_none=True)
        loss = train_dp.micro_batches(args, batches, net, opt, VOCAB, amp=False)
        opt.step()
        dist.all_reduce(loss)
        losses.append(float(loss) / P)
    params = [p.full_tensor() if hasattr(p, "full_tensor") else p
              for p in model.parameters()]
    end = torch.cat([p.detach().reshape(-1) for p in params])
    if not (end - start).abs().max() > 1e-3:
        raise AssertionError("%s: the steps left the parameters where they were" % optimizer)
    return losses, end


def baselines(rank, P, d):
    """torch-zero and torch-fsdp2 against DDP + AdamW (--optimizer torch):
    the losses and the parameters after the steps, relative differences."""
    want_loss, want = run("torch", rank, P)
    out = []
    for optimizer in ("torch-zero", "torch-fsdp2"):
        loss, got = run(optimizer, rank, P)
        dl = max(abs(a - b) / abs(b) for a, b in zip(loss, want_loss))
        dp = float((got - want).norm() / want.norm())
        if not (dl <= 1e-5 and dp <= 1e-5):
            raise AssertionError("%s against DDP + AdamW: losses %.2e, parameters %.2e apart"
                                 % (optimizer, dl, dp))
        out.append("%s losses %.1e params %.1e" % (optimizer, dl, dp))
    return "; ".join(out)


if __name__ == "__main__":
    gloo_ranks.serve({"baselines": baselines}, lambda setattr_: None)

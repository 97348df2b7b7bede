"""gpt2.py: a GPT-2-style model from PyTorch modules, for the examples here,
and the corpus they train on.

GPT(vocab, ctx, width, layers, heads): token and position embeddings, pre-
LayerNorm blocks (causal self-attention through
F.scaled_dot_product_attention, a 4x GELU MLP), a final LayerNorm and an
output head tied to the token embedding: GPT-2 small's layout, 124M
parameters at its sizes (50257, 1024, 768, 12, 12); SIZES names the sizes
the training scripts' --model takes.

corpus(n, vocab, seed, words): n tokens generated deterministically (no
download): a seeded random first-order Markov chain over `words` tokens of
the vocabulary (all of it when None), in which each token has 8 likely
successors, so a model has something to learn and the loss falls well below
ln(vocab): over 2048 words (train_dp.py's default) within a few hundred
steps, where the loss keeps falling and runs stay comparable; over the
whole vocabulary it lingers near ln(vocab), where Adam's updates of tiny,
noisy gradients turn last-bit differences into different runs.

setup(): this process's GPU and, under torchrun, its NCCL process group;
returns (rank, P)."""
import csv
import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

GPT2_SMALL = dict(vocab=50257, ctx=1024, width=768, layers=12, heads=12)
# The training scripts' --model sizes. gpt-1.5b: 1.55B parameters with 16
# heads of 96 (GPT-2 XL's 25 heads of 64 divide by no tensor-parallel size).
SIZES = {
    "gpt2": GPT2_SMALL,
    "gpt2-medium": dict(GPT2_SMALL, width=1024, layers=24, heads=16),
    "gpt-1.5b": dict(GPT2_SMALL, width=1536, layers=52, heads=16),
    "tiny": dict(GPT2_SMALL, width=256, layers=4, heads=4),  # quick runs
}


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, width, layers, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(ctx, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def corpus(n, vocab, seed=0, words=None):
    """n tokens of a seeded Markov chain over `words` of the vocabulary's
    tokens (int64, on the CPU)."""
    if words is not None and not 8 <= words <= vocab:
        raise ValueError("corpus: words=%d: expected 8 to %d (the vocabulary)" % (words, vocab))
    g = torch.Generator().manual_seed(seed)
    ids = (torch.randperm(vocab, generator=g)[:words] if words else torch.arange(vocab)).tolist()
    succ = torch.randint(0, len(ids), (len(ids), 8), generator=g).tolist()
    pick = torch.multinomial(torch.tensor([8., 4, 2, 1, 1, 1, 1, 1]), n, replacement=True,
                             generator=g).tolist()
    out, t = [0] * n, 0
    for i in range(n):  # a few million steps of plain Python: about a second
        out[i] = ids[t]
        t = succ[t][pick[i]]
    return torch.tensor(out, dtype=torch.int64)


def batches(data, batch, ctx, rank, nranks, step):
    """The micro-batch of `rank` at `step`: windows of ctx + 1 tokens at
    offsets that depend on both, the same on every run."""
    g = torch.Generator().manual_seed(step * 1000003 + rank)
    starts = torch.randint(0, len(data) - ctx - 1, (batch,), generator=g)
    w = torch.stack([data[s:s + ctx + 1] for s in starts.tolist()])
    return w[:, :-1], w[:, 1:]


def write_csv(path, header, rows):
    """rows (tuples in header's order) as a CSV file with that header"""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def setup():
    """This process's GPU (LOCAL_RANK) and, under torchrun, its NCCL group"""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank() if dist.is_initialized() else 0
    P = dist.get_world_size() if dist.is_initialized() else 1
    return rank, P

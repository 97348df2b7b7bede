#!/usr/bin/env python3
"""check.py: an independent numpy oracle for coconet's CPU reference executor.

usage: check.py FILE.coco DUMPDIR [--seed S]
       check.py --batch LIST

LIST has a line "FILE.coco DUMPDIR S OUT" a check: each is made as the first
form would, in this one process (numpy imported once), its messages written
to OUT and then a last line "exit N", N the first form's exit status.

DUMPDIR is what `coconet run FILE --ranks P --seed S --dump DIR` wrote:
manifest.txt (lines "role name rank type layout ndim global_dims... local_dims...")
and NAME.rRANK.f64 (that rank's local data, little-endian float64, row-major).

Two checks, each written from the language's definition, not from the C code:
 1. inputs: every rank's part of every input is the seeded value the language
    defines (stream = input_index<<32 | group<<16 | (rank+1 if Local), element
    = lo + (hi-lo) * uniform(seed, stream, logical row-major index), rounded to
    the type; [lo,hi) = [0,1) for updated tensors, else [-1,1); scalars without
    a value: 1 - uniform(seed, stream, 0)). This also checks that Sliced parts
    fit together and that Replicated copies agree.
 2. outputs: one Python function per program (ORACLES below, keyed by the
    file's base name), written from the .coco text, computes every output of
    every rank from the dumped inputs on the LOGICAL tensors. Each operation's
    result is rounded to its type as the language defines:
      - pointwise ops: computed in float64 from rounded inputs, rounded once;
        a comparison is 1 where it holds (IEEE: false with a NaN operand,
        but for !=), else 0; Ite(c, a, b) is a where c != 0 (NaN too), else
        b, broadcast over the three; both have the type of a binary op
        (of a and b for Ite);
        the type of a binary op (doc/language.md section 5): with a literal,
        the other operand's type (a literal is an exact FP64 number); else
        the type of the operand with dimensions when the other has none; else
        (both 0-d) the type of the one that is not a Scalar; else the
        promotion (FP16+BF16 -> FP32, else the wider);
      - MatMul / Conv2D: float32 products and float32 accumulation in
        increasing k (Conv2D: in the order c, r, s), FP64 in float64; a
        MatMul/Conv2D whose operands are both sliced on the contraction
        dimension gives each rank the product of its slices (a Local partial
        result), rounded to the type;
      - collectives: a float64 fold over the group's ranks in rank order
        starting from group rank 0, rounded once; Reduce leaves zeros on
        the other ranks; Send moves group j's value to group j+shift (mod;
        Linear: only where that group exists, a group no one sends to
        keeps its own value);
      - Norm / ReduceTensor / PartialReduce: float64 fold in index order,
        rounded once (with Keep the reduced dimension stays, extent 1);
      - Dropout: keep iff uniform(seed, 2^63 | dropout_id, logical index) >= p,
        then x * (1 / (1 - p)) rounded, else 0.
    Since this follows the same arithmetic order, outputs must be EXACTLY
    equal (NaN equals NaN). Transcendental functions come from Python's math
    module, i.e. the same C library the executor calls.
    For the MatMul and Conv2D programs a second, plain evaluation (float64
    product of the whole logical tensors, no partial sums) must agree within
    a tolerance stated in plain_tolerance() below: this checks that the ranks'
    slices of the two operands line up, which the exact check cannot see.
Exit status 0 when everything agrees; otherwise a line per mismatch.
"""
import contextlib
import math
import os
import re
import sys
import traceback

import numpy as np

# ---------------------------------------------------------------------------
# element types


def r16(x):
    """Round to FP16 (numpy converts float64 -> float16 directly: one rounding)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float64).astype(np.float16).astype(np.float64)


def r32(x):
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def rbf16(x):
    """Round to BF16, nearest even, from float64 in one rounding.

    First float64 -> float32 with round-to-odd (truncate, then set the last
    bit when inexact), which keeps enough information for the second step,
    float32 -> bf16 by the usual bit trick (add 0x7FFF + the kept lsb, cut).
    Rounding twice to nearest could be off by one in the last place."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        inexact = (f.astype(np.float64) != x) & np.isfinite(x)
        away = inexact & (np.abs(f.astype(np.float64)) > np.abs(x))
        f = np.where(away, np.nextafter(f, np.float32(0)), f).astype(np.float32)
        bits = f.view(np.uint32).copy()
        bits = np.where(inexact, bits | np.uint32(1), bits).astype(np.uint32)
        nan = np.isnan(x)
        lsb = (bits >> np.uint32(16)) & np.uint32(1)
        b = ((bits.astype(np.uint64) + np.uint64(0x7FFF) + lsb) >> np.uint64(16)).astype(np.uint32)
        b = np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x40), b).astype(np.uint32)
        return (b << np.uint32(16)).astype(np.uint32).view(np.float32).astype(np.float64)


def r64(x):
    return np.asarray(x, np.float64)


ROUND = {"FP16": r16, "BF16": rbf16, "FP32": r32, "FP64": r64}

# ---------------------------------------------------------------------------
# counter-based random numbers (the formula of src/cpu/rng.c), on uint64 arrays

M64 = (1 << 64) - 1


def _mix_int(z):
    z &= M64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return z


def _mix_arr(z):
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return z


def uniform(seed, stream, index):
    """uniform(seed, stream, index) in [0, 1) for an array of indices."""
    h = _mix_int(seed * 0x9E3779B97F4A7C15 + 0x6A09E667F3BCC909)
    h = _mix_int(h ^ ((stream * 0xD1B54A32D192ED03) & M64))
    idx = np.asarray(index, np.uint64)
    with np.errstate(over="ignore"):
        z = _mix_arr(np.uint64(h) ^ (idx * np.uint64(0x8CB92BA72F3D8DD7)))
    return (z >> np.uint64(40)).astype(np.float64) * 2.0 ** -24


# ---------------------------------------------------------------------------
# the dump


class Value:
    def __init__(self, name, role, typ, layout, gshape):
        self.name, self.role, self.type, self.layout = name, role, typ, layout
        self.gshape = tuple(gshape)
        self.lshape = {}
        self.data = {}  # rank -> local array

    @property
    def sliced_dim(self):
        m = re.fullmatch(r"Sliced\((\d+)\)", self.layout)
        return int(m.group(1)) if m else None


class Dump:
    def __init__(self, path, seed):
        self.path, self.seed = path, seed
        self.values = {}
        self.ranks = set()
        with open(os.path.join(path, "manifest.txt")) as f:
            for line in f:
                w = line.split()
                if not w:
                    continue
                role, name, rank, typ, layout, nd = w[0], w[1], int(w[2]), w[3], w[4], int(w[5])
                gshape = [int(v) for v in w[6:6 + nd]]
                lshape = tuple(int(v) for v in w[6 + nd:6 + 2 * nd])
                key = (role, name)
                if key not in self.values:
                    self.values[key] = Value(name, role, typ, layout, gshape)
                v = self.values[key]
                raw = np.fromfile(os.path.join(path, "%s.r%d.f64" % (name, rank)), dtype="<f8")
                if raw.size != int(np.prod(lshape, dtype=np.int64)):
                    raise SystemExit("%s rank %d: %d values for local shape %s"
                                     % (name, rank, raw.size, lshape))
                v.lshape[rank] = lshape
                v.data[rank] = raw.reshape(lshape)
                self.ranks.add(rank)
        self.P = len(self.ranks)
        if sorted(self.ranks) != list(range(self.P)):
            raise SystemExit("manifest ranks are not 0..P-1: %s" % sorted(self.ranks))

    def inp(self, name):
        return self.values[("input", name)]

    def outputs(self):
        return [v for (role, _), v in self.values.items() if role == "output"]


def slice_bounds(n, parts, k):
    """Blocks of c = ceil(n / parts): [min(n, k*c), min(n, (k+1)*c))."""
    c = -(-n // parts)
    return min(n, k * c), min(n, (k + 1) * c)


def groups(P, G):
    """Groups are runs of G consecutive ranks."""
    return [list(range(j * G, (j + 1) * G)) for j in range(P // G)]


# ---------------------------------------------------------------------------
# the program text: declaration order, groups, updated tensors, scalar values


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


class Source:
    def __init__(self, path):
        text = strip_comments(open(path).read())
        self.decls = {}  # name -> dict(kind, index, type, layout, group, value)
        i = 0
        for m in re.finditer(r"\b(Tensor|Scalar)\s+(\w+)\s*\(([^;]*)\)\s*;", text):
            kind, name, args = m.group(1), m.group(2), [a.strip() for a in m.group(3).split(",")]
            d = {"kind": kind, "index": i, "type": args[0]}
            i += 1
            if kind == "Tensor":
                inner = m.group(3)
                rest = inner[inner.index("]") + 1:]
                rest = [a.strip() for a in rest.split(",") if a.strip()]
                d["layout"], d["group"] = rest[0].replace(" ", ""), rest[1]
            else:
                d["value"] = float(args[1]) if len(args) > 1 else None
            self.decls[name] = d
        self.updated = set(re.findall(r"\bUpdate\s*\(\s*(\w+)", text))
        m = re.search(r"\bGroup\s+GROUP\s*\(\s*(\d+)\s*\)", text)
        self.group_size = int(m.group(1)) if m else None


# ---------------------------------------------------------------------------
# check 1: the inputs


def expected_input(src, dump, v, rank):
    d = src.decls[v.name]
    typ = ROUND[v.type]
    P, seed = dump.P, dump.seed
    gsize = src.group_size if d.get("group") == "GROUP" else P
    gindex = rank // gsize if d.get("group") == "GROUP" else 0
    local = d.get("layout") == "Local"
    stream = (d["index"] << 32) | (gindex << 16) | ((rank + 1) if local else 0)
    if d["kind"] == "Scalar":
        if d["value"] is not None:
            return typ(np.float64(d["value"]))
        return typ(1.0 - uniform(seed, stream, 0))
    # logical index of every local element
    ranges = [np.arange(n) for n in v.gshape]
    sd = v.sliced_dim
    if sd is not None:
        lo, hi = slice_bounds(v.gshape[sd], gsize, rank % gsize)
        ranges[sd] = np.arange(lo, hi)
    grid = np.meshgrid(*ranges, indexing="ij") if ranges else []
    gidx = np.ravel_multi_index(grid, v.gshape) if ranges else np.array(0)
    lo, width = (0.0, 1.0) if v.name in src.updated else (-1.0, 2.0)
    return typ(lo + width * uniform(seed, stream, gidx))


def same(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def describe_mismatch(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return "shape %s, expected %s" % (got.shape, want.shape)
    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    idx = np.argwhere(bad)
    first = tuple(int(i) for i in idx[0])
    return "%d of %d elements differ; first at %s: got %r, expected %r" % (
        len(idx), got.size, first, float(got[first]), float(want[first]))


# ---------------------------------------------------------------------------
# building blocks of the oracles


def fold(parts, op="+"):
    """Reduction over ranks in float64, in order, starting from the first."""
    acc = np.array(parts[0], np.float64, copy=True)
    for x in parts[1:]:
        if op == "+":
            acc = acc + x
        elif op == "*":
            acc = acc * x
        elif op == "max":  # NaN propagates
            acc = np.where((x > acc) | np.isnan(x), x, acc)
        elif op == "min":
            acc = np.where((x < acc) | np.isnan(x), x, acc)
    return acc


def seq_sum(x, axis=None):
    """float64 sum in index order starting from the first element (no pairwise)."""
    x = np.asarray(x, np.float64)
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    return np.cumsum(x, axis=axis).take(-1, axis=axis)


def norm(x, typ, axis=None):
    x = np.asarray(x, np.float64)
    return ROUND[typ](np.sqrt(seq_sum(x * x, axis)))


def matmul(a, b, typ):
    """[..., M, K] x [..., K, N]: float32 products and sums in increasing k."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    dt = np.float64 if typ == "FP64" else np.float32
    a, b = a.astype(dt), b.astype(dt)
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    acc = np.zeros(shape, dt)
    for k in range(a.shape[-1]):
        acc = acc + a[..., :, k:k + 1] * b[..., k:k + 1, :]
    return ROUND[typ](acc.astype(np.float64))


def conv2d(x, w, typ, stride=1, pad=0):
    """x [N,C,H,W], w [K,C,R,S]; float32 (FP64: float64), order c, r, s;
    zero padding (adding 0*w for a padded position is the same as skipping it)."""
    dt = np.float64 if typ == "FP64" else np.float32
    x, w = np.asarray(x, dt), np.asarray(w, dt)
    n, c, h, wd = x.shape
    k, _, rr, ss = w.shape
    oh, ow = (h + 2 * pad - rr) // stride + 1, (wd + 2 * pad - ss) // stride + 1
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad), dt)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    acc = np.zeros((n, k, oh, ow), dt)
    for ci in range(c):
        for r in range(rr):
            for s in range(ss):
                patch = xp[:, ci, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride]
                acc = acc + patch[:, None, :, :] * w[None, :, ci, r, s, None, None]
    return ROUND[typ](acc.astype(np.float64))


def dropout(x, p, dropout_id, typ, seed):
    """x is the LOGICAL tensor; the mask is indexed by logical row-major index."""
    x = np.asarray(x, np.float64)
    u = uniform(seed, (1 << 63) | dropout_id, np.arange(x.size)).reshape(x.shape)
    return np.where(u >= p, ROUND[typ](x * (1.0 / (1.0 - p))), 0.0)


def relu(x):
    return np.where(x > 0, x, 0.0)


COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
           "==": np.equal, "!=": np.not_equal}


def compare(op, a, b, typ):
    """a OP b: 1.0 where it holds, else 0.0, of type typ (numpy's comparisons
    are IEEE's: false with a NaN operand, but for !=)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return ROUND[typ](np.where(COMPARE[op](a, b), 1.0, 0.0))


def ite(cond, a, b, typ):
    """Ite(cond, a, b): a where cond is not zero (a NaN is not), else b;
    broadcast over the three, rounded to typ."""
    cond = np.asarray(cond, np.float64)
    return ROUND[typ](np.where(cond != 0, np.asarray(a, np.float64), np.asarray(b, np.float64)))


def ltanh(x):
    return np.vectorize(math.tanh, otypes=[np.float64])(x) if np.ndim(x) else np.float64(math.tanh(x))


def _libm(fn, x):
    """fn (a math function: the C library's) elementwise, in float64."""
    x = np.asarray(x, np.float64)
    return np.vectorize(fn, otypes=[np.float64])(x) if x.ndim else np.float64(fn(float(x)))


def _exp(v):
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def _log(v):
    """C's log: -Inf at 0, NaN below (math.log raises there)"""
    if v == 0:
        return -math.inf
    return math.nan if v < 0 else math.log(v)


def lexp(x):
    return _libm(_exp, x)


def llog(x):
    return _libm(_log, x)


def lerf(x):
    """math.erf: the C library's from Python 3.11 (older ones had their own)"""
    return _libm(math.erf, x)


def vmax(a, b):
    """Max(a, b): b where it is larger or NaN, else a (the fold of a then b)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.where((b > a) | np.isnan(b), b, a)


def vmin(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.where((b < a) | np.isnan(b), b, a)


def fold_dim(x, axis, op="+"):
    """A reduction along axis that keeps it (Keep): a float64 fold in index
    order, starting from the first element."""
    x = np.asarray(x, np.float64)
    return np.expand_dims(fold([np.take(x, i, axis=axis) for i in range(x.shape[axis])], op), axis)


def lpow(a, b):
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    return np.vectorize(_pow, otypes=[np.float64])(a, b) if a.ndim else np.float64(_pow(a, b))


def _pow(a, b):
    try:
        return math.pow(float(a), float(b))
    except (ValueError, OverflowError):
        return float(np.power(float(a), float(b)))


class Ctx:
    """What an oracle function sees: the dumped inputs as logical tensors."""

    def __init__(self, src, dump):
        self.src, self.dump, self.P, self.seed = src, dump, dump.P, dump.seed

    def rank_data(self, name, rank):
        """A rank's own data: its slice, its Local tensor, its copy."""
        return self.dump.inp(name).data[rank]

    def replicated(self, name, rank=0):
        return self.dump.inp(name).data[rank]

    def scalar(self, name):
        return np.float64(self.dump.inp(name).data[0])

    def gathered(self, name, ranks):
        """The logical tensor of a Sliced input, from the parts of these ranks."""
        v = self.dump.inp(name)
        return np.concatenate([v.data[r] for r in ranks], axis=v.sliced_dim)

    def everywhere(self, x):
        """A Replicated (WORLD) result: the same value on every rank."""
        return {r: x for r in range(self.P)}


def sliced_parts(x, dim, ranks):
    """Each rank's part of logical tensor x cut along dim (blocks of ceil(n/G))."""
    out = {}
    for k, r in enumerate(ranks):
        lo, hi = slice_bounds(x.shape[dim], len(ranks), k)
        out[r] = np.take(x, np.arange(lo, hi), axis=dim)
    return out


# ---------------------------------------------------------------------------
# the oracles of examples/*.coco, one per program, written from its text.
# Each returns ({output name: {rank: expected local data}}, plain) where plain
# is None or ({name: {rank: data}}, {name: {rank: tolerance}}).

ONE = 1.0  # a literal: an exact double that never sets the type


def adam_moments(c, g, m, v, beta1, beta2, t):
    avg = r16(fold(g))                                     # AllReduce("+", g): FP16
    # m*beta1: FP32; 1-beta1: FP32 (the Scalar's type, rule 1);
    # (1-beta1)*avg: the type of the operand with dimensions, FP16 (rule 2)
    m_ = r32(r32(m * beta1) + r16(r32(ONE - beta1) * avg))
    v_ = r32(r32(v * beta2) + r16(r16(r32(ONE - beta2) * avg) * avg))
    m1 = r32(m_ / r32(ONE - r32(lpow(beta1, t))))
    v1 = r32(v_ / r32(ONE - r32(lpow(beta2, t))))
    return m1, v1


def oracle_adam(c):
    P = c.P
    g = [c.rank_data("g", r) for r in range(P)]
    p, m, v = c.replicated("p"), c.replicated("m"), c.replicated("v")
    lr, t = c.scalar("lr"), c.scalar("t")
    beta1, beta2 = r32(0.9), r32(0.999)
    m1, v1 = adam_moments(c, g, m, v, beta1, beta2, t)
    p_ = r32(p - r32(r32(lr * m1) / r32(np.sqrt(v1))))   # p - ((lr*m1)/Sqrt(v1))
    return {"p_": c.everywhere(p_)}, None


def oracle_lamb(c):
    P = c.P
    g = [c.rank_data("g", r) for r in range(P)]
    p, m, v = c.replicated("p"), c.replicated("m"), c.replicated("v")
    lr, t = c.scalar("lr"), c.scalar("t")
    beta1, beta2, eps, wd = r32(0.9), r32(0.999), r32(1e-6), r32(0.01)
    m1, v1 = adam_moments(c, g, m, v, beta1, beta2, t)
    u = r32(r32(m1 / r32(r32(np.sqrt(v1)) + eps)) + r32(wd * p))
    r1, r2 = norm(p, "FP32"), norm(u, "FP32")
    # Ite(r1 > 0, Ite(r2 > 0, r1 / r2, 1.0), 1.0): FP32 (the literal takes
    # the other operand's type), then p - ((lr * ratio) * u), all FP32
    inner = ite(compare(">", r2, 0, "FP32"), r32(r1 / r2), ONE, "FP32")
    ratio = ite(compare(">", r1, 0, "FP32"), inner, ONE, "FP32")
    p_ = r32(p - r32(r32(lr * ratio) * u))
    return {"p_": c.everywhere(p_)}, None


def oracle_sgd_momentum(c):
    P = c.P
    g = [c.rank_data("g", r) for r in range(P)]
    p, mom = c.replicated("p"), c.replicated("mom")
    lr, mu, ranks = r32(0.01), r32(0.9), c.scalar("ranks")
    avg = r32(r32(fold(g)) / ranks)
    mom_ = r32(r32(mu * mom) + avg)
    p_ = r32(p - r32(lr * mom_))
    return {"p_": c.everywhere(p_)}, None


def oracle_reduce_broadcast(c):
    P = c.P
    x = [c.rank_data("x", r) for r in range(P)]
    total = r32(fold(x))                       # Reduce to rank 0 (zeros elsewhere)
    mean = r32(total * 0.25)                   # computed on rank 0, then Broadcast
    biggest = r32(fold(x, "max"))
    out = r32(r32(ltanh(mean)) - biggest)
    return {"out": c.everywhere(out), "biggest": c.everywhere(biggest)}, None


def plain_tolerance(M, nround):
    """Tolerance of the plain evaluation against the distributed one.

    The exact and the plain computations differ only in how the product is
    summed: per-rank float32 partials each rounded to the type (FP16: relative
    error 2^-11), then added in float64 and rounded again, versus one float64
    sum. Their difference is at most 2^-11 * sum_k |a_k b_k| per partial
    rounding plus one rounding of the sum, i.e. <= 2^-10 * M where M bounds
    sum_k |a_k b_k| plus everything added later. Each of the nround later
    roundings (bias, dropout scaling, residual, ...) can turn a difference d
    into at most 1.12*d (dropout's 1/0.9) plus one ulp (2^-10 relative) of a
    value bounded by M. So 2^-10 * M * (2 + 1.2 * nround) bounds it; float32
    accumulation errors (2^-24 K M) are far below."""
    return 2.0 ** -10 * M * (2 + 1.2 * nround)


def attention_like(c, k_dim_of_in):
    """mlp and self_attention: MatMul(in, w) with both sliced on K, AllReduce,
    Dropout(sum + b, 0.1), + r; all FP16."""
    P = c.P
    b, r = c.replicated("b"), c.replicated("r")
    parts = [matmul(c.rank_data("in", k), c.rank_data("w", k), "FP16") for k in range(P)]
    s = r16(fold(parts))
    out = r16(dropout(r16(s + b), 0.1, 0, "FP16", c.seed) + r)
    # plain: the whole product at once, in float64
    a_full, w_full = c.gathered("in", range(P)), c.gathered("w", range(P))
    prod = np.matmul(a_full, w_full)
    plain = r16(dropout(r16(prod + b), 0.1, 0, "FP16", c.seed) + r)
    M = np.matmul(np.abs(a_full), np.abs(w_full)) / 0.9 + np.abs(b) / 0.9 + np.abs(r) + 1e-3
    tol = plain_tolerance(M, 3)
    return {"out": c.everywhere(out)}, ({"out": c.everywhere(plain)}, {"out": c.everywhere(tol)})


def oracle_mlp(c):
    return attention_like(c, 2)


def oracle_self_attention(c):
    return attention_like(c, 2)


def oracle_conv2d(c):
    P = c.P
    b = c.replicated("b")
    parts = [conv2d(c.rank_data("x", k), c.rank_data("w", k), "FP32", 1, 1) for k in range(P)]
    s = r32(fold(parts))
    out = relu(r32(s + b))
    x_full, w_full = c.gathered("x", range(P)), c.gathered("w", range(P))
    plain = relu(r32(conv2d_f64(x_full, w_full, 1, 1) + b))
    M = conv2d_f64(np.abs(x_full), np.abs(w_full), 1, 1) + np.abs(b) + 1e-30
    # FP32 partials: each rounding is 2^-24 relative instead of FP16's 2^-11.
    tol = plain_tolerance(M, 2) * 2.0 ** -13
    return {"out": c.everywhere(out)}, ({"out": c.everywhere(plain)}, {"out": c.everywhere(tol)})


def conv2d_f64(x, w, stride, pad):
    n, ch, h, wd = x.shape
    k, _, rr, ss = w.shape
    oh, ow = (h + 2 * pad - rr) // stride + 1, (wd + 2 * pad - ss) // stride + 1
    xp = np.zeros((n, ch, h + 2 * pad, wd + 2 * pad))
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    out = np.zeros((n, k, oh, ow))
    for r in range(rr):
        for s in range(ss):
            patch = xp[:, :, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, r, s])
    return out


def oracle_pipeline(c):
    P, G = c.P, c.src.group_size                # Group GROUP(2) in the file
    grps = groups(P, G)
    send = []
    for ranks in grps:
        s = r16(fold([c.rank_data("in", r) for r in ranks]))       # AllReduce in the group
        b, res = c.replicated("b", ranks[0]), c.replicated("r", ranks[0])
        send.append(r16(dropout(r16(s + b), 0.1, 0, "FP16", c.seed) + res))
    out = {}
    for j, ranks in enumerate(grps):            # Send to GroupRank(GROUP+1, RANK)
        for r in ranks:
            out[r] = send[(j - 1) % len(grps)]
    return {"output": out}, None


def oracle_pipeline_linear(c):
    """Each group: MatMul(in, w) sliced on K, AllReduce in the group,
    Dropout(sum + b, 0.1) + r; Send to GroupRank(GROUP+1, RANK, Linear):
    group j >= 1 gets group j-1's value, group 0 (no group before it) keeps
    its own, the last group's value goes nowhere."""
    P, G = c.P, c.src.group_size                # Group GROUP(2) in the file
    grps = groups(P, G)
    send, plain_send, tol_send = [], [], []
    for ranks in grps:
        b, res = c.replicated("b", ranks[0]), c.replicated("r", ranks[0])
        parts = [matmul(c.rank_data("in", k), c.rank_data("w", k), "FP16") for k in ranks]
        s = r16(fold(parts))
        send.append(r16(dropout(r16(s + b), 0.1, 0, "FP16", c.seed) + res))
        a_full, w_full = c.gathered("in", ranks), c.gathered("w", ranks)
        plain_send.append(r16(dropout(r16(np.matmul(a_full, w_full) + b), 0.1, 0, "FP16", c.seed) + res))
        M = np.matmul(np.abs(a_full), np.abs(w_full)) / 0.9 + np.abs(b) / 0.9 + np.abs(res) + 1e-3
        tol_send.append(plain_tolerance(M, 3))
    out, plain, tol = {}, {}, {}
    for j, ranks in enumerate(grps):
        src = j - 1 if j >= 1 else j
        for r in ranks:
            out[r], plain[r], tol[r] = send[src], plain_send[src], tol_send[src]
    return {"output": out}, ({"output": plain}, {"output": tol})


ORACLES = {
    "adam": oracle_adam,
    "adam_scattered": oracle_adam,  # the same on a scattered tensor (its 1-D concatenation)
    "lamb": oracle_lamb,
    "sgd_momentum": oracle_sgd_momentum,
    "reduce_broadcast": oracle_reduce_broadcast,
    "mlp": oracle_mlp,
    "self_attention": oracle_self_attention,
    "conv2d": oracle_conv2d,
    "pipeline": oracle_pipeline,
    "pipeline_linear": oracle_pipeline_linear,
}

# the oracles of tests/oracle/programs/*.coco and of the transformer examples
try:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import programs_oracles  # noqa: E402
    import transformer_oracles  # noqa: E402

    ORACLES.update(programs_oracles.oracles(sys.modules[__name__]))
    ORACLES.update(transformer_oracles.oracles(sys.modules[__name__]))
except ImportError:
    pass

# ---------------------------------------------------------------------------


def selftest():
    """The oracle's own rounding, against values worked out by hand."""
    cases = [
        (r16, [1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-11 + 2**-40, 65519.99, 65520, 2**-25, 3 * 2**-25, 0.1],
         [1, 1 + 2**-9, 1 + 2**-10, 65504, np.inf, 0, 2**-23, 0.0999755859375]),
        (rbf16, [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-40, -(1 + 2**-8), 65520, 2.0**-133,
                 2.0**-134, 1.5 * 2.0**-134, float.fromhex('0x1.FEp127'), float.fromhex('0x1.FFp127'), 1e300, 1e-300, 0.1],
         [1, 1 + 2**-6, 1 + 2**-7, -1, 65536, 2.0**-133, 0, 2.0**-133, float.fromhex('0x1.FEp127'), np.inf, np.inf, 0,
          0.10009765625]),
        (r32, [1 + 2**-24, 1 + 3 * 2**-24, 0.1], [1, 1 + 2**-22, 0.100000001490116119384765625]),
    ]
    for fn, xs, want in cases:
        got = fn(np.array(xs, np.float64))
        if not same(got, np.array(want, np.float64)):
            raise SystemExit("oracle self-test failed: %s(%r) = %r, expected %r" % (fn.__name__, xs, list(got), want))
    if not np.isnan(rbf16(np.array([np.nan]))[0]):
        raise SystemExit("oracle self-test failed: rbf16(nan)")


def batch(listfile):
    """every check of LIST (see the usage), each into its own OUT"""
    with open(listfile) as f:
        lines = [l.split() for l in f if l.strip()]
    for line in lines:
        if len(line) != 4:
            print("%s: expected 'FILE.coco DUMPDIR S OUT', got %r" % (listfile, " ".join(line)))
            return 2
    for path, dumpdir, seed, out in lines:
        with open(out, "w") as o:
            with contextlib.redirect_stdout(o):
                try:
                    status = check(path, dumpdir, int(seed))
                except Exception:  # the first form would end so: a failure
                    traceback.print_exc(file=o)
                    status = 1
            o.write("exit %d\n" % status)
    return 0


def main(argv):
    selftest()
    args = [a for a in argv[1:]]
    if len(args) == 2 and args[0] == "--batch":
        return batch(args[1])
    seed = 1
    if "--seed" in args:
        i = args.index("--seed")
        seed = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    path, dumpdir = args
    return check(path, dumpdir, seed)


def check(path, dumpdir, seed):
    """the checks of one dump: 0 when all hold, else 1 (each told on stdout)"""
    name = os.path.splitext(os.path.basename(path))[0]
    if name not in ORACLES:
        print("%s: no oracle function for this program in tests/oracle" % path)
        return 1
    src, dump = Source(path), Dump(dumpdir, seed)
    errors = []

    for (role, vname), v in sorted(dump.values.items()):
        if role != "input":
            continue
        for rank in range(dump.P):
            want = expected_input(src, dump, v, rank)
            if not same(v.data[rank], want):
                errors.append("input %s rank %d: %s" % (vname, rank, describe_mismatch(v.data[rank], want)))

    with np.errstate(all="ignore"):
        expected, plain = ORACLES[name](Ctx(src, dump))
    outs = {v.name: v for v in dump.outputs()}
    if set(outs) != set(expected):
        errors.append("outputs %s, the oracle computes %s" % (sorted(outs), sorted(expected)))
    for oname in sorted(set(outs) & set(expected)):
        for rank in range(dump.P):
            got, want = outs[oname].data[rank], expected[oname][rank]
            if not same(got, want):
                errors.append("output %s rank %d: %s" % (oname, rank, describe_mismatch(got, want)))
    if plain:
        values, tols = plain
        for oname, per_rank in values.items():
            for rank, want in per_rank.items():
                got = outs[oname].data[rank]
                diff = np.abs(got - want)
                over = diff > tols[oname][rank]
                if np.any(over):
                    i = tuple(int(k) for k in np.argwhere(over)[0])
                    errors.append("output %s rank %d: %d elements differ from the plain evaluation "
                                  "by more than the tolerance; first at %s: got %r, plain %r, tolerance %r"
                                  % (oname, rank, int(over.sum()), i, float(got[i]), float(want[i]),
                                     float(tols[oname][rank][i])))
    for e in errors[:20]:
        print(e)
    if len(errors) > 20:
        print("... and %d more" % (len(errors) - 20))
    if not errors:
        print("%s: %d ranks, seed %d: inputs and outputs agree" % (path, dump.P, seed))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

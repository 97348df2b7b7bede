"""programs_oracles.py: the oracles of tests/oracle/programs/*.coco.

These programs exercise what the examples do not: every reduction operator,
uneven ReduceScatter slices, AllGather, Reduce/Broadcast with a non-zero
root, MatMul and Conv2D in each allowed layout and in every type, casts,
Slice, Dropout of a Sliced value, Norm and ReduceTensor along a dimension,
every comparison and Ite in every type, groups with Send/Recv offsets that
wrap around, reductions that keep their dimension, Exp, Log, Erf, Abs, Max
and Min (LayerNorm, softmax, GELU, SiLU), a LayerNorm's backward,
Transpose, and Norm per member of a scattered tensor. Each function is written
from its .coco text with the building blocks of check.py (C below), which
states the language's rounding rules. Outputs must agree exactly.
"""
import numpy as np


def oracles(C):
    r16, r32, rbf, r64 = C.r16, C.r32, C.rbf16, C.r64

    def per_rank_sliced(x, dim, P):
        """{rank: part} of logical x cut along dim over WORLD."""
        return C.sliced_parts(x, dim, list(range(P)))

    # ---- collectives.coco ----
    def collectives(c):
        P = c.P
        x = [c.rank_data("x", r) for r in range(P)]
        h = [c.rank_data("h", r) for r in range(P)]
        b = [c.rank_data("b", r) for r in range(P)]
        s = r32(C.fold(x))
        out = {
            "s": c.everywhere(s),
            "pr": c.everywhere(r32(C.fold(x, "*"))),
            "mx": c.everywhere(r16(C.fold(h, "max"))),
            "mn": c.everywhere(rbf(C.fold(b, "min"))),
            # ReduceScatter: the rounded reduction, each rank keeps its block
            "rs": per_rank_sliced(s, 0, P),
            "rs1": per_rank_sliced(r32(C.fold([r32(v * 2) for v in x], "max")), 1, P),
            # rs + 1 on each slice, gathered: the whole r32(s + 1)
            "ag": c.everywhere(r32(s + 1)),
        }
        hs = r16(C.fold(h))
        out["red"] = {r: (hs if r == 1 else np.zeros_like(hs)) for r in range(P)}
        out["bc"] = c.everywhere(r16(hs * 3))   # red * 3 on root 1, broadcast
        return out, None

    # ---- layers.coco ----
    def layers(c):
        P = c.P
        w, a16, w3, k = c.replicated("w"), c.replicated("a16"), c.replicated("w3"), c.replicated("k")
        xr = c.replicated("xr")
        out = {
            # a sliced on M (dim 1), w replicated: each rank its rows
            "rows": {r: C.matmul(c.rank_data("a", r), w, "FP32") for r in range(P)},
            # FP16 x BF16 is FP32; wn sliced on N: each rank its columns
            "cols": {r: C.matmul(a16, c.rank_data("wn", r), "FP32") for r in range(P)},
            "batched": c.everywhere(C.matmul(a16, w3, "FP16")),
            # FP64 partials over K slices, added in rank order
            "full": c.everywhere(r64(C.fold([C.matmul(c.rank_data("a64", r), c.rank_data("w64", r), "FP64")
                                             for r in range(P)]))),
            # input sliced on the batch, weights replicated
            "c1": {r: C.conv2d(c.rank_data("x", r), k, "FP32", 2, 1) for r in range(P)},
            # weights sliced on output channels: output Sliced(1)
            "c2": {r: C.conv2d(xr, c.rank_data("kk", r), "FP16", 1, 2) for r in range(P)},
            "c3": {r: C.relu(C.conv2d(c.rank_data("x", r), k, "FP32")) for r in range(P)},
            # FP64 with FP32 is FP64: accumulated in double
            "c4": {r: C.conv2d(c.replicated("x64"), c.rank_data("k32", r), "FP64", 2, 1) for r in range(P)},
        }
        # plain check that the parts fit together: the whole products
        a_full = c.gathered("a", range(P))
        plain = {"rows": per_rank_sliced(np.matmul(a_full, w), 1, P),
                 "cols": per_rank_sliced(np.matmul(a16, c.gathered("wn", range(P))), 2, P),
                 "full": c.everywhere(np.matmul(c.gathered("a64", range(P)), c.gathered("w64", range(P))))}
        mags = {"rows": per_rank_sliced(np.matmul(np.abs(a_full), np.abs(w)), 1, P),
                "cols": per_rank_sliced(np.matmul(np.abs(a16), np.abs(c.gathered("wn", range(P)))), 2, P),
                "full": c.everywhere(np.matmul(np.abs(c.gathered("a64", range(P))),
                                               np.abs(c.gathered("w64", range(P)))))}
        # FP32 results of float32 sums over K = 24 terms: |error| <= 24 * 2^-24
        # * sum|a*b| plus the final rounding; FP64: far less. 2^-18 covers both.
        tols = {n: {r: 2.0 ** -18 * m + 1e-300 for r, m in v.items()} for n, v in mags.items()}
        return out, (plain, tols)

    # ---- pointwise.coco ----
    def pointwise(c):
        P, seed = c.P, c.seed
        y, z, q = c.replicated("y"), c.replicated("z"), c.replicated("q")
        k, e = c.scalar("k"), c.scalar("e")
        R, Cn = z.shape
        zs = per_rank_sliced(z, 0, P)                     # Slice(z, 0)
        a, b, d1, d2, n1, lit = {}, {}, {}, {}, {}, {}
        for r in range(P):
            x = c.rank_data("x", r)
            lit[r] = r32(r32(x * 0.1) + 0.001)            # literals: exact doubles
            # x * y: FP32 with BF16 -> FP32
            a[r] = r32(r32(C.ltanh(r32(x * y))) - r32(r32(np.sqrt(r32(r32(C.relu(x)) + 1))) / 3))
            b[r] = r32(r16(r16(C.lpow(zs[r], 2)) * k) + x)  # FP16 Pow and * Scalar, + FP32
            n1[r] = C.norm(x, "FP32", axis=1)
        # Dropout of a Sliced value: the mask is drawn on the logical tensor
        ab = np.concatenate([r32(a[r] + b[r]) for r in range(P)], axis=0)
        d1_full = C.dropout(ab, 0.3, 0, "FP32", seed)
        d2_full = C.dropout(r32(r32(-d1_full) * e), 0.5, 1, "FP32", seed)
        out = {
            "a": a, "b": b,
            "d1": per_rank_sliced(d1_full, 0, P),
            "d2": per_rank_sliced(d2_full, 0, P),
            # FP16 + BF16 -> FP32
            "c16": c.everywhere(r32(r16(q) + rbf(rbf(q) * 2))),
            # FP32 - FP64 -> FP64
            "c32": c.everywhere(r64(r32(r64(q * 1000)) - rbf(q))),
            "n0": c.everywhere(C.norm(z, "FP16", axis=0)),
            "n1": n1,
            "t1": c.everywhere(r64(C.fold([q[:, j] for j in range(Cn)], "min")
                                   + C.fold([z[:, j] for j in range(Cn)], "*"))),
            # FP16 * BF16 -> FP32; FP16 - literal -> FP16; FP64 / FP16 -> FP64
            "mix": c.everywhere(r64(r32(z * y) + r64(q / r16(z - 2)))),
            "lit": lit,
            # 0-d: a literal takes the other operand's type (rule 1)
            "r1": c.everywhere(r32(r32(1 - e) + 0.1)),
            # Norm (not a Scalar) with a Scalar: the Norm's type (rule 3)
            "r3": c.everywhere(r64(C.norm(q, "FP64") * k)),
            # two Scalars: promotion FP16, FP32 -> FP32 (rule 4)
            "r4": c.everywhere(r32(r32(r32(k * e) + 0.2) + 0.1)),
        }
        return out, None

    # ---- groups.coco ----
    def groups(c):
        P, G = c.P, c.src.group_size
        grps = C.groups(P, G)
        ng = len(grps)
        w, cc = c.replicated("w"), c.scalar("c")
        g = [c.rank_data("g", r) for r in range(P)]
        rg = [c.replicated("rg", grp[0]) for grp in grps]
        sums, gats, scs, worlds = [], [], [], []
        for j, grp in enumerate(grps):
            ar = r32(C.fold([g[r] for r in grp]))
            sums.append(r32(r32(ar * w) + r32(rg[j] * cc)))
            gats.append(np.concatenate([r16(c.rank_data("s", r) * 2) for r in grp], axis=0))
            scs.append(r32(C.fold([r32(g[r] * cc) for r in grp])))
            src = grps[(j - 2) % ng]                      # Send(g, GROUP+2): from group j-2
            worlds.append(r32(C.fold([r32(g[src[i]] * w) for i in range(G)])))
        fwd = [sums[(j - 1) % ng] for j in range(ng)]     # Send to GROUP+1
        back = [gats[(j - 1) % ng] for j in range(ng)]    # Recv from GROUP-1
        diff = [r32(fwd[j] - rg[j]) for j in range(ng)]
        far = [diff[(j + 3) % ng] for j in range(ng)]     # Send to GROUP-3
        out = {n: {} for n in ("sum", "gat", "fwd", "back", "far", "sc", "world")}
        for j, grp in enumerate(grps):
            parts = C.sliced_parts(scs[j], 0, grp)
            for r in grp:
                out["sum"][r], out["gat"][r], out["fwd"][r] = sums[j], gats[j], fwd[j]
                out["back"][r], out["far"][r], out["world"][r] = back[j], far[j], worlds[j]
                out["sc"][r] = parts[r]
        return out, None

    # ---- ragged.coco: slices of N = 1001 and H = 3 (uneven for most P) ----
    def ragged(c):
        P, seed, r = c.P, c.seed, c.replicated("r")
        g = [c.rank_data("g", k) for k in range(P)]
        h = [c.rank_data("h", k) for k in range(P)]
        q = [c.rank_data("q", k) for k in range(P)]
        # FP16 sum rounded once, times FP32 r: FP32; the mask on the whole tensor
        d0 = C.dropout(r32(r16(C.fold(g)) * r), 0.25, 0, "FP32", seed)
        return {
            "ag0": c.everywhere(d0),
            "ag1": c.everywhere(rbf(C.ltanh(rbf(C.fold(h))))),
            "agq": c.everywhere(r32(r32(C.fold(q, "max")) + 1)),
        }, None

    # ---- compare.coco ----
    def compare(c):
        P = c.P
        ranks = list(range(P))
        h, f, d = c.gathered("h", ranks), c.gathered("f", ranks), c.gathered("d", ranks)
        b, s, k = c.replicated("b"), c.scalar("s"), c.scalar("k")
        g = [c.rank_data("g", r) for r in ranks]
        cmp, ite = C.compare, C.ite
        relu = C.relu
        lt = cmp("<", relu(h), relu(b), "FP32")
        ge = cmp(">=", relu(b), 0, "BF16")
        rt = r16(np.sqrt(h))
        sliced = {
            "lt": lt,
            "le": cmp("<=", relu(f), relu(d), "FP64"),
            "gt": cmp(">", relu(d), relu(r32(-s)), "FP64"),
            "eq": cmp("==", relu(h), relu(f), "FP32"),
            "ne": cmp("!=", d, relu(d), "FP64"),
            "pr": cmp("==", cmp(">", r16(h + 1), r32(f * 2), "FP32"), cmp("<", b, 0, "BF16"), "FP32"),
            "i1": ite(relu(h), f, b, "FP32"),
            "i2": ite(lt, d, 0.5, "FP64"),
            "i3": ite(ge, b, h, "FP32"),
            "i5": ite(cmp(">", h, 0, "FP16"), s, h, "FP16"),
            "i6": ite(cmp("<", f, 0.5, "FP32"), 0.1, b, "BF16"),
            "nn": ite(rt, cmp("!=", rt, rt, "FP16"), cmp(">=", rt, 0, "FP16"), "FP16"),
        }
        # every result has the shape of its broadcast operands
        sliced["i2"] = np.broadcast_to(sliced["i2"], h.shape)
        out = {n: per_rank_sliced(np.asarray(v), 0, P) for n, v in sliced.items()}
        sg = r32(C.fold(g))
        out["ge"] = c.everywhere(ge)
        out["i4"] = c.everywhere(ite(cmp(">", k, s, "FP64"), s, r64(k * 2), "FP64"))
        out["leaky"] = c.everywhere(ite(cmp(">", sg, 0, "FP32"), sg, r32(0.01 * sg), "FP32"))
        return out, None

    # ---- rows.coco ----
    def rows(c):
        P = c.P
        g, b, h, f, d = (c.replicated(n) for n in "gbhfd")
        fd = C.fold_dim
        ln, silu = {}, {}
        for r in range(P):                                 # each rank's whole rows
            x = c.rank_data("x", r)
            mean = r32(r32(fd(x, 1)) / 8)
            xc = r32(x - mean)
            var = r32(r32(fd(r32(xc * xc), 1)) / 8)
            ln[r] = r32(r32(r32(xc / r32(np.sqrt(r32(var + 0.00001)))) * g) + b)
            silu[r] = r32(x / r32(1 + r32(C.lexp(-x))))
        e = r16(C.lexp(r16(h - r16(fd(h, 1, "max")))))
        sm = r16(e / r16(fd(e, 1)))
        gelu = rbf(rbf(0.5 * f) * rbf(1 + rbf(C.lerf(rbf(f * 0.7071067811865476)))))
        # Min(f, -0.25): -0.25 is a computed 0-d FP64 value, so BF16 (rule 2)
        lg = r64(r64(r64(C.llog(np.abs(d) + 0.5)) + C.vmin(d, C.llog(d))) + r32(C.vmax(h, f)))
        lg = r64(lg - rbf(np.abs(rbf(C.vmin(f, -0.25)))))
        nh = r16(np.sqrt(C.seq_sum(h * h, 0)))[None, :]     # Norm(h, 0, Keep)
        cols = r64(fd(d, 0, "min") + r32(nh * rbf(fd(f, 0, "*"))))
        ys = [c.rank_data("y", r) for r in range(P)]
        ym = r32(r32(C.fold([r32(fd(y, 1)) for y in ys])) / 24)
        yc = [r32(y - ym) for y in ys]
        sq = [r32(C.seq_sum(v * v, 1)[:, None]) for v in yc]  # "sumsq" folds squares
        yv = r32(r32(C.fold(sq)) / 24)
        out = {
            "ln": ln, "silu": silu, "sm": c.everywhere(sm), "gelu": c.everywhere(gelu),
            "lg": c.everywhere(lg), "cols": c.everywhere(cols),
            "yln": {r: r32(yc[r] / r32(np.sqrt(r32(yv + 0.00001)))) for r in range(P)},
            "part": {r: r32(fd(r32(C.lexp(ys[r])), 1, "max")) for r in range(P)},
        }
        return out, rows_formulas(c, g, b, h, f)

    def rows_formulas(c, g, b, h, f):
        """LayerNorm, softmax, GELU and SiLU by their float64 formulas (numpy's
        own sums, scipy-free GELU), within a few roundings of each type."""
        P, plain, tols = c.P, {"ln": {}, "silu": {}}, {"ln": {}, "silu": {}}
        for r in range(P):
            x = c.rank_data("x", r)
            z = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 0.00001)
            plain["ln"][r], tols["ln"][r] = z * g + b, 2.0 ** -22 * (np.abs(z * g) + np.abs(b) + 1)
            sig = 1 / (1 + np.exp(-x))
            plain["silu"][r], tols["silu"][r] = x * sig, 2.0 ** -21 * (np.abs(x * sig) + 1e-30)
        ex = np.exp(h - h.max(1, keepdims=True))
        gel = 0.5 * f * (1 + C.lerf(f / np.sqrt(2)))
        plain.update(sm=c.everywhere(ex / ex.sum(1, keepdims=True)), gelu=c.everywhere(gel))
        # FP16: 2^-11 a rounding, five of them; BF16: 2^-8, four
        tols.update(sm=c.everywhere(2.0 ** -8 * np.abs(plain["sm"][0]) + 2.0 ** -24),
                    gelu=c.everywhere(2.0 ** -5 * np.abs(gel) + 2.0 ** -133))
        return plain, tols

    # ---- transpose.coco ----
    def transpose(c):
        P = c.P
        a, q = c.replicated("a"), c.replicated("q")
        tr = lambda v: np.swapaxes(v, -1, -2)               # noqa: E731
        x = [c.rank_data("x", r) for r in range(P)]
        dy = [c.rank_data("dy", r) for r in range(P)]
        w = [c.rank_data("w", r) for r in range(P)]
        dz = [c.rank_data("dz", r) for r in range(P)]
        # each rank's product of its slices (on the contraction dimension)
        dw = r32(C.fold([C.matmul(tr(x[r]), dy[r], "FP32") for r in range(P)]))
        dx = r16(C.fold([C.matmul(dz[r], tr(w[r]), "FP16") for r in range(P)]))
        out = {
            "dw": c.everywhere(dw),
            "dx": per_rank_sliced(dx, 0, P),
            "tx": {r: r32(tr(x[r]) * 2) for r in range(P)},  # Sliced(0) -> Sliced(1)
            "tw": {r: r16(tr(w[r]) - 1) for r in range(P)},  # Sliced(1) -> Sliced(0)
            "ta": c.everywhere(rbf(tr(a) + 1)),
            "bm": c.everywhere(C.matmul(tr(a), a, "BF16")),
            "qq": c.everywhere(C.matmul(q, tr(q), "FP64")),
            "tt": c.everywhere(np.zeros_like(q)),
        }
        # plain: the whole products, which the slices must add up to
        xs, dys = c.gathered("x", range(P)), c.gathered("dy", range(P))
        ws, dzs = c.gathered("w", range(P)), c.gathered("dz", range(P))
        plain = {"dw": c.everywhere(tr(xs) @ dys), "dx": per_rank_sliced(dzs @ tr(ws), 0, P)}
        mags = {"dw": c.everywhere(np.abs(tr(xs)) @ np.abs(dys)),
                "dx": per_rank_sliced(np.abs(dzs) @ np.abs(tr(ws)), 0, P)}
        # FP32: sums of 24 terms (2^-18 covers them); FP16 partials over P
        # ranks: plain_tolerance's bound with nothing after the sum
        tols = {"dw": {r: 2.0 ** -18 * m + 1e-300 for r, m in mags["dw"].items()},
                "dx": {r: C.plain_tolerance(m, 0) for r, m in mags["dx"].items()}}
        return out, (plain, tols)

    # ---- layernorm.coco ----
    def layernorm(c):
        P, g, b, fd = c.P, c.replicated("g"), c.replicated("b"), C.fold_dim
        out = {"y": {}, "dx": {}}
        dgs, dbs = [], []
        for r in range(P):                                 # each rank's whole rows
            x, dy = c.rank_data("x", r), c.rank_data("dy", r)
            xc = r32(x - r32(r32(fd(x, 1)) / 8))
            rstd = r32(1 / r32(np.sqrt(r32(r32(r32(fd(r32(xc * xc), 1)) / 8) + 0.00001))))
            xh = r32(xc * rstd)
            out["y"][r] = r32(r32(xh * g) + b)
            dxh = r32(dy * g)
            m1 = r32(r32(fd(dxh, 1)) / 8)
            m2 = r32(r32(fd(r32(dxh * xh), 1)) / 8)
            out["dx"][r] = r32(r32(r32(dxh - m1) - r32(xh * m2)) * rstd)
            dgs.append(r32(fd(r32(dy * xh), 0)))           # PartialReduce: the rank's tokens
            dbs.append(r32(C.seq_sum(dy, 0)))
        out["dg"], out["db"] = c.everywhere(r32(C.fold(dgs))), c.everywhere(r32(C.fold(dbs)))
        return out, layernorm_formulas(c, g, b)

    def layernorm_formulas(c, g, b):
        """The forward and backward by their float64 formulas on the whole
        tensors: y = xh g + b, dx = (dxh - mean(dxh) - xh mean(dxh xh)) / sd,
        dg = sum(dy xh), db = sum(dy) over the tokens."""
        P, ranks = c.P, range(c.P)
        x, dy = c.gathered("x", ranks), c.gathered("dy", ranks)
        sd = np.sqrt(x.var(1, keepdims=True) + 0.00001)
        xh = (x - x.mean(1, keepdims=True)) / sd
        dxh = dy * g
        dx = (dxh - dxh.mean(1, keepdims=True) - xh * (dxh * xh).mean(1, keepdims=True)) / sd
        plain = {"y": per_rank_sliced(xh * g + b, 0, P), "dx": per_rank_sliced(dx, 0, P),
                 "dg": c.everywhere((dy * xh).sum(0, keepdims=True)), "db": c.everywhere(dy.sum(0))}
        # FP32: a few roundings of each term; the row sums of 8 terms and the
        # column sums over T: 2^-19 of the magnitudes
        mags = {"y": per_rank_sliced(np.abs(xh * g) + np.abs(b), 0, P),
                "dx": per_rank_sliced((np.abs(dxh) + np.abs(dxh).mean(1, keepdims=True) + np.abs(xh) *
                                       np.abs(dxh * xh).mean(1, keepdims=True)) / sd, 0, P),
                "dg": c.everywhere(np.abs(dy * xh).sum(0, keepdims=True)),
                "db": c.everywhere(np.abs(dy).sum(0))}
        tols = {n: {r: 2.0 ** -19 * m + 1e-30 for r, m in v.items()} for n, v in mags.items()}
        return plain, tols

    # ---- members.coco ----
    def members(c):
        P, cuts = c.P, [0, 5, 6, 18, 25]
        p, h = c.replicated("p"), c.replicated("h")
        g = [c.rank_data("g", r) for r in range(P)]

        def squares(x):
            """Each member's sum of squares in double, in index order."""
            out = []
            for a, b in zip(cuts, cuts[1:]):
                acc = float(x[a]) * float(x[a])
                for v in x[a + 1:b]:
                    acc += float(v) * float(v)
                out.append(acc)
            return out

        def spread(sums, rnd):
            y = np.empty(cuts[-1])
            for (a, b), s in zip(zip(cuts, cuts[1:]), sums):
                y[a:b] = np.sqrt(s)
            return rnd(y)

        def sliced_sums(x):
            """Each rank folds the part of every member its block holds; the
            ranks' folds are added in rank order, from 0."""
            sums = [0.0] * (len(cuts) - 1)
            parts = per_rank_sliced(x, 0, P)
            lo = 0
            for r in range(P):
                part = parts[r]
                for m, (a, b) in enumerate(zip(cuts, cuts[1:])):
                    i, j = max(a, lo), min(b, lo + len(part))
                    if i < j:
                        acc = float(part[i - lo]) ** 2
                        for v in part[i - lo + 1:j - lo]:
                            acc += float(v) * float(v)
                        sums[m] += acc
                lo += len(part)
            return sums

        s = r32(rbf(C.fold(g)) * p)
        np1, ns = spread(squares(p), r32), spread(squares(s), r32)
        out = {"np1": c.everywhere(np1), "nh": c.everywhere(spread(squares(r16(h * 2)), r16)),
               "ng": {r: spread(squares(g[r]), rbf) for r in range(P)},
               "ns": c.everywhere(ns),
               "nsl": per_rank_sliced(spread(sliced_sums(r32(p * 3)), r32), 0, P),
               "ratio": c.everywhere(r32(np1 / r32(ns + 1)))}
        return out, None

    return {"collectives": collectives, "compare": compare, "layers": layers, "pointwise": pointwise, "groups": groups,
            "ragged": ragged, "rows": rows, "transpose": transpose, "layernorm": layernorm,
            "members": members}

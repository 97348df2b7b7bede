"""transformer_oracles.py: the oracles of the transformer examples:
examples/transformer_sp.coco, transformer_sp_backward.coco, rmsnorm_sp.coco
and softmax.coco.

Each function is written from its .coco text with the building blocks of
check.py (C below), which states the language's rounding rules, and returns
the outputs every rank must hold exactly, then a plain check: the same layer
by its float64 formulas on the whole tensors (LayerNorm, RMSNorm, GELU and
its derivative, SiLU, softmax, the LayerNorm's backward), which the ranks'
parts must meet within a tolerance of the terms' magnitudes. The plain check
sees what the exact one cannot: that the slices of the operands line up and
that the program is the layer it says it is.
"""
import numpy as np

C1 = 0.7071067811865476   # 1 / sqrt(2), as the programs write it
C2 = 0.3989422804014327   # 1 / sqrt(2 pi)


def oracles(C):
    r16, r32, rbf = C.r16, C.r32, C.rbf16
    fd = C.fold_dim

    def parts_of(x, dim, P):
        return C.sliced_parts(x, dim, list(range(P)))

    def tol_of(mags, rel):
        """rel times each rank's magnitudes, and a floor for exact zeros"""
        return {r: rel * m + 2.0 ** -30 for r, m in mags.items()}

    def gelu_exact(hf):
        """0.5 * hf * (1 + Erf(hf * C1)) in FP32, each operation rounded"""
        return r32(r32(0.5 * hf) * r32(1 + r32(C.lerf(r32(hf * C1)))))

    def gelu_plain(h):
        return 0.5 * h * (1 + C.lerf(h / np.sqrt(2)))

    def layernorm_rows(xf, gamma, beta, n):
        """the programs' LayerNorm over the last dimension, in FP32"""
        xc = r32(xf - r32(r32(fd(xf, -1)) / n))
        rstd = r32(1 / r32(np.sqrt(r32(r32(r32(fd(r32(xc * xc), -1)) / n) + 0.00001))))
        return xc, rstd, r32(r32(r32(xc * rstd) * gamma) + beta)

    def plain_layernorm(v, gamma, beta):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 0.00001) * gamma + beta

    # ---- transformer_sp.coco ----
    def transformer_sp(c):
        P, seed = c.P, c.seed
        bo, r, gamma, beta = (c.replicated(n) for n in ("bo", "r", "gamma", "beta"))
        # the row-parallel projection: each rank's partial sum, AllReduce
        s = rbf(C.fold([C.matmul(c.rank_data("x", k), c.rank_data("wo", k), "BF16") for k in range(P)]))
        res = rbf(C.dropout(rbf(s + bo), 0.1, 0, "BF16", seed) + r)
        ln = rbf(layernorm_rows(res, gamma, beta, 24)[2])
        act = {}
        for k in range(P):                       # the column-parallel MatMul: each rank's columns
            hf = rbf(C.matmul(ln, c.rank_data("w1", k), "BF16") + c.rank_data("b1", k))
            act[k] = rbf(gelu_exact(hf))
        return {"act": act}, transformer_sp_plain(c)

    def transformer_sp_plain(c):
        P, ranks = c.P, range(c.P)
        x, wo = c.gathered("x", ranks), c.gathered("wo", ranks)
        w1, b1 = c.gathered("w1", ranks), c.gathered("b1", ranks)
        bo, r, gamma, beta = (c.replicated(n) for n in ("bo", "r", "gamma", "beta"))
        res = C.dropout(x @ wo + bo, 0.1, 0, "FP64", c.seed) + r
        h = plain_layernorm(res, gamma, beta) @ w1 + b1
        # BF16 values: a rounding is at most 2^-9 of a magnitude; the
        # projection's partial sums, the residual (through the LayerNorm's
        # 1/sigma, rows of unit scale), ln, h and GELU round about ten
        # times: 2^-6 of the terms' magnitudes (the tests' seeds use a third
        # of it at most)
        mag = np.abs(plain_layernorm(res, gamma, beta)) @ np.abs(w1) + np.abs(b1) + 1
        return ({"act": parts_of(gelu_plain(h), 2, P)}, {"act": tol_of(parts_of(mag, 2, P), 2.0 ** -6)})

    # ---- transformer_sp_backward.coco ----
    def transformer_sp_backward(c):
        P, seed = c.P, c.seed
        ln, res, gamma = c.replicated("ln"), c.replicated("res"), c.replicated("gamma")
        out = {"dw1": {}, "db1": {}, "dx": {}, "dwo": {}}
        dlnp = []
        for k in range(P):                       # the MLP's columns of each rank
            hf = c.rank_data("h", k)
            a = r32(0.5 * r32(1 + r32(C.lerf(r32(hf * C1)))))
            b = r32(r32(hf * r32(C.lexp(r32(r32(hf * hf) * -0.5)))) * C2)
            dh = rbf(r32(c.rank_data("dact", k) * r32(a + b)))
            out["db1"][k] = rbf(C.seq_sum(dh, 0))
            out["dw1"][k] = C.matmul(ln.T, dh, "BF16")
            dlnp.append(C.matmul(dh, c.rank_data("w1", k).T, "BF16"))
        dy = rbf(C.fold(dlnp))                   # AllReduce; Cast(dln, FP32) is exact
        xc, rstd, _ = layernorm_rows(res, 0, 0, 24)
        xh = r32(xc * rstd)
        dxh = r32(dy * gamma)
        m1 = r32(r32(fd(dxh, 1)) / 24)
        m2 = r32(r32(fd(r32(dxh * xh), 1)) / 24)
        dxf = r32(r32(r32(dxh - m1) - r32(xh * m2)) * rstd)
        ds = C.dropout(rbf(dxf), 0.1, 0, "BF16", seed)
        for k in range(P):
            out["dx"][k] = C.matmul(ds, c.rank_data("wo", k).T, "BF16")
            out["dwo"][k] = C.matmul(c.rank_data("x", k).T, ds, "BF16")
        out.update(dbo=c.everywhere(rbf(C.seq_sum(ds, 0))),
                   dgamma=c.everywhere(r32(C.seq_sum(r32(dy * xh), 0))),
                   dbeta=c.everywhere(r32(C.seq_sum(dy, 0))))
        return out, transformer_sp_backward_plain(c)

    def transformer_sp_backward_plain(c):
        """The backward by its formulas: GELU'(h), dln = dh W1^T, the
        LayerNorm's dx = (dxh - mean(dxh) - xh mean(dxh xh)) / sigma,
        dgamma = sum(dln xh), dbeta = sum(dln), the dropout's mask, and the
        products of both layers, on the whole tensors."""
        P, ranks = c.P, range(c.P)
        dact, h, w1 = c.gathered("dact", ranks), c.gathered("h", ranks), c.gathered("w1", ranks)
        x, wo = c.gathered("x", ranks), c.gathered("wo", ranks)
        ln, res, gamma = c.replicated("ln"), c.replicated("res"), c.replicated("gamma")
        dh = dact * (0.5 * (1 + C.lerf(h / np.sqrt(2))) + h * np.exp(-h * h / 2) / np.sqrt(2 * np.pi))
        dy = dh @ w1.T
        sd = np.sqrt(res.var(1, keepdims=True) + 0.00001)
        xh = (res - res.mean(1, keepdims=True)) / sd
        dxh = dy * gamma
        dxf = (dxh - dxh.mean(1, keepdims=True) - xh * (dxh * xh).mean(1, keepdims=True)) / sd
        ds = C.dropout(dxf, 0.1, 0, "FP64", c.seed)
        plain = {"db1": parts_of(dh.sum(0), 0, P), "dw1": parts_of(ln.T @ dh, 1, P),
                 "dgamma": c.everywhere((dy * xh).sum(0)), "dbeta": c.everywhere(dy.sum(0)),
                 "dbo": c.everywhere(ds.sum(0)), "dx": parts_of(ds @ wo.T, 1, P),
                 "dwo": parts_of(x.T @ ds, 0, P)}
        # magnitudes: the same sums of absolute terms; dy carries BF16
        # roundings of dh and of its products (2^-9 each), which the
        # LayerNorm's backward scales by 1/sigma and spreads over each row;
        # with the roundings of ds and of the products, 2^-6 of them (the
        # tests' seeds use a third of it at most)
        adh = np.abs(dh) + 2.0 ** -8 * np.abs(dact)
        ady = adh @ np.abs(w1.T)
        adx = (np.abs(dxh) + np.abs(ady * gamma).mean(1, keepdims=True) * (1 + np.abs(xh) ** 2)) / sd + 1e-3
        mags = {"db1": parts_of(adh.sum(0), 0, P), "dw1": parts_of(np.abs(ln.T) @ adh, 1, P),
                "dgamma": c.everywhere((ady * np.abs(xh)).sum(0)), "dbeta": c.everywhere(ady.sum(0)),
                "dbo": c.everywhere(adx.sum(0) / 0.9), "dx": parts_of(adx @ np.abs(wo.T) / 0.9, 1, P),
                "dwo": parts_of(np.abs(x.T) @ adx / 0.9, 0, P)}
        return plain, {n: tol_of(m, 2.0 ** -6) for n, m in mags.items()}

    # ---- rmsnorm_sp.coco ----
    def rmsnorm_sp(c):
        P = c.P
        r, gamma = c.replicated("r"), c.replicated("gamma")
        s = r16(C.fold([C.matmul(c.rank_data("x", k), c.rank_data("wo", k), "FP16") for k in range(P)]))
        xf = r16(s + r)
        ms = r32(r32(fd(r32(xf * xf), -1)) / 24)
        ln = r16(r32(r32(xf / r32(np.sqrt(r32(ms + 0.000001)))) * gamma))
        act = {}
        for k in range(P):
            gf = C.matmul(ln, c.rank_data("wg", k), "FP16")
            up = C.matmul(ln, c.rank_data("wu", k), "FP16")
            act[k] = r16(r32(r32(gf / r32(1 + r32(C.lexp(-gf)))) * up))
        return {"act": act}, rmsnorm_sp_plain(c)

    def rmsnorm_sp_plain(c):
        P, ranks = c.P, range(c.P)
        x, wo = c.gathered("x", ranks), c.gathered("wo", ranks)
        wg, wu = c.gathered("wg", ranks), c.gathered("wu", ranks)
        r, gamma = c.replicated("r"), c.replicated("gamma")
        res = x @ wo + r
        ln = res / np.sqrt((res * res).mean(-1, keepdims=True) + 0.000001) * gamma
        g, u = ln @ wg, ln @ wu
        act = g / (1 + np.exp(-g)) * u
        # FP16 roundings (2^-11 each) of the sums, the residual, the norm's
        # output and both products: 2^-8 of the terms' magnitudes (the
        # tests' seeds use a fifth of it at most)
        mag = (np.abs(ln) @ np.abs(wg) + 1) * (np.abs(ln) @ np.abs(wu) + 1)
        return ({"act": parts_of(act, 2, P)}, {"act": tol_of(parts_of(mag, 2, P), 2.0 ** -8)})

    # ---- softmax.coco ----
    def softmax(c):
        P = c.P
        z = r16(C.fold([C.matmul(c.rank_data("x", k), c.rank_data("w", k), "FP16") for k in range(P)]))
        e = r32(C.lexp(r32(z - fd(z, 1, "max"))))
        probs = r16(r32(e / r32(fd(e, 1))))
        x, w = c.gathered("x", range(P)), c.gathered("w", range(P))
        logits = x @ w
        ex = np.exp(logits - logits.max(1, keepdims=True))
        plain = ex / ex.sum(1, keepdims=True)
        # the FP16 logits are within a few 2^-11 of their magnitude |x| |w|
        # (partial sums, their sum): a probability moves by that error of
        # the logits it compares, and rounds to FP16 once: 2^-8 with room
        # (the tests' seeds use a tenth of it at most)
        spread = (np.abs(x) @ np.abs(w)).max(1, keepdims=True)
        tol = 2.0 ** -8 * plain * (1 + spread) + 2.0 ** -12
        return {"probs": c.everywhere(probs)}, ({"probs": c.everywhere(plain)},
                                                {"probs": c.everywhere(tol)})

    return {"transformer_sp": transformer_sp, "transformer_sp_backward": transformer_sp_backward,
            "rmsnorm_sp": rmsnorm_sp, "softmax": softmax}

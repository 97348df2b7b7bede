"""programs.py: the .coco programs behind coconet.torch's optimizers and
layers, written for given sizes (no torch here, so that the CPU tests check
them against NumPy on the reference executor).

optimizer(kind, counts, dtype): data-parallel Adam (AdamW's decoupled
weight decay, torch.optim.AdamW's formula) or LAMB (examples/lamb.coco's
formula: one trust ratio over all the parameters) over scattered tensors
whose members are the model's parameters and gradients where they lie
(examples/adam_scattered.coco). The gradients are summed over the ranks and
scaled by gscale (1/P: DDP's mean). With dtype FP16 or BF16 the gradients
and the model's weights w are of that type, and the optimizer keeps FP32
master weights p, from which w_ takes its rounded copy. The schedule
`paper` is the paper's fuse(RS-Opt-AG) (Figure 7b): one FusedAllReduce in
which each rank updates its slice, keeping only its slice of m and v
(asSlice).

row_parallel(...): Megatron's row-parallel linear with bias, dropout and
residual (examples/self_attention.coco with separate input and output
widths): out = Dropout(AllReduce(x @ w) + b, p) + r, x sliced along its last
dimension, w along its rows; `paper` is ol(MM,fuse(RS-C-AG)), and
`fused` fuse(RS-C-AG) without the overlap (for CUDA graphs)."""

TYPES = ("FP16", "BF16", "FP32")


def _members(counts):
    if not counts:
        raise ValueError("an optimizer program needs at least one parameter")
    for c in counts:
        if int(c) < 1:
            raise ValueError("a parameter of %d elements: every member must have at least one"
                             % c)
    return "Scattered[%s]" % ", ".join(str(int(c)) for c in counts)


def optimizer(kind, counts, dtype="FP32"):
    """The program text: kind "adam" or "lamb", counts the element count of
    each parameter tensor, dtype the type of the model's parameters and
    gradients."""
    if kind not in ("adam", "lamb"):
        raise ValueError("optimizer kind '%s': expected adam or lamb" % kind)
    if dtype not in TYPES:
        raise ValueError("dtype '%s': expected one of %s" % (dtype, ", ".join(TYPES)))
    sc = _members(counts)
    mixed = dtype != "FP32"
    lines = ["// written by coconet.programs.optimizer: %s over %d parameter tensors%s"
             % (kind, len(counts), ", %s model weights with FP32 master weights" % dtype
                if mixed else ""),
             "Tensor g(%s, %s, Local, WORLD, RANK);" % (dtype, sc),
             "Tensor p(FP32, %s, Replicated, WORLD);" % sc]
    if mixed:
        lines.append("Tensor w(%s, %s, Replicated, WORLD);" % (dtype, sc))
    lines += ["Tensor m(FP32, %s, Replicated, WORLD);" % sc,
              "Tensor v(FP32, %s, Replicated, WORLD);" % sc,
              "Scalar lr(FP32);  Scalar t(FP32);  Scalar beta1(FP32);  Scalar beta2(FP32);",
              "Scalar eps(FP32);  Scalar wd(FP32);  Scalar gscale(FP32);",
              'Var avg = AllReduce("+", g);',
              "Var gm = avg * gscale;",
              "Var m_ = Update(m, m*beta1 + (1-beta1)*gm);",
              "Var v_ = Update(v, v*beta2 + (1-beta2)*gm*gm);",
              "Var m1 = m_/(1-Pow(beta1, t));",
              "Var v1 = v_/(1-Pow(beta2, t));"]
    if kind == "adam":
        lines.append("Var p_ = Update(p, p - lr*wd*p - lr*(m1/(Sqrt(v1) + eps)));")
        comps = "gm, m_, v_, m1, v1, p_"
    else:
        lines += ["Var u = m1/(Sqrt(v1) + eps) + wd*p;",
                  "Var r1 = Norm(p * 1);",
                  "Var r2 = Norm(u);",
                  "Var ratio = Ite(r1 > 0, Ite(r2 > 0, r1 / r2, 1.0), 1.0);",
                  "Var p_ = Update(p, p - lr * ratio * u);"]
        comps = "gm, m_, v_, m1, v1, u, r1, r2, ratio, p_"
    if mixed:
        lines.append("Var w_ = Update(w, p_);")
        comps += ", w_"
    ins = "g,p,w,m,v" if mixed else "g,p,m,v"
    outs = "p_, w_" if mixed else "p_"
    lines += ["Execute %s({%s,lr,t,beta1,beta2,eps,wd,gscale}, {%s});" % (kind, ins, outs), "",
              "// fuse(RS-Opt-AG): each rank updates its slice, keeps its slice of m and v",
              "Schedule paper {",
              "  comps = fuse(%s, ComputationFuse);" % comps,
              "  (rsG, agG) = split(avg, ARSplitRSAG);",
              "  (scComp, agP, %sagM, agV) = reorder(agG, comps, AGReorder);"
              % ("agW, " if mixed else ""),
              "  asSlice(m); asSlice(v); dead(agM); dead(agV);",
              "  fuseAR = fuse(rsG, scComp, agP, %sAllReduceFuse);" % ("agW, " if mixed else ""),
              "}", ""]
    return "\n".join(lines)


def row_parallel(dtype="FP16", p_drop=0.1, residual=True):
    """The program text, with sizes B, S (tokens: B*S rows), K (the input's
    width, sliced over the ranks) and H (the output's width), bound at load."""
    if dtype not in TYPES:
        raise ValueError("dtype '%s': expected one of %s" % (dtype, ", ".join(TYPES)))
    if not 0 <= p_drop < 1:
        raise ValueError("dropout probability %r: expected 0 <= p < 1" % p_drop)
    y = "Dropout(sum + b, %r)" % float(p_drop) if p_drop > 0 else "sum + b"
    out = "%s + r" % y if residual else y
    ins = "w,x,b,r" if residual else "w,x,b"
    text = ["// written by coconet.programs.row_parallel: Megatron's row-parallel linear",
            "Size B = 8, S = 4, K = 16, H = 8;",
            "Tensor w(%s, [K,H], Sliced(0), WORLD, RANK);" % dtype,
            "Tensor b(%s, [H], Replicated, WORLD);" % dtype,
            "Tensor x(%s, [B,S,K], Sliced(2), WORLD, RANK);" % dtype]
    if residual:
        text.append("Tensor r(%s, [B,S,H], Replicated, WORLD);" % dtype)
    text += ["Var layer = MatMul(x, w);",
             'Var sum = AllReduce("+", layer);',
             "Var out = %s;" % out,
             "Execute row_parallel({%s}, {out});" % ins, "",
             "// ol(MM,fuse(RS-C-AG)) (the paper's Figure 4, program 5)",
             "Schedule paper {",
             "  (rsSum, agSum) = split(sum, ARSplitRSAG);",
             "  (scOut, agOut) = reorder(out, agSum);",
             "  fuseAR = fuse(rsSum, scOut, agOut, AllReduceFuse);",
             "  layerWithAR = overlap(layer, fuseAR);",
             "}",
             "// fuse(RS-C-AG): the same without the overlap",
             "Schedule fused {",
             "  (rsSum, agSum) = split(sum, ARSplitRSAG);",
             "  (scOut, agOut) = reorder(out, agSum);",
             "  fuseAR = fuse(rsSum, scOut, agOut, AllReduceFuse);",
             "}", ""]
    return "\n".join(text)


def write(text, name, directory):
    """Writes text to directory/NAME-HASH.coco (once) and returns the path."""
    import hashlib
    import os
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "%s-%s.coco" % (name, hashlib.sha1(text.encode())
                                                    .hexdigest()[:16]))
    if not os.path.exists(path):
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path

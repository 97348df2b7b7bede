"""programs.py: the .coco programs behind coconet.torch's optimizers and
layers, written for given sizes (no torch here, so that the CPU tests check
them against NumPy on the reference executor).

optimizer(kind, counts, dtype, **variant): data-parallel Adam (AdamW's
decoupled weight decay, torch.optim.AdamW's formula; or Adam's L2 decay)
or LAMB (examples/lamb.coco's formula: one trust ratio over all the
parameters; or one per parameter tensor, Norm(x, Members)), with the
variant's amsgrad, maximize, clipping by the summed gradient's global norm,
GradScaler's unscaling and skipped steps, and lr and the step count read
from device memory (VARIANT, step_variant, step_inputs), over scattered tensors
whose members are the model's parameters and gradients where they lie
(examples/adam_scattered.coco). The gradients are summed over the ranks and
scaled by gscale (1/P: DDP's mean). With dtype FP16 or BF16 the gradients
and the model's weights w are of that type, and the optimizer keeps FP32
master weights p, from which w_ takes its rounded copy. The schedule
`paper` is the paper's fuse(RS-Opt-AG) (Figure 7b): one FusedAllReduce in
which each rank updates its slice, keeping only its slice of m and v
(asSlice). On GPUs it is one kernel over the peers' memory for the plain
Adam, two (a cross-rank reduction between them) for Adam with clipping or
amp and for LAMB with one ratio; LAMB with clipping or amp (two reductions
in a row) and LAMB per tensor (Norm per member) take the FusedAllReduce's
NCCL path (ReduceScatter, kernels, AllGather), which is slower.

optimizer_rs(kind, counts, dtype, ranks, **variant) and param_gather(counts,
dtype, ranks): the same step cut in two, for an all-gather deferred to the
next forward pass (coconet.torch.optim's overlap_param_gather): the
reduce-scatter and each rank's slice of the new parameters (Adam's
variants without clip and amp), then the slices gathered into every rank's
parameters; bit for bit the fused program's values (slice_layout: each
rank's slice, padded to equal sizes).

row_parallel(...): Megatron's row-parallel linear with bias, dropout and
residual (examples/self_attention.coco with separate input and output
widths): out = Dropout(AllReduce(x @ w) + b, p) + r, x sliced along its last
dimension, w along its rows; `paper` is ol(MM,fuse(RS-C-AG)), and
`fused` fuse(RS-C-AG) without the overlap (for CUDA graphs)."""
from typing import Any, Dict, List, Mapping, Sequence, Tuple


TYPES = ("FP16", "BF16", "FP32")


def _members(counts):
    if not counts:
        raise ValueError("an optimizer program needs at least one parameter")
    for c in counts:
        if int(c) < 1:
            raise ValueError("a parameter of %d elements: every member must have at least one"
                             % c)
    return "Scattered[%s]" % ", ".join(str(int(c)) for c in counts)


# The variants of the optimizer programs (optimizer's keyword arguments) and
# their defaults, which give the plain program above.
VARIANT = dict(decay="decoupled", amsgrad=False, maximize=False, clip=False, amp=False,
               capturable=False, trust="group")
FLT_MAX = "3.4028234663852886e38"  # the largest FP32: a larger norm is Inf or NaN


def _variant(kind, options):
    """The options completed with their defaults, checked."""
    unknown = sorted(set(options) - set(VARIANT))
    if unknown:
        raise ValueError("optimizer option '%s': expected one of %s"
                         % (unknown[0], ", ".join(sorted(VARIANT))))
    o = dict(VARIANT, **options)
    if o["decay"] not in ("decoupled", "l2"):
        raise ValueError("decay '%s': expected decoupled (AdamW) or l2 (Adam)" % o["decay"])
    if o["trust"] not in ("group", "tensor"):
        raise ValueError("trust '%s': expected group (one ratio) or tensor (one per "
                         "parameter tensor)" % o["trust"])
    if kind == "lamb" and o["amsgrad"]:
        raise ValueError("amsgrad is an option of adam, not of lamb")
    if kind == "adam" and o["trust"] != "group":
        raise ValueError("trust is an option of lamb, not of adam")
    return o


def step_inputs(kind: str, dtype: str = "FP32", **options: Any) -> Dict[str, List[str]]:
    """What a step of optimizer(kind, counts, dtype, **options) takes and
    gives, by name: `device`, the 0-dimensional FP32 tensors read from
    device memory (lr when capturable, the step count t when capturable or
    with amp, whose skipped steps do not count: the caller adds 1 before a
    step and subtracts found after it, as torch's fused optimizers do, with
    no host synchronisation; grad_scale gs and found_inf fin with amp);
    `scalars`, those passed by value; `state`,
    the optimizer's state tensors (each rank's slice under `paper`); and
    `outputs`, in order (gnorm: the clipped gradient's global norm before
    clipping, with clip; found: 1 where the step was skipped, with amp)."""
    o = _variant(kind, options)
    on_device = dict(lr=o["capturable"], t=o["capturable"] or o["amp"])
    device = [n for n in ("lr", "t") if on_device[n]] + (["gs", "fin"] if o["amp"] else [])
    scalars = [n for n in ("lr", "t") if not on_device[n]] + \
        ["beta1", "beta2", "eps", "wd", "gscale"] + (["maxnorm"] if o["clip"] else [])
    outputs = ["p_"] + (["w_"] if dtype != "FP32" else []) + \
        (["gnorm"] if o["clip"] else []) + (["found"] if o["amp"] else [])
    return dict(device=device, scalars=scalars, state=["m", "v"] + (["vm"] if o["amsgrad"] else []),
                outputs=outputs)


def step_variant(kind: str, group: Mapping[str, Any], decay: str = "decoupled",
                 amp: bool = False) -> Dict[str, Any]:
    """The options of optimizer() for a parameter group's step, from its
    settings as torch names them (a dict: amsgrad, maximize, capturable,
    max_grad_norm; for lamb trust: "tensor", a ratio per parameter tensor
    as the LAMB paper and apex's FusedLAMB, the default here, or "group",
    the CoCoNet paper's one ratio), the class's decay ("l2" for
    torch.optim.Adam's formula, "decoupled" for AdamW's)
    and amp (a GradScaler scales the gradients: grad_scale and found_inf
    are read at the step). Only the options that differ from VARIANT's
    defaults, so that equal variants give equal texts (and cache hits)."""
    o = dict(decay=decay, maximize=bool(group.get("maximize", False)),
             capturable=bool(group.get("capturable", False)), amp=bool(amp))
    norm = group.get("max_grad_norm")
    if norm is not None:
        if not float(norm) > 0 or float(norm) == float("inf"):
            raise ValueError("max_grad_norm %r: expected a finite number > 0 (None: no "
                             "clipping)" % (norm,))
        o["clip"] = True
    if kind == "adam":
        o["amsgrad"] = bool(group.get("amsgrad", False))
    else:
        if group.get("amsgrad"):
            raise ValueError("amsgrad is an option of Adam and AdamW, not of LAMB")
        o["trust"] = group.get("trust", "tensor")
    o = {k: v for k, v in o.items() if v != VARIANT[k]}
    _variant(kind, o)
    return o


def _gradient(o, mixed, p="p"):
    """The lines from the summed gradient avg to gm, the gradient the
    moments take: averaged (gscale), unscaled by grad_scale (amp; in FP32
    with 16-bit gradients), its global norm gnorm (a reduction over every
    rank's slice), the inf/NaN check found, clipped, negated (maximize),
    plus wd p (L2 decay; p: the parameters' value, or their slice)."""
    src = "Cast(avg, FP32)" if mixed and (o["clip"] or o["amp"]) else "avg"
    scaled = "%s * gscale%s" % (src, " / gs" if o["amp"] else "")
    lines = []
    if o["clip"] or o["amp"]:
        name = "gu" if o["clip"] or o["maximize"] or o["decay"] == "l2" else "gm"
        lines += ["Var %s = %s;" % (name, scaled), "Var gnorm = Norm(%s);" % name]
        scaled = name
    if o["amp"]:
        lines.append("Var found = Max(fin >= 1, (gnorm <= %s) == 0);" % FLT_MAX)
    if o["clip"]:
        scaled = "gu * Min(maxnorm / (gnorm + 0.000001), 1.0)"
    if o["maximize"]:
        scaled = "-(%s)" % scaled if " " in scaled else "-" + scaled
    if o["decay"] == "l2":
        scaled += " + wd*%s" % p
    return lines + ([] if scaled == "gm" else ["Var gm = %s;" % scaled])


def _kept(o, tensor, value):
    """value, or with amp the tensor unchanged where the step is skipped."""
    return "Ite(found, %s, %s)" % (tensor, value) if o["amp"] else value


def _moments(o):
    """m_, v_ (vm_), and the bias-corrected m1 and v1. With amp the new
    moments are values of their own (mn, vn, vmn), which the Updates keep
    only where the step is not skipped and m1 and v1 read: so nothing but
    the Updates and p_ waits for found, and LAMB's norm of u is no later
    than the gradient's norm (one cross-rank reduction after another would
    take the fused operation's NCCL path)."""
    if not o["amp"]:
        lines = ["Var m_ = Update(m, m*beta1 + (1-beta1)*gm);",
                 "Var v_ = Update(v, v*beta2 + (1-beta2)*gm*gm);",
                 "Var m1 = m_/(1-Pow(beta1, t));"]
        if o["amsgrad"]:
            return lines + ["Var vm_ = Update(vm, Max(vm, v_));", "Var v1 = vm_/(1-Pow(beta2, t));"]
        return lines + ["Var v1 = v_/(1-Pow(beta2, t));"]
    lines = ["Var mn = m*beta1 + (1-beta1)*gm;",
             "Var vn = v*beta2 + (1-beta2)*gm*gm;",
             "Var m_ = Update(m, %s);" % _kept(o, "m", "mn"),
             "Var v_ = Update(v, %s);" % _kept(o, "v", "vn"),
             "Var m1 = mn/(1-Pow(beta1, t));"]
    if o["amsgrad"]:
        return lines + ["Var vmn = Max(vm, vn);", "Var vm_ = Update(vm, %s);" % _kept(o, "vm", "vmn"),
                        "Var v1 = vmn/(1-Pow(beta2, t));"]
    return lines + ["Var v1 = vn/(1-Pow(beta2, t));"]


def _adam_new(o, p):
    """Adam's new value of the parameters p (their name, or their slice's)."""
    wd = "%s - lr*wd*%s - " % (p, p) if o["decay"] == "decoupled" else "%s - " % p
    return wd + "lr*(m1/(Sqrt(v1) + eps))"


def _step(kind, o):
    """The lines that compute p_, the parameters' new value, and the names
    of the values they define."""
    if kind == "adam":
        return ["Var p_ = Update(p, %s);" % _kept(o, "p", _adam_new(o, "p"))], ["p_"]
    wd = " + wd*p" if o["decay"] == "decoupled" else ""
    per = o["trust"] == "tensor"  # each element the norms of its own parameter tensor
    lines = ["Var u = m1/(Sqrt(v1) + eps)%s;" % wd,
             "Var r1 = Norm(p, Members);" if per else "Var r1 = Norm(p * 1);",
             "Var r2 = Norm(u, Members);" if per else "Var r2 = Norm(u);",
             "Var ratio = Ite(r1 > 0, Ite(r2 > 0, r1 / r2, 1.0), 1.0);",
             "Var p_ = Update(p, %s);" % _kept(o, "p", "p - lr * ratio * u")]
    return lines, ["u", "r1", "r2", "ratio", "p_"]


def _defined(lines):
    return [ln.split()[1] for ln in lines if ln.startswith("Var ")]


def optimizer(kind: str, counts: Sequence[int], dtype: str = "FP32", **options: Any) -> str:
    """The program text: kind "adam" or "lamb", counts the element count of
    each parameter tensor, dtype the type of the model's parameters and
    gradients. The options (VARIANT, all off by default) choose a variant:
    decay "decoupled" (AdamW, lamb's u + wd p) or "l2" (Adam: wd p added to
    the gradient); amsgrad (the largest v so far kept as state vm); maximize
    (the gradient negated); clip (a Scalar maxnorm: the gradient scaled by
    min(1, maxnorm / (gnorm + 1e-6)), torch.nn.utils.clip_grad_norm_'s
    factor, gnorm the global norm of the summed and averaged gradient, an
    output); amp (the gradient divided by the 0-dimensional tensor gs,
    torch's grad_scale; found, an output, is 1 where fin (torch's found_inf,
    0 or 1) is 1 or more, or the gradient has an Inf or NaN, else 0; where
    it is 1, m, v, vm and p keep their values:
    every rank decides on the same summed gradient); capturable (lr and t
    are 0-dimensional tensors, read from device memory); step_inputs names
    what a step takes (with amp, t is a tensor too)."""
    if kind not in ("adam", "lamb"):
        raise ValueError("optimizer kind '%s': expected adam or lamb" % kind)
    if dtype not in TYPES:
        raise ValueError("dtype '%s': expected one of %s" % (dtype, ", ".join(TYPES)))
    o = _variant(kind, options)
    io = step_inputs(kind, dtype, **options)
    sc = _members(counts)
    mixed = dtype != "FP32"
    lines = ["// written by coconet.programs.optimizer: %s over %d parameter tensors%s"
             % (kind, len(counts), ", %s model weights with FP32 master weights" % dtype
                if mixed else "")]
    lines += _declarations(sc, dtype, io)
    lines.append('Var avg = AllReduce("+", g);')
    body = _gradient(o, mixed) + _moments(o)
    step, _ = _step(kind, o)
    body += step
    if mixed:
        body.append("Var w_ = Update(w, p_);")
    lines += body
    ins = ["g", "p"] + (["w"] if mixed else []) + io["state"] + io["device"] + io["scalars"]
    lines.append("Execute %s({%s}, {%s});" % (kind, ",".join(ins), ", ".join(io["outputs"])))
    lines += _paper(o, mixed, _defined(body), io["outputs"])
    return "\n".join(lines)


def _declarations(sc, dtype, io):
    lines = ["Tensor g(%s, %s, Local, WORLD, RANK);" % (dtype, sc),
             "Tensor p(FP32, %s, Replicated, WORLD);" % sc]
    if dtype != "FP32":
        lines.append("Tensor w(%s, %s, Replicated, WORLD);" % (dtype, sc))
    lines += ["Tensor %s(FP32, %s, Replicated, WORLD);" % (s, sc) for s in io["state"]]
    lines += ["Tensor %s(FP32, [], Replicated, WORLD);" % d for d in io["device"]]
    cut = io["scalars"].index("eps")
    for names in (io["scalars"][:cut], io["scalars"][cut:]):
        lines.append("  ".join("Scalar %s(FP32);" % n for n in names))
    return lines


def _paper(o, mixed, comps, outputs):
    """The schedule `paper`: fuse(RS-Opt-AG), each rank its slice of the
    state (asSlice)."""
    ags = ["agP"] + (["agW"] if mixed else [])
    state = ["m", "v"] + (["vm"] if o["amsgrad"] else [])
    ag_state = ["ag" + s.upper() for s in state]
    return ["", "// fuse(RS-Opt-AG): each rank updates its slice, keeps its slice of %s"
            % " and ".join(state),
            "Schedule paper {",
            "  comps = fuse(%s, ComputationFuse);" % ", ".join(comps),
            "  (rsG, agG) = split(avg, ARSplitRSAG);",
            "  (scComp, %s) = reorder(agG, comps, AGReorder);" % ", ".join(ags + ag_state),
            "  %s" % " ".join("asSlice(%s);" % s for s in state) + " " +
            " ".join("dead(%s);" % a for a in ag_state),
            "  fuseAR = fuse(rsG, scComp, %s, AllReduceFuse);" % ", ".join(ags),
            "}", ""]


# The fused step cut in two (the all-gather deferred: coconet.torch.optim's
# overlap_param_gather). Each rank's slice is c = ceil(N/P) elements of the
# N parameters' concatenation, the last rank's padded to c by a member of
# `pad` elements after the parameters (gradients, weights: a buffer of the
# caller's that nothing else reads), so that the slices are declared Sliced
# tensors of c*P elements (a declared Sliced tensor divides evenly) with the
# blocks of the fused program's ReduceScatter (doc/language.md, section 6).

def slice_layout(counts: Sequence[int], ranks: int) -> Tuple[int, int]:
    """(c, pad): each rank's slice of optimizer_rs and param_gather, and
    the elements of the padding member (0: none)."""
    if int(ranks) < 1:
        raise ValueError("ranks %r: expected 1 or more" % (ranks,))
    n = sum(int(c) for c in counts)
    c = -(-n // int(ranks))
    return c, c * int(ranks) - n


def _padded(counts, ranks):
    c, pad = slice_layout(counts, ranks)
    return _members(list(counts) + ([pad] if pad else [])), c * int(ranks)


def optimizer_rs(kind: str, counts: Sequence[int], dtype: str = "FP32", ranks: int = 2,
                 **options: Any) -> str:
    """optimizer(kind, counts, dtype, **options) without its all-gather, at
    `ranks` ranks: the gradients reduce-scattered, and each rank's slice
    of the parameters' new value computed from its slice of the state
    (m, v, vm: Sliced tensors of slice_layout's c elements a rank), as
    outputs p_ (FP32) and, with 16-bit dtype, w_ (its rounding, as the
    fused program's Update of w rounds it); p, the whole (master)
    parameters, is only read (this rank's slice). param_gather then fills
    every rank's parameters from the slices. The gradients g and p take a
    last member of slice_layout's pad elements where it is not 0. Adam
    only, without clip and amp (their norms would span the padding: the
    caller refuses them). The schedule `paper` fuses the computations
    after the ReduceScatter into one kernel."""
    if kind != "adam":
        raise ValueError("optimizer kind '%s': the reduce-scatter-and-step program is written "
                         "for adam only" % kind)
    if dtype not in TYPES:
        raise ValueError("dtype '%s': expected one of %s" % (dtype, ", ".join(TYPES)))
    o = _variant(kind, options)
    for name in ("clip", "amp"):
        if o[name]:
            raise ValueError("%s: the reduce-scatter-and-step program has no such variant"
                             % name)
    io = step_inputs(kind, dtype, **options)
    sc, total = _padded(counts, ranks)
    mixed = dtype != "FP32"
    lines = ["// written by coconet.programs.optimizer_rs: %s over %d parameter tensors, "
             "reduce-scatter and step of each rank's slice (no all-gather)%s"
             % (kind, len(counts), ", %s model weights with FP32 master weights" % dtype
                if mixed else ""),
             "Tensor g(%s, %s, Local, WORLD, RANK);" % (dtype, sc),
             "Tensor p(FP32, %s, Replicated, WORLD);" % sc]
    lines += ["Tensor %s(FP32, [%d], Sliced(0), WORLD, RANK);" % (s, total) for s in io["state"]]
    lines += _declarations(sc, dtype, io)[2 + mixed + len(io["state"]):]
    lines += ['Var avg = ReduceScatter("+", g);', "Var ps = Slice(p, 0);"]
    body = _gradient(o, mixed, "ps") + _moments(o) + ["Var p_ = %s;" % _adam_new(o, "ps")]
    if mixed:
        body.append("Var w_ = Cast(p_, %s);" % dtype)
    lines += body
    ins = ["g", "p"] + io["state"] + io["device"] + io["scalars"]
    outs = ["p_"] + (["w_"] if mixed else [])
    lines.append("Execute %s_rs({%s}, {%s});" % (kind, ",".join(ins), ", ".join(outs)))
    lines += ["", "// the computations on each rank's slice, one kernel after the ReduceScatter",
              "Schedule paper {",
              "  comps = fuse(%s, ComputationFuse);" % ", ".join(_defined(body)),
              "}", ""]
    return "\n".join(lines)


def param_gather(counts: Sequence[int], dtype: str = "FP32", ranks: int = 2) -> str:
    """The all-gather that optimizer_rs leaves out: every rank's slice ps
    (FP32, c elements: slice_layout) gathered into the (master) parameters
    p, a scattered tensor of the members counts and the padding member;
    with 16-bit dtype also the slices ws into the weights w."""
    if dtype not in TYPES:
        raise ValueError("dtype '%s': expected one of %s" % (dtype, ", ".join(TYPES)))
    sc, total = _padded(counts, ranks)
    mixed = dtype != "FP32"
    lines = ["// written by coconet.programs.param_gather: the parameters' slices gathered "
             "into %d parameter tensors" % len(counts),
             "Tensor ps(FP32, [%d], Sliced(0), WORLD, RANK);" % total,
             "Tensor p(FP32, %s, Replicated, WORLD);" % sc]
    if mixed:
        lines += ["Tensor ws(%s, [%d], Sliced(0), WORLD, RANK);" % (dtype, total),
                  "Tensor w(%s, %s, Replicated, WORLD);" % (dtype, sc)]
    lines.append("Var p_ = Update(p, AllGather(ps));")
    if mixed:
        lines.append("Var w_ = Update(w, AllGather(ws));")
    lines.append("Execute gather({%s}, {%s});" % ("ps,p,ws,w" if mixed else "ps,p",
                                                  "p_, w_" if mixed else "p_"))
    return "\n".join(lines) + "\n"


def row_parallel(dtype: str = "FP16", p_drop: float = 0.1, residual: bool = True) -> str:
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


def write(text: str, name: str, directory: str) -> str:
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

"""tp_programs.py: the .coco programs behind tensor- and sequence-parallel
layers (Megatron-LM's ColumnParallelLinear, RowParallelLinear and the
LayerNorm between them), forward and backward, written for given options
(no torch here, so that the CPU tests check them against NumPy on the
reference executor at any number of simulated ranks).

Tokens are rows: an activation is [T, H] with T = sequence x batch, as
Megatron's backward views it to sum weight gradients over every token.
Weights are in torch's layout, [out, in]: a MatMul reads them through
Transpose (in place, cuBLASLt's transpose flag). Sizes are T, H (the
layer's input width) and F (its output width), bound when loaded.

- column_parallel(direction, ...): y = x W^T + b, W and b sliced along
  `out` (F). With sequence parallelism the input is each rank's tokens,
  gathered first (AllGather, overlapped with the MatMul by schedule `ol`);
  the forward also returns the gathered input `g`, which the backward reads
  for dW (no second AllGather). Backward: dX = dY W, reduced over the ranks
  (ReduceScatter back to each rank's tokens with sequence parallelism,
  overlapped with its MatMul by `ol`; AllReduce without), dW = dY^T g and
  db = the sum of dY over the tokens.
- row_parallel(direction, ...): y = x W^T + b, x and W sliced along `in`
  (F here is the input width: the MLP's 4H), each rank's product a partial
  sum (Local) reduced by ReduceScatter to each rank's tokens (sequence
  parallelism; `ol` overlaps it with the MatMul) or AllReduce. Backward:
  the gradient gathered (AllGather, overlapped with dX's MatMul by `ol`)
  or replicated, dX = dY W (sliced as x), dW = dY^T x, db = sum of dY.
- norm_after_row_parallel(direction, ...): the row-parallel projection,
  its bias, Dropout and the residual, then LayerNorm or RMSNorm over H in
  FP32 (gamma, beta): the sequence-parallel layer boundary
  (examples/transformer_sp.coco). The program is tensor parallelism
  (AllReduce); its schedules are sequence parallelism (`sp`: RS-C-AG),
  the norm inside one fused collective (`fused`: fuse(RS-C-AG)) and that
  overlapped with the MatMul (`fused_overlapped`). It returns the norm's
  output and the residual stream z, both whole on every rank. The
  backward has no collective: it takes the gradients of both whole on
  every rank (the norm's output feeds column-parallel layers, whose
  backward has reduced them), recomputes the row statistics from z, then
  runs the norm's backward on every token, Dropout's backward (the same
  mask: the same seed and indices) and the projection's gradients, which
  need the whole dZ on every rank anyway (a sequence-parallel backward
  would gather what it sliced)."""

from .programs import TYPES

DIRECTIONS = ("forward", "backward")
NORMS = ("layernorm", "rmsnorm")


def _check(dtype, direction, p_drop=0.0):
    if dtype not in TYPES:
        raise ValueError("dtype '%s': expected one of %s" % (dtype, ", ".join(TYPES)))
    if direction not in DIRECTIONS:
        raise ValueError("direction '%s': expected 'forward' or 'backward'" % direction)
    if not 0 <= p_drop < 1:
        raise ValueError("dropout probability %r: expected 0 <= p < 1" % p_drop)


def _head(what, name):
    return ["// written by coconet.tp_programs.%s" % what, "Size T = 8, H = 16, F = 24;"]


def _tensor(name, dtype, shape, layout):
    ranked = ", RANK" if layout.startswith("Sliced") or layout == "Local" else ""
    return "Tensor %s(%s, [%s], %s, WORLD%s);" % (name, dtype, shape, layout, ranked)


def _execute(name, ins, outs):
    return "Execute %s({%s}, {%s});" % (name, ", ".join(ins), ", ".join(outs))


def _layer(what, direction, dtype, sp, bias, forward, backward):
    """A layer's program text: its head, then forward's or backward's body"""
    _check(dtype, direction)
    name = "%s_%s%s" % (what, "sp_" if sp else "", direction)
    body = forward if direction == "forward" else backward
    return "\n".join(_head(what, name) + body(name, dtype, sp, bias)) + "\n"


def column_parallel(direction: str, dtype: str = "FP16", sequence_parallel: bool = True,
                    bias: bool = True) -> str:
    """Megatron's ColumnParallelLinear, forward or backward (module doc)."""
    return _layer("column_parallel", direction, dtype, sequence_parallel, bias,
                  _column_forward, _column_backward)


def _column_forward(name, dtype, sp, bias):
    text = [_tensor("x", dtype, "T,H", "Sliced(0)" if sp else "Replicated"),
            _tensor("w", dtype, "F,H", "Sliced(0)")]
    ins, outs = ["x", "w"], ["y"]
    if bias:
        text.append(_tensor("b", dtype, "F", "Sliced(0)"))
        ins.append("b")
    src = "x"
    if sp:
        text.append("Var g = AllGather(x);")
        src = "g"
        outs.append("g")
    mm = "mm" if bias else "y"
    text.append("Var %s = MatMul(%s, Transpose(w));" % (mm, src))
    if bias:
        text.append("Var y = mm + b;")
    text.append(_execute(name, ins, outs))
    if sp:
        text += ["", "// the MatMul by the AllGather's blocks, each as it arrives",
                 "Schedule ol { overlap(g, %s); }" % mm]
    return text


def _column_backward(name, dtype, sp, bias):
    text = [_tensor("dy", dtype, "T,F", "Sliced(1)"),
            _tensor("g", dtype, "T,H", "Replicated"),
            _tensor("w", dtype, "F,H", "Sliced(0)"),
            "Var dxp = MatMul(dy, w);",
            'Var dx = ReduceScatter("+", dxp, 0);' if sp else 'Var dx = AllReduce("+", dxp);',
            "Var dw = MatMul(Transpose(dy), g);"]
    outs = ["dx", "dw"]
    if bias:
        text.append('Var db = ReduceTensor("+", dy, 0);')
        outs.append("db")
    text.append(_execute(name, ["dy", "g", "w"], outs))
    if sp:
        text += ["", "// dX's ReduceScatter by the MatMul's blocks, each as it is written",
                 "Schedule ol { overlap(dxp, dx); }"]
    return text


def row_parallel(direction: str, dtype: str = "FP16", sequence_parallel: bool = True,
                 bias: bool = True) -> str:
    """Megatron's RowParallelLinear, forward or backward (module doc)."""
    return _layer("row_parallel", direction, dtype, sequence_parallel, bias,
                  _row_forward, _row_backward)


def _row_forward(name, dtype, sp, bias):
    text = [_tensor("x", dtype, "T,F", "Sliced(1)"), _tensor("w", dtype, "H,F", "Sliced(1)")]
    ins = ["x", "w"]
    if bias:
        text.append(_tensor("b", dtype, "H", "Replicated"))
        ins.append("b")
    text.append("Var mm = MatMul(x, Transpose(w));")
    red = "red" if bias else "y"
    if sp:
        text.append('Var %s = ReduceScatter("+", mm, 0);' % red)
    else:
        text.append('Var %s = AllReduce("+", mm);' % red)
    if bias:
        text.append("Var y = red + b;")
    text.append(_execute(name, ins, ["y"]))
    if sp:
        text += ["", "// the ReduceScatter by the MatMul's blocks, each as it is written",
                 "Schedule ol { overlap(mm, %s); }" % red]
    elif bias:
        text += ["", "// ol(MM,fuse(RS-C-AG)): the bias inside the fused collective",
                 "Schedule ol {",
                 "  (rs, ag) = split(red, ARSplitRSAG);",
                 "  reorder(ag, y);",
                 "  f = fuse(rs, sc_y, ag_y, AllReduceFuse);",
                 "  overlap(mm, f);",
                 "}"]
    return text


def _row_backward(name, dtype, sp, bias):
    text = [_tensor("dy", dtype, "T,H", "Sliced(0)" if sp else "Replicated"),
            _tensor("x", dtype, "T,F", "Sliced(1)"),
            _tensor("w", dtype, "H,F", "Sliced(1)")]
    src = "dy"
    if sp:
        text.append("Var g = AllGather(dy);")
        src = "g"
    text += ["Var dx = MatMul(%s, w);" % src, "Var dw = MatMul(Transpose(%s), x);" % src]
    outs = ["dx", "dw"]
    if bias:
        text.append('Var db = ReduceTensor("+", %s, 0);' % src)
        outs.append("db")
    text.append(_execute(name, ["dy", "x", "w"], outs))
    if sp:
        text += ["", "// dX's MatMul by the AllGather's blocks, each as it arrives",
                 "Schedule ol { overlap(g, dx); }"]
    return text


def norm_after_row_parallel(direction: str, dtype: str = "BF16", norm: str = "layernorm",
                            p_drop: float = 0.1, eps: float = 1e-5) -> str:
    """The row-parallel projection, bias, Dropout, residual and the norm over
    H, forward or backward (module doc). The norm computes in FP32."""
    _check(dtype, direction, p_drop)
    if norm not in NORMS:
        raise ValueError("norm '%s': expected 'layernorm' or 'rmsnorm'" % norm)
    name = "%s_after_row_parallel_%s" % (norm, direction)
    text = ["// written by coconet.tp_programs.norm_after_row_parallel",
            "Size T = 8, H = 16, F = 24;",
            "Scalar eps(FP32, %r);" % float(eps),
            "Scalar hn(FP32);  // H as a value (a size is not one): an input, given with H"]
    if direction == "forward":
        text += _norm_forward(name, dtype, norm, p_drop)
    else:
        text += _norm_backward(name, dtype, norm, p_drop)
    return "\n".join(text) + "\n"


def _dropped(value, p_drop):
    """value through Dropout; without one, a new value all the same (the
    backward's schedules name it)"""
    return "Dropout(%s, %r)" % (value, float(p_drop)) if p_drop > 0 else "%s * 1" % value


def _stats(norm, src):
    """The row statistics of FP32 rows `src` (xc: centred or not, rstd)"""
    if norm == "layernorm":
        centre = 'Var xc = %s - ReduceTensor("+", %s, -1, Keep) / hn;' % (src, src)
    else:
        centre = "Var xc = %s * 1;" % src
    return [centre,
            'Var rstd = 1 / Sqrt(ReduceTensor("+", xc * xc, -1, Keep) / hn + eps);',
            "Var xh = xc * rstd;"]


def _norm_forward(name, dtype, norm, p_drop):
    ins = ["x", "w", "b", "r", "gamma"] + (["beta"] if norm == "layernorm" else []) + ["hn"]
    text = [_tensor("x", dtype, "T,F", "Sliced(1)"), _tensor("w", dtype, "H,F", "Sliced(1)"),
            _tensor("b", dtype, "H", "Replicated"), _tensor("r", dtype, "T,H", "Replicated"),
            _tensor("gamma", dtype, "H", "Replicated")]
    if norm == "layernorm":
        text.append(_tensor("beta", dtype, "H", "Replicated"))
    text += ["Var mm = MatMul(x, Transpose(w));", 'Var sum = AllReduce("+", mm);',
             "Var z = %s + r;" % ("Dropout(sum + b, %r)" % float(p_drop) if p_drop > 0
                                  else "sum + b"), "Var zf = Cast(z, FP32);"]
    text += _stats(norm, "zf")
    shift = " + beta" if norm == "layernorm" else ""
    text.append("Var out = Cast(xh * gamma%s, %s);" % (shift, dtype))
    text.append(_execute(name, ins, ["out", "z"]))
    comps = "z, zf, xc, rstd, xh, out"
    text += ["",
             "// sequence parallelism: RS, the norm on each rank's tokens, AG (MM-RS-C-AG)",
             "Schedule sp {", "  (rs, ag) = split(sum);", "  reorder(ag, %s);" % comps, "}",
             "// the ReduceScatter, the norm and the AllGather as one collective",
             "Schedule fused { f = fuse(sum, %s, AllReduceFuse); }" % comps,
             "// that collective overlapped with the projection (ol(MM,fuse(RS-C-AG)))",
             "Schedule fused_overlapped {",
             "  f = fuse(sum, %s, AllReduceFuse);" % comps, "  overlap(mm, f);", "}"]
    return text


def _norm_backward(name, dtype, norm, p_drop):
    ln = norm == "layernorm"
    text = [_tensor("dout", dtype, "T,H", "Replicated"),
            _tensor("dz", dtype, "T,H", "Replicated"),
            _tensor("z", dtype, "T,H", "Replicated"), _tensor("gamma", dtype, "H", "Replicated"),
            _tensor("x", dtype, "T,F", "Sliced(1)"), _tensor("w", dtype, "H,F", "Sliced(1)"),
            "// dout: the gradient of the norm's output, dz: the residual stream's,",
            "// both whole on every rank (reduced by the layers after)",
            "Var zf = Cast(z, FP32);"]
    text += _stats(norm, "zf")
    text += ["Var dy = Cast(dout, FP32);", "Var dxh = dy * gamma;"]
    mean_term = 'ReduceTensor("+", dxh, -1, Keep) / hn - ' if ln else ""
    text += ['Var dzf = (dxh - %sxh * (ReduceTensor("+", dxh * xh, -1, Keep) / hn)) * rstd;'
             % mean_term,
             "Var dr = Cast(dzf + Cast(dz, FP32), %s);" % dtype,
             'Var dgamma = Cast(ReduceTensor("+", dy * xh, 0), %s);' % dtype]
    outs = ["dx", "dw", "db", "dr", "dgamma"]
    if ln:
        text.append('Var dbeta = Cast(ReduceTensor("+", dy, 0), %s);' % dtype)
        outs.append("dbeta")
    text += ["// Dropout's backward: the forward's mask (the same seed and indices)",
             "Var ds = %s;" % _dropped("dr", p_drop), 'Var db = ReduceTensor("+", ds, 0);',
             "Var dx = MatMul(ds, w);", "Var dw = MatMul(Transpose(ds), x);",
             _execute(name, ["dout", "dz", "z", "gamma", "x", "w", "hn"], outs),
             "",
             "// the row statistics and the norm's backward as one row kernel",
             "Schedule rows { f = fuse(zf, xc, rstd, xh, dy, dxh, dzf, dr, ds, "
             "ComputationFuse); }"]
    return text

#!/usr/bin/env python3
"""tests/fuzz/gen.py: a seeded generator of random well-formed coconet programs.

    gen.py SEED            prints a program and, on its first line, the
                           coconet arguments to run it with (// args: ...)
    gen.py --dir DIR N     writes the programs of seeds 1 to N, the same,
                           as DIR/seedSEED.coco (one process for them all)
    --uneven (first)       sizes that no rank count need divide (each size a
                           multiple of 24 moved by up to 23), where the
                           language allows it: every dimension but a
                           MatMul's contraction K (a sliced declared input);
                           the same seed gives another program

Each program is one of four shapes seen in distributed training, with random
sizes, element types, pointwise chains (arithmetic, comparisons, Ite, Exp,
Log, Erf, Abs, Max, Min, GELU, SiLU), reductions that keep their dimension,
Transposes, scalars and constants:
  data-parallel  Local gradients, AllReduce, Updates of Replicated state
                 (optionally with a Norm, as LAMB does);
  model-parallel a MatMul of operands sliced on the contraction dimension,
                 AllReduce, then bias / residual / activation chains, and
                 the next layer's column-parallel MatMul;
  pipeline       GROUP-local values reduced in each group, computed on and
                 sent to the next group (a ring, or with Linear no wrap-around);
  replicated     chains over Replicated and Local values with collectives.
Programs are correct by construction (the generator follows the layout rules),
so a refusal by `coconet check` is a bug on one side or the other.
"""
import random
import sys

TYPES = ["FP16", "BF16", "FP32", "FP64"]
LCM = 24  # divisible by every rank count tested: 1, 2, 3, 4, 8


class Gen:
    def __init__(self, seed, uneven=False):
        self.r = random.Random(seed)
        self.uneven = uneven
        self.lines = []
        self.names = 0

    def size(self, most):
        """A multiple of LCM up to most x LCM; with uneven, moved by up to
        LCM - 1 either way (still at least 1)."""
        n = LCM * self.r.randint(1, most)
        return max(1, n + self.r.randint(1 - LCM, LCM - 1)) if self.uneven else n

    def name(self, prefix):
        self.names += 1
        return "%s%d" % (prefix, self.names)

    def pick(self, xs):
        return self.r.choice(xs)

    def const(self):
        return self.pick(["0.5", "2", "0.25", "1.5", "3", "0.1"])

    def pointwise(self, x, others, depth):
        """A random expression of x with same-shaped or broadcast operands."""
        if depth == 0:
            return x
        y = self.pointwise(x, others, depth - 1)
        o = self.pick(others) if others else self.const()
        form = self.r.randrange(17)
        if form == 0:
            return "(%s + %s)" % (y, o)
        if form == 1:
            return "(%s - %s * %s)" % (y, self.const(), o)
        if form == 2:
            return "(%s * %s)" % (y, o)
        if form == 3:
            return "(%s / (1 + %s * %s))" % (y, o, o)
        if form == 4:
            return "Tanh(%s)" % y
        if form == 5:
            return "ReLU(%s)" % y
        if form == 6:
            return "Dropout(%s, %s)" % (y, self.pick(["0.1", "0.25", "0.5"]))
        if form == 7:
            return "Sqrt(1 + %s * %s)" % (y, y)
        if form == 9:  # a comparison as a value: 0 or 1 (C's precedence)
            return "(%s + %s %s %s)" % (y, o, self.comparison(), self.const())
        if form == 10:  # a leaky ReLU, or a clamp
            return "Ite(%s %s %s, %s, %s * %s)" % (y, self.comparison(), o, y, o, self.const())
        if form == 11:  # a condition of any type, compared with nothing
            return "Ite(ReLU(%s), %s, %s)" % (o, y, self.const())
        if form == 12:  # bounded: no overflow to Inf
            return self.pick(["Exp(-Abs(%s))", "Log(1 + Abs(%s))", "Erf(%s)"]) % y
        if form == 13:
            return "%s(%s, %s)" % (self.pick(["Max", "Min"]), y, o)
        if form == 14:  # GELU
            return "(0.5 * %s * (1 + Erf(%s * 0.7071067811865476)))" % (y, y)
        if form == 15:  # SiLU
            return "(%s / (1 + Exp(-Abs(%s))))" % (y, y)
        if form == 16:
            return "Abs(%s)" % y
        return "-%s" % y

    def row_reduction(self, v, dim):
        """v less a reduction of v that keeps its dimension dim or the last
        (written -1): a LayerNorm's centring, a softmax's, a norm's scaling."""
        d = self.pick(["-1", str(dim)])
        return self.pick(['(%s - ReduceTensor("+", %s, %s, Keep) * 0.25)',
                          '(%s - ReduceTensor("max", %s, %s, Keep))',
                          '(%s / (1 + Norm(%s, %s, Keep)))']) % (v, v, d)

    def comparison(self):
        return self.pick(["<", "<=", ">", ">=", "==", "!="])

    def var(self, expr):
        v = self.name("v")
        self.lines.append("Var %s = %s;" % (v, expr))
        return v

    def data_parallel(self):
        n = self.size(6)
        self.lines.append("Size N = %d;" % n)
        gt = self.pick(TYPES)
        st = self.pick(["FP32", "FP64", gt])
        self.lines.append("Tensor g(%s, [N], Local, WORLD, RANK);" % gt)
        nstate = self.r.randint(1, 3)
        state = ["s%d" % i for i in range(nstate)]
        for s in state:
            self.lines.append("Tensor %s(%s, [N], Replicated, WORLD);" % (s, st))
        self.lines.append("Scalar lr(%s);" % st)
        self.lines.append("Scalar beta(%s, %s);" % (st, self.pick(["0.9", "0.5", "0.99"])))
        red = self.pick(['"+"', '"+"', '"max"', '"min"'])
        avg = self.var("AllReduce(%s, g)" % red)
        outs = []
        prev = avg
        for i, s in enumerate(state):
            expr = "%s * beta + (1 - beta) * %s" % (s, self.pointwise(prev, [avg], self.r.randint(0, 2)))
            if i == len(state) - 1 and self.r.random() < 0.4:
                ratio = self.var("Norm(%s) / (1 + Norm(%s))" % (outs[0] if outs else s, prev))
                expr = "%s - lr * %s * %s" % (s, ratio, prev)
            u = self.name("u")
            self.lines.append("Var %s = Update(%s, %s);" % (u, s, expr))
            prev = u
            outs.append(u)
        extra = self.var(self.pointwise(prev, [avg], 1))
        outs.append(extra)
        self.execute(["g"] + state + ["lr"], outs)

    def model_parallel(self):
        b = self.size(2)
        s = self.r.randint(1, 3)
        k = LCM * self.r.randint(1, 2)
        h = self.r.randint(2, 9)
        t = self.pick(TYPES)
        self.lines.append("Size B = %d, S = %d, K = %d, H = %d;" % (b, s, k, h))
        self.lines.append("Tensor w(%s, [K,H], Sliced(0), WORLD, RANK);" % t)
        self.lines.append("Tensor x(%s, [B,S,K], Sliced(2), WORLD, RANK);" % t)
        self.lines.append("Tensor bias(%s, [H], Replicated, WORLD);" % self.pick(TYPES))
        self.lines.append("Tensor res(%s, [B,S,H], Replicated, WORLD);" % t)
        mm = self.var("MatMul(x, w)")
        red = self.var('AllReduce("+", %s)' % mm)
        c1 = self.var(self.pointwise("(%s + bias)" % red, ["bias", "res"], self.r.randint(1, 3)))
        if self.r.random() < 0.3:
            c1 = self.var(self.row_reduction(c1, 2))
        c2 = self.var(self.pointwise(c1, ["res", "bias"], self.r.randint(1, 2)))
        outs = [c2] + ([c1] if self.r.random() < 0.3 else [])
        ins = ["w", "x", "bias", "res"]
        if self.r.random() < 0.3:  # a sum over the sliced dimension: per rank, then added
            m = self.var('AllReduce("+", PartialReduce("+", x, -1, Keep))')
            outs.append(self.var("x - %s * 0.125" % m))
        if self.r.random() < 0.4:  # the next layer: a column-parallel MatMul, named or inline
            self.lines.append("Tensor w2(%s, [H,%d], Sliced(1), WORLD, RANK);" % (t, LCM))
            ins.append("w2")
            outs.append(self.var(self.pick(["MatMul(%s, w2)", "MatMul(%s, w2) * 0.5 + 1"]) % c2))
        self.execute(ins, outs)

    def pipeline(self):
        b = self.size(2)
        h = self.r.randint(2, 8)
        t = self.pick(TYPES)
        self.lines.append("Size B = %d, H = %d;" % (b, h))
        self.lines.append("Group GROUP(2);")
        self.lines.append("Tensor x(%s, [B,H], Local, GROUP, RANK);" % t)
        self.lines.append("Tensor bias(%s, [H], Replicated, GROUP);" % t)
        self.lines.append("Tensor res(%s, [B,H], Replicated, GROUP);" % t)
        red = self.var('AllReduce("+", x)')
        c = self.var(self.pointwise("(%s + bias)" % red, ["res", "bias"], self.r.randint(1, 3)))
        k = self.pick(["+1", "+1", "-1", "+2"])
        verb = self.pick(["Send", "Recv"])
        linear = self.pick(["", "", ", Linear"])  # a ring, or no wrap-around
        sent = self.var("%s(%s, GroupRank(GROUP%s, RANK%s))" % (verb, c, k, linear))
        self.execute(["x", "bias", "res"], [sent])

    def replicated(self):
        n = self.size(4)
        m = self.r.randint(1, 4)
        t = self.pick(TYPES)
        self.lines.append("Size N = %d, M = %d;" % (n, m))
        self.lines.append("Tensor a(%s, [N,M], Local, WORLD, RANK);" % t)
        self.lines.append("Tensor r(%s, [N,M], Replicated, WORLD);" % self.pick(TYPES))
        self.lines.append("Tensor c(%s, [M], Replicated, WORLD);" % t)
        self.lines.append("Scalar k(%s);" % self.pick(TYPES))
        first = self.pick(['AllReduce("+", a)', 'Broadcast(a, 0)', 'AllReduce("max", a)',
                           'Broadcast(Reduce("+", a, 0), 0)'])
        v = self.var(first)
        c1 = self.var(self.pointwise("(%s * k)" % v, ["r", "c"], self.r.randint(1, 3)))
        c2 = self.var(self.pointwise(c1, ["c", "r"], self.r.randint(1, 2)))
        outs = [c2]
        if self.r.random() < 0.5:
            outs.append(self.var("ReduceTensor(\"+\", %s, 1)" % c1))
        if self.r.random() < 0.3:
            outs.append(self.var(self.row_reduction(c2, self.pick([0, 1]))))
        if self.r.random() < 0.3:  # transposed: a copy, or read by a MatMul
            outs.append(self.var(self.pick(["Transpose(%s) * 2", "MatMul(Transpose(%s), r)"]) % c1))
        self.execute(["a", "r", "c", "k"], outs)

    def execute(self, ins, outs):
        self.lines.append("Execute fuzz({%s}, {%s});" % (", ".join(ins), ", ".join(outs)))

    def program(self):
        kind = self.r.randrange(4)
        [self.data_parallel, self.model_parallel, self.pipeline, self.replicated][kind]()
        ranks = self.pick([2, 4, 8]) if kind == 2 else self.pick([1, 2, 3, 4, 8])
        return "// args: --ranks %d --seed %d\n%s\n" % (ranks, self.r.randint(1, 1000),
                                                      "\n".join(self.lines))


def main():
    args = sys.argv[1:]
    uneven = bool(args) and args[0] == "--uneven"
    if uneven:
        args = args[1:]
    if len(args) == 3 and args[0] == "--dir":
        for seed in range(1, int(args[2]) + 1):
            with open("%s/seed%d.coco" % (args[1], seed), "w") as f:
                f.write(Gen(seed, uneven).program())
        return
    if len(args) != 1:
        sys.exit("usage: gen.py [--uneven] SEED | gen.py [--uneven] --dir DIR N")
    sys.stdout.write(Gen(int(args[0]), uneven).program())


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/bert_params.py: writes bench/bert_adam_scattered.coco (Adam over the
parameter tensors of BERT-large, each its own allocation: scattered tensors)
and bench/bert_adam.coco (the same work on one contiguous tensor of the same
total size). Run from the repository root: python3 bench/bert_params.py

The tensors are those of BERT-large pretraining (BertForPreTraining of
Hugging Face transformers, bert-large-uncased: H = 1024 hidden, F = 4H
feed-forward, 24 layers, V = 30522 vocabulary, S = 512 positions), the MLM
decoder weight being tied to the word embeddings (not counted twice).
Sizes are Size constants, so -D H=16 -D V=64 -D S=8 makes a small twin."""

LAYERS = 24


def shapes():
    t = [("embeddings.word_embeddings.weight", "V*H"),
         ("embeddings.position_embeddings.weight", "S*H"),
         ("embeddings.token_type_embeddings.weight", "2*H"),
         ("embeddings.LayerNorm.weight", "H"), ("embeddings.LayerNorm.bias", "H")]
    for layer in range(LAYERS):
        p = "encoder.layer.%d." % layer
        for w in ("query", "key", "value"):
            t += [(p + "attention.self.%s.weight" % w, "H*H"),
                  (p + "attention.self.%s.bias" % w, "H")]
        t += [(p + "attention.output.dense.weight", "H*H"), (p + "attention.output.dense.bias", "H"),
              (p + "attention.output.LayerNorm.weight", "H"), (p + "attention.output.LayerNorm.bias", "H"),
              (p + "intermediate.dense.weight", "F*H"), (p + "intermediate.dense.bias", "F"),
              (p + "output.dense.weight", "H*F"), (p + "output.dense.bias", "H"),
              (p + "output.LayerNorm.weight", "H"), (p + "output.LayerNorm.bias", "H")]
    t += [("pooler.dense.weight", "H*H"), ("pooler.dense.bias", "H"),
          ("cls.predictions.transform.dense.weight", "H*H"), ("cls.predictions.transform.dense.bias", "H"),
          ("cls.predictions.transform.LayerNorm.weight", "H"),
          ("cls.predictions.transform.LayerNorm.bias", "H"),
          ("cls.predictions.bias", "V"),
          ("cls.seq_relationship.weight", "2*H"), ("cls.seq_relationship.bias", "2")]
    return t


BODY = """Scalar lr(FP32);  Scalar beta1(FP32, 0.9);  Scalar beta2(FP32, 0.999);  Scalar t(FP32);
Var avg = AllReduce("+", g);
Var m_ = Update(m, (m*beta1+(1-beta1)*avg));
Var v_ = Update(v, (v*beta2+(1-beta2)*avg*avg));
Var m1 = m_/(1-Pow(beta1, t));
Var v1 = v_/(1-Pow(beta2, t));
Var p_ = Update(p, (p - lr * m1/(Sqrt(v1))));
Execute adam({g,p,v,m,lr,t}, {p_});

// Every optimizer step of one fused kernel chain; then the paper's schedule
// (fuse(RS-Opt-AG), Figure 7b; m and v kept as each rank's slice).
Schedule fusedComp {
  comps = fuse(m_, v_, m1, v1, p_, ComputationFuse);
}
Schedule paper {
  comps = fuse(m_, v_, m1, v1, p_, ComputationFuse);
  (rsG, agG) = split(avg, ARSplitRSAG);
  (scComp, agP, agM, agV) = reorder(agG, comps, AGReorder);
  asSlice(m); asSlice(v); dead(agM); dead(agV);
  fuseAR = fuse(rsG, scComp, agP, AllReduceFuse);
}
"""


def value(expr, env):
    return eval(expr, {}, dict(env))


def main():
    t = shapes()
    env = {"H": 1024, "F": 4096, "V": 30522, "S": 512}
    total = sum(value(s, env) for _, s in t)
    head = ("Size H = 1024, F = 4*H, V = 30522, S = 512;\n")
    listing = "".join("//   %3d  %-52s %s = %d\n" % (i, n, s, value(s, env))
                      for i, (n, s) in enumerate(t))
    members = ", ".join(s for _, s in t)
    common = ("// Written by bench/bert_params.py. Adam over the %d parameter tensors of BERT-large\n"
              "// (BertForPreTraining; %d elements in all):\n%s" % (len(t), total, listing))
    with open("bench/bert_adam_scattered.coco", "w") as f:
        f.write("// bert_adam_scattered.coco: each parameter tensor its own allocation (a\n"
                "// scattered tensor); bert_adam.coco is the same on one contiguous tensor.\n")
        f.write(common + head)
        for name, typ, lay in (("g", "FP16", "Local, WORLD, RANK"), ("p", "FP32", "Replicated, WORLD"),
                               ("m", "FP32", "Replicated, WORLD"), ("v", "FP32", "Replicated, WORLD")):
            f.write("Tensor %s(%s, Scattered[%s], %s);\n" % (name, typ, members, lay))
        f.write(BODY)
    with open("bench/bert_adam.coco", "w") as f:
        f.write("// bert_adam.coco: the contiguous twin of bert_adam_scattered.coco: one tensor\n"
                "// of the total size of BERT-large's parameter tensors.\n")
        f.write(common + head + "Size N = %s;\n" % "+".join(s for _, s in t))
        for name, typ, lay in (("g", "FP16", "Local, WORLD, RANK"), ("p", "FP32", "Replicated, WORLD"),
                               ("m", "FP32", "Replicated, WORLD"), ("v", "FP32", "Replicated, WORLD")):
            f.write("Tensor %s(%s, [N], %s);\n" % (name, typ, lay))
        f.write(BODY)
    print("%d tensors, %d elements" % (len(t), total))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Training a model exported with a fixed batch at another batch.

usage: check_fixed_batch.py HPDLF_EXEC

torch.onnx.export without dynamic_axes writes the batch it traced with
into the input's shape.  A small CNN (Conv, BatchNormalization, Relu,
Flatten, MatMul + bias Add) is written with its input's batch fixed at 4
and with a dynamic batch: trained at --batch 8 (and 2), both must give the
same losses bit for bit (BatchNorm takes its statistics over the batch, so
a run that kept 4 rows would differ), and at --batch 4 too.  The same CNN
with Flatten written as Reshape to a constant [4, 144] fixes the batch
inside the graph: --batch 8 is then status 2, one message naming the
Reshape, the exported batch and what to do.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(5)
FAILS = []


def build(batch, baked):
    f = lambda *s: numpy_helper.from_array((RNG.standard_normal(s) * 0.3).astype(np.float32))  # noqa: E731
    w = {"conv.w": f(4, 2, 3, 3), "conv.b": f(4), "bn.s": f(4), "bn.b": f(4), "fc.w": f(144, 3), "fc.b": f(3)}
    w["bn.m"] = numpy_helper.from_array(np.zeros(4, np.float32))
    w["bn.v"] = numpy_helper.from_array(np.ones(4, np.float32))
    inits = []
    for k, t in w.items():
        t.name = k
        inits.append(t)
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             mk("BatchNormalization", ["c", "bn.s", "bn.b", "bn.m", "bn.v"], ["bn"]), mk("Relu", ["bn"], ["r"])]
    if baked:
        inits.append(numpy_helper.from_array(np.array([batch, 144], np.int64), "flat.shape"))
        nodes.append(mk("Reshape", ["r", "flat.shape"], ["f"], name="flatten_baked"))
    else:
        nodes.append(mk("Flatten", ["r"], ["f"]))
    nodes += [mk("MatMul", ["f", "fc.w"], ["mm"]), mk("Add", ["mm", "fc.b"], ["logits"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 2, 6, 6])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def train(exe, tmp, model, tag, batch):
    log = os.path.join(tmp, tag + ".jsonl")
    p = subprocess.run([exe, model, "--train", "--data", os.path.join(tmp, "x.npy"), "--labels",
                        os.path.join(tmp, "y.npy"), "--batch", str(batch), "--steps", "5", "--optimizer", "sgd",
                        "--lr", "0.1", "--log-json", log, "--quiet"], capture_output=True, text=True, timeout=300)
    if p.returncode:
        return p, None
    return p, [json.loads(l)["loss"] for l in open(log) if l.strip()]


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), RNG.standard_normal((32, 2, 6, 6)).astype(np.float32))
        np.save(os.path.join(tmp, "y.npy"), RNG.integers(0, 3, 32).astype(np.int64))
        state = RNG.bit_generator.state
        paths = {}
        for tag, batch, baked in (("fixed", 4, False), ("dynamic", "N", False), ("baked", 4, True)):
            RNG.bit_generator.state = state  # the same weights in all three
            paths[tag] = os.path.join(tmp, tag + ".onnx")
            onnx.save(build(batch, baked), paths[tag])
        for batch in (8, 2, 4):
            pf, lf = train(exe, tmp, paths["fixed"], "fixed%d" % batch, batch)
            pd, ld = train(exe, tmp, paths["dynamic"], "dynamic%d" % batch, batch)
            if lf is None or ld is None:
                FAILS.append("--batch %d: exit %d / %d: %s %s" % (batch, pf.returncode, pd.returncode,
                                                                 pf.stderr.strip(), pd.stderr.strip()))
            elif lf != ld or len(lf) != 5:
                FAILS.append("--batch %d: fixed-batch model %s, dynamic %s" % (batch, lf, ld))
            else:
                print("ok   exported at batch 4, trained at --batch %d: the dynamic model's losses %s" %
                      (batch, ["%.5f" % x for x in lf]))
        p, _ = train(exe, tmp, paths["baked"], "baked", 8)
        want = ("flatten_baked", "fixed batch of 4", "dynamic_axes", "--batch")
        if p.returncode != 2 or not all(w in p.stderr for w in want) or len(p.stderr.strip().splitlines()) != 1:
            FAILS.append("batch fixed inside the graph: exit %d, want 2 and one line with %s: %s" %
                         (p.returncode, want, p.stderr.strip()))
        else:
            print("ok   batch fixed inside the graph: status 2: %s" % p.stderr.strip())
        p, lb = train(exe, tmp, paths["baked"], "baked4", 4)
        if lb is None:
            FAILS.append("the baked model at its own batch: exit %d: %s" % (p.returncode, p.stderr.strip()))
    for f in FAILS:
        print("FAIL " + f)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Training fuses LayerNorm as torch writes it below opset 17 and GELU in
both of its exported forms (exec/fuse.h).

usage: check_train_fuse.py HPDLF_EXEC REF_DIR

Trains REF_DIR/autoenc (Gemm, a LayerNorm exported below opset 17 as
ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, GELU, Gemm, and an
in-graph MSE loss: Sub/Pow/ReduceMean) for 3 steps with --trace and checks
from the trace that each step ran one LayerNormalization and one
LayerNormGrad, the loss's ReduceMean and Pow only and no Sqrt, one
FusedGelu and one UnaryGrad (its gradient) and no Erf, and that the
losses stay within 1e-3 relative of PyTorch's (train.json; train-refs
checks every step and optimizer, in core and out of core).  Then
REF_DIR/gpt, whose GELU is the tanh form with x^3 as Mul(x, Mul(x, x))
(nine nodes): one FusedGelu per step and no Tanh, and whose linear layers
are MatMul(x, Transpose(W)) with W an initializer (counted here from the
ONNX file): each one Gemm and one GemmGrad per step, with PyTorch's
losses.
"""
import json
import os
import subprocess
import sys
import tempfile


def check(exe, ref, counts):
    r = json.load(open(os.path.join(ref, "train.json")))["runs"][0]
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        trace, log = os.path.join(tmp, "t.json"), os.path.join(tmp, "log.json")
        cmd = [exe, os.path.join(ref, "model.onnx"), "--train", "--data", os.path.join(ref, "x.npy"), "--labels",
               os.path.join(ref, "y.npy"), "--loss", r["loss"], "--optimizer", r["optimizer"], "--lr", repr(r["lr"]),
               "--momentum", repr(r["momentum"]), "--weight-decay", repr(r["weight_decay"]), "--batch",
               str(r["batch"]), "--steps", "3", "--no-shuffle", "--quiet", "--threads", "2", "--trace", trace,
               "--log-json", log]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            print("FAIL training: exit %d %s" % (p.returncode, p.stderr.strip()))
            return 1
        cats = [e.get("cat") for e in json.load(open(trace)) if e.get("ph") == "X"]
        losses = [json.loads(line)["loss"] for line in open(log) if line.startswith("{") and "loss" in line]
    for op, want in counts:
        got = cats.count(op)
        ok = got == want
        fails += not ok
        print("%s %s %s: %d kernels in 3 steps (want %d)" % ("ok  " if ok else "FAIL", os.path.basename(ref), op,
                                                             got, want))
    for i, (a, b) in enumerate(zip(losses, r["losses"])):
        ok = abs(a - b) <= 1e-3 * abs(b)
        fails += not ok
        print("%s step %d loss %.7g, PyTorch %.7g" % ("ok  " if ok else "FAIL", i, a, b))
    if len(losses) != 3:
        print("FAIL %d losses logged" % len(losses))
        fails += 1
    return fails


def linear_layers(model):
    """MatMul nodes whose B is a Transpose of an initializer."""
    import onnx
    g = onnx.load(model).graph
    inits = {i.name for i in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    return sum(1 for n in g.node if n.op_type == "MatMul" and n.input[1] in prod and
               prod[n.input[1]].op_type == "Transpose" and prod[n.input[1]].input[0] in inits)


def main():
    exe, ref = sys.argv[1], sys.argv[2]
    fails = check(exe, os.path.join(ref, "autoenc"),
                  (("LayerNormalization", 3), ("LayerNormGrad", 3), ("ReduceMean", 3), ("Pow", 3), ("Sqrt", 0),
                   ("FusedGelu", 3), ("UnaryGrad", 3), ("Erf", 0)))
    gpt = os.path.join(ref, "gpt")
    lin = linear_layers(os.path.join(gpt, "model.onnx"))
    if lin < 4:
        print("FAIL gpt: %d linear layers as MatMul(x, Transpose(W)) in the reference (want 4 or more)" % lin)
        fails += 1
    fails += check(exe, gpt, (("FusedGelu", 3), ("Tanh", 0), ("Gemm", 3 * lin), ("GemmGrad", 3 * lin)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Inference graph optimisation: BatchNormalization folded into the Conv
before it (exec/fuse.c).

usage: check_fuse.py HPDLF_EXEC

Generates a model (NumPy + onnx) with Conv(bias)+BatchNorm+Relu,
Conv(no bias, strided 1x1)+BatchNorm as the graph output, and two
BatchNorms that must not fold: one after a Relu, one whose Conv output is
also read by an Add, and a Conv+BatchNorm whose mean and variance come
through Identity nodes of initializers (torch's export of MobileNetV2's
last BatchNorm), which must fold as the others: C5 channels, so that the
importer leaves those initializers in the file (above IMP_INLINE_MAX,
4 KiB) and the Identity nodes are not folded away as constants first.  Checks:
  - --plan lists exactly the two foldable BatchNorms, and --no-fuse none;
  - the output, fused and with --no-fuse, within TOL * max|y| of a float64
    NumPy evaluation of the graph, and fused within TOL * max|y| of unfused
    (folding rounds W * a once instead of rounding the convolution and the
    normalization separately: a few float32 ulps of the result's scale);
  - out of core (a budget below the in-core peak) the fused output is
    bitwise the in-core one;
  - --no-fuse with --train is refused (exit 2): training never folds.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper

TOL = 1e-5
OUTS = ("y", "n2", "n5")
C5 = 1040
FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)
    return ok


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def conv(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j])
    return y + (0 if b is None else b[None, :, None, None])


def bn(x, s, o, m, v, eps):
    r = lambda a: a[None, :, None, None]
    return (x - r(m)) / np.sqrt(r(v) + eps) * r(s) + r(o)


def make(folder):
    rng = np.random.default_rng(0)
    P = {}

    def init(name, a):
        P[name] = a.astype(np.float32)
        return numpy_helper.from_array(P[name], name)

    def bnp(k, c):
        return [init("s" + k, 1 + 0.2 * rng.standard_normal(c)), init("o" + k, 0.1 * rng.standard_normal(c)),
                init("m" + k, 0.1 * rng.standard_normal(c)), init("v" + k, 1 + rng.random(c))]

    inits = [init("w1", 0.3 * rng.standard_normal((8, 3, 3, 3))), init("b1", 0.1 * rng.standard_normal(8)),
             init("w2", 0.3 * rng.standard_normal((16, 8, 1, 1))), init("w3", 0.3 * rng.standard_normal((16, 16, 3, 3))),
             init("w5", 0.3 * rng.standard_normal((C5, 3, 3, 3)))]
    for k, c in (("1", 8), ("2", 16), ("3", 16), ("4", 16), ("5", C5)):
        inits += bnp(k, c)
    B = lambda k, i, o, eps=1e-5: helper.make_node("BatchNormalization", [i, "s" + k, "o" + k, "m" + k, "v" + k],
                                                   [o], epsilon=eps, name="bn" + k)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             B("1", "c1", "n1", 1e-3), helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], name="conv2"), B("2", "c2", "n2"),
             helper.make_node("Relu", ["n2"], ["r2"]), B("3", "r2", "n3"),
             helper.make_node("Conv", ["n3", "w3"], ["c3"], pads=[1, 1, 1, 1], name="conv3"), B("4", "c3", "n4"),
             helper.make_node("Add", ["n4", "c3"], ["y"]),
             helper.make_node("Identity", ["v5"], ["v5a"]), helper.make_node("Identity", ["v5a"], ["v5b"]),
             helper.make_node("Identity", ["m5"], ["m5a"]),
             helper.make_node("Conv", ["x", "w5"], ["c5"], strides=[2, 2], name="conv5"),
             helper.make_node("BatchNormalization", ["c5", "s5", "o5", "m5a", "v5b"], ["n5"], name="bn5")]
    g = helper.make_graph(nodes, "fuse", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("n2", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("n5", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(folder, "m.onnx"))
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    np.save(os.path.join(folder, "x.npy"), x)
    d = {k: v.astype(np.float64) for k, v in P.items()}
    n2 = bn(conv(np.maximum(bn(conv(x.astype(np.float64), d["w1"], d["b1"], 1, 1), d["s1"], d["o1"], d["m1"], d["v1"],
                               1e-3), 0), d["w2"], None, 2, 0), d["s2"], d["o2"], d["m2"], d["v2"], 1e-5)
    c3 = conv(bn(np.maximum(n2, 0), d["s3"], d["o3"], d["m3"], d["v3"], 1e-5), d["w3"], None, 1, 1)
    n5 = bn(conv(x.astype(np.float64), d["w5"], None, 2, 0), d["s5"], d["o5"], d["m5"], d["v5"], 1e-5)
    return {"y": bn(c3, d["s4"], d["o4"], d["m4"], d["v4"], 1e-5) + c3, "n2": n2, "n5": n5}


def outputs(exe, folder, tag, extra):
    args = [os.path.join(folder, "m.onnx"), "--input", "x=" + os.path.join(folder, "x.npy"), "--quiet"]
    for k in OUTS:
        args += ["--output", "%s=%s" % (k, os.path.join(folder, "%s_%s.npy" % (tag, k)))]
    rc, _, err = run(exe, args + extra)
    if not check(rc == 0, "%s: runs %s" % (tag, err.strip()[-300:])):
        return None
    return {k: np.load(os.path.join(folder, "%s_%s.npy" % (tag, k))) for k in OUTS}


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        ref = make(tmp)
        model = os.path.join(tmp, "m.onnx")
        rc, out, err = run(exe, [model, "--plan"])
        fused = re.findall(r"BatchNormalization '(\w+)' into Conv '(\w+)'", out)
        check(rc == 0 and sorted(fused) == [("bn1", "conv1"), ("bn2", "conv2"), ("bn5", "conv5")],
              "--plan lists bn1 into conv1, bn2 into conv2 and bn5 (statistics through Identity) into conv5, "
              "not bn3 (after a Relu) nor bn4 (its Conv output read twice): %s %s" % (fused, err.strip()[-200:]))
        rc, _, err = run(exe, [model, "--input", "x=" + os.path.join(tmp, "x.npy"), "--iterations", "1", "--profile"])
        check(rc == 0 and " BatchNormalization " in err and " Identity " not in err,
              "bn5's Identity nodes are dropped with it (none runs), bn3 and bn4 still run")
        rc, out, _ = run(exe, [model, "--plan", "--no-fuse"])
        check(rc == 0 and "into Conv" not in out, "--plan --no-fuse lists no fusion")
        got = {t: outputs(exe, tmp, t, e) for t, e in (("fused", []), ("plain", ["--no-fuse"]))}
        if not got["fused"] or not got["plain"]:
            return 1
        for k in OUTS:
            scale = float(np.max(np.abs(ref[k])))
            for t in ("fused", "plain"):
                err = float(np.max(np.abs(got[t][k] - ref[k])))
                check(err <= TOL * scale, "%s %s vs NumPy float64: max err %.2e (scale %.2f)" % (t, k, err, scale))
            err = float(np.max(np.abs(got["fused"][k] - got["plain"][k])))
            check(err <= TOL * scale, "%s fused vs --no-fuse: max err %.2e" % (k, err))
        budget, ooc = "1K", None
        for _ in range(4):  # the planner names the smallest budget that works; follow it
            rc, _, err = run(exe, [model, "--input", "x=" + os.path.join(tmp, "x.npy"), "--budget", budget, "--quiet"])
            m = re.search(r"--budget (\S+)\)", err)
            if rc == 0 or not m:
                break
            budget = m.group(1)
        if check(rc == 0, "out of core: runs at --budget %s %s" % (budget, err.strip()[-200:])):
            ooc = outputs(exe, tmp, "ooc", ["--budget", budget])
        if ooc:
            same = all(np.array_equal(ooc[k], got["fused"][k]) for k in OUTS)
            check(same, "out of core at --budget %s: fused outputs bitwise the in-core ones" % budget)
        rc, _, err = run(exe, [model, "--train", "--data", os.path.join(tmp, "x.npy"), "--no-fuse"])
        check(rc == 2 and "--no-fuse" in err, "--no-fuse with --train: exit 2 naming the option (%d)" % rc)
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Issue 17: small models run inference at a quarter of their in-core peak.

usage: check_small_quarter.py HPDLF_EXEC MODELS_DIR TMP

The reference models of tests/models (lenet, mlp, unet3d_tiny) at the
inputs they ship (infer_x.npy: batches of 64, 64 and 2), a 2-D U-Net built
here (batch 2, 64x64, BatchNorm: it needed 33%, its KxK convolutions never
cut in rows) and a MatMul model built here (a rank-3 activation times weights, as transformers' linear
layers are exported: 64 -> 256 -> 16 features; graph outputs are joined
whole, so its output is kept small).  Their smallest budgets were 29%, 33% and 26% of
the in-core tensor peak: a LeNet band's convolution held workspace for 128
columns where the band had 64, the Concat that joined a Gemm's bands (or
its weight's blocks) back held the whole activation and its parts, and a
ConvTranspose could not be cut in rows.  For each model:
  - the in-core outputs (2 threads) are the reference; the in-core tensor
    peak comes from --stats-json, as bench_ooc_targets.py takes it;
  - the smallest budget --plan names (given a budget of a quarter of the
    peak) is at most a quarter of the peak;
  - runs at a quarter of the peak, with 1 and 2 threads, stay within the
    budget (tensor peak) and give the in-core outputs bitwise;
  - the MatMul model's output matches float64 numpy.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

FAILS = []
PASSED = [0]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if ok:
        PASSED[0] += 1
    else:
        FAILS.append(what)
    return ok


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def matmul_model(path, xin, rng):
    import onnx
    from onnx import TensorProto, helper, numpy_helper as nh
    w1 = (rng.standard_normal((64, 256)) * 0.1).astype(np.float32)
    b1 = (rng.standard_normal(256) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((256, 16)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 32, 16])],
                          [nh.from_array(w1, "w1"), nh.from_array(b1, "b1"), nh.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    x = rng.standard_normal((16, 32, 64)).astype(np.float32)
    np.save(xin, x)
    x64 = x.astype(np.float64)
    return np.maximum(x64 @ w1 + b1, 0) @ w2.astype(np.float64)


def unet2d_model(path, xin, rng):
    """A 2-D U-Net as bench/make_bench_models.py exports one (Conv + BN +
    Relu blocks, max pooling, ConvTranspose up-sampling, skip Concats), at
    64x64 and a batch of 2: its 3x3 convolutions run the KxK path, whose
    row cuts the band pass took from the shift path it replaced, which folds
    the batch into its tiles: no row cut, so it needed a third of its peak."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper as nh
    inits, nodes = [], []

    def arr(name, a):
        inits.append(nh.from_array(a.astype(np.float32), name))
        return name

    def block(x, cin, cout, name):
        for i in (1, 2):
            c = cin if i == 1 else cout
            w = arr(name + "w%d" % i, rng.standard_normal((cout, c, 3, 3)) * (2.0 / (9 * c)) ** 0.5)
            b = arr(name + "b%d" % i, rng.standard_normal(cout) * 0.1)
            nodes.append(helper.make_node("Conv", [x, w, b], [name + "c%d" % i], pads=[1, 1, 1, 1]))
            bn = [arr(name + "n%d%s" % (i, k), v) for k, v in (("s", 1 + rng.standard_normal(cout) * 0.1),
                                                                 ("b", rng.standard_normal(cout) * 0.1),
                                                                 ("m", rng.standard_normal(cout) * 0.1),
                                                                 ("v", 1 + rng.random(cout)))]
            nodes.append(helper.make_node("BatchNormalization", [name + "c%d" % i] + bn, [name + "n%d" % i]))
            nodes.append(helper.make_node("Relu", [name + "n%d" % i], [name + "r%d" % i]))
            x = name + "r%d" % i
        return x

    def up(x, cin, cout, name):
        w = arr(name + "w", rng.standard_normal((cin, cout, 2, 2)) * 0.1)
        b = arr(name + "b", rng.standard_normal(cout) * 0.1)
        nodes.append(helper.make_node("ConvTranspose", [x, w, b], [name], kernel_shape=[2, 2], strides=[2, 2]))
        return name

    e0 = block("x", 3, 16, "e0")
    nodes.append(helper.make_node("MaxPool", [e0], ["p0"], kernel_shape=[2, 2], strides=[2, 2]))
    e1 = block("p0", 16, 32, "e1")
    nodes.append(helper.make_node("MaxPool", [e1], ["p1"], kernel_shape=[2, 2], strides=[2, 2]))
    m = block("p1", 32, 64, "m")
    nodes.append(helper.make_node("Concat", [up(m, 64, 32, "u1"), e1], ["k1"], axis=1))
    d1 = block("k1", 64, 32, "d1")
    nodes.append(helper.make_node("Concat", [up(d1, 32, 16, "u0"), e0], ["k0"], axis=1))
    d0 = block("k0", 32, 16, "d0")
    nodes.append(helper.make_node("Conv", [d0, arr("ow", rng.standard_normal((2, 16, 1, 1)) * 0.2),
                                           arr("ob", rng.standard_normal(2) * 0.1)], ["y"]))
    g = helper.make_graph(nodes, "unet2d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2, 64, 64])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    np.save(xin, rng.standard_normal((2, 3, 64, 64)).astype(np.float32))


def infer(exe, tmp, name, model, xname, xin, tag, budget=None, threads=2):
    st = os.path.join(tmp, "%s_%s.json" % (name, tag))
    od = os.path.join(tmp, "%s_%s" % (name, tag))
    args = [model, "--input", "%s=%s" % (xname, xin), "--output-dir", od, "--stats-json", st,
            "--threads", str(threads), "--quiet"]
    rc, _, err = run(exe, args + (["--budget", str(budget)] if budget else []))
    if rc != 0:
        return None, None, err.strip()[-400:]
    outs = {f: np.load(os.path.join(od, f)) for f in sorted(os.listdir(od))}
    with open(st) as f:
        return outs, json.load(f), ""


def smallest(exe, model, xname, xin, budget):
    rc, out, err = run(exe, [model, "--input", "%s=%s" % (xname, xin), "--budget", str(budget), "--plan"])
    m = re.search(r"smallest budget\s.*?= (\d+) bytes", out) or re.search(r"smallest budget that works is (\d+)", err)
    return int(m.group(1)) if m else None


def check_model(exe, tmp, name, model, xname, xin, ref=None):
    base, s, err = infer(exe, tmp, name, model, xname, xin, "incore")
    if not check(base is not None, "%s in core runs %s" % (name, err)):
        return
    if ref is not None:
        y = next(iter(base.values())).astype(np.float64)
        e = float(np.max(np.abs(y - ref)))
        check(e <= 1e-4 * max(1.0, float(np.max(np.abs(ref)))), "%s in core matches float64 numpy (%.1e)" % (name, e))
    peak = s["tensor_peak_bytes"]
    q = peak // 4
    low = smallest(exe, model, xname, xin, q)
    check(low is not None and low <= q, "%s: --plan's smallest budget %s B <= a quarter of the in-core peak %d B "
          "(%.1f%%)" % (name, low, peak, 100.0 * (low or 0) / peak))
    for threads in (2, 1):
        outs, st, err = infer(exe, tmp, name, model, xname, xin, "q_t%d" % threads, q, threads)
        what = "%s at %d B (25%% of %d), %d thread(s)" % (name, q, peak, threads)
        if not check(outs is not None, what + ": runs " + err):
            continue
        check(st["tensor_peak_bytes"] <= q, what + ": tensor peak %d B within the budget" % st["tensor_peak_bytes"])
        same = outs.keys() == base.keys() and all(np.array_equal(outs[k], base[k]) for k in base)
        check(same, what + ": outputs bitwise the in-core ones")


def main():
    exe, models, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(tmp, exist_ok=True)
    for name, xname in (("lenet", "input"), ("mlp", "input"), ("unet3d_tiny", "input")):
        d = os.path.join(models, name)
        check_model(exe, tmp, name, os.path.join(d, "model.onnx"), xname, os.path.join(d, "infer_x.npy"))
    path, xin = os.path.join(tmp, "matmul.onnx"), os.path.join(tmp, "matmul_x.npy")
    ref = matmul_model(path, xin, np.random.default_rng(7))
    check_model(exe, tmp, "matmul", path, "x", xin, ref)
    path, xin = os.path.join(tmp, "unet2d.onnx"), os.path.join(tmp, "unet2d_x.npy")
    unet2d_model(path, xin, np.random.default_rng(5))
    check_model(exe, tmp, "unet2d", path, "x", xin)
    print("%d passed, %d failed" % (PASSED[0], len(FAILS)))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

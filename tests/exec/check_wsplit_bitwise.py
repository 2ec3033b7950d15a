#!/usr/bin/env python3
"""Inference with Gemm/MatMul/Conv weights cut into blocks (exec/split_weight.c)
is bitwise the in-core inference, at every budget down to the smallest.

usage: check_wsplit_bitwise.py HPDLF_EXEC MLP_DIR

Models (built here with numpy/onnx, plus the mlp reference model):
  feature   Gemm transB=1 + bias layers (cut along output features)
  reduce    Gemm transB=0 with alpha/beta != 1, and transA=1 behind a
            Transpose (cut along the reduction: chained partial sums)
  matmul    MatMul of a rank-3 activation, bias Add (reduction cut,
            MatMulAcc blocks)
  shared    two Gemm transB=1 whose biases are one initializer, the second
            through an Identity (as the PyTorch exporter writes equal
            parameters: torchvision's VGG); the shared bias is copied per block
  conv      Conv 3x3 (bias, Relu), 1x1, 3x3 stride 2 dilation 2 with
            uneven pads and no bias, a 1000-channel 1x1 classifier, batch
            2 (cut along output channels, outputs concatenated)
  conv3d    Conv 3x3x3 and 1x1x1 on a 4x4x4 volume (the dot path; 3-D
            convs of more positions run sgemm and stay whole)
For each: the in-core outputs with 1 and 2 threads must be bitwise equal;
the smallest budget that runs is found by bisection; at 50% and 25% of the
in-core peak (when runnable) and at the smallest budget, the run must
partition weights, stay within the budget and give the in-core outputs
bitwise (and numpy's within 1e-4).  The mlp's smallest budget must be at
most 25% of its in-core peak (it was 34%: the Concat of a 64x256
activation beside the staging buffers, until Gemm was cut in batch rows).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

FAILS = []
PASSED = [0]
KIB = 1024


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if ok:
        PASSED[0] += 1
    else:
        FAILS.append(what)
    return ok


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stderr


# ---- models ----------------------------------------------------------------

def save(path, nodes, inits, xshape, yshape, out="y"):
    import onnx
    from onnx import TensorProto, helper
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, yshape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="check_wsplit_bitwise")
    onnx.checker.check_model(m)
    onnx.save(m, path)


def arr(rng, shape, scale):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def model_feature(path, rng):
    from onnx import helper, numpy_helper as nh
    w1, b1 = arr(rng, (1024, 384), 0.05), arr(rng, (1024,), 0.1)
    w2, b2 = arr(rng, (500, 1024), 0.03), arr(rng, (500,), 0.1)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    inits = [nh.from_array(v, n) for n, v in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))]
    save(path, nodes, inits, [48, 384], [48, 500])
    f64 = lambda a: a.astype(np.float64)
    return lambda x: f64(np.maximum(f64(x) @ f64(w1).T + b1, 0)) @ f64(w2).T + b2


def model_shared(path, rng):
    from onnx import helper, numpy_helper as nh
    w1, w2, b = arr(rng, (1024, 256), 0.05), arr(rng, (1024, 1024), 0.03), arr(rng, (1024,), 0.1)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Identity", ["b"], ["b2"]), helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    inits = [nh.from_array(v, n) for n, v in (("w1", w1), ("w2", w2), ("b", b))]
    save(path, nodes, inits, [32, 256], [32, 1024])
    f64 = lambda a: a.astype(np.float64)
    return lambda x: f64(np.maximum(f64(x) @ f64(w1).T + b, 0)) @ f64(w2).T + b


def model_reduce(path, rng):
    from onnx import helper, numpy_helper as nh
    w1, b1 = arr(rng, (640, 896), 0.04), arr(rng, (896,), 0.1)
    w2, c2 = arr(rng, (896, 300), 0.03), arr(rng, (1, 300), 0.1)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], alpha=0.5, beta=2.0),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Transpose", ["r"], ["rt"], perm=[1, 0]),
             helper.make_node("Gemm", ["rt", "w2", "c2"], ["y"], transA=1, alpha=1.5, beta=0.25)]
    inits = [nh.from_array(v, n) for n, v in (("w1", w1), ("b1", b1), ("w2", w2), ("c2", c2))]
    save(path, nodes, inits, [40, 640], [40, 300])
    f64 = lambda a: a.astype(np.float64)
    return lambda x: 1.5 * (np.maximum(0.5 * (f64(x) @ f64(w1)) + 2.0 * b1, 0) @ f64(w2)) + 0.25 * c2


def model_matmul(path, rng):
    from onnx import helper, numpy_helper as nh
    w1, w2, b2 = arr(rng, (512, 1024), 0.04), arr(rng, (1024, 200), 0.03), arr(rng, (200,), 0.1)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["z"]), helper.make_node("Add", ["z", "b2"], ["y"])]
    inits = [nh.from_array(v, n) for n, v in (("w1", w1), ("w2", w2), ("b2", b2))]
    save(path, nodes, inits, [2, 20, 512], [2, 20, 200])
    f64 = lambda a: a.astype(np.float64)
    return lambda x: np.maximum(f64(x) @ f64(w1), 0) @ f64(w2) + b2


def conv_f64(x, w, b=None, stride=1, dil=1, pads=None):
    """float64 convolution, N C spatial..., group 1; pads (begins, ends)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    nd = x.ndim - 2
    pads = pads or ([0] * nd, [0] * nd)
    x = np.pad(x, [(0, 0), (0, 0)] + [(pads[0][i], pads[1][i]) for i in range(nd)])
    k = w.shape[2:]
    span = [dil * (k[i] - 1) + 1 for i in range(nd)]
    win = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(2, 2 + nd)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, stride) for _ in range(nd)) +
              tuple(slice(None, None, dil) for _ in range(nd))]
    axes = tuple(range(2 + nd, 2 + 2 * nd))
    y = np.tensordot(win, w, axes=((1,) + axes, (1,) + tuple(range(2, 2 + nd))))  # N spatial... Cout
    y = np.moveaxis(y, -1, 1)
    if b is not None:
        y = y + b.astype(np.float64).reshape((1, -1) + (1,) * nd)
    return y


def model_conv(path, rng):
    from onnx import helper, numpy_helper as nh
    w1, b1 = arr(rng, (192, 64, 3, 3), 0.05), arr(rng, (192,), 0.1)
    w2, b2 = arr(rng, (480, 192, 1, 1), 0.07), arr(rng, (480,), 0.1)
    w3 = arr(rng, (144, 480, 3, 3), 0.02)
    w4, b4 = arr(rng, (1000, 144, 1, 1), 0.08), arr(rng, (1000,), 0.1)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["h2"]), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["h3"], strides=[2, 2], dilations=[2, 2], pads=[2, 1, 1, 2]),
             helper.make_node("Conv", ["h3", "w4", "b4"], ["y"])]
    inits = [nh.from_array(v, n) for n, v in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2), ("w3", w3),
                                              ("w4", w4), ("b4", b4))]
    save(path, nodes, inits, [2, 64, 15, 15], [2, 1000, 7, 7])
    relu = lambda a: np.maximum(a, 0)

    def ref(x):
        r1 = relu(conv_f64(x, w1, b1, pads=([1, 1], [1, 1])))
        r2 = relu(conv_f64(r1, w2, b2))
        return conv_f64(conv_f64(r2, w3, None, 2, 2, ([2, 1], [1, 2])), w4, b4)
    return ref


def model_conv3d(path, rng):
    from onnx import helper, numpy_helper as nh
    w1, b1 = arr(rng, (144, 24, 3, 3, 3), 0.04), arr(rng, (144,), 0.1)
    w2 = arr(rng, (240, 144, 1, 1, 1), 0.08)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h1"], pads=[1, 1, 1, 1, 1, 1]),
             helper.make_node("Relu", ["h1"], ["r1"]), helper.make_node("Conv", ["r1", "w2"], ["y"])]
    inits = [nh.from_array(v, n) for n, v in (("w1", w1), ("b1", b1), ("w2", w2))]
    save(path, nodes, inits, [1, 24, 4, 4, 4], [1, 240, 4, 4, 4])
    return lambda x: conv_f64(np.maximum(conv_f64(x, w1, b1, pads=([1] * 3, [1] * 3)), 0), w2)


# ---- runs ------------------------------------------------------------------

class Model:
    def __init__(self, exe, tmp, name, onnx_path, xin, xname, yname, ref=None):
        self.exe, self.tmp, self.name, self.path = exe, tmp, name, onnx_path
        self.xin, self.xname, self.yname, self.ref = xin, xname, yname, ref

    def infer(self, tag, budget=None, threads=2):
        out, st = (os.path.join(self.tmp, "%s_%s.%s" % (self.name, tag, e)) for e in ("npy", "json"))
        args = [self.path, "--input", "%s=%s" % (self.xname, self.xin), "--output", "%s=%s" % (self.yname, out),
                "--stats-json", st, "--threads", str(threads), "--quiet"]
        rc, err = run(self.exe, args + (["--budget", str(budget)] if budget else []))
        if rc != 0:
            return None, None, err.strip()[-300:]
        with open(st) as f:
            return np.load(out), json.load(f), ""

    def smallest(self, hi):
        """The smallest runnable budget (4 KiB steps), by bisection below hi."""
        lo = 16 * KIB
        if self.infer("probe", lo)[0] is not None:
            return lo
        while hi - lo > 4 * KIB:
            mid = (lo + hi) // 2 // (4 * KIB) * (4 * KIB)
            if self.infer("probe", mid)[0] is not None:
                hi = mid
            else:
                lo = mid
        return hi


def check_model(m, max_min_frac=None):
    y2, s2, err = m.infer("in_t2")
    y1, _, err1 = m.infer("in_t1", threads=1)
    if not check(y2 is not None and y1 is not None, "%s in core: %s" % (m.name, err + err1)):
        return
    check(np.array_equal(y1, y2), "%s in core: 1 and 2 threads bitwise equal" % m.name)
    if m.ref is not None:
        x = np.load(m.xin)
        e = float(np.max(np.abs(y2 - m.ref(x))))
        check(e <= 1e-4 * max(1.0, float(np.max(np.abs(m.ref(x))))), "%s in core matches numpy (%.1e)" % (m.name, e))
    peak = s2["tensor_peak_bytes"]
    low = m.smallest(peak)
    print("     %s: in-core peak %d KiB, smallest budget %d KiB (%.0f%%)" % (m.name, peak // KIB, low // KIB,
                                                                          100.0 * low / peak), flush=True)
    if max_min_frac:
        check(low <= max_min_frac * peak, "%s: smallest budget %d B <= %.0f%% of the in-core peak %d B"
              % (m.name, low, 100 * max_min_frac, peak))
    budgets = sorted({b for b in (peak // 2, peak // 4) if b >= low} | {low}, reverse=True)
    for b in budgets:
        for threads in ((2, 1) if b == low else (2,)):
            y, s, err = m.infer("b%d_t%d" % (b, threads), b, threads)
            what = "%s at %d B (%.0f%% of in core), %d thread(s)" % (m.name, b, 100.0 * b / peak, threads)
            if not check(y is not None, what + ": runs " + err):
                continue
            check(s.get("partitioned_weights", 0) > 0 and s["tensor_peak_bytes"] <= b,
                  what + ": %d weights partitioned, tensor peak %d B" % (s.get("partitioned_weights", 0),
                                                                       s["tensor_peak_bytes"]))
            diff = int(np.sum(y != y2)) if y.shape == y2.shape else -1
            check(diff == 0, what + ": bitwise the in-core outputs (%d of %d differ)" % (diff, y2.size))


def main():
    exe, mlp = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, xshape in (("feature", model_feature, (48, 384)), ("shared", model_shared, (32, 256)),
                                   ("reduce", model_reduce, (40, 640)),
                                   ("matmul", model_matmul, (2, 20, 512)), ("conv", model_conv, (2, 64, 15, 15)),
                                   ("conv3d", model_conv3d, (1, 24, 4, 4, 4))):
            path, xin = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + "_x.npy")
            ref = make(path, rng)
            np.save(xin, rng.standard_normal(xshape).astype(np.float32))
            check_model(Model(exe, tmp, name, path, xin, "x", "y", ref))
        check_model(Model(exe, tmp, "mlp", os.path.join(mlp, "model.onnx"), os.path.join(mlp, "infer_x.npy"),
                          "input", "logits"), max_min_frac=0.25)
    print("%d passed, %d failed" % (PASSED[0], len(FAILS)))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Out-of-core training is bitwise the in-core one in its weights, not only
its losses.

Under a budget the forward graph is cut into bands (split_band.c) before
autodiff, so every band has its own weight and bias gradient; they are
chained so that they sum in the whole kernel's order (conv_grad.c,
autodiff.c chain()).  A loss can round alike while a weight differs by an
ulp, so this compares the exported ONNX initializers byte for byte:

  - a 2-D conv net, batch 16 (bands of batch items): Conv with bias,
    1x1 Conv, depthwise Conv, ConvTranspose, strided Conv; and one of
    depthwise 5x5 and 7x7 (stride 2) windows, batch 8 and, in rows, 1;
    and one of depthwise 3x3 and 5x5 windows on rows of 100 and 50
    outputs (conv_dwp_grad.c's lanes), batch 2 and, in rows, 1;
  - the shipped LeNet with its data (batch 64);
  - a batch of one, cut into rows of the outermost spatial axis: the 2-D
    net at 24x24 and the shipped 3-D U-Net (unet3d_tiny).  A band's data
    gradient is the whole kernel's rows for the input rows it owns, from
    the dY rows of every band they need (split_grad.c), so halo rows add
    zeros instead of two partial sums; and a net of overlapping MaxPool and
    AveragePool windows at batch 1 (their gradients cut the same way, with
    the X rows under every window of the dY rows taken), and one of pooling
    with ceil_mode, whose last windows reach past the rows;

each trained 3 SGD steps with momentum in core and at the smallest budget
the planner names and at a budget between, with 1 and 2 threads (the
in-core run of the same thread count is the reference).  Each budgeted run
must really be cut: its plan has more kernels than the in-core plan.
Those small steps round an ulp of gradient away (w - 0.01 g keeps few of
g's bits), so each model also takes one step at --lr 1e6 without momentum
at the smallest budget, 2 threads: its weights then carry the gradients'
bits (the tiny U-Net's up-sampling gradient once took another kernel path
in bands of one item, an ulp off, which only Adam's weights showed).

usage: check_band_weights.py HPDLF_EXEC LENET_DIR UNET3D_TINY_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)
    return ok


def init(name, shape, rng, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def conv(name, x, w, b, y, **attrs):
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [y], name=name, **attrs)


def net2d(path, rng, batch=16, side=12):
    """x [batch,3,side,side] -> Conv 3x3 (8) -> Relu -> Conv 1x1 -> Relu -> depthwise 3x3 -> Relu ->
    ConvTranspose k2 s2 (4) -> Relu -> Conv 3x3 stride 2 (2)."""
    nodes = [conv("c1", "x", "w1", "b1", "a1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r0"]),
             conv("pw", "r0", "w5", "b5", "a5", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a5"], ["r1"]),
             conv("dw", "r1", "w2", "b2", "a2", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8),
             helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("ConvTranspose", ["r2", "w3", "b3"], ["a3"], name="up", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Relu", ["a3"], ["r3"]),
             conv("c4", "r3", "w4", "b4", "y", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])]
    inits = [init("w1", (8, 3, 3, 3), rng), init("b1", (8,), rng), init("w2", (8, 1, 3, 3), rng),
             init("b2", (8,), rng), init("w3", (8, 4, 2, 2), rng), init("b3", (4,), rng),
             init("w4", (2, 4, 3, 3), rng), init("b4", (2,), rng), init("w5", (8, 8, 1, 1), rng),
             init("b5", (8,), rng)]
    xs, ys = [batch, 3, side, side], [batch, 2, side, side]
    save(path, nodes, inits, xs, ys)
    return xs, ys


def net2d_rows(path, rng):
    return net2d(path, rng, 1, 48)


def dwk(path, rng, batch=8, side=12):
    """x [batch,3,side,side] -> Conv 3x3 (24) -> Relu -> depthwise 5x5 pad 2 -> Relu -> depthwise 7x7
    stride 2 pad 3 -> Relu -> Conv 1x1 (2): the 5x5 and 7x7 depthwise weight gradients
    (conv_dwk_grad.c: blocks of 16 channels, so one whole and one partial)."""
    nodes = [conv("c1", "x", "w1", "b1", "a1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             conv("dw5", "r1", "w2", "b2", "a2", kernel_shape=[5, 5], pads=[2, 2, 2, 2], group=24),
             helper.make_node("Relu", ["a2"], ["r2"]),
             conv("dw7", "r2", "w3", "b3", "a3", kernel_shape=[7, 7], pads=[3, 3, 3, 3], strides=[2, 2], group=24),
             helper.make_node("Relu", ["a3"], ["r3"]),
             conv("pw", "r3", "w4", "b4", "y", kernel_shape=[1, 1])]
    inits = [init("w1", (24, 3, 3, 3), rng), init("b1", (24,), rng), init("w2", (24, 1, 5, 5), rng),
             init("b2", (24,), rng), init("w3", (24, 1, 7, 7), rng), init("b3", (24,), rng),
             init("w4", (2, 24, 1, 1), rng), init("b4", (2,), rng)]
    xs, ys = [batch, 3, side, side], [batch, 2, side // 2, side // 2]
    save(path, nodes, inits, xs, ys)
    return xs, ys


def dwk_rows(path, rng):
    return dwk(path, rng, 1, 40)


def dwp(path, rng, batch=2, side=100):
    """x [batch,3,side,side] -> Conv 3x3 (16) -> Relu -> depthwise 3x3 -> Relu -> depthwise 3x3 stride 2
    -> Relu -> depthwise 5x5 pad 2 -> Relu -> Conv 1x1 (2): depthwise weight gradients of rows of 100
    and 50 outputs, which take sixteen positions of a row in the lanes (conv_dwp_grad.c), with units
    of an item (batch bands) and, in rows, of a row."""
    nodes = [conv("c1", "x", "w1", "b1", "a1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             conv("dw", "r1", "w2", "b2", "a2", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16),
             helper.make_node("Relu", ["a2"], ["r2"]),
             conv("ds", "r2", "w3", "b3", "a3", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=16),
             helper.make_node("Relu", ["a3"], ["r3"]),
             conv("dw5", "r3", "w4", "b4", "a4", kernel_shape=[5, 5], pads=[2, 2, 2, 2], group=16),
             helper.make_node("Relu", ["a4"], ["r4"]),
             conv("pw", "r4", "w5", "b5", "y", kernel_shape=[1, 1])]
    inits = [init("w1", (16, 3, 3, 3), rng), init("b1", (16,), rng), init("w2", (16, 1, 3, 3), rng),
             init("b2", (16,), rng), init("w3", (16, 1, 3, 3), rng), init("b3", (16,), rng),
             init("w4", (16, 1, 5, 5), rng), init("b4", (16,), rng),
             init("w5", (2, 16, 1, 1), rng), init("b5", (2,), rng)]
    xs, ys = [batch, 3, side, side], [batch, 2, side // 2, side // 2]
    save(path, nodes, inits, xs, ys)
    return xs, ys


def dwp_rows(path, rng):
    return dwp(path, rng, 1, 100)


def pool_rows(path, rng):
    """x [1,3,64,64] -> Conv 3x3 -> Relu -> MaxPool 3x3 stride 2 pad 1 -> Conv 3x3 -> Relu ->
    AveragePool 3x3 stride 2 pad 1 (pads counted) -> Conv 3x3: overlapping pooling windows."""
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    nodes = [conv("c1", "x", "w1", "b1", "a1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], **pool),
             conv("c2", "p1", "w2", "b2", "a2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("AveragePool", ["r2"], ["p2"], count_include_pad=1, **pool),
             conv("c3", "p2", "w3", "b3", "y", kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits = [init("w1", (8, 3, 3, 3), rng), init("b1", (8,), rng), init("w2", (8, 8, 3, 3), rng),
             init("b2", (8,), rng), init("w3", (2, 8, 3, 3), rng), init("b3", (2,), rng)]
    xs, ys = [1, 3, 64, 64], [1, 2, 16, 16]
    save(path, nodes, inits, xs, ys)
    return xs, ys


def pool_ceil(path, rng):
    """x [1,3,62,62] -> Conv 3x3 -> Relu -> MaxPool 3x3 stride 2, ceil_mode (31 rows, not 30) ->
    Conv 3x3 -> Relu -> AveragePool 2x2 stride 2, ceil_mode, pads not counted (16 rows, not 15) ->
    Conv 3x3: the last windows reach past the rows, which bands must ignore as the whole node does."""
    nodes = [conv("c1", "x", "w1", "b1", "a1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
             conv("c2", "p1", "w2", "b2", "a2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("AveragePool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                              count_include_pad=0),
             conv("c3", "p2", "w3", "b3", "y", kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits = [init("w1", (8, 3, 3, 3), rng), init("b1", (8,), rng), init("w2", (8, 8, 3, 3), rng),
             init("b2", (8,), rng), init("w3", (2, 8, 3, 3), rng), init("b3", (2,), rng)]
    xs, ys = [1, 3, 62, 62], [1, 2, 16, 16]
    save(path, nodes, inits, xs, ys)
    return xs, ys


def save(path, nodes, inits, xs, ys):
    g = helper.make_graph(nodes, "bands", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def weights(path):
    return {i.name: numpy_helper.to_array(i).tobytes() for i in onnx.load(path).graph.initializer}


def kernels(exe, args):
    rc, out, err = run(exe, args + ["--plan"])
    m = re.search(r"\(one training step\): (\d+) kernels", out + err)
    return int(m.group(1)) if rc == 0 and m else -1


def grad_bits(exe, name, args, low, tmp):
    """One step at lr 1e6, no momentum: in core and at `low`, 2 threads."""
    a = list(args)
    for flag, value in (("--lr", "1e6"), ("--momentum", "0"), ("--steps", "1")):
        a[a.index(flag) + 1] = value
    got = []
    for budget in (None, low):
        out = os.path.join(tmp, "%s_g_%s.onnx" % (name, budget))
        rc, _, err = run(exe, a + ["--threads", "2", "--export-onnx", out] + (["--budget", str(budget)] if budget else []))
        if not check(rc == 0, "%s, one step at lr 1e6%s: exit %d %s"
                     % (name, " at %d B" % budget if budget else " in core", rc, err.strip()[-300:])):
            return
        got.append(weights(out))
    differ = sorted(k for k in got[0] if got[1].get(k) != got[0][k])
    check(len(got[0]) > 0 and not differ, "%s at %d B: every gradient bitwise the in-core one (one step at lr 1e6)%s"
          % (name, low, " (differ: %s)" % differ[:4] if differ else ""))


def check_model(exe, name, args, tmp):
    probe = run(exe, args + ["--threads", "1", "--budget", "4096", "--steps", "1"])[2]
    m = re.search(r"smallest budget that works is (\d+) bytes", probe)
    if not check(m is not None, "%s: the planner names a smallest budget (%s)" % (name, probe.strip()[-200:])):
        return
    low = int(m.group(1))
    grad_bits(exe, name, args, low, tmp)
    whole = kernels(exe, args + ["--threads", "1"])
    for threads in ("1", "2"):
        ref = os.path.join(tmp, "%s_in_%s.onnx" % (name, threads))
        rc, _, err = run(exe, args + ["--threads", threads, "--export-onnx", ref])
        if not check(rc == 0, "%s in core, %s threads: exit %d %s" % (name, threads, rc, err.strip()[-300:])):
            continue
        want = weights(ref)
        # the smallest budget and one a little above it: half again above
        # it, pool_rows (a 3-channel stem whose convolution needs little
        # workspace) fits whole and swaps, which tests no bands
        for budget in (low, low + low // 16):
            out = os.path.join(tmp, "%s_%d_%s.onnx" % (name, budget, threads))
            a = args + ["--threads", threads, "--budget", str(budget)]
            cut = kernels(exe, a)
            rc, _, err = run(exe, a + ["--export-onnx", out])
            what = "%s at %d B, %s threads (%d kernels, %d in core)" % (name, budget, threads, cut, whole)
            if not check(rc == 0 and cut > whole, "%s: runs cut into bands: exit %d %s"
                         % (what, rc, err.strip()[-300:])):
                continue
            if name == "pool_ceil":  # the ceil_mode pools themselves cut, not only the convolutions
                dot = os.path.join(tmp, "%s_%d_%s.dot" % (name, budget, threads))
                run(exe, a + ["--plan-dot", dot])
                text = open(dot).read() if os.path.exists(dot) else ""
                npool = [len(re.findall(r'label="\d+: %s ' % op, text)) for op in ("MaxPool", "AveragePool")]
                check(min(npool) >= 2, "%s: MaxPool and AveragePool in bands (%d and %d kernels)"
                      % (what, npool[0], npool[1]))
            got = weights(out)
            differ = sorted(k for k in want if got.get(k) != want[k])
            check(len(want) > 0 and not differ, "%s: %d exported tensors bitwise the in-core ones%s"
                  % (what, len(want), " (differ: %s)" % differ if differ else ""))


def main():
    exe, lenet, unet = sys.argv[1], sys.argv[2], sys.argv[3]
    rng = np.random.default_rng(7)
    common = ["--train", "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9", "--steps", "3",
              "--no-shuffle", "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, batch in (("net2d", net2d, 16), ("net2d_rows", net2d_rows, 1),
                                  ("pool_rows", pool_rows, 1), ("pool_ceil", pool_ceil, 1),
                                  ("dwk", dwk, 8), ("dwk_rows", dwk_rows, 1),
                                  ("dwp", dwp, 2), ("dwp_rows", dwp_rows, 1)):
            path = os.path.join(tmp, name + ".onnx")
            xs, ys = make(path, rng)
            x, y = (os.path.join(tmp, name + s) for s in ("_x.npy", "_y.npy"))
            np.save(x, rng.standard_normal([3 * batch] + xs[1:]).astype(np.float32))
            np.save(y, rng.standard_normal([3 * batch] + ys[1:]).astype(np.float32))
            check_model(exe, name, [path, "--data", x, "--labels", y, "--loss", "mse", "--batch", str(batch)]
                        + common, tmp)
        check_model(exe, "lenet", [os.path.join(lenet, "model.onnx"), "--data", os.path.join(lenet, "x.npy"),
                                   "--labels", os.path.join(lenet, "y.npy"), "--loss", "cross-entropy",
                                   "--batch", "64"] + common, tmp)
        check_model(exe, "unet3d_tiny", [os.path.join(unet, "model.onnx"), "--data", os.path.join(unet, "x.npy"),
                                         "--labels", os.path.join(unet, "y.npy"), "--loss", "cross-entropy",
                                         "--batch", "1"] + common, tmp)
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Training through unrolled control flow, against PyTorch.

usage: check_loop_train.py HPDLF_EXEC

A model written here with python3-onnx: x[N, 4] -> Loop whose trip count is
Shape(x)[1] - 1 (3; known only at shape inference, so the Loop is folded
there: onnx/control_defer.c) carrying y = x, body y <- Tanh(y W) + If(true:
y B, else: y) reading the outer weights W and B -> y W2.  hpdlf-exec --train
(--loss mse, SGD with momentum, then Adam, 8 steps on the whole set) must
give PyTorch's float64 losses of the same unrolled computation within 1e-5
relative, so every unrolled copy's gradient reaches the shared weights.
Exit 1 on a mismatch, 77 without PyTorch.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper

try:
    import torch
except ImportError:
    print("PyTorch is not installed: skipped")
    sys.exit(77)

N, D, STEPS = 8, 4, 8
F = T.FLOAT


def vi(name, dtype=F, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr), name + "_t"))


def build(path, w, b, w2):
    then_b = helper.make_graph([helper.make_node("Mul", ["y_in", "B"], ["tb"])], "then", [], [vi("tb")])
    else_b = helper.make_graph([helper.make_node("Identity", ["y_in"], ["eb"])], "else", [], [vi("eb")])
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("MatMul", ["y_in", "W"], ["m"]), helper.make_node("Tanh", ["m"], ["t"]),
                              const("k", np.array(True)),
                              helper.make_node("If", ["k"], ["r"], then_branch=then_b, else_branch=else_b),
                              helper.make_node("Add", ["t", "r"], ["y_out"])], "body",
                             [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in")], [vi("c_out", T.BOOL, []), vi("y_out")])
    nodes = [helper.make_node("Shape", ["x"], ["sh"]), const("one", np.array(1, np.int64)),
             helper.make_node("Gather", ["sh", "one"], ["d1"]), helper.make_node("Sub", ["d1", "one"], ["M"]),
             const("C", np.array(True)), helper.make_node("Loop", ["M", "C", "x"], ["y"], name="loop", body=body),
             helper.make_node("MatMul", ["y", "W2"], ["out"])]
    g = helper.make_graph(nodes, "m", [vi("x", F, ["n", D])], [vi("out", F, ["n", 2])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"), numpy_helper.from_array(w2, "W2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)


def torch_losses(w, x, y, opt):
    ps = [torch.nn.Parameter(torch.from_numpy(a.astype(np.float64))) for a in w]
    o = torch.optim.SGD(ps, lr=0.05, momentum=0.9) if opt == "sgd" else torch.optim.Adam(ps, lr=0.01)
    xs, ys, out = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(y.astype(np.float64)), []
    for _ in range(STEPS):
        o.zero_grad()
        h = xs
        for _ in range(D - 1):
            h = torch.tanh(h @ ps[0]) + h * ps[1]
        loss = torch.nn.functional.mse_loss(h @ ps[2], ys)
        loss.backward()
        o.step()
        out.append(float(loss))
    return out


def main():
    exe, bad = sys.argv[1], 0
    torch.set_num_threads(1)
    rs = np.random.RandomState(3)
    w = [(rs.randn(D, D) * 0.5).astype(np.float32), (rs.randn(D) * 0.3).astype(np.float32),
         (rs.randn(D, 2) * 0.5).astype(np.float32)]
    x, y = rs.randn(N, D).astype(np.float32), rs.randn(N, 2).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path, log = os.path.join(tmp, "loop.onnx"), os.path.join(tmp, "log.json")
        build(path, *w)
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), y)
        for opt in ("sgd", "adam"):
            args = [exe, path, "--train", "--data", os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "y.npy"),
                    "--loss", "mse", "--optimizer", opt, "--lr", "0.05" if opt == "sgd" else "0.01", "--batch", str(N),
                    "--steps", str(STEPS), "--no-shuffle", "--quiet", "--threads", "1", "--log-json", log]
            p = subprocess.run(args + (["--momentum", "0.9"] if opt == "sgd" else []), capture_output=True, text=True,
                               timeout=300)
            if p.returncode != 0:
                print("FAIL %s: exit %d: %s" % (opt, p.returncode, p.stderr.strip()[-300:]))
                bad += 1
                continue
            with open(log) as f:
                got = [json.loads(line)["loss"] for line in f if line.strip()]
            ref = torch_losses(w, x, y, opt)
            rel = max(abs(a - b) / abs(b) for a, b in zip(got, ref)) if len(got) == STEPS else float("inf")
            ok = rel <= 1e-5
            bad += not ok
            print("%s loop %s: %d losses vs PyTorch float64, max rel err %.2e (%.4f -> %.4f)"
                  % ("ok  " if ok else "FAIL", opt, len(got), rel, ref[0], ref[-1]))
    print("loop-train: %d failed" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""float16 and bfloat16 weights train in float32 and export in their type.

usage: check_half_train.py HPDLF_EXEC

Models written here with python3-onnx: x -> Cast(half) -> MatMul(W1 half)
-> Add(B1 half) -> Tanh -> Cast(float) -> MatMul(W2 float32), once with
float16 and once with bfloat16 weights, and a float32 twin of each whose
initializers hold the half values widened.  Checks:
  - hpdlf-exec --train (SGD with momentum, then Adam) gives the twin's
    losses, and PyTorch's (float64, from the same widened weights) within
    1e-5 relative: the half weights are trained as float32 master weights;
  - the summary counts the half weights among the trained parameters;
  - --export-onnx writes W1 and B1 in their declared type, equal to the
    twin's trained float32 values rounded to that type, and the exported
    model passes onnx.checker and runs;
  - --freeze W1 leaves W1's bytes as they were.
Exit 1 on any failure, 77 when PyTorch is missing (for the reference).
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

FAILS = []
N, I, H, O, STEPS = 16, 4, 8, 2, 8


def to_bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    b = a.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def half_init(name, a, half):
    """(TensorProto in the half type, its values as float32)."""
    if half == "float16":
        h = a.astype(np.float16)
        return numpy_helper.from_array(h, name), h.astype(np.float32)
    bits = to_bf16_bits(a)
    t = helper.make_tensor(name, T.BFLOAT16, a.shape, bits.tobytes(), raw=True)
    return t, bf16_value(bits)


def models(tmp, half):
    rs = np.random.RandomState(5 if half == "float16" else 6)
    w1, w1v = half_init("W1", rs.randn(I, H).astype(np.float32) * 0.5, half)
    b1, b1v = half_init("B1", rs.randn(H).astype(np.float32) * 0.1, half)
    w2v = (rs.randn(H, O) * 0.5).astype(np.float32)
    ht = T.FLOAT16 if half == "float16" else T.BFLOAT16
    nodes = [helper.make_node("Cast", ["x"], ["xh"], to=ht), helper.make_node("MatMul", ["xh", "W1"], ["h"]),
             helper.make_node("Add", ["h", "B1"], ["hb"]), helper.make_node("Tanh", ["hb"], ["t"]),
             helper.make_node("Cast", ["t"], ["tf"], to=T.FLOAT), helper.make_node("MatMul", ["tf", "W2"], ["y"])]
    io = ([helper.make_tensor_value_info("x", T.FLOAT, ["n", I])], [helper.make_tensor_value_info("y", T.FLOAT, ["n", O])])
    paths = []
    twin = [helper.make_node("MatMul", ["x", "W1"], ["h"])] + nodes[2:4] + [helper.make_node("MatMul", ["t", "W2"], ["y"])]
    for kind, graph_nodes, inits in (("half", nodes, [w1, b1]),
                                     ("twin", twin, [numpy_helper.from_array(w1v, "W1"), numpy_helper.from_array(b1v, "B1")])):
        g = helper.make_graph(graph_nodes, "m", *io, inits + [numpy_helper.from_array(w2v, "W2")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        p = os.path.join(tmp, "%s_%s.onnx" % (half, kind))
        onnx.save(m, p)
        paths.append(p)
    return paths, (w1v, b1v, w2v)


def torch_losses(w, x, y, opt):
    ps = [torch.nn.Parameter(torch.from_numpy(a.astype(np.float64))) for a in w]
    o = torch.optim.SGD(ps, lr=0.05, momentum=0.9) if opt == "sgd" else torch.optim.Adam(ps, lr=0.01)
    xs, ys, out = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(y.astype(np.float64)), []
    for _ in range(STEPS):
        o.zero_grad()
        loss = torch.nn.functional.mse_loss(torch.tanh(xs @ ps[0] + ps[1]) @ ps[2], ys)
        loss.backward()
        o.step()
        out.append(float(loss))
    return out


def train(exe, tmp, model, opt, extra=()):
    log, out = os.path.join(tmp, "log.json"), os.path.join(tmp, "out_" + os.path.basename(model))
    args = [exe, model, "--train", "--data", os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "y.npy"),
            "--loss", "mse", "--optimizer", opt, "--lr", "0.05" if opt == "sgd" else "0.01", "--batch", str(N),
            "--steps", str(STEPS), "--no-shuffle", "--threads", "1", "--log-json", log, "--export-onnx", out]
    args += ["--momentum", "0.9"] if opt == "sgd" else []
    p = subprocess.run(args + list(extra), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        FAILS.append("%s %s: exit %d: %s" % (os.path.basename(model), opt, p.returncode, p.stderr.strip()[-300:]))
        return None, None, p.stderr
    with open(log) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()], out, p.stderr


def inits(path):
    return {i.name: i for i in onnx.load(path).graph.initializer}


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)


def check_export(half, got, want):
    ht = T.FLOAT16 if half == "float16" else T.BFLOAT16
    for name in ("W1", "B1"):
        t, w = got[name], numpy_helper.to_array(want[name]).astype(np.float32)
        if t.data_type != ht:
            check(False, "%s: exported %s has type %d, expected %d" % (half, name, t.data_type, ht))
            continue
        have = numpy_helper.to_array(t)
        have = have.astype(np.float32) if half == "float16" else bf16_value(np.frombuffer(t.raw_data, np.uint16))
        ref = w.astype(np.float16).astype(np.float32) if half == "float16" else bf16_value(to_bf16_bits(w))
        check(np.array_equal(have.ravel(), ref.ravel()),
              "%s: exported %s in its type equals the float32 twin's trained values rounded to it" % (half, name))


def run_half(exe, tmp, half, x, y):
    (hm, tm), w = models(tmp, half)
    for opt in ("sgd", "adam"):
        got, out, err = train(exe, tmp, hm, opt)
        twin, tout, _ = train(exe, tmp, tm, opt)
        if got is None or twin is None:
            continue
        ref = torch_losses(w, x, y, opt)
        rel = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
        check(got == twin, "%s %s: losses equal the float32 twin's (%d steps)" % (half, opt, len(got)))
        check(rel <= 1e-5, "%s %s: losses vs PyTorch float64, max rel err %.2e" % (half, opt, rel))
        check("parameters: %d trained" % (I * H + H + H * O) in err, "%s %s: the summary counts the half weights: %s"
              % (half, opt, [l for l in err.splitlines() if "parameters" in l]))
        check_export(half, inits(out), inits(tout))
        try:
            onnx.checker.check_model(onnx.load(out), full_check=True)
            ok = subprocess.run([exe, out, "--input", "x=" + os.path.join(tmp, "x.npy"), "--quiet"],
                                capture_output=True, timeout=120).returncode == 0
            check(ok, "%s %s: the exported model passes onnx.checker and runs" % (half, opt))
        except Exception as e:  # the checker raises its own errors
            check(False, "%s %s: onnx.checker: %s" % (half, opt, str(e)[:200]))
    _, out, _ = train(exe, tmp, hm, "sgd", ["--freeze", "W1"])
    if out:
        check(inits(out)["W1"].raw_data == inits(hm)["W1"].raw_data and
              inits(out)["B1"].raw_data != inits(hm)["B1"].raw_data,
              "%s: --freeze W1 keeps W1's bytes, B1 trains" % half)


def main():
    exe = sys.argv[1]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        x = np.random.RandomState(1).randn(N, I).astype(np.float32)
        y = np.random.RandomState(2).randn(N, O).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), y)
        for half in ("float16", "bfloat16"):
            run_half(exe, tmp, half, x, y)
    print("half-train: %d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

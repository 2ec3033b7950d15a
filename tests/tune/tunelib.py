"""Shared by the --val-data and --tune tests: a tiny classifier (Conv,
BatchNormalization, Relu, Dropout, Gemm) written with onnx.helper, a
separable synthetic image set, and a PyTorch evaluation of an exported
model's weights (the independent reference of hpdlf's validation)."""
import os
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)
    return ok


def run(exe, args, env=None, timeout=600):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout, p.stderr


def make_model(path, classes=3, side=8, seed=0):
    rng = np.random.default_rng(seed)
    c, k = 4, 3
    o = side - k + 1
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, 1, k, k)) * 0.4).astype(np.float32), "conv.w"),
        numpy_helper.from_array(np.zeros(c, np.float32), "conv.b"),
        numpy_helper.from_array(np.ones(c, np.float32), "bn.scale"),
        numpy_helper.from_array(np.zeros(c, np.float32), "bn.bias"),
        numpy_helper.from_array(np.zeros(c, np.float32), "bn.mean"),
        numpy_helper.from_array(np.ones(c, np.float32), "bn.var"),
        numpy_helper.from_array((rng.standard_normal((classes, c * o * o)) * 0.1).astype(np.float32), "fc.w"),
        numpy_helper.from_array(np.zeros(classes, np.float32), "fc.b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv"),
        helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["n"], name="bn",
                         momentum=0.9),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Dropout", ["r"], ["d"], name="drop", ratio=0.25),
        helper.make_node("Flatten", ["d"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, side, side])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.save(m, path)


def make_data(path, n, classes=3, side=8, seed=1, noise=1.5):
    """Class k: a faint square at one of `classes` places, in noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n).astype(np.int64)
    x = (rng.standard_normal((n, 1, side, side)) * noise).astype(np.float32)
    rows = (y * (side - 3)) // max(classes - 1, 1)
    for r in range(side - 2):
        sel = rows == r
        x[sel, 0, r:r + 3, 2:5] += 1.0
    np.savez(path, x=x, y=y)
    return x, y


def torch_logits(model_path, x):
    import torch
    import torch.nn.functional as F
    w = {t.name: torch.tensor(numpy_helper.to_array(t).astype(np.float64)) for t in onnx.load(model_path).graph.initializer}
    h = F.conv2d(torch.tensor(x, dtype=torch.float64), w["conv.w"], w["conv.b"])
    h = F.batch_norm(h, w["bn.mean"], w["bn.var"], w["bn.scale"], w["bn.bias"], training=False, eps=1e-5)
    return F.linear(F.relu(h).flatten(1), w["fc.w"], w["fc.b"]).numpy()


def torch_eval(model_path, x, y):
    """Loss and accuracy of the model's weights in inference mode
    (BatchNorm's running statistics, no Dropout), in float64."""
    import torch
    import torch.nn.functional as F
    w = {t.name: torch.tensor(numpy_helper.to_array(t).astype(np.float64)) for t in onnx.load(model_path).graph.initializer}
    h = F.conv2d(torch.tensor(x, dtype=torch.float64), w["conv.w"], w["conv.b"])
    h = F.batch_norm(h, w["bn.mean"], w["bn.var"], w["bn.scale"], w["bn.bias"], training=False, eps=1e-5)
    h = F.relu(h).flatten(1)
    logits = F.linear(h, w["fc.w"], w["fc.b"])
    loss = F.cross_entropy(logits, torch.tensor(y)).item()
    acc = (logits.argmax(1).numpy() == y).mean()
    return loss, float(acc)

#!/usr/bin/python3
"""PyTorch side of hpdlf-bench-train: train an ONNX model in PyTorch.

Usage: bench_train_torch.py MODEL.onnx X.npy Y.npy --batch B --steps S
                            [--optimizer sgd|adam] [--lr F] [--threads N]

The torch module is built from the ONNX graph itself: every float
initializer becomes a trainable parameter holding the same values, and the
forward pass walks the graph's nodes with the torch equivalents of their
ops, so both sides train the same network from the same weights.  Step i
trains on rows [(i*B) mod N, +B) (wrapping), with mean softmax
cross-entropy over all label positions, like `hpdlf-exec --train
--no-shuffle --loss cross-entropy`.  Prints one JSON line: the step times
(ms), their median after the first (warm-up) step, and the losses.

--torchscript FILE trains that module (torch.jit.save of the module the
ONNX file was exported from, with the same weights) instead of one built
from the graph: bench/make_bench_models.py writes one beside its exports.
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import helper, numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv_pads(a, nd):
    """ONNX pads [b0..bn, e0..en] as torch's symmetric padding (asymmetric refused)."""
    p = list(a.get("pads", [0] * 2 * nd))
    if p[:nd] != p[nd:]:
        raise SystemExit("bench_train_torch: asymmetric pads are not supported")
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise SystemExit("bench_train_torch: auto_pad is not supported")
    return p[:nd]


def op_gemm(x, a):
    A, B = x[0], x[1]
    if a.get("transA", 0):
        A = A.t()
    if a.get("transB", 0):
        B = B.t()
    y = a.get("alpha", 1.0) * (A @ B)
    if len(x) > 2 and x[2] is not None:
        y = y + a.get("beta", 1.0) * x[2]
    return y


def op_conv(x, a):
    nd = x[0].dim() - 2
    fn = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    return fn(x[0], x[1], x[2] if len(x) > 2 else None, stride=a.get("strides", [1] * nd),
              padding=conv_pads(a, nd), dilation=a.get("dilations", [1] * nd), groups=a.get("group", 1))


def op_convt(x, a):
    nd = x[0].dim() - 2
    fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
    return fn(x[0], x[1], x[2] if len(x) > 2 else None, stride=a.get("strides", [1] * nd),
              padding=conv_pads(a, nd), output_padding=a.get("output_padding", [0] * nd),
              dilation=a.get("dilations", [1] * nd), groups=a.get("group", 1))


def op_maxpool(x, a):
    nd = x[0].dim() - 2
    fn = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[nd - 1]
    k = a["kernel_shape"]
    return fn(x[0], k, stride=a.get("strides", k), padding=conv_pads(a, nd),
              dilation=a.get("dilations", [1] * nd), ceil_mode=bool(a.get("ceil_mode", 0)))


def op_avgpool(x, a):
    nd = x[0].dim() - 2
    fn = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[nd - 1]
    k = a["kernel_shape"]
    return fn(x[0], k, stride=a.get("strides", k), padding=conv_pads(a, nd),
              ceil_mode=bool(a.get("ceil_mode", 0)), count_include_pad=bool(a.get("count_include_pad", 0)))


def op_flatten(x, a):
    ax = a.get("axis", 1)
    if ax < 0:
        ax += x[0].dim()
    return x[0].reshape(int(np.prod(x[0].shape[:ax])), -1)


def op_reshape(x, a):
    shape = [int(d) for d in x[1].tolist()]
    if not a.get("allowzero", 0):
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x[0].reshape(shape)


OPS = {
    "Gemm": op_gemm,
    "Conv": op_conv,
    "ConvTranspose": op_convt,
    "MaxPool": op_maxpool,
    "AveragePool": op_avgpool,
    "GlobalAveragePool": lambda x, a: x[0].mean(dim=tuple(range(2, x[0].dim())), keepdim=True),
    "Relu": lambda x, a: F.relu(x[0]),
    "LeakyRelu": lambda x, a: F.leaky_relu(x[0], a.get("alpha", 0.01)),
    "Sigmoid": lambda x, a: torch.sigmoid(x[0]),
    "Tanh": lambda x, a: torch.tanh(x[0]),
    "Concat": lambda x, a: torch.cat(x, a["axis"]),
    "Flatten": op_flatten,
    "Reshape": op_reshape,
    "MatMul": lambda x, a: x[0] @ x[1],
    "Add": lambda x, a: x[0] + x[1],
    "Sub": lambda x, a: x[0] - x[1],
    "Mul": lambda x, a: x[0] * x[1],
    "Identity": lambda x, a: x[0],
    "Transpose": lambda x, a: x[0].permute(*a.get("perm", list(range(x[0].dim()))[::-1])),
}


class OnnxModule(nn.Module):
    """The ONNX graph as a torch module; float initializers are its parameters."""

    def __init__(s, path):
        super().__init__()
        g = onnx.load(path).graph
        s.nodes = [(n.op_type, list(n.input), list(n.output), attrs(n)) for n in g.node]
        for n in s.nodes:
            if n[0] not in OPS:
                raise SystemExit("bench_train_torch: op %s has no torch equivalent here" % n[0])
        s.params = nn.ParameterList()
        s.consts = {}
        s.index = {}
        for t in g.initializer:
            arr = numpy_helper.to_array(t)
            if arr.dtype == np.float32:
                s.index[t.name] = len(s.params)
                s.params.append(nn.Parameter(torch.from_numpy(arr.copy())))
            else:
                s.consts[t.name] = torch.from_numpy(arr.copy())
        inits = set(s.index) | set(s.consts)
        s.input = [i.name for i in g.input if i.name not in inits][0]
        s.output = g.output[0].name

    def forward(s, x):
        env = {s.input: x, "": None}
        for op, ins, outs, a in s.nodes:
            args = []
            for name in ins:
                if name in s.index:
                    args.append(s.params[s.index[name]])
                elif name in s.consts:
                    args.append(s.consts[name])
                else:
                    args.append(env[name])
            env[outs[0]] = OPS[op](args, a)
        return env[s.output]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("x")
    ap.add_argument("y")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"))
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--torchscript", default=None)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    lr = a.lr if a.lr is not None else (0.01 if a.optimizer == "sgd" else 1e-3)
    x, y = np.load(a.x), np.load(a.y).astype(np.int64)
    if a.torchscript:  # the plain interpreter: the profiling one recompiles during the first steps
        torch._C._jit_set_profiling_executor(False)
        torch._C._jit_set_profiling_mode(False)
    m = torch.jit.load(a.torchscript) if a.torchscript else OnnxModule(a.model)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=lr) if a.optimizer == "sgd" else \
        torch.optim.Adam(m.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8)
    n, B = len(x), a.batch
    ms, losses = [], []
    for i in range(a.steps):
        t0 = time.perf_counter()
        rows = [(i * B + j) % n for j in range(B)]
        xb, yb = torch.from_numpy(x[rows]), torch.from_numpy(y[rows])
        opt.zero_grad()
        loss = F.cross_entropy(m(xb), yb)
        loss.backward()
        opt.step()
        losses.append(float(loss))
        ms.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(ms[1:] if len(ms) > 1 else ms)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "ms_median": med,
                      "ms": ms, "losses": losses}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Inference fusions beyond BatchNorm folding (exec/fuse_*.c, kernels/fused*.c).

usage: check_fuse_patterns.py HPDLF_EXEC MAKE_FUSE_MODELS_PY

Seven models written here with onnx.helper and seeded NumPy weights, each
with fusable patterns and look-alikes that must NOT fuse because an
intermediate has a reader outside the pattern (or is a graph output):

  epi   Conv+Add+Relu, Conv+Clip(0, 6), Conv+Sigmoid, Conv+HardSwish; a Conv
        whose output is also a graph output (not fused); Conv+Add whose sum
        is read twice (the Add fuses, its Relu does not); HardSwish as
        HardSigmoid(1/6, 1/2) and a Mul of the value and it (either order,
        after a 1x1 and a depthwise 5x5), and look-alikes: HardSigmoid's
        default alpha 0.2, a HardSigmoid that is also a graph output; SiLU
        as Sigmoid and a Mul of the value and it (either order, after a
        3x3, a 1x1, a depthwise 5x5 and a residual Add), one whose Sigmoid
        is also a graph output (not fused)
  mm    MatMul+Add+Gelu (erf form, as torch writes F.gelu), Add(bias,
        MatMul)+Relu, Gemm+BatchNormalization+Relu, a tanh-form Gelu (Pow),
        a tanh-form Gelu whose Tanh output is a graph output (not fused),
        MatMul of a transposed matrix (a Gemm with transA) and of a rank-3
        Transpose (not fused)
  ln    the LayerNorm chain torch writes below opset 17; the same chain with
        x - mean also a graph output (not fused)
  cst   Transposes of weights (rank 2 into a rank-3 MatMul, rank 3 permuted)
        computed once; one whose output is a graph output (not folded)
  pwt   1x1 Convs at a 2x2 plane and at one position (after a
        GlobalAveragePool), plain and fused: their weights transposed once
        (kernels/conv_pwt.c); a weight read by two Convs (not packed)
  grpt  grouped 3x3 Convs at 2x2 planes (32 and 16 channels a group, one
        of stride 2 from 4x4), plain and fused: their weights
        transposed once per group (kernels/conv_grp.c's co-lane forward
        tiles); a weight read by two Convs (not packed); a 1x1 at 4x4
        (packed for kernels/conv_pwt.c); a stride-2 1x1 from 4x4 (packed,
        conv_pwt.c over X subsampled); dense Convs of the kxk path at tiny
        planes, packed for conv_grp.c's co-lane tiles: 3x3s at 2x2 and 4x4
        (units of 16 and 32 channels; one unit), a stride-2 1x1 with pads to 3x3
  pwt6  1x1 Convs at 6x6 (GoogLeNet's inception 4 at 96x96), packed for
        kernels/conv_pwt.c: 32 and 48 channels, whose panels hold W's
        floats and take its place (in-core tensor memory within half of
        them of the unfused model's), 40 channels (panels beside W); at 7x7
        after a Pad, 48 channels (conv_pw.c's tiles: not packed) and 16
        from K 64 (packed: narrow nodes at any plane)
  dense DenseNet's layer: BatchNorm, Relu and a 1x1 Conv (one with a Relu
        epilogue, one reading a Concat, statistics through an Identity) into
        the conv's prologue (exec/fuse_pro.c), and a BatchNorm without Relu;
        a Relu that is also a graph output and a 3x3 Conv (not fused)
  grpinf a dense 3x3 at 5x5 (32 channels) packed for conv_grp.c's tiles that
        skip the padding's products, and one whose W holds an Inf (not packed:
        its border outputs are NaN, as every product is taken); bitwise
        --no-fuse, NaNs included
  attn  attentions reading Q, K, V through Transposes (a causal Where mask
        with Mul scale; an added mask with Div scale; neither, the result
        not transposed; operands whose rows are not contiguous, so that the
        kernel packs its tiles), and one whose Softmax output is a graph
        output (not fused)

For each: --plan's pattern counts are exactly the expected ones (so the
look-alikes did not fuse), and under --budget the same without the packed
weights (the epilogues fused once the graph is cut for the budget); outputs fused and --no-fuse within TOL * max|ref|
of a float64 NumPy evaluation; the epilogue-only and copy-only models (epi, cst, pwt, grpt, dense) bitwise equal
to --no-fuse (the epilogue computes each element as the unfused nodes do);
out of core at the smallest budget the planner allows, outputs bitwise the
in-core fused ones.  Then torch exports (bench/make_fuse_models.py, 2-layer
GPT and BERT at opset 13): every LayerNorm, Gelu and attention fused, and
the output within TOL of the same torch model run in float64.
"""
import importlib.util
import math
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper

TOL = 2e-5
FAILS = []
erf = np.vectorize(math.erf)


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)
    return ok


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


class M:
    """A model under construction with float64 copies of its constants."""

    def __init__(self, seed):
        self.rng, self.nodes, self.inits, self.P, self.n = np.random.default_rng(seed), [], [], {}, 0

    def w(self, name, shape, scale=0.3, a=None):
        a = (scale * self.rng.standard_normal(shape)) if a is None else a
        self.P[name] = np.asarray(a).astype(np.float32)
        self.inits.append(numpy_helper.from_array(self.P[name], name))
        return name

    def c(self, v, dtype=np.float32):
        self.n += 1
        name = "const%d" % self.n
        arr = np.asarray(v, dtype=dtype)
        self.inits.append(numpy_helper.from_array(arr, name))
        self.P[name] = arr
        return name

    def op(self, t, ins, out, **kw):
        self.nodes.append(helper.make_node(t, ins, [out], name="n_" + out, **kw))
        return out

    def save(self, path, xshape, outs):
        g = helper.make_graph(self.nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], self.inits)
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def conv(x, w, b, pad):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    y = np.zeros((n, m, h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + y.shape[2], j:j + y.shape[3]], w[:, :, i, j])
    return y + (0 if b is None else b[None, :, None, None])


def dwconv(x, w, b, pad):
    """Depthwise (group = channels) stride-1 convolution in float64."""
    return np.concatenate([conv(x[:, i:i + 1], w[i:i + 1], b[i:i + 1], pad) for i in range(x.shape[1])], axis=1)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def gelu_erf(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def model_epi(path):
    m, d = M(1), None
    x = m.rng.standard_normal((2, 4, 10, 10)).astype(np.float32)
    ws = {k: m.w(k, s) for k, s in (("w1", (8, 4, 3, 3)), ("w0", (8, 4, 1, 1)), ("w2", (8, 8, 3, 3)),
                                     ("w3", (8, 8, 3, 3)), ("w4", (8, 8, 1, 1)), ("w5", (8, 8, 3, 3)),
                                     ("w6", (8, 8, 1, 1)), ("w8", (8, 8, 1, 1)), ("w9", (8, 1, 5, 5)),
                                     ("w10", (8, 8, 1, 1)), ("w11", (8, 8, 3, 3)), ("w12", (8, 8, 3, 3)),
                                     ("w13", (8, 8, 1, 1)), ("w14", (8, 8, 1, 1)), ("w15", (8, 1, 5, 5)),
                                     ("w16", (8, 8, 1, 1)))}
    bs = {k: m.w(k, (8,), 0.1) for k in ("b1", "b2", "b4", "b5", "b8", "b9", "b12", "b15")}
    pad = dict(pads=[1, 1, 1, 1])
    m.op("Conv", ["x", "w1", "b1"], "c1", **pad)
    m.op("Conv", ["x", "w0"], "c0")
    m.op("Add", ["c1", "c0"], "a1")
    m.op("Relu", ["a1"], "y1")
    m.op("Conv", ["y1", "w2", "b2"], "c2", **pad)
    m.op("Clip", ["c2", m.c(0.0), m.c(6.0)], "y2")
    m.op("Conv", ["y2", "w3"], "c3", **pad)
    m.op("Sigmoid", ["c3"], "y3")
    m.op("Conv", ["y3", "w4", "b4"], "c4")
    m.op("HardSwish", ["c4"], "y4")
    m.op("Conv", ["y4", "w5", "b5"], "c5", **pad)  # c5 is a graph output: not fused
    m.op("Relu", ["c5"], "y5")
    m.op("Conv", ["y4", "w6"], "c6")
    m.op("Add", ["c6", "y4"], "a6")                 # a6 read twice: Conv+Add only
    m.op("Relu", ["a6"], "y6")
    m.op("Mul", ["a6", "a6"], "y7")
    m.op("Conv", ["y4", "w8", "b8"], "c8")         # HardSwish as MobileNetV3 exports it
    m.op("HardSigmoid", ["c8"], "h8", alpha=1 / 6, beta=0.5)
    m.op("Mul", ["c8", "h8"], "y8")
    m.op("Conv", ["y8", "w9", "b9"], "c9", group=8, pads=[2, 2, 2, 2])  # depthwise, Mul the other way
    m.op("HardSigmoid", ["c9"], "h9", alpha=1 / 6, beta=0.5)
    m.op("Mul", ["h9", "c9"], "y9")
    m.op("Conv", ["y9", "w10"], "c10")             # alpha 0.2: not HardSwish
    m.op("HardSigmoid", ["c10"], "h10")
    m.op("Mul", ["c10", "h10"], "y10")
    m.op("Conv", ["y9", "w11"], "c11", **pad)      # h11 is a graph output: not fused
    m.op("HardSigmoid", ["c11"], "h11", alpha=1 / 6, beta=0.5)
    m.op("Mul", ["c11", "h11"], "y11")
    m.op("Conv", ["y4", "w12", "b12"], "c12", **pad)  # SiLU as EfficientNet exports it
    m.op("Sigmoid", ["c12"], "s12")
    m.op("Mul", ["c12", "s12"], "y12")
    m.op("Conv", ["y12", "w13"], "c13")            # the Mul's operands the other way
    m.op("Sigmoid", ["c13"], "s13")
    m.op("Mul", ["s13", "c13"], "y13")
    m.op("Conv", ["y13", "w14"], "c14")            # s14 is a graph output: not fused
    m.op("Sigmoid", ["c14"], "s14")
    m.op("Mul", ["c14", "s14"], "y14")
    m.op("Conv", ["y13", "w15", "b15"], "c15", group=8, pads=[2, 2, 2, 2])  # depthwise
    m.op("Sigmoid", ["c15"], "s15")
    m.op("Mul", ["c15", "s15"], "y15")
    m.op("Conv", ["y13", "w16"], "c16")            # a residual Add, then SiLU
    m.op("Add", ["c16", "y13"], "a16")
    m.op("Sigmoid", ["a16"], "s16")
    m.op("Mul", ["a16", "s16"], "y16")
    outs = ["y5", "c5", "y6", "y7", "y10", "y11", "h11", "y14", "s14", "y15", "y16"]
    m.save(path, list(x.shape), outs)
    d = {k: v.astype(np.float64) for k, v in m.P.items()}
    X = x.astype(np.float64)
    y1 = np.maximum(conv(X, d["w1"], d["b1"], 1) + conv(X, d["w0"], None, 0), 0)
    y2 = np.clip(conv(y1, d["w2"], d["b2"], 1), 0, 6)
    y3 = sigmoid(conv(y2, d["w3"], None, 1))
    c4 = conv(y3, d["w4"], d["b4"], 0)
    y4 = c4 * np.clip(c4 / 6 + 0.5, 0, 1)
    c5 = conv(y4, d["w5"], d["b5"], 1)
    a6 = conv(y4, d["w6"], None, 0) + y4
    hsig = lambda v, a=1 / 6: np.clip(a * v + 0.5, 0, 1)
    y8 = conv(y4, d["w8"], d["b8"], 0)
    y8 = y8 * hsig(y8)
    y9 = dwconv(y8, d["w9"], d["b9"], 2)
    y9 = y9 * hsig(y9)
    c10, c11 = conv(y9, d["w10"], None, 0), conv(y9, d["w11"], None, 1)
    silu = lambda v: v * sigmoid(v)
    y13 = silu(conv(silu(conv(y4, d["w12"], d["b12"], 1)), d["w13"], None, 0))
    c14 = conv(y13, d["w14"], None, 0)
    ref = {"y5": np.maximum(c5, 0), "c5": c5, "y6": np.maximum(a6, 0), "y7": a6 * a6,
           "y10": c10 * hsig(c10, 0.2), "y11": c11 * hsig(c11), "h11": hsig(c11), "y14": silu(c14),
           "s14": sigmoid(c14), "y15": silu(dwconv(y13, d["w15"], d["b15"], 2)),
           "y16": silu(conv(y13, d["w16"], None, 0) + y13)}
    # w9 and w15, depthwise 5x5 at a small plane: packed for conv_dwkz.c's sixteen lanes (AVX-512), W beside
    want = {"Conv+Add+Relu": 1, "Conv+Clip": 1, "Conv+Sigmoid": 1, "Conv+HardSwish": 3, "Conv+Add": 1,
            "Conv+Silu": 3, "Conv+Add+Silu": 1, "Packed weights": 2}
    return x, ref, want


def gelu_nodes(m, x, out, form, leak=None):
    """Gelu of x as torch writes it; leak names an intermediate to expose."""
    if form == "erf":
        m.op("Div", [x, m.c(1.4142135)], out + "d")
        m.op("Erf", [out + "d"], out + "e")
        m.op("Add", [out + "e", m.c(1.0)], out + "a")
        m.op("Mul", [x, out + "a"], out + "m")
        return m.op("Mul", [out + "m", m.c(0.5)], out)
    m.op("Pow", [x, m.c(3.0)], out + "p")
    m.op("Mul", [m.c(0.044715), out + "p"], out + "k")
    m.op("Add", [x, out + "k"], out + "s")
    m.op("Mul", [out + "s", m.c(0.7978845608)], out + "b")
    m.op("Tanh", [out + "b"], out + "t")
    m.op("Add", [m.c(1.0), out + "t"], out + "a")
    m.op("Mul", [m.c(0.5), x], out + "h")
    return m.op("Mul", [out + "h", out + "a"], out)


def model_mm(path):
    m = M(2)
    x = m.rng.standard_normal((3, 5, 16)).astype(np.float32)
    m.w("W1", (16, 32)), m.w("b1", (32,), 0.1), m.w("W2", (32, 16)), m.w("b2", (16,), 0.1)
    m.w("Wg", (8, 16)), m.w("bg", (8,), 0.1)
    for k, a in (("s", 1 + 0.2 * m.rng.standard_normal(8)), ("o", 0.1 * m.rng.standard_normal(8)),
                 ("mu", 0.1 * m.rng.standard_normal(8)), ("var", 1 + m.rng.random(8))):
        m.w(k, None, a=a)
    m.op("MatMul", ["x", "W1"], "m1")
    m.op("Add", ["m1", "b1"], "a1")
    gelu_nodes(m, "a1", "g1", "erf")
    m.op("MatMul", ["g1", "W2"], "m2")
    m.op("Add", ["b2", "m2"], "a2")
    m.op("Relu", ["a2"], "y1")
    m.op("Reshape", ["x", m.c([15, 16], np.int64)], "z")
    m.op("Gemm", ["z", "Wg", "bg"], "gm", transB=1, alpha=0.5, beta=2.0)
    m.op("BatchNormalization", ["gm", "s", "o", "mu", "var"], "bn")
    m.op("Relu", ["bn"], "y2")
    gelu_nodes(m, "y1", "y3", "tanh")
    gelu_nodes(m, "y1", "y4", "tanh")
    m.w("W5", (15, 4)), m.w("W6", (5, 4))
    m.op("Transpose", ["z"], "zt")                    # a matrix: MatMul becomes Gemm(transA)
    m.op("MatMul", ["zt", "W5"], "y5")
    m.op("Transpose", ["x"], "xt", perm=[0, 2, 1])  # rank 3: stays
    m.op("MatMul", ["xt", "W6"], "y6")
    outs = ["y1", "y2", "y3", "y4", "y4t", "y5", "y6"]  # y4's Tanh output is a graph output: y4 stays unfused
    m.save(path, list(x.shape), outs)
    d = {k: v.astype(np.float64) for k, v in m.P.items()}
    X = x.astype(np.float64)
    y1 = np.maximum(gelu_erf(X @ d["W1"] + d["b1"]) @ d["W2"] + d["b2"], 0)
    gm = 0.5 * X.reshape(15, 16) @ d["Wg"].T + 2.0 * d["bg"]
    y2 = np.maximum((gm - d["mu"]) / np.sqrt(d["var"] + 1e-5) * d["s"] + d["o"], 0)
    t = np.tanh(0.7978845608 * (y1 + 0.044715 * y1 ** 3))
    ref = {"y1": y1, "y2": y2, "y3": gelu_tanh(y1), "y4": gelu_tanh(y1), "y4t": t,
           "y5": X.reshape(15, 16).T @ d["W5"], "y6": X.transpose(0, 2, 1) @ d["W6"]}
    want = {"Gemm+BatchNormalization": 1, "Gelu (erf form)": 1, "Gelu (tanh form)": 1, "MatMul+Add+Gelu": 1,
            "MatMul+Add+Relu": 1, "Gemm+Relu": 1, "Transpose+MatMul": 1,
            "Packed weights": 4}  # W1, W2, W5 (Gemm transA), W6; not Wg (alpha 0.5)
    return x, ref, want


def model_cst(path):
    """Transposes of weights (a Linear layer as torch exports it, a rank-3 permutation) become transposed
    initializers; one whose output is a graph output stays."""
    m = M(5)
    x = m.rng.standard_normal((3, 5, 32)).astype(np.float32)
    # over 4 KiB each: smaller initializers are read at import, and constant folding transposes them
    m.w("W7", (48, 32)), m.w("Wc", (12, 3, 32)), m.w("Wo", (40, 30))
    m.op("Transpose", ["W7"], "W7t")                     # default perm: reversed
    m.op("MatMul", ["x", "W7t"], "y7")                   # rank-3 activation: no Gemm takes it
    m.op("Transpose", ["Wc"], "Wct", perm=[1, 2, 0])     # [3, 32, 12]
    m.op("MatMul", ["x", "Wct"], "y8")
    m.op("Transpose", ["Wo"], "y9")                      # a graph output: stays
    m.save(path, list(x.shape), ["y7", "y8", "y9"])
    d = {k: v.astype(np.float64) for k, v in m.P.items()}
    ref = {"y7": x.astype(np.float64) @ d["W7"].T, "y8": x.astype(np.float64) @ d["Wc"].transpose(1, 2, 0), "y9": d["Wo"].T}
    return x, ref, {"Transpose of a constant": 2, "Packed weights": 1}  # W7's transpose; not Wc's (rank 3)


def ln_nodes(m, x, out, g, b):
    m.op("ReduceMean", [x], out + "m", axes=[-1])
    m.op("Sub", [x, out + "m"], out + "d")
    m.op("Pow", [out + "d", m.c(2.0)], out + "p")
    m.op("ReduceMean", [out + "p"], out + "v", axes=[-1])
    m.op("Add", [out + "v", m.c(1e-5)], out + "e")
    m.op("Sqrt", [out + "e"], out + "s")
    m.op("Div", [out + "d", out + "s"], out + "n")
    m.op("Mul", [out + "n", g], out + "g")
    return m.op("Add", [out + "g", b], out)


def model_ln(path):
    m = M(3)
    x = (3 + 2 * m.rng.standard_normal((2, 6, 48))).astype(np.float32)
    m.w("g", (48,), a=1 + 0.2 * m.rng.standard_normal(48)), m.w("b", (48,), 0.1)
    ln_nodes(m, "x", "y1", "g", "b")
    ln_nodes(m, "x", "y2", "g", "b")
    m.save(path, list(x.shape), ["y1", "y2", "y2d"])  # y2's x - mean is an output: y2 stays unfused
    X, d = x.astype(np.float64), {k: v.astype(np.float64) for k, v in m.P.items()}
    mu = X.mean(-1, keepdims=True)
    y = (X - mu) / np.sqrt(((X - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * d["g"] + d["b"]
    return x, {"y1": y, "y2": y, "y2d": X - mu}, {"LayerNorm": 1}


def model_attn(path):
    m = M(4)
    B, T, H, D = 2, 80, 4, 8  # T over one 64-column tile: the online softmax rescales
    C = H * D
    x = m.rng.standard_normal((B, T, C)).astype(np.float32)
    for k in "qkv":
        m.w("W" + k, (C, C), 0.5)
    heads = m.c([B, T, H, D], np.int64)
    for k in "qkv":
        m.op("MatMul", ["x", "W" + k], k + "0")
        m.op("Reshape", [k + "0", heads], k + "1")
        m.op("Transpose", [k + "1"], k, perm=[0, 2, 1, 3])
    m.op("Transpose", ["k"], "kt", perm=[0, 1, 3, 2])
    causal = np.triu(np.ones((T, T), bool), 1)[None, None]
    cond = "cond"
    m.inits.append(numpy_helper.from_array(causal, cond))
    addm = (m.rng.random((B, 1, 1, T)) < 0.2) * -1e4
    m.w("addm", None, a=addm)
    back = m.c([B, T, C], np.int64)

    def attn(out, scale, mask, leak=False):
        m.op("MatMul", ["q", "kt"], out + "s")
        if scale == "mul":
            m.op("Mul", [out + "s", m.c(1 / math.sqrt(D))], out + "c")
        else:
            m.op("Div", [out + "s", m.c(math.sqrt(D))], out + "c")
        if mask == "where":
            m.op("Where", [cond, m.c(-np.inf), out + "c"], out + "k")
        else:
            m.op("Add", [out + "c", "addm"], out + "k")
        m.op("Softmax", [out + "k"], out + "p", axis=-1)
        m.op("MatMul", [out + "p", "v"], out + "o")
        m.op("Transpose", [out + "o"], out + "t", perm=[0, 2, 1, 3])
        return m.op("Reshape", [out + "t", back], out)

    attn("y1", "mul", "where")
    attn("y2", "div", "add")
    attn("y3", "mul", "where")
    m.op("MatMul", ["q", "kt"], "y4s")  # no scale, no mask, the result as it is
    m.op("Softmax", ["y4s"], "y4p", axis=-1)
    m.op("MatMul", ["y4p", "v"], "y4")
    odd = m.c([B, T, D, H], np.int64)  # heads innermost: no operand row is contiguous, the kernel packs tiles
    for k, perm in (("q", [0, 3, 1, 2]), ("k", [0, 3, 2, 1]), ("v", [0, 3, 1, 2])):
        m.op("Reshape", [k + "0", odd], k + "5r")
        m.op("Transpose", [k + "5r"], k + "5", perm=perm)
    m.op("MatMul", ["q5", "k5"], "y5s")
    m.op("Mul", ["y5s", m.c(1 / math.sqrt(D))], "y5c")
    m.op("Softmax", ["y5c"], "y5p", axis=-1)
    m.op("MatMul", ["y5p", "v5"], "y5")
    m.save(path, list(x.shape), ["y1", "y2", "y3", "y3p", "y4", "y5"])  # y3's softmax is an output: not fused
    X, d = x.astype(np.float64), {k: v.astype(np.float64) for k, v in m.P.items()}
    q, k, v = ((X @ d["W" + c]).reshape(B, T, H, D).transpose(0, 2, 1, 3) for c in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D)

    def sm(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    p1, p2 = sm(np.where(causal, -np.inf, s)), sm(s + addm)
    o = lambda p: (p @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    q5, k5, v5 = ((X @ d["W" + c]).reshape(B, T, D, H).transpose(0, 3, 1, 2) for c in "qkv")
    y5 = sm(q5 @ k5.transpose(0, 1, 3, 2) / math.sqrt(D)) @ v5
    return x, {"y1": o(p1), "y2": o(p2), "y3": o(p1), "y3p": p1, "y4": sm(s * math.sqrt(D)) @ v, "y5": y5}, \
        {"Attention": 4, "Packed weights": 3}  # y5's Wq, Wk, Wv


def model_pwt(path):
    m = M(7)
    x = m.rng.standard_normal((2, 48, 2, 2)).astype(np.float32)
    for k, sh in (("w1", (40, 48, 1, 1)), ("w2", (40, 40, 1, 1)), ("w3", (20, 40, 1, 1)), ("w4", (70, 40, 1, 1)),
                  ("w5", (24, 40, 1, 1))):
        m.w(k, sh)
    for k, n in (("b1", 40), ("b3", 20), ("b4", 70)):
        m.w(k, (n,), 0.1)
    m.op("Conv", ["x", "w1", "b1"], "c1")         # a plain Conv: packed, as a FusedConv without epilogue
    m.op("Conv", ["c1", "w2"], "c2")
    m.op("Add", ["c2", "c1"], "a2")
    m.op("Sigmoid", ["a2"], "y2")                  # a FusedConv with an addend: packed
    m.op("Conv", ["y2", "w3", "b3"], "y3")         # 20 channels: a second vector of 4
    m.op("GlobalAveragePool", ["c1"], "p")
    m.op("Conv", ["p", "w4", "b4"], "c4")          # a plane of one position: the items are the columns
    m.op("Relu", ["c4"], "y4")
    m.op("Conv", ["c1", "w5"], "y5")               # w5 read twice: not packed
    m.op("Conv", ["y2", "w5"], "y6")
    m.save(path, list(x.shape), ["y3", "y4", "y5", "y6"])
    d = {k: v.astype(np.float64) for k, v in m.P.items()}
    c1 = conv(x.astype(np.float64), d["w1"], d["b1"], 0)
    y2 = sigmoid(conv(c1, d["w2"], None, 0) + c1)
    c4 = conv(c1.mean(axis=(2, 3), keepdims=True), d["w4"], d["b4"], 0)
    ref = {"y3": conv(y2, d["w3"], d["b3"], 0), "y4": np.maximum(c4, 0), "y5": conv(c1, d["w5"], None, 0),
           "y6": conv(y2, d["w5"], None, 0)}
    return x, ref, {"Conv+Add+Sigmoid": 1, "Conv+Relu": 1, "Packed weights": 4}


def model_pwt6(path):
    m = M(9)
    x = m.rng.standard_normal((1, 64, 6, 6)).astype(np.float32)
    for k, sh in (("w1", (32, 64, 1, 1)), ("w2", (48, 32, 1, 1)), ("w3", (40, 64, 1, 1)), ("w4", (48, 64, 1, 1)),
                  ("w5", (16, 64, 1, 1))):
        m.w(k, sh, 0.1)
    m.w("b1", (32,), 0.1)
    m.op("Conv", ["x", "w1", "b1"], "c1")          # 32 channels at 6x6: packed, W^T in W's place
    m.op("Relu", ["c1"], "r1")
    m.op("Conv", ["r1", "w2"], "y2")               # 48 = 32 + 16: in W's place
    m.op("Conv", ["x", "w3"], "y3")                # 40: the last unit padded to 16, beside W
    m.op("Pad", ["x", m.c([0, 0, 0, 0, 0, 0, 1, 1], np.int64)], "p")
    m.op("Conv", ["p", "w4"], "y4")                # 7x7: conv_pw.c's, not packed
    m.op("Conv", ["p", "w5"], "y5")                # 16 channels from 64 at 7x7: packed, in W's place
    m.save(path, list(x.shape), ["y2", "y3", "y4", "y5"])
    d = {k: v.astype(np.float64) for k, v in m.P.items()}
    x64 = x.astype(np.float64)
    r1 = np.maximum(conv(x64, d["w1"], d["b1"], 0), 0)
    p = np.pad(x64, ((0, 0), (0, 0), (0, 1), (0, 1)))
    return x, {"y2": conv(r1, d["w2"], None, 0), "y3": conv(x64, d["w3"], None, 0),
               "y4": conv(p, d["w4"], None, 0), "y5": conv(p, d["w5"], None, 0)}, {"Conv+Relu": 1, "Packed weights": 4}


def model_grpinf(path):
    m = M(10)
    x = m.rng.standard_normal((1, 16, 5, 5)).astype(np.float32)
    m.w("w1", (32, 16, 3, 3), 0.1)
    w2 = 0.1 * m.rng.standard_normal((32, 16, 3, 3))
    w2[0, 0, 0, 0] = np.inf  # read only through the padding by output (0, 0)
    m.w("w2", w2.shape, a=w2)
    m.w("b1", (32,), 0.1)
    g = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    m.op("Conv", ["x", "w1", "b1"], "y1", **g)    # packed: conv_grp.c's tiles skip the padding's products
    m.op("Conv", ["x", "w2", "b1"], "y2", **g)    # an Inf in W: not packed, every product taken (NaN at (0, 0))
    m.save(path, list(x.shape), ["y1", "y2"])
    d = {k: v.astype(np.float64) for k, v in m.P.items()}
    return x, {"y1": conv(x.astype(np.float64), d["w1"], d["b1"], 1)}, {"Packed weights": 1}


def gconv(x, w, b, pad, group, stride=1):
    cg, mg = x.shape[1] // group, w.shape[0] // group
    y = np.concatenate([conv(x[:, g * cg:(g + 1) * cg], w[g * mg:(g + 1) * mg], None, pad) for g in range(group)], 1)
    return y[:, :, ::stride, ::stride] + (0 if b is None else b[None, :, None, None])


def model_grpt(path):
    m = M(8)
    x = m.rng.standard_normal((1, 64, 4, 4)).astype(np.float32)
    for k, sh in (("w1", (64, 32, 3, 3)), ("w2", (64, 32, 3, 3)), ("w3", (64, 16, 3, 3)), ("w4", (64, 16, 3, 3)),
                  ("w6", (40, 64, 1, 1)), ("w7", (48, 64, 1, 1)), ("w8", (48, 64, 1, 1)),
                  ("w9", (48, 64, 3, 3)), ("w10", (64, 64, 3, 3)), ("w11", (32, 64, 3, 3))):
        m.w(k, sh, 0.1)
    for k, n in (("b1", 64), ("b3", 64), ("b6", 40), ("b7", 48), ("b9", 48)):
        m.w(k, (n,), 0.1)
    g = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    m.op("Conv", ["x", "w1", "b1"], "c1", group=2, strides=[2, 2], **g)  # 4x4 -> 2x2, 32 a group: packed
    m.op("Relu", ["c1"], "r1")
    m.op("Conv", ["r1", "w2"], "y2", group=2, **g)      # a plain Conv at 2x2: packed, a FusedConv
    m.op("Conv", ["y2", "w3", "b3"], "y3", group=4, **g)  # 16 channels a group: one vector
    m.op("Conv", ["x", "w4"], "y4", group=4, **g)       # w4 read twice: not packed
    m.op("Conv", ["x", "w4"], "y5", group=4, **g)
    m.op("Conv", ["x", "w6", "b6"], "y6")               # a 1x1 at 4x4: packed for conv_pwt.c
    m.op("Conv", ["x", "w7", "b7"], "c7", strides=[2, 2])  # a stride-2 1x1 to 2x2: packed, X subsampled
    m.op("Relu", ["c7"], "y7")
    m.op("Conv", ["x", "w8"], "y8", strides=[2, 2], pads=[1, 1, 1, 1])  # with pads: kxk's, packed for conv_grp.c
    m.op("Conv", ["r1", "w9", "b9"], "y9", **g)        # dense 3x3s (kxk's nodes) at 2x2 and 4x4: packed for
    m.op("Conv", ["x", "w10"], "y10", **g)              # conv_grp.c's tiles, units of 16 and 32 channels
    m.op("Conv", ["r1", "w11"], "y11", **g)             # one unit of 32 channels
    m.save(path, list(x.shape), ["y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9", "y10", "y11"])
    d = {k: v.astype(np.float64) for k, v in m.P.items()}
    r1 = np.maximum(gconv(x.astype(np.float64), d["w1"], d["b1"], 1, 2, 2), 0)
    y2 = gconv(r1, d["w2"], None, 1, 2)
    y4 = gconv(x.astype(np.float64), d["w4"], None, 1, 4)
    return x, {"y2": y2, "y3": gconv(y2, d["w3"], d["b3"], 1, 4), "y4": y4, "y5": y4,
               "y6": conv(x.astype(np.float64), d["w6"], d["b6"], 0),
               "y7": np.maximum(conv(x.astype(np.float64), d["w7"], d["b7"], 0)[:, :, ::2, ::2], 0),
               "y8": conv(x.astype(np.float64), d["w8"], None, 1)[:, :, ::2, ::2],
               "y9": conv(r1, d["w9"], d["b9"], 1), "y10": conv(x.astype(np.float64), d["w10"], None, 1),
               "y11": conv(r1, d["w11"], None, 1)}, {"Conv+Relu": 2, "Packed weights": 9}
def bn(x, s, b, m, v, eps):
    c = lambda a: a[None, :, None, None]
    return (x - c(m)) / np.sqrt(c(v) + eps) * c(s) + c(b)


def model_dense(path):
    m = M(8)
    x = m.rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    for k, c in (("1", 16), ("3", 24), ("4", 24), ("5", 24), ("6", 24)):
        m.w("s" + k, (c,), 1.0)
        m.w("b" + k, (c,), 0.5)
        m.w("m" + k, (c,), 0.5)
        m.w("v" + k, (c,), a=m.rng.uniform(0.3, 2.0, c))
    for k, sh in (("w1", (24, 16, 1, 1)), ("w2", (8, 24, 3, 3)), ("w3", (12, 24, 1, 1)), ("w4", (6, 24, 1, 1)),
                  ("w5", (6, 24, 1, 1)), ("w6", (4, 24, 3, 3))):
        m.w(k, sh)
    m.w("cb1", (24,), 0.1)
    m.w("b5c", (6,), 0.1)
    bnk = lambda k, x, out, eps=1e-5, mean=None: m.op("BatchNormalization", [x, "s" + k, "b" + k, mean or "m" + k,
                                                                            "v" + k], out, epsilon=eps)
    bnk("1", "x", "n1", 1e-3)
    m.op("Relu", ["n1"], "r1")
    m.op("Conv", ["r1", "w1", "cb1"], "c1")
    m.op("Relu", ["c1"], "e1")                          # an epilogue and a prologue on one conv
    m.op("Conv", ["e1", "w2"], "c2", pads=[1, 1, 1, 1])
    m.op("Concat", ["x", "c2"], "cat", axis=1)
    m.op("Identity", ["m3"], "m3i")                     # torch hands shared statistics through Identity
    bnk("3", "cat", "n3", mean="m3i")
    m.op("Relu", ["n3"], "r3")
    m.op("Conv", ["r3", "w3"], "y1")
    bnk("4", "cat", "n4")
    m.op("Relu", ["n4"], "r4")                          # also a graph output: not fused
    m.op("Conv", ["r4", "w4"], "y4")
    bnk("5", "cat", "n5")
    m.op("Conv", ["n5", "w5", "b5c"], "y5")             # no Relu: BatchNormalization+Conv
    bnk("6", "cat", "n6")
    m.op("Relu", ["n6"], "r6")
    m.op("Conv", ["r6", "w6"], "y6", pads=[1, 1, 1, 1])  # 3x3: not fused
    m.save(path, list(x.shape), ["y1", "r4", "y4", "y5", "y6"])
    d = {k: v.astype(np.float64) for k, v in m.P.items()}
    B = lambda k, x, eps=1e-5: bn(x, d["s" + k], d["b" + k], d["m" + k], d["v" + k], eps)
    x64 = x.astype(np.float64)
    e1 = np.maximum(conv(np.maximum(B("1", x64, 1e-3), 0), d["w1"], d["cb1"], 0), 0)
    cat = np.concatenate([x64, conv(e1, d["w2"], None, 1)], axis=1)
    r4 = np.maximum(B("4", cat), 0)
    ref = {"y1": conv(np.maximum(B("3", cat), 0), d["w3"], None, 0), "r4": r4, "y4": conv(r4, d["w4"], None, 0),
           "y5": conv(B("5", cat), d["w5"], d["b5c"], 0), "y6": conv(np.maximum(B("6", cat), 0), d["w6"], None, 1)}
    return x, ref, {"Conv+Relu": 1, "BatchNormalization+Relu+Conv": 2, "BatchNormalization+Conv": 1}


def plan_counts(out):
    got = {}
    for name, n in re.findall(r"^  ([A-Z][\w+ ()-]*?): (\d+)$", out, re.M):
        got[name] = int(n)
    return got


def outputs(exe, path, xpath, names, tag, extra):
    folder = os.path.dirname(path)
    args = [path, "--input", "x=" + xpath, "--quiet"]
    for k in names:
        args += ["--output", "%s=%s" % (k, os.path.join(folder, "%s_%s.npy" % (tag, k)))]
    rc, _, err = run(exe, args + extra)
    if not check(rc == 0, "%s: runs %s" % (tag, err.strip()[-300:])):
        return None
    return {k: np.load(os.path.join(folder, "%s_%s.npy" % (tag, k))) for k in names}


def smallest_budget(exe, path, xpath):
    budget = "1K"
    for _ in range(4):  # the planner names the smallest budget that works; follow it
        rc, _, err = run(exe, [path, "--input", "x=" + xpath, "--budget", budget, "--quiet", "--threads", "2"])
        mm = re.search(r"--budget (\S+)\)", err)
        if rc == 0 or not mm:
            return budget if rc == 0 else None
        budget = mm.group(1)
    return None


def check_model(exe, tmp, name, make):
    path, xpath = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + "_x.npy")
    x, ref, want = make(path)
    np.save(xpath, x)
    rc, out, err = run(exe, [path, "--plan"])
    got = plan_counts(out)
    check(rc == 0 and got == want, "%s: --plan fuses exactly %s, got %s %s" % (name, want, got, err.strip()[-200:]))
    rc, out, _ = run(exe, [path, "--plan", "--no-fuse"])
    check(rc == 0 and plan_counts(out) == {}, "%s: --plan --no-fuse fuses nothing" % name)
    # under a budget operators may be split: the epilogues (bitwise the unfused nodes) are fused
    # once the graph is cut (at 1G nothing is: the same ones as in core), the fusions that round
    # differently the same as in core (weights are packed in core only: a packed B cannot be cut)
    # (nor prologues: in core only, the unfused nodes' bits out of core)
    keep = {k: v for k, v in want.items()
            if k not in ("Packed weights", "BatchNormalization+Relu+Conv", "BatchNormalization+Conv")}
    rc, out, _ = run(exe, [path, "--plan", "--budget", "1G"])
    check(rc == 0 and plan_counts(out) == keep, "%s: --plan --budget 1G fuses %s, got %s" % (name, keep, plan_counts(out)))
    names = list(ref) + (["y2"] if name == "grpinf" else [])  # y2: Inf and NaN, no float64 reference
    res = {t: outputs(exe, path, xpath, names, name + t, e + ["--threads", "2"])
           for t, e in (("f", []), ("n", ["--no-fuse"]))}
    if not res["f"] or not res["n"]:
        return
    for k in ref:
        scale = max(float(np.max(np.abs(ref[k]))), 1e-30)
        ef, en = (float(np.max(np.abs(res[t][k] - ref[k]))) for t in ("f", "n"))
        check(ef <= TOL * scale, "%s %s: fused vs NumPy float64 max err %.2e (unfused %.2e, scale %.3g, tol %.0e)"
              % (name, k, ef, en, scale, TOL))
        if name in ("epi", "cst", "pwt", "pwt6", "grpt", "dense"):  # only copies or per-element epilogues: the unfused bits
            check(np.array_equal(res["f"][k], res["n"][k]), "%s %s: fused bitwise --no-fuse" % (name, k))
    if name == "grpinf":  # skipped padding products change no bit: W finite, or W not packed
        for k in names:
            check(res["f"][k].tobytes() == res["n"][k].tobytes(), "%s %s: fused bitwise --no-fuse" % (name, k))
        check(bool(np.isnan(res["f"]["y2"][0, 0, 0, 0])), "grpinf y2: the Inf times the padding, NaN at (0, 0)")
    if name in ("grpt", "pwt6"):  # W^T takes W's place where it holds W's floats: not held twice
        peaks = {}
        for t, e in (("f", []), ("n", ["--no-fuse"])):
            js = os.path.join(os.path.dirname(path), "%s_%s_stats.json" % (name, t))
            rc, _, _ = run(exe, [path, "--input", "x=" + xpath, "--quiet", "--stats-json", js] + e)
            peaks[t] = json.load(open(js))["tensor_peak_bytes"] if rc == 0 else None
        if name == "grpt":
            twice, beside = 4 * 9 * (2 * 64 * 32 + 64 * 16 + 2 * 48 * 64 + 64 * 64 + 32 * 64), 0  # w1-w3, w8-w11
        else:
            twice, beside = 4 * (64 * 32 + 32 * 48 + 64 * 16), 4 * 64 * 48  # w1, w2, w5; w3's panels (40 -> 48)
        check(None not in peaks.values() and peaks["f"] - peaks["n"] < beside + twice // 2,
              "%s: in-core tensor memory fused %s, unfused %s: the packed weights (%d bytes) are not held "
              "beside their originals" % (name, peaks["f"], peaks["n"], twice))
    again = outputs(exe, path, xpath, list(ref), name + "r", ["--threads", "2"])
    if again:
        check(all(np.array_equal(again[k], res["f"][k]) for k in ref), "%s: a second fused run at 2 threads "
              "repeats bit for bit" % name)
    budget = smallest_budget(exe, path, xpath)
    if check(budget is not None, "%s: out of core runs at the smallest budget (%s)" % (name, budget)):
        ooc = outputs(exe, path, xpath, list(ref), name + "o", ["--budget", budget, "--threads", "2"])
        if ooc:
            check(all(np.array_equal(ooc[k], res["f"][k]) for k in ref),
                  "%s: out of core at --budget %s bitwise the in-core fused outputs" % (name, budget))


def check_torch(exe, tmp, maker):
    import torch
    spec = importlib.util.spec_from_file_location("make_fuse_models", maker)
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    L, d, h, t = 2, 64, 4, 48
    for name, cls, want in (("gpt", mk.GPT, {"LayerNorm": 2 * L + 1, "Attention": L, "Gelu (tanh form)": L}),
                            ("bert", mk.BERT, {"LayerNorm": 2 * L + 1, "Attention": L, "Gelu (erf form)": L})):
        torch.manual_seed(1)
        model = cls(300, d, h, t, L)
        rng = np.random.default_rng(1)
        x = rng.integers(1, 300, (2, t)).astype(np.int64)
        x[1, -10:] = 0
        path, xpath = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + "_x.npy")
        mk.export(model, torch.from_numpy(x), path, 13)
        np.save(xpath, x)
        with torch.no_grad():
            ref = model.double()(torch.from_numpy(x)).numpy()
        rc, out, err = run(exe, [path, "--plan"])
        got = plan_counts(out)
        check(rc == 0 and all(got.get(k) == v for k, v in want.items()),
              "torch %s: --plan fuses %s (got %s) %s" % (name, want, got, err.strip()[-200:]))
        res, plain = outputs(exe, path, xpath, ["y"], name, []), outputs(exe, path, xpath, ["y"], name + "n",
                                                                           ["--no-fuse"])
        if res and plain:
            scale = float(np.max(np.abs(ref)))
            err, en = (float(np.max(np.abs(r["y"] - ref))) for r in (res, plain))
            check(err <= TOL * scale, "torch %s: fused vs torch float64 max err %.2e (unfused %.2e, scale %.3g, "
                  "tol %.0e)" % (name, err, en, scale, TOL))


def main():
    exe, maker = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("epi", model_epi), ("mm", model_mm), ("ln", model_ln), ("attn", model_attn),
                           ("cst", model_cst), ("pwt", model_pwt), ("pwt6", model_pwt6), ("grpt", model_grpt),
                           ("dense", model_dense), ("grpinf", model_grpinf)):
            check_model(exe, tmp, name, make)
        check_torch(exe, tmp, maker)
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Models for the shape inference / folding tests: the shape subgraphs that
PyTorch and Paddle2ONNX exports carry, written with onnx.helper.

Usage: make_infer_models.py OUTDIR

Writes OUTDIR/*.onnx and OUTDIR/expect.txt, one check a line:
  MODEL INPUTS VALUE const DIMS FILE.npy   after inference VALUE is a folded
                                           constant of shape DIMS equal to FILE
  MODEL INPUTS VALUE run DIMS              VALUE is computed at run time, shape DIMS
  MODEL INPUTS - error CODE                hp_graph_infer fails with CODE
INPUTS: NAME=D0xD1x...[;NAME=...] (shapes given to the dynamic inputs);
DIMS: [d0,d1,...] ([] for a scalar).  Expected values come from numpy.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
lines = []


def save(name, nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                                                for o in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(m, os.path.join(OUT, name + ".onnx"))


def dims(shape):
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def shapes(**kw):
    return ";".join("%s=%s" % (k, "x".join(str(d) for d in v)) for k, v in kw.items())


def expect_const(model, ins, value, arr):
    f = "%s_%s.npy" % (model, value)
    np.save(os.path.join(OUT, f), arr)
    lines.append("%s.onnx %s %s const %s %s" % (model, ins, value, dims(arr.shape), f))


def expect_run(model, ins, value, shape):
    lines.append("%s.onnx %s %s run %s" % (model, ins, value, dims(shape)))


def f32in(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


# 1. Upsample-9 (scales input) and Resize-10 (X, scales): the importer makes
#    them Resize-13 (X, roi omitted, scales) whatever the opset
def legacy_resize():
    x = f32in("x", ["N", 2, "H", "W"])
    sc = const("scales", np.array([1, 1, 2, 3], np.float32))
    save("up9", [helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")], [x], ["y"], [sc], 9)
    save("resize10", [helper.make_node("Resize", ["x", "scales"], ["y"], mode="linear")], [x], ["y"], [sc], 10)
    for m in ("up9", "resize10"):
        expect_run(m, shapes(x=(1, 2, 3, 4)), "y", (1, 2, 6, 12))


# 2. PyTorch's opset-9 F.interpolate(x, size=skip.shape[2:]): float32 scales =
#    Cast(size) / Cast(dim); dim * scale must round back to size
def sized_upsample():
    nodes = [
        helper.make_node("Shape", ["skip"], ["ss"]),
        helper.make_node("Slice", ["ss"], ["ss2"], starts=[2], ends=[4], axes=[0]),
        helper.make_node("Cast", ["ss2"], ["ssf"], to=TensorProto.FLOAT),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Slice", ["xs"], ["xs2"], starts=[2], ends=[4], axes=[0]),
        helper.make_node("Cast", ["xs2"], ["xsf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["ssf", "xsf"], ["ratio"]),
        helper.make_node("Concat", ["ones", "ratio"], ["scales"], axis=0),
        helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest"),
    ]
    save("sized9", nodes, [f32in("x", ["N", 2, "H", "W"]), f32in("skip", ["N", 2, "H2", "W2"])], ["y"],
         [const("ones", np.ones(2, np.float32))], 9)
    small, big = (3, 7), (7, 15)
    ratio = np.float32(big[0]) / np.float32(small[0]), np.float32(big[1]) / np.float32(small[1])
    # the double product falls short: a kernel computing in double gets these wrong
    assert all(np.floor(np.float64(s) * np.float64(r)) < b for s, r, b in zip(small, ratio, big))
    expect_const("sized9", shapes(x=(1, 2) + small, skip=(1, 2) + big), "scales",
                 np.array([1, 1, ratio[0], ratio[1]], np.float32))
    expect_run("sized9", shapes(x=(1, 2) + small, skip=(1, 2) + big), "y", (1, 2) + big)


# 3. torch.arange(seq) at opset 9: ConstantOfShape -> NonZero -> Transpose -> Squeeze
def arange9():
    nodes = [
        helper.make_node("Shape", ["tokens"], ["ts"]),
        helper.make_node("Gather", ["ts", "one"], ["seq"], axis=0),
        helper.make_node("Unsqueeze", ["seq"], ["seq1"], axes=[0]),
        helper.make_node("ConstantOfShape", ["seq1"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.int64))),
        helper.make_node("NonZero", ["ones"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
        helper.make_node("Squeeze", ["nzt"], ["pos"], axes=[1]),
        helper.make_node("Gather", ["table", "pos"], ["pe"], axis=0),
        helper.make_node("Gather", ["emb", "tokens"], ["tok"], axis=0),
        helper.make_node("Add", ["tok", "pe"], ["y"]),
    ]
    table = np.arange(40 * 3, dtype=np.float32).reshape(40, 3) * 0.5
    emb = np.ones((50, 3), np.float32)
    tok = helper.make_tensor_value_info("tokens", TensorProto.INT64, ["B", "S"])
    save("arange9", nodes, [tok], ["y"], [const("one", np.array(1, np.int64)), const("table", table),
                                          const("emb", emb)], 9)
    ins = shapes(tokens=(3, 11))
    expect_const("arange9", ins, "pos", np.arange(11, dtype=np.int64))
    expect_const("arange9", ins, "nz", np.arange(11, dtype=np.int64).reshape(1, 11))
    expect_const("arange9", ins, "pe", table[:11])
    expect_run("arange9", ins, "y", (3, 11, 3))
    # NonZero of a run-time value has no shape before it runs
    save("nonzero_rt", [helper.make_node("NonZero", ["x"], ["y"])], [f32in("x", ["N"])], ["y"], [], 13)
    lines.append("nonzero_rt.onnx %s - error ENOTCONST" % shapes(x=(5,)))
    # NonZero of a constant with zeros, rank 2: indices in row-major order
    c = np.array([[0, 3, 0], [1, 0, 2]], np.float32)
    save("nonzero_c", [helper.make_node("NonZero", ["c"], ["y"])], [], ["y"], [const("c", c)], 13)
    expect_const("nonzero_c", "-", "y", np.array(np.nonzero(c), np.int64))


# 4. torch.triu(ones(t, t), diagonal=k) at opset 14+: Trilu over ConstantOfShape
def triu():
    nodes = [
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Gather", ["xs", "one"], ["t"], axis=0),
        helper.make_node("Unsqueeze", ["t", "zero_axis"], ["t1"]),
        helper.make_node("Concat", ["t1", "t1"], ["tt"], axis=0),
        helper.make_node("ConstantOfShape", ["tt"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
    ]
    inits = [const("one", np.array(1, np.int64)), const("zero_axis", np.array([0], np.int64))]
    ks = (-2, 0, 1, 4)
    outs = []
    for k in ks:
        inits.append(const("k%d" % (k + 10), np.array(k, np.int64)))
        for upper in (1, 0):
            name = "%s_%d" % ("u" if upper else "l", k + 10)
            nodes.append(helper.make_node("Trilu", ["ones", "k%d" % (k + 10)], [name], upper=upper))
            outs.append(name)
    nodes.append(helper.make_node("Trilu", ["ones"], ["u_default"]))
    outs.append("u_default")
    save("triu", nodes, [f32in("x", ["B", "T", 4])], outs, inits, 14)
    ins = shapes(x=(2, 6, 4))
    ones = np.ones((6, 6), np.float32)
    for k in ks:
        expect_const("triu", ins, "u_%d" % (k + 10), np.triu(ones, k))
        expect_const("triu", ins, "l_%d" % (k + 10), np.tril(ones, k))
    expect_const("triu", ins, "u_default", np.triu(ones))


# 5. x.view(b, t, heads, -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape
def chain():
    nodes = [
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Gather", ["xs", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["xs", "i1"], ["t"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["t", "ax0"], ["t1"]),
        helper.make_node("Concat", ["b1", "t1", "heads", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [const("i0", np.array(0, np.int64)), const("i1", np.array(-2, np.int64)),
             const("ax0", np.array([0], np.int64)), const("heads", np.array([4], np.int64)),
             const("minus1", np.array([-1], np.int64))]
    save("chain", nodes, [f32in("x", ["B", "T", 32])], ["y"], inits, 13)
    ins = shapes(x=(3, 5, 32))
    expect_const("chain", ins, "shape", np.array([3, 5, 4, -1], np.int64))
    expect_run("chain", ins, "y", (3, 5, 4, 8))


legacy_resize()
sized_upsample()
arange9()
triu()
chain()
with open(os.path.join(OUT, "expect.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")

#!/usr/bin/env python3
"""Models at opsets 1, 9, 13 and 21 and IR versions 3 to 10 against NumPy.

usage: check_opsets.py HPDLF_EXEC

Each model is written here with python3-onnx (opsets above the installed
onnx's own are written by hand: the checker is not run) using the old
forms the importer must normalize: legacy broadcast, attributes that later
became inputs, Softmax's 2-D coercion, Split's num_outputs, Pad's axes...
hpdlf-exec runs it on fixed inputs; every output must match a NumPy
reference computed here.  Also: IR 3 weights listed among the graph inputs
(kept unless --input binds them), float16/bfloat16 weights, inputs and
outputs, every unsupported operator named in one message, --info, wrong
--input/--output names, opsets outside 1..21.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

EXE = None
TMP = None
FAILS = []
RNG = np.random.default_rng(7)


def rnd(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def model(nodes, inputs, outputs, inits, opset, ir, extra_imports=(), inits_as_inputs=False):
    ins = list(inputs)
    if inits_as_inputs:  # what IR 3 required
        ins += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    g = helper.make_graph(nodes, "m", ins, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] +
                          [helper.make_opsetid(d, v) for d, v in extra_imports])
    m.ir_version = ir
    return m


def vi(name, dtype=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def run(m, name, feeds, outs, extra=()):
    path = os.path.join(TMP, name + ".onnx")
    onnx.save(m, path)
    args = [EXE, path, "--quiet"]
    for k, v in feeds.items():
        f = os.path.join(TMP, "%s_in_%s.npy" % (name, k))
        np.save(f, v)
        args += ["--input", "%s=%s" % (k, f)]
    files = {}
    for o in outs:
        files[o] = os.path.join(TMP, "%s_out_%s.npy" % (name, o))
        args += ["--output", "%s=%s" % (o, files[o])]
    p = subprocess.run(args + list(extra), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        FAILS.append("%s: exit %d: %s" % (name, p.returncode, p.stderr.strip()))
        return None
    return {o: np.load(f) for o, f in files.items()}


def compare(name, got, refs, tol=1e-5):
    if got is None:
        return
    for o, ref in refs.items():
        y = got[o]
        if y.shape != ref.shape or y.dtype != ref.dtype:
            FAILS.append("%s/%s: got %s %s, expected %s %s" % (name, o, y.dtype, y.shape, ref.dtype, ref.shape))
            continue
        err = float(np.max(np.abs(y.astype(np.float64) - ref.astype(np.float64)))) if y.size else 0.0
        lim = tol * max(1.0, float(np.max(np.abs(ref.astype(np.float64)))) if ref.size else 1.0)
        if not err <= lim:
            FAILS.append("%s/%s: max |hpdlf - numpy| = %.3g > %.3g" % (name, o, err, lim))
        else:
            print("ok   %-14s %-6s max|err| %.2e" % (name, o, err))


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_2d(x, axis):
    """Softmax before opset 13: the input seen as [prod(dims[:axis]), prod(dims[axis:])]."""
    return softmax(x.reshape(int(np.prod(x.shape[:axis])), -1), 1).reshape(x.shape)


def up2(x):
    return np.repeat(np.repeat(x, 2, axis=2), 2, axis=3)


def init(name, arr):
    return numpy_helper.from_array(arr, name)


def opset1():
    """Opset 1 (IR 3): legacy broadcast, consumed_inputs, attributes as attributes."""
    x = rnd(2, 3, 4, 4)
    b3, s3, slope, w, c = rnd(3), rnd(3), np.abs(rnd(3)) * 0.3, rnd(48, 5), rnd(5)
    inits = [init("b3", b3), init("s3", s3), init("slope", slope), init("w", w), init("c", c),
             init("tiles", np.array(2, np.int64)), init("axis", np.array(3, np.int64))]
    mk = helper.make_node
    nodes = [
        mk("Add", ["x", "b3"], ["a"], broadcast=1, axis=1),
        mk("Mul", ["a", "s3"], ["m"], broadcast=1, axis=1, consumed_inputs=[0, 0]),
        mk("PRelu", ["m", "slope"], ["p"]),
        mk("Relu", ["p"], ["r"], consumed_inputs=[0]),
        mk("Softmax", ["r"], ["sm"]),
        mk("Reshape", ["r"], ["f"], shape=[2, 48]),
        mk("Gemm", ["f", "w", "c"], ["g"], broadcast=1),
        mk("Cast", ["g"], ["gc"], to="FLOAT"),
        mk("Concat", ["gc", "gc"], ["cc"]),
        mk("Selu", ["cc"], ["se"]),
        mk("Pad", ["x"], ["pd"], paddings=[0, 0, 1, 1, 0, 0, 1, 1], value=0.5),
        mk("Upsample", ["x"], ["up"], height_scale=2.0, width_scale=2.0),
        mk("Slice", ["x"], ["sl"], starts=[1], ends=[3], axes=[2]),
        mk("ReduceMean", ["x"], ["rm"], axes=[2, 3], keepdims=0),
        mk("Clip", ["x"], ["cl"], min=-0.2, max=0.3),
        mk("Split", ["x"], ["s1", "s2"], axis=1, split=[1, 2]),
        mk("ReduceSum", ["x"], ["rs"], axes=[1], keepdims=1),
        mk("Squeeze", ["rs"], ["sq"], axes=[1]),
        mk("Tile", ["x", "tiles", "axis"], ["tl"]),
        mk("Dropout", ["x"], ["dr"], is_test=1, ratio=0.3),
        mk("HardSigmoid", ["x"], ["hs"], consumed_inputs=[0]),
        mk("GlobalLpPool", ["x"], ["glp"], p=3.0),
    ]
    a = x + b3.reshape(1, 3, 1, 1)
    m = a * s3.reshape(1, 3, 1, 1)
    p = np.where(m < 0, m * slope.reshape(1, 3, 1, 1), m)
    r = np.maximum(p, 0)
    g = r.reshape(2, 48) @ w + c
    cc = np.concatenate([g, g], axis=1)
    se = np.where(cc > 0, 1.0507 * cc, 1.0507 * 1.6732 * (np.exp(cc) - 1)).astype(np.float32)
    refs = {"sm": softmax_2d(r, 1), "se": se,
            "pd": np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=0.5), "up": up2(x),
            "sl": x[:, :, 1:3], "rm": x.mean(axis=(2, 3)), "cl": np.clip(x, -0.2, 0.3), "s1": x[:, :1],
            "s2": x[:, 1:], "sq": x.sum(axis=1), "tl": np.concatenate([x, x], axis=3), "dr": x,
            "hs": np.clip(0.2 * x + 0.5, 0, 1), "glp": np.cbrt((np.abs(x) ** 3).sum(axis=(2, 3), keepdims=True))}
    outs = [vi(k) for k in refs]
    md = model(nodes, [vi("x", shape=[2, 3, 4, 4])], outs, inits, 1, 3, inits_as_inputs=True)
    compare("opset1-ir3", run(md, "opset1", {"x": x}, list(refs)), refs)


def opset9():
    """Opset 9, IR 3: weights among the graph inputs, a bias built by
    ConstantOfShape, Upsample-9, BatchNormalization-9, Softmax coerced."""
    x = rnd(1, 3, 8, 8)
    w, b = rnd(4, 3, 3, 3) * 0.3, rnd(4)
    sc, bi, mean, var = rnd(4), rnd(4), rnd(4) * 0.1, np.abs(rnd(4)) + 0.5
    w2 = rnd(4, 10)
    inits = [init("W", w), init("B", b), init("scale", sc), init("bias", bi), init("mean", mean), init("var", var),
             init("scales", np.array([1, 1, 2, 2], np.float32)), init("W2", w2)]
    mk = helper.make_node
    nodes = [
        mk("Conv", ["x", "W", "B"], ["conv"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        mk("BatchNormalization", ["conv", "scale", "bias", "mean", "var"], ["bn"], epsilon=1e-5),
        mk("Relu", ["bn"], ["r"]),
        mk("Softmax", ["r"], ["sm4"], axis=1),
        mk("Upsample", ["r", "scales"], ["up"], mode="nearest"),
        mk("GlobalAveragePool", ["up"], ["gap"]),
        mk("Flatten", ["gap"], ["flat"]),
        mk("Constant", [], ["c2shape"], value=numpy_helper.from_array(np.array([10], np.int64))),
        mk("ConstantOfShape", ["c2shape"], ["C2"], value=numpy_helper.from_array(np.array([0.1], np.float32))),
        mk("Gemm", ["flat", "W2", "C2"], ["logits"]),
        mk("Dropout", ["logits"], ["d"], ratio=0.5),
        mk("Softmax", ["d"], ["prob"], axis=1),
    ]
    md = model(nodes, [vi("x", shape=[1, 3, 8, 8])], [vi("prob"), vi("sm4")], inits, 9, 3, inits_as_inputs=True)

    def ref(w_):
        conv = np.zeros((1, 4, 8, 8), np.float64)
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        for i in range(3):
            for j in range(3):
                conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 8, j:j + 8], w_[:, :, i, j])
        conv += b.reshape(1, 4, 1, 1)
        bn = (conv - mean.reshape(1, 4, 1, 1)) / np.sqrt(var.reshape(1, 4, 1, 1) + 1e-5) * sc.reshape(1, 4, 1, 1) \
            + bi.reshape(1, 4, 1, 1)
        r = np.maximum(bn, 0)
        logits = r.mean(axis=(2, 3)) @ w2 + 0.1
        return {"prob": softmax(logits, 1).astype(np.float32), "sm4": softmax_2d(r, 1).astype(np.float32)}

    compare("opset9-ir3", run(md, "opset9", {"x": x}, ["prob", "sm4"]), ref(w), 1e-4)
    # a weight listed as an input keeps its value unless --input binds it
    w_other = rnd(4, 3, 3, 3) * 0.3
    compare("opset9-ir3-bound", run(md, "opset9b", {"x": x, "W": w_other}, ["prob", "sm4"]), ref(w_other), 1e-4)


def opset13(ir):
    """Opset 13: axes/split/pads/min/max as inputs, Softmax along one axis."""
    x = rnd(2, 3, 4, 4)
    inits = [init("ax2", np.array([2], np.int64)), init("split", np.array([1, 2], np.int64)),
             init("lo", np.array(-0.2, np.float32)), init("hi", np.array(0.3, np.float32)),
             init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)), init("pv", np.array(0.5, np.float32)),
             init("scales", np.array([1, 1, 2, 2], np.float32))]
    mk = helper.make_node
    nodes = [
        mk("ReduceSum", ["x", "ax2"], ["rs"], keepdims=1),
        mk("Squeeze", ["rs", "ax2"], ["sq"]),
        mk("Split", ["x", "split"], ["s1", "s2"], axis=1),
        mk("Softmax", ["x"], ["sm"], axis=1),
        mk("LogSoftmax", ["x"], ["lsm"], axis=1),
        mk("Resize", ["x", "", "scales"], ["rz"], mode="nearest"),
        mk("Clip", ["x", "lo", "hi"], ["cl"]),
        mk("Pad", ["x", "pads", "pv"], ["pd"]),
        mk("ReduceMean", ["x"], ["rm"], axes=[1], keepdims=0),
    ]
    refs = {"sq": x.sum(axis=2), "s1": x[:, :1], "s2": x[:, 1:], "sm": softmax(x, 1),
            "lsm": np.log(softmax(x, 1)), "rz": up2(x), "cl": np.clip(x, -0.2, 0.3),
            "pd": np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=0.5), "rm": x.mean(axis=1)}
    md = model(nodes, [vi("x", shape=[2, 3, 4, 4])], [vi(k) for k in refs], inits, 13, ir,
               inits_as_inputs=ir < 4)
    compare("opset13-ir%d" % ir, run(md, "opset13_ir%d" % ir, {"x": x}, list(refs)), refs)


def opset21():
    """Opset 21, IR 10: Reduce* axes inputs (18), Split num_outputs (18),
    Pad axes (18), Resize-19 attributes, Cast saturate (19), HardSwish;
    opset imports of domains no node uses."""
    x, z = rnd(2, 3, 4, 4), rnd(2, 7)
    ls, lb = rnd(7), rnd(7)
    inits = [init("ax23", np.array([2, 3], np.int64)), init("ax1", np.array([1], np.int64)),
             init("pads", np.array([1, 1], np.int64)), init("pv", np.array(0.5, np.float32)),
             init("pax", np.array([3], np.int64)), init("scales", np.array([1, 1, 2, 2], np.float32)),
             init("ls", ls), init("lb", lb)]
    mk = helper.make_node
    nodes = [
        mk("ReduceMean", ["x", "ax23"], ["rm"], keepdims=0),
        mk("ReduceMax", ["x", "ax1"], ["rmx"], keepdims=1),
        mk("Split", ["z"], ["z1", "z2", "z3"], axis=1, num_outputs=3),
        mk("Pad", ["x", "pads", "pv", "pax"], ["pd"]),
        mk("Resize", ["x", "", "scales"], ["rz"], mode="nearest", antialias=0, keep_aspect_ratio_policy="stretch"),
        mk("Cast", ["x"], ["cs"], to=TensorProto.FLOAT, saturate=1),
        mk("Softmax", ["x"], ["sm"], axis=1),
        mk("HardSwish", ["x"], ["ge"]),
        mk("LayerNormalization", ["z", "ls", "lb"], ["ln"], axis=-1, epsilon=1e-5),
    ]
    mu, va = z.mean(axis=-1, keepdims=True), z.var(axis=-1, keepdims=True)
    refs = {"rm": x.mean(axis=(2, 3)), "rmx": x.max(axis=1, keepdims=True), "z1": z[:, :3], "z2": z[:, 3:6],
            "z3": z[:, 6:], "pd": np.pad(x, ((0, 0), (0, 0), (0, 0), (1, 1)), constant_values=0.5), "rz": up2(x),
            "cs": x, "sm": softmax(x, 1), "ge": x * np.clip(x / 6 + 0.5, 0, 1), "ln": ((z - mu) / np.sqrt(va + 1e-5) * ls + lb)}
    md = model(nodes, [vi("x", shape=[2, 3, 4, 4]), vi("z", shape=[2, 7])], [vi(k) for k in refs], inits, 21, 10,
               extra_imports=[("ai.onnx.ml", 3), ("com.microsoft", 1)])
    compare("opset21-ir10", run(md, "opset21", {"x": x, "z": z}, list(refs)), refs)


def bf16_tensor(name, arr):
    bits = (arr.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    t = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=list(arr.shape))
    t.raw_data = bits.tobytes()
    return t, (bits.astype(np.uint32) << 16).view(np.float32)


def half():
    """float16 input, weights, Constant and output; a bfloat16 weight; all
    computed in float32, the output returned as float16."""
    x = rnd(2, 4).astype(np.float16)
    w, b = rnd(4, 3).astype(np.float16), rnd(3).astype(np.float16)
    wb, wb32 = bf16_tensor("wb", rnd(3, 3))
    k = np.array([0.5, -1.0, 2.0], np.float16)
    mk = helper.make_node
    nodes = [mk("MatMul", ["x", "w"], ["mm"]), mk("Add", ["mm", "b"], ["a"]),
             mk("Constant", [], ["k"], value=numpy_helper.from_array(k)), mk("Mul", ["a", "k"], ["ak"]),
             mk("Cast", ["ak"], ["ak32"], to=TensorProto.FLOAT), mk("MatMul", ["ak32", "wb"], ["mb"]),
             mk("Relu", ["mb"], ["r"]), mk("Cast", ["r"], ["y"], to=TensorProto.FLOAT16),
             mk("Cast", ["r"], ["yb"], to=TensorProto.BFLOAT16)]
    md = model(nodes, [vi("x", TensorProto.FLOAT16, [2, 4])],
               [vi("y", TensorProto.FLOAT16, [2, 3]), vi("yb", TensorProto.BFLOAT16, [2, 3])],
               [init("w", w), init("b", b), wb], 13, 8)
    ak = (x.astype(np.float32) @ w.astype(np.float32) + b.astype(np.float32)) * k.astype(np.float32)
    r = np.maximum(ak @ wb32, 0)
    got = run(md, "half", {"x": x}, ["y", "yb"])
    if got is not None:  # bfloat16 comes back as uint16 bits; widened here to compare
        if got["yb"].dtype != np.uint16:
            FAILS.append("half/yb: bfloat16 output written as %s, expected uint16 bits" % got["yb"].dtype)
        got["yb"] = (got["yb"].astype(np.uint32) << 16).view(np.float32)
    compare("half", got, {"y": r.astype(np.float16), "yb": r}, 1e-2)
    # a random float16 input works too (no --input)
    p = subprocess.run([EXE, os.path.join(TMP, "half.onnx"), "--quiet"], capture_output=True, text=True, timeout=300)
    if p.returncode:
        FAILS.append("half, random input: exit %d: %s" % (p.returncode, p.stderr.strip()))


def groupnorm18():
    """GroupNormalization-18's per-group scale and bias, normalized to opset
    21's per-channel ones.  Without a GroupNormalization kernel the model
    must load and be refused for that operator alone."""
    x, sc, bi = rnd(2, 4, 3, 3), rnd(2), rnd(2)
    md = model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-5)],
               [vi("x", shape=[2, 4, 3, 3])], [vi("y")], [init("s", sc), init("b", bi)], 18, 8)
    path = os.path.join(TMP, "gn18.onnx")
    onnx.save(md, path)
    p = subprocess.run([EXE, path, "--quiet"], capture_output=True, text=True, timeout=300)
    if "operator GroupNormalization is not supported" in p.stderr:
        print("ok   groupnorm18    (no GroupNormalization kernel: refused for that operator only)")
        return
    g = x.reshape(2, 2, -1)
    y = ((g - g.mean(axis=-1, keepdims=True)) / np.sqrt(g.var(axis=-1, keepdims=True) + 1e-5)).reshape(x.shape)
    y = y * np.repeat(sc, 2).reshape(1, 4, 1, 1) + np.repeat(bi, 2).reshape(1, 4, 1, 1)
    compare("groupnorm18", run(md, "gn18", {"x": x}, ["y"]), {"y": y.astype(np.float32)}, 1e-4)


def ir2():
    """IR 2 had no opset imports: its operators are opset 1's."""
    x, b = rnd(2, 3, 2), rnd(3)
    md = model([helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)], [vi("x", shape=[2, 3, 2])],
               [vi("y")], [init("b", b)], 1, 2, inits_as_inputs=True)
    del md.opset_import[:]
    compare("ir2-no-opset", run(md, "ir2", {"x": x}, ["y"]), {"y": x + b.reshape(1, 3, 1)})


def expect_fail(name, m, args, status, *needles):
    path = os.path.join(TMP, name + ".onnx")
    onnx.save(m, path)
    p = subprocess.run([EXE, path] + list(args), capture_output=True, text=True, timeout=300)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    if p.returncode != status or not lines:
        FAILS.append("%s: exit %d, expected %d: %s" % (name, p.returncode, status, p.stderr.strip()))
        return
    for n in needles:
        if n not in lines[0]:
            FAILS.append("%s: '%s' not in '%s'" % (name, n, lines[0]))
            return
    print("ok   %-14s exit %d: %s" % (name, status, lines[0][:150]))


def problems():
    """Every unsupported operator in one message; names the model lacks; opsets outside 1..21."""
    mk = helper.make_node
    nodes = [mk("Foo", ["x"], ["a"], name="f1", domain="com.example"), mk("Relu", ["a"], ["b"], name="r"),
             mk("Foo", ["b"], ["c"], name="f2", domain="com.example"),
             mk("Bar", ["c"], ["y"], name="b1", domain="com.example")]
    m = model(nodes, [vi("x", shape=[2, 3])], [vi("y")], [], 17, 8, extra_imports=[("com.example", 1)])
    expect_fail("unsupported", m, [], 2, "2 operators are not supported", "com.example.Foo (2 nodes: 'f1', 'f2')",
                "com.example.Bar (1 node: 'b1')")
    relu = model([mk("Relu", ["x"], ["y"])], [vi("x", shape=[2, 3])], [vi("y")], [], 17, 8)
    expect_fail("bad-input", relu, ["--input", "nope=x.npy"], 2, "--input nope", "its inputs: x")
    expect_fail("bad-output", relu, ["--output", "nope=y.npy"], 2, "--output nope", "its outputs: y")
    expect_fail("opset22", model([mk("Relu", ["x"], ["y"])], [vi("x", shape=[2])], [vi("y")], [], 22, 10), [], 2,
                "opset 22", "1..21", "onnx.version_converter")
    return m


def info(unsupported):
    path = os.path.join(TMP, "opset21.onnx")
    p = subprocess.run([EXE, path, "--info"], capture_output=True, text=True, timeout=300)
    want = ["IR version 10, opset 21 (ai.onnx), ai.onnx.ml 3, com.microsoft 1", "inputs (2):", "float32  [2,3,4,4]",
            "parameters: 25 in 8 initializers", "Softmax 1", "unsupported operators: none", "outputs",
            "ln", "[2,7]"]
    miss = [w for w in want if w not in p.stdout]
    if p.returncode or miss:
        FAILS.append("--info: exit %d, lacks %s:\n%s%s" % (p.returncode, miss, p.stdout, p.stderr))
    else:
        print("ok   --info\n" + p.stdout)
    path = os.path.join(TMP, "unsupported.onnx")
    p = subprocess.run([EXE, path, "--info"], capture_output=True, text=True, timeout=300)
    if p.returncode or "unsupported operators: com.example.Foo (2 nodes), com.example.Bar (1 node)" not in p.stdout:
        FAILS.append("--info of an unsupported model: exit %d:\n%s%s" % (p.returncode, p.stdout, p.stderr))
    else:
        print("ok   --info (unsupported)")


def main():
    global EXE, TMP
    EXE = sys.argv[1]
    with tempfile.TemporaryDirectory() as TMP:
        opset1()
        opset9()
        for ir in (3, 7, 10):
            opset13(ir)
        opset21()
        ir2()
        groupnorm18()
        half()
        info(problems())
    for f in FAILS:
        print("FAIL " + f)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Models for the importer tests, written with onnx.helper (and seeded numpy).

Usage: make_import_models.py OUTDIR [--big]

Writes into OUTDIR, with what the C test must find in them:
  inits.onnx + inits.txt     initializers of every supported dtype as raw_data and
                             typed fields (scalars, empty, small, large); lines
                             "NAME file|memory", bytes in NAME.npy
  ext.onnx + ext.txt         external data (two files, offsets, gaps, no length key);
                             lines "NAME file|memory FILE OFFSET", bytes in NAME.npy
  consts.onnx                Constant nodes of every form; values in k_*.npy
  attrs.onnx                 attributes of every type on a custom-domain node
  dyn.onnx                   dynamic dims, an initializer listed as input, rank 0
  norm_opsetN.onnx + .txt    old/new forms of Split, Squeeze, Unsqueeze, Clip, Pad,
                             ReduceSum, ReduceMean, ReduceMax, Slice, Dropout, TopK,
                             Upsample, Resize, BatchNormalization, Cast (N = 7, 9,
                             10, 11, 13, 17); expected normalized nodes, see below
  emb.onnx                   3 x 24 MiB embedded raw_data tensors; emb1.npy
  bad/*.onnx + bad.txt       bad models: "FILE<TAB>CODE<TAB>substring<TAB>..."
  big.onnx + big.bin         (--big) 4 x 1 GiB + a tail tensor of external data in a
                             sparse 4.5 GiB file; tail.npy

Expected-node lines (norm_opsetN.txt):
  NAME OP NINPUTS SPEC...   SPEC: K=@VALUE (input K is that model value),
  K=x (omitted), K=i64:a,b (constant int64 1-D), K=f32:a,b (float32 1-D),
  K=f32s:a (float32 scalar), -ATTR (absent), =ATTR:VALUE (present, equal)
"""
import os
import sys

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(11)
OUT = sys.argv[1]
INLINE_MAX = 4096  # documented: initializers up to this size are read at load


def save(model, path, check=True):
    if check:
        onnx.checker.check_model(model)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def model_of(graph, opset=13, ir=None):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir:
        m.ir_version = ir
    return m


def npy(name, arr):
    np.save(os.path.join(OUT, name + ".npy"), np.array(arr, order="C"))  # ascontiguousarray makes 0-d 1-d


def sample(dtype, shape):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -2**40), min(info.max, 2**40)
        return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


DTYPES = [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE), (np.int64, TensorProto.INT64),
          (np.int32, TensorProto.INT32), (np.int8, TensorProto.INT8), (np.uint8, TensorProto.UINT8),
          (np.bool_, TensorProto.BOOL)]


def typed_tensor(name, arr, code):
    vals = arr.flatten().tolist()
    if arr.dtype == np.bool_:
        vals = [int(v) for v in vals]
    return helper.make_tensor(name, code, arr.shape, vals, raw=False)


def inits():
    tensors, lines = [], []
    for dt, code in DTYPES:
        tag = np.dtype(dt).name
        big = (INLINE_MAX // np.dtype(dt).itemsize + 37,)  # just over the inline limit
        for shape, label in [((), "scalar"), ((0,), "empty"), ((3, 4), "small"), (big, "big"), ((2, 3, 2, 2, 1, 3), "rank6")]:
            arr = sample(dt, shape)
            raw = f"raw_{tag}_{label}"
            tensors.append(numpy_helper.from_array(arr, raw))
            lines.append(f"{raw} {'file' if arr.nbytes > INLINE_MAX else 'memory'}")
            npy(raw, arr)
            typ = f"typed_{tag}_{label}"
            tensors.append(typed_tensor(typ, arr, code))
            lines.append(f"{typ} memory")
            npy(typ, arr)
    # unused float16 initializer: fine at load, refused only when used
    tensors.append(numpy_helper.from_array(np.ones((4,), np.float16), "unused_f16"))
    nodes = [helper.make_node("Identity", [t.name], ["out_" + t.name]) for t in tensors if t.name != "unused_f16"]
    outs = [helper.make_tensor_value_info("out_" + t.name, t.data_type, list(t.dims)) for t in tensors if t.name != "unused_f16"]
    g = helper.make_graph(nodes, "inits", [], outs, tensors)
    save(model_of(g), os.path.join(OUT, "inits.onnx"))
    with open(os.path.join(OUT, "inits.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def ext_tensor(name, arr, location, offset, with_length=True):
    t = numpy_helper.from_array(arr, name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    keys = [("location", location), ("offset", str(offset))] + ([("length", str(arr.nbytes))] if with_length else [])
    for k, v in keys:
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def ext():
    os.makedirs(os.path.join(OUT, "sub"), exist_ok=True)
    specs = [("e_a", np.float32, (64, 64), "w.bin", 0, True), ("e_b", np.int64, (1000,), "w.bin", 20480, True),
             ("e_c", np.float32, (32, 32), "w.bin", 40000, True), ("e_d", np.float64, (700,), "sub/w2.bin", 8, False),
             ("e_e", np.uint8, (5000,), "w.bin", 50001, True)]
    files, tensors, lines = {}, [], []
    for name, dt, shape, loc, off, with_len in specs:
        arr = sample(dt, shape)
        buf = files.setdefault(loc, bytearray())
        if len(buf) < off + arr.nbytes:
            buf.extend(b"\xa5" * (off + arr.nbytes - len(buf)))
        buf[off:off + arr.nbytes] = arr.tobytes()
        tensors.append(ext_tensor(name, arr, loc, off, with_len))
        lines.append(f"{name} {'file' if arr.nbytes > INLINE_MAX else 'memory'} {os.path.basename(loc)} {off}")
        npy(name, arr)
    for loc, buf in files.items():
        with open(os.path.join(OUT, loc), "wb") as f:
            f.write(buf + b"trailing bytes")
    emb = sample(np.float32, (50, 50))
    tensors.append(numpy_helper.from_array(emb, "e_embedded"))
    lines.append("e_embedded file model 0")
    npy("e_embedded", emb)
    nodes = [helper.make_node("Identity", [t.name], ["o_" + t.name]) for t in tensors]
    outs = [helper.make_tensor_value_info("o_" + t.name, t.data_type, None) for t in tensors]
    m = model_of(helper.make_graph(nodes, "ext", [], outs, tensors))
    save(m, os.path.join(OUT, "ext.onnx"), check=False)
    with open(os.path.join(OUT, "ext.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def consts():
    vals = {
        "k_tensor": ("value", numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) / 4)),
        "k_typed": ("value", helper.make_tensor("t", TensorProto.INT64, [3], [7, -8, 2**40])),
        "k_float": ("value_float", 2.5),
        "k_floats": ("value_floats", [1.0, -2.0, 3.5]),
        "k_int": ("value_int", 42),
        "k_ints": ("value_ints", [4, -5]),
        "k_empty": ("value", numpy_helper.from_array(np.zeros((0,), np.int64))),
        "k_bool": ("value", helper.make_tensor("b", TensorProto.BOOL, [2], [1, 0])),
        "k_scalar_f64": ("value", numpy_helper.from_array(np.array(-0.125, np.float64))),
    }
    nodes, outs = [], []
    for name, (attr, v) in vals.items():
        nodes.append(helper.make_node("Constant", [], [name], name="c_" + name, **{attr: v}))
        nodes.append(helper.make_node("Identity", [name], ["o_" + name]))
        outs.append(helper.make_tensor_value_info("o_" + name, TensorProto.UNDEFINED, None))
        if attr == "value":
            ref = numpy_helper.to_array(v)
        elif attr.endswith("s"):
            ref = np.array(v, np.float32 if "float" in attr else np.int64)
        else:
            ref = np.array(v, np.float32 if "float" in attr else np.int64)
        npy(name, ref)
    # a Constant used before its node appears (nodes are sorted on import)
    nodes.insert(0, helper.make_node("Identity", ["k_late"], ["o_k_late"]))
    nodes.append(helper.make_node("Constant", [], ["k_late"], value_ints=[9]))
    outs.append(helper.make_tensor_value_info("o_k_late", TensorProto.INT64, None))
    npy("k_late", np.array([9], np.int64))
    save(model_of(helper.make_graph(nodes, "consts", [], outs)), os.path.join(OUT, "consts.onnx"), check=False)


def attrs():
    t = numpy_helper.from_array(np.array([0.5, -1.0], np.float32))
    n1 = helper.make_node("NoSuchOp", ["x"], ["h"], name="nosuch")
    n2 = helper.make_node("AllAttrs", ["h"], ["y"], name="allattrs", domain="test.domain", f=1.5, i=-7,
                          s=b"hello\x00world", t=t, floats=[1.0, 2.5], ints=[1, -2, 3000000000],
                          strings=[b"a", b"bc", b""])
    g = helper.make_graph([n1, n2], "attrs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("test.domain", 1)])
    save(m, os.path.join(OUT, "attrs.onnx"), check=False)


def dyn():
    w = numpy_helper.from_array(np.ones((5,), np.float32), "w")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, None, 5]),
              helper.make_tensor_value_info("w", TensorProto.FLOAT, [5]),
              helper.make_tensor_value_info("z", TensorProto.INT64, None),
              helper.make_tensor_value_info("s", TensorProto.DOUBLE, [])]
    nodes = [helper.make_node("Add", ["x", "w"], ["y"]), helper.make_node("Identity", ["z"], ["zo"]),
             helper.make_node("Identity", ["s"], ["so"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, None, 5]),
            helper.make_tensor_value_info("zo", TensorProto.INT64, None),
            helper.make_tensor_value_info("s", TensorProto.DOUBLE, [])]
    g = helper.make_graph(nodes, "dyn", inputs, outs, [w])
    save(model_of(g, 13), os.path.join(OUT, "dyn.onnx"), check=False)  # 1.12 wants shapes; unknown rank is legal


class Norm:
    """One model per opset holding old or new forms, plus the expected normalized nodes."""

    def __init__(self, opset):
        self.opset, self.nodes, self.inits, self.lines = opset, [], [], []

    def const(self, name, arr, how):
        if how == "init":
            self.inits.append(numpy_helper.from_array(arr, name))
        else:
            self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr)))
        return name

    def node(self, op, inputs, outputs, name, expect, **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))
        self.lines.append(name + " " + expect)


def ints(v):
    return "i64:" + ",".join(str(x) for x in v)


def floats(v):
    return "f32:" + ",".join(repr(float(x)) for x in v)


def norm(opset):
    n = Norm(opset)
    old13, old11, old10, old12 = opset < 13, opset < 11, opset < 10, opset < 12
    # Split along axis 1 into [2, 4]
    if old13:
        n.node("Split", ["x"], ["sp0", "sp1"], "split", f"Split 2 0=@x 1={ints([2, 4])} -split =axis:1", axis=1, split=[2, 4])
    else:
        n.node("Split", ["x", n.const("split_sizes", np.array([2, 4], np.int64), "init")], ["sp0", "sp1"], "split",
               f"Split 2 0=@x 1={ints([2, 4])} =axis:1", axis=1)
    # Unsqueeze then Squeeze axis 0
    if old13:
        n.node("Unsqueeze", ["x"], ["u"], "unsqueeze", f"Unsqueeze 2 0=@x 1={ints([0])} -axes", axes=[0])
        n.node("Squeeze", ["u"], ["sq"], "squeeze", f"Squeeze 2 0=@u 1={ints([0])} -axes", axes=[0])
        n.node("Squeeze", ["u"], ["sq_all"], "squeeze_all", "Squeeze 1 0=@u")
    else:
        ax = n.const("axes0", np.array([0], np.int64), "node")
        n.node("Unsqueeze", ["x", ax], ["u"], "unsqueeze", f"Unsqueeze 2 0=@x 1={ints([0])}")
        n.node("Squeeze", ["u", ax], ["sq"], "squeeze", f"Squeeze 2 0=@u 1={ints([0])}")
        n.node("Squeeze", ["u"], ["sq_all"], "squeeze_all", "Squeeze 1 0=@u")
    # Clip
    if old11:
        n.node("Clip", ["x"], ["c"], "clip", "Clip 3 0=@x 1=f32s:-0.5 2=f32s:0.5 -min -max", min=-0.5, max=0.5)
        n.node("Clip", ["x"], ["c6"], "clip_max", "Clip 3 0=@x 1=x 2=f32s:6.0 -max", max=6.0)
    else:
        lo = n.const("lo", np.array(-0.5, np.float32), "node")
        hi = n.const("hi", np.array(0.5, np.float32), "init")
        n.node("Clip", ["x", lo, hi], ["c"], "clip", "Clip 3 0=@x 1=f32s:-0.5 2=f32s:0.5")
        six = n.const("six", np.array(6.0, np.float32), "node")
        n.node("Clip", ["x", "", six], ["c6"], "clip_max", "Clip 3 0=@x 1=x 2=f32s:6.0")
    # Pad
    pads = [0, 0, 1, 1, 0, 0, 1, 1]
    if old11:
        n.node("Pad", ["x"], ["p"], "pad", f"Pad 3 0=@x 1={ints(pads)} 2=f32s:1.5 -pads -value =mode:reflect",
               pads=pads, value=1.5, mode="reflect")
        n.node("Pad", ["x"], ["p0"], "pad_novalue", f"Pad 2 0=@x 1={ints(pads)} -pads", pads=pads)
    else:
        pv = n.const("pads", np.array(pads, np.int64), "init")
        n.node("Pad", ["x", pv, n.const("padv", np.array(1.5, np.float32), "node")], ["p"], "pad",
               f"Pad 3 0=@x 1={ints(pads)} 2=f32s:1.5 =mode:reflect", mode="reflect")
        n.node("Pad", ["x", pv], ["p0"], "pad_novalue", f"Pad 2 0=@x 1={ints(pads)}")
    # Reductions
    if old13:
        n.node("ReduceSum", ["x"], ["rs"], "rsum", f"ReduceSum 2 0=@x 1={ints([2, 3])} -axes =keepdims:1",
               axes=[2, 3], keepdims=1)
    else:
        n.node("ReduceSum", ["x", n.const("rs_axes", np.array([2, 3], np.int64), "init")], ["rs"], "rsum",
               f"ReduceSum 2 0=@x 1={ints([2, 3])} =keepdims:1", keepdims=1)
    n.node("ReduceMean", ["x"], ["rm"], "rmean", f"ReduceMean 2 0=@x 1={ints([1, -1])} -axes =keepdims:0",
           axes=[1, -1], keepdims=0)
    n.node("ReduceMax", ["x"], ["rx"], "rmax", "ReduceMax 1 0=@x")
    # Slice
    if old10:
        n.node("Slice", ["x"], ["sl"], "slice", f"Slice 4 0=@x 1={ints([0, 1])} 2={ints([1, 3])} 3={ints([2, 3])} -starts -ends -axes",
               starts=[0, 1], ends=[1, 3], axes=[2, 3])
        n.node("Slice", ["x"], ["sl2"], "slice_noaxes", f"Slice 3 0=@x 1={ints([1])} 2={ints([2])}", starts=[1], ends=[2])
    else:
        st = n.const("starts", np.array([0, 1], np.int64), "init")
        en = n.const("ends", np.array([1, 3], np.int64), "node")
        n.node("Slice", ["x", st, en, n.const("sl_axes", np.array([2, 3], np.int64), "init")], ["sl"], "slice",
               f"Slice 4 0=@x 1={ints([0, 1])} 2={ints([1, 3])} 3={ints([2, 3])}")
        n.node("Slice", ["x", n.const("st1", np.array([1], np.int64), "init"), n.const("en2", np.array([2], np.int64), "init")],
               ["sl2"], "slice_noaxes", f"Slice 3 0=@x 1={ints([1])} 2={ints([2])}")
    # Dropout
    if old12:
        n.node("Dropout", ["x"], ["d"], "dropout", "Dropout 2 0=@x 1=f32s:0.25 -ratio", ratio=0.25)
    else:
        n.node("Dropout", ["x", n.const("ratio", np.array(0.25, np.float32), "node")], ["d"], "dropout",
               "Dropout 2 0=@x 1=f32s:0.25")
    # TopK
    if old10:
        n.node("TopK", ["x"], ["tv", "ti"], "topk", f"TopK 2 0=@x 1={ints([3])} -k =axis:3", k=3, axis=3)
    else:
        n.node("TopK", ["x", n.const("k", np.array([3], np.int64), "init")], ["tv", "ti"], "topk",
               f"TopK 2 0=@x 1={ints([3])} =axis:3", axis=3)
    # Upsample / Resize
    up = "=coordinate_transformation_mode:asymmetric"
    scales = [1.0, 1.0, 2.0, 2.0]
    if opset < 9:
        n.node("Upsample", ["x"], ["up"], "upsample", f"Resize 3 0=@x 1=x 2={floats(scales)} -scales =mode:nearest {up} =nearest_mode:floor",
               scales=scales, mode="nearest")
        n.node("Upsample", ["x"], ["upl"], "upsample_lin", f"Resize 3 0=@x 1=x 2={floats(scales)} -scales =mode:linear {up} -nearest_mode",
               scales=scales, mode="linear")
    elif opset == 9:
        sc = n.const("scales", np.array(scales, np.float32), "init")
        n.node("Upsample", ["x", sc], ["up"], "upsample", f"Resize 3 0=@x 1=x 2=@scales =mode:nearest {up} =nearest_mode:floor",
               mode="nearest")
        n.node("Upsample", ["x", sc], ["upl"], "upsample_lin", f"Resize 3 0=@x 1=x 2=@scales =mode:linear {up} -nearest_mode",
               mode="linear")
    elif opset == 10:
        sc = n.const("scales", np.array(scales, np.float32), "node")
        n.node("Resize", ["x", sc], ["up"], "resize", f"Resize 3 0=@x 1=x 2={floats(scales)} =mode:nearest {up} =nearest_mode:floor",
               mode="nearest")
    else:
        sc = n.const("scales", np.array(scales, np.float32), "init")
        if opset == 11:
            roi = n.const("roi", np.zeros((0,), np.float32), "init")
            n.node("Resize", ["x", roi, sc], ["up"], "resize", "Resize 3 0=@x 1=f32: 2=@scales =mode:nearest -coordinate_transformation_mode",
                   mode="nearest")
        else:
            n.node("Resize", ["x", "", sc], ["up"], "resize", "Resize 3 0=@x 1=x 2=@scales =mode:nearest -coordinate_transformation_mode",
                   mode="nearest")
    # BatchNormalization
    bn = [n.const(nm, np.full((6,), v, np.float32), "init") for nm, v in [("bn_s", 1.0), ("bn_b", 0.0), ("bn_m", 0.0), ("bn_v", 1.0)]]
    extra = {"spatial": 1} if opset < 9 else {}
    n.node("BatchNormalization", ["x"] + bn, ["bn"], "bn", "BatchNormalization 5 0=@x 1=@bn_s -spatial =epsilon:0.001",
           epsilon=1e-3, **extra)
    n.node("Cast", ["x"], ["cast"], "cast", "Cast 1 0=@x =to:7", to=TensorProto.INT64)
    g = helper.make_graph(n.nodes, f"norm{opset}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 4, 4])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 6, 4, 4])], n.inits)
    save(model_of(g, opset), os.path.join(OUT, f"norm_opset{opset}.onnx"))
    with open(os.path.join(OUT, f"norm_opset{opset}.txt"), "w") as f:
        f.write("\n".join(n.lines) + "\n")


def emb():
    ts = []
    for i in range(3):
        arr = (np.arange(6 << 20, dtype=np.float32) * (i + 1)) % 1000.0
        ts.append(numpy_helper.from_array(arr, f"emb{i}"))
        if i == 1:
            npy("emb1", arr)
    nodes = [helper.make_node("Identity", [t.name], ["o" + t.name]) for t in ts]
    outs = [helper.make_tensor_value_info("o" + t.name, TensorProto.FLOAT, list(t.dims)) for t in ts]
    save(model_of(helper.make_graph(nodes, "emb", [], outs, ts)), os.path.join(OUT, "emb.onnx"), check=False)


def simple(nodes, inputs=None, outputs=None, inits=(), opset=13):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]
    return model_of(helper.make_graph(nodes, "bad", inputs, outputs, list(inits)), opset)


def bad():
    d = os.path.join(OUT, "bad")
    os.makedirs(d, exist_ok=True)
    rows = []

    def put(name, data, code, *subs):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.SerializeToString())
        rows.append("\t".join((name, code, name) + subs))

    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    good = simple(relu, inits=[numpy_helper.from_array(np.ones((300,), np.float32), "w")]).SerializeToString()
    put("truncated.onnx", good[:len(good) // 2], "EMODEL", "corrupt")
    put("random.onnx", rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), "EMODEL")
    put("empty.onnx", b"", "EMODEL")
    put("zeros.onnx", bytes(64), "EMODEL")

    def ext_model(name, loc, nbytes_needed=16):
        arr = np.ones((nbytes_needed // 4,), np.float32)
        return simple([helper.make_node("Add", ["x", name], ["y"], name="add")], inits=[ext_tensor(name, arr, loc, 0)])

    put("missing_ext.onnx", ext_model("w_missing", "nothere.bin"), "ENOENT", "nothere.bin", "initializer 'w_missing'")
    put("abs_ext.onnx", ext_model("w_abs", "/etc/hostname"), "EMODEL", "absolute", "w_abs")
    put("dotdot_ext.onnx", ext_model("w_up", "sub/../../escape.bin"), "EMODEL", "'..'", "w_up")
    with open(os.path.join(OUT, "outside.bin"), "wb") as f:
        f.write(bytes(64))
    link = os.path.join(d, "link.bin")
    if not os.path.lexists(link):
        os.symlink("../outside.bin", link)
    put("symlink_ext.onnx", ext_model("w_link", "link.bin"), "EMODEL", "outside", "w_link")
    with open(os.path.join(d, "short.bin"), "wb") as f:
        f.write(bytes(100))
    put("short_ext.onnx", ext_model("w_short", "short.bin", 400), "EMODEL", "w_short", "short.bin")
    raw = numpy_helper.from_array(np.ones((4,), np.float32), "w_raw")
    raw.raw_data = raw.raw_data[:12]
    put("short_raw.onnx", simple([helper.make_node("Add", ["x", "w_raw"], ["y"], name="add")], inits=[raw]), "EMODEL",
        "w_raw", "raw_data")
    put("undef.onnx", simple([helper.make_node("Relu", ["ghost"], ["y"], name="relu1")]), "EMODEL", "relu1", "Relu", "ghost")
    put("dup.onnx", simple([helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Relu", ["x"], ["y"], name="b")]),
        "EMODEL", "'y'", "'b'")
    put("dup_init.onnx", simple(relu, inits=[numpy_helper.from_array(np.ones(2, np.float32), "w")] * 2), "EMODEL", "'w'", "twice")
    put("cycle.onnx", simple([helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
                              helper.make_node("Relu", ["b"], ["y"], name="n3")]), "EMODEL", "cycle")
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    put("if.onnx", simple([helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)],
                          inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]), cond]),
        "EUNSUPPORTED@infer", "branch", "If", "condition is computed at run time", "subgraph")
    # control flow refused after part of it was inlined (error paths of onnx/control.c)
    i64, bl = TensorProto.INT64, TensorProto.BOOL
    body_vi = [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("c", bl, []),
               helper.make_tensor_value_info("v", TensorProto.FLOAT, [4])]
    def loop_model(body_nodes, name):
        body = helper.make_graph(body_nodes, "body", body_vi,
                                 [helper.make_tensor_value_info("c_out", bl, []), helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4])])
        m_t = helper.make_node("Constant", [], ["M"], value=numpy_helper.from_array(np.array(3, np.int64), "M_t"))
        return simple([m_t, helper.make_node("Loop", ["M", "", "x"], ["y"], name=name, body=body)],
                      inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]), cond])
    put("loop_ghost.onnx", loop_model([helper.make_node("Identity", ["c"], ["c_out"]),
                                       helper.make_node("Add", ["v", "ghost"], ["v_out"])], "lg"), "EMODEL", "ghost")
    put("loop_rtcond.onnx", loop_model([helper.make_node("Identity", ["cond"], ["c_out"]),
                                        helper.make_node("Neg", ["v"], ["v_out"])], "lr"), "EUNSUPPORTED", "'lr'", "body's condition")
    put("c64.onnx", simple([helper.make_node("Cast", ["w64"], ["y"], name="cast", to=1)],
                           inits=[numpy_helper.from_array(np.ones(4, np.complex64), "w64")]), "EUNSUPPORTED", "w64", "complex64")
    put("string_init.onnx", simple([helper.make_node("Identity", ["ws"], ["y"])],
                                   inits=[helper.make_tensor("ws", TensorProto.STRING, [1], [b"abc"])]), "EUNSUPPORTED", "ws", "string")
    put("rank9.onnx", simple([helper.make_node("Identity", ["w9"], ["y"])],
                             inits=[numpy_helper.from_array(np.ones([1] * 9, np.float32), "w9")]), "EUNSUPPORTED", "w9", "rank 9")
    put("rank9_input.onnx", simple(relu, inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1] * 9)]),
        "EUNSUPPORTED", "'x'", "rank 9")
    put("opset0.onnx", simple(relu, opset=0), "EUNSUPPORTED", "opset 0", "1..21", "onnx.version_converter")
    put("opset22.onnx", simple(relu, opset=22), "EUNSUPPORTED", "opset 22", "1..21", "onnx.version_converter")
    bn = [numpy_helper.from_array(np.ones(4, np.float32), nm) for nm in ("s", "b", "m", "v")]
    put("bn_spatial0.onnx", simple([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn0", spatial=0)],
                                   inits=bn, opset=7), "EUNSUPPORTED", "bn0", "spatial")
    put("no_producer.onnx", simple(relu, outputs=[helper.make_tensor_value_info("nowhere", TensorProto.FLOAT, [4])]),
        "EMODEL", "nowhere")
    seq = helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT, [4])
    put("seq_input.onnx", simple(relu, inputs=[seq]), "EUNSUPPORTED", "'x'", "not a tensor")
    put("constant_string.onnx", simple([helper.make_node("Constant", [], ["y"], name="kstr", value_string="hi")]),
        "EUNSUPPORTED", "kstr", "value_string")
    with open(os.path.join(OUT, "bad.txt"), "w") as f:
        f.write("\n".join(rows) + "\n")


def big():
    gib = 1 << 30
    path = os.path.join(OUT, "big.bin")
    tail = sample(np.float32, (2048,))
    tail_off = 4 * gib + gib // 4
    with open(path, "wb") as f:
        f.truncate(tail_off + tail.nbytes + 4096)  # sparse: no disk used
        f.seek(tail_off)
        f.write(tail.tobytes())
    tensors = [ext_tensor(f"big{i}", np.zeros((1,), np.float32), "big.bin", i * gib) for i in range(4)]
    for t in tensors:  # 16384 x 16384 float32 = 1 GiB each, described without building them
        del t.dims[:]
        t.dims.extend([16384, 16384])
        for e in t.external_data:
            if e.key == "length":
                e.value = str(gib)
    tensors.append(ext_tensor("tail", tail, "big.bin", tail_off))
    npy("tail", tail)
    nodes = [helper.make_node("Identity", [t.name], ["o" + t.name]) for t in tensors]
    outs = [helper.make_tensor_value_info("o" + t.name, TensorProto.FLOAT, None) for t in tensors]
    save(model_of(helper.make_graph(nodes, "big", [], outs, tensors)), os.path.join(OUT, "big.onnx"), check=False)


if __name__ == "__main__":
    inits()
    ext()
    consts()
    attrs()
    dyn()
    for o in (7, 9, 10, 11, 13, 17):
        norm(o)
    emb()
    bad()
    if "--big" in sys.argv[2:]:
        big()

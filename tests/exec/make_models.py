#!/usr/bin/python3
"""Models for the executor tests, written with onnx.helper and seeded numpy.

Usage: make_models.py OUTDIR
  mlp.onnx        Gemm/Relu x3, input [8, 64]
  convnet.onnx    Conv/Relu/MaxPool/Conv/Relu/GlobalAveragePool/Flatten/Gemm, input [2, 3, 32, 32]
  branches.onnx   a diamond with fan-out, Add/Mul/Concat/Softmax, input [4, 256]
  unet3s.onnx     a small 3-D U-Net (Conv/Relu/MaxPool/ConvTranspose/channel Concat), input [1, 1, 16, 16, 16]
  convb.onnx      2-D Conv/Relu/MaxPool/Conv/Sigmoid/Add, input [8, 4, 32, 32] (splitting tests)
  big_ext.onnx    wide MLP whose weights (12 x 2048x2048 floats, 192 MiB) live in
                  external data big_ext.bin, input [4, 2048]
"""
import os
import sys

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)


def init(name, shape, scale=None):
    fan = shape[-1] if len(shape) > 1 else shape[0]
    b = scale if scale else 1.0 / np.sqrt(fan)
    return numpy_helper.from_array(rng.uniform(-b, b, shape).astype(np.float32), name)


def save(g, path, opset=13):
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def mlp(out):
    inits = [init("w1", (64, 128)), init("b1", (128,)), init("w2", (128, 128)), init("b2", (128,)),
             init("w3", (128, 10)), init("b3", (10,))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"]), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Gemm", ["r1", "w2", "b2"], ["h2"]), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("Gemm", ["r2", "w3", "b3"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 10])], inits)
    save(g, os.path.join(out, "mlp.onnx"))


def convnet(out):
    inits = [init("c1w", (16, 3, 3, 3)), init("c1b", (16,)), init("c2w", (32, 16, 3, 3)), init("c2b", (32,)),
             init("fw", (10, 32)), init("fb", (10,))]
    nodes = [helper.make_node("Conv", ["x", "c1w", "c1b"], ["a1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "c2w", "c2b"], ["a2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    save(g, os.path.join(out, "convnet.onnx"))


def branches(out):
    inits = [init("wa", (256, 256)), init("wb", (256, 256)), init("wc", (512, 64))]
    nodes = [helper.make_node("MatMul", ["x", "wa"], ["a"]), helper.make_node("MatMul", ["x", "wb"], ["b"]),
             helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Mul", ["b", "x"], ["bx"]),
             helper.make_node("Add", ["ra", "bx"], ["s"]), helper.make_node("Concat", ["s", "a"], ["c"], axis=1),
             helper.make_node("MatMul", ["c", "wc"], ["l"]), helper.make_node("Softmax", ["l"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], inits)
    save(g, os.path.join(out, "branches.onnx"))


def unet3s(out):
    inits = [init("e1w", (4, 1, 3, 3, 3)), init("e1b", (4,)), init("e2w", (8, 4, 3, 3, 3)), init("e2b", (8,)),
             init("uw", (8, 4, 2, 2, 2)), init("ub", (4,)), init("d1w", (4, 8, 3, 3, 3)), init("d1b", (4,)),
             init("hw", (2, 4, 1, 1, 1)), init("hb", (2,))]
    p1, p0 = [1] * 6, [0] * 6
    nodes = [helper.make_node("Conv", ["x", "e1w", "e1b"], ["a1"], pads=p1), helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
             helper.make_node("Conv", ["p1", "e2w", "e2b"], ["a2"], pads=p1), helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("ConvTranspose", ["r2", "uw", "ub"], ["u"], kernel_shape=[2, 2, 2], strides=[2, 2, 2],
                              pads=p0),
             helper.make_node("Concat", ["u", "r1"], ["c"], axis=1),
             helper.make_node("Conv", ["c", "d1w", "d1b"], ["a3"], pads=p1), helper.make_node("Relu", ["a3"], ["r3"]),
             helper.make_node("Conv", ["r3", "hw", "hb"], ["y"])]
    g = helper.make_graph(nodes, "unet3s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 16, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 16, 16, 16])], inits)
    save(g, os.path.join(out, "unet3s.onnx"))


def convb(out):
    inits = [init("c1w", (16, 4, 3, 3)), init("c1b", (16,)), init("c2w", (8, 16, 3, 3)), init("c2b", (8,)),
             init("bias", (8, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "c1w", "c1b"], ["a1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "c2w", "c2b"], ["a2"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["a2"], ["s2"]), helper.make_node("Add", ["s2", "bias"], ["y"])]
    g = helper.make_graph(nodes, "convb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8, 16, 16])], inits)
    save(g, os.path.join(out, "convb.onnx"))


def big_ext(out, width=2048, layers=12):
    """Streams weights to big_ext.bin, 4 KiB aligned, never holding them all."""
    path = os.path.join(out, "big_ext.bin")
    inits, nodes, off = [], [], 0
    x = "x"
    with open(path, "wb") as f:
        for i in range(layers):
            for name, shape in (("w%d" % i, (width, width)), ("b%d" % i, (width,))):
                pad = (-off) % 4096
                f.write(b"\0" * pad)
                off += pad
                a = rng.uniform(-1 / np.sqrt(width), 1 / np.sqrt(width), shape).astype(np.float32)
                f.write(a.tobytes())
                t = TensorProto()
                t.name = name
                t.data_type = TensorProto.FLOAT
                t.dims.extend(shape)
                t.data_location = TensorProto.EXTERNAL
                for k, v in (("location", "big_ext.bin"), ("offset", str(off)), ("length", str(a.nbytes))):
                    e = t.external_data.add()
                    e.key, e.value = k, v
                off += a.nbytes
                inits.append(t)
            y = "h%d" % i
            nodes.append(helper.make_node("Gemm", [x, "w%d" % i, "b%d" % i], [y], transB=1))
            if i + 1 < layers:
                nodes.append(helper.make_node("Relu", [y], ["r%d" % i]))
                x = "r%d" % i
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "big_ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, os.path.join(out, "big_ext.onnx"))


if __name__ == "__main__":
    o = sys.argv[1]
    os.makedirs(o, exist_ok=True)
    mlp(o)
    convnet(o)
    branches(o)
    unet3s(o)
    convb(o)
    if len(sys.argv) < 3 or sys.argv[2] != "--small":
        big_ext(o)

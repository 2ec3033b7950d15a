#!/usr/bin/python3
"""Write a 3D U-Net (Cicek et al. 2016 shape) as ONNX, with seeded weights.

Usage: make_unet3d.py OUT.onnx [--base 16] [--levels 3] [--classes 2] [--in-channels 1]
                      [--external] [--seed 1234]

Two 3x3x3 convolutions (+ReLU) per level, MaxPool 2 down, ConvTranspose 2
stride 2 up, skip concatenation, 1x1x1 head; input 'input' [batch, C, D, H, W]
with dynamic batch and spatial dims, output 'logits'.  Weights follow
PyTorch's default init (kaiming-uniform bound 1/sqrt(fan_in)).
"""
import argparse
import os

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--base", type=int, default=16)
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--in-channels", type=int, default=1)
    ap.add_argument("--external", action="store_true", help="weights in OUT.onnx.data")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    nodes, inits = [], []
    count = [0]

    def name(p):
        count[0] += 1
        return "%s_%d" % (p, count[0])

    def weight(shape, fan_in):
        b = 1.0 / np.sqrt(fan_in)
        n = name("w")
        inits.append(numpy_helper.from_array(rng.uniform(-b, b, shape).astype(np.float32), n))
        return n

    def conv(x, cin, cout, k):
        w = weight((cout, cin, k, k, k), cin * k ** 3)
        b = weight((cout,), cin * k ** 3)
        y = name("conv")
        nodes.append(helper.make_node("Conv", [x, w, b], [y], kernel_shape=[k] * 3,
                                      pads=[k // 2] * 6, name=y))
        return y

    def relu(x):
        y = name("relu")
        nodes.append(helper.make_node("Relu", [x], [y], name=y))
        return y

    def block(x, cin, cout):
        return relu(conv(relu(conv(x, cin, cout, 3)), cout, cout, 3))

    x, c, skips = "input", a.in_channels, []
    for lvl in range(a.levels):
        o = a.base * 2 ** lvl
        x = block(x, c, o)
        skips.append((x, o))
        y = name("pool")
        nodes.append(helper.make_node("MaxPool", [x], [y], kernel_shape=[2] * 3, strides=[2] * 3, name=y))
        x, c = y, o
    x = block(x, c, 2 * c)
    c = 2 * c
    for sk, o in reversed(skips):
        w = weight((c, o, 2, 2, 2), o * 8)
        b = weight((o,), o * 8)
        y = name("up")
        nodes.append(helper.make_node("ConvTranspose", [x, w, b], [y], kernel_shape=[2] * 3,
                                      strides=[2] * 3, name=y))
        z = name("cat")
        nodes.append(helper.make_node("Concat", [y, sk], [z], axis=1, name=z))
        x = block(z, 2 * o, o)
        c = o
    w = weight((a.classes, c, 1, 1, 1), c)
    b = weight((a.classes,), c)
    nodes.append(helper.make_node("Conv", [x, w, b], ["logits"], kernel_shape=[1] * 3, name="head"))
    dims = ["batch", a.in_channels, "depth", "height", "width"]
    g = helper.make_graph(nodes, "unet3d",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                         ["batch", a.classes, "depth", "height", "width"])],
                          inits)
    m = helper.make_model(g, producer_name="hpdlf make_unet3d.py",
                          opset_imports=[helper.make_opsetid("", 13)])
    if a.external:
        onnx.save_model(m, a.out, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(a.out) + ".data", size_threshold=1024)
    else:
        onnx.save(m, a.out)
    params = sum(int(np.prod(t.dims)) for t in inits)
    print("%s: 3D U-Net, %d levels, base %d, %d parameters" % (a.out, a.levels, a.base, params))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A small conv net with BatchNorm for the --sync-bn test, with data.

usage: make_bnnet.py OUTDIR LENET_DIR [--branches]

OUTDIR/model.onnx: Conv(1->4, 3x3, pad 1) -> BatchNormalization -> Relu ->
Flatten -> Gemm(256->10), seeded weights; x.npy / y.npy copied from the
lenet test model's data (8x8 images, 10 classes).  --branches: after the
first Conv two branches, BatchNormalization -> Relu and Conv(4->4, 1x1) ->
BatchNormalization -> Relu, added: two BatchNorm kernels (and their
backward) that no data orders, which an executor may run either way round.
"""
import os
import sys

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out, lenet = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(3)

    def u(name, shape, fan):
        b = 1 / np.sqrt(fan)
        return numpy_helper.from_array(rng.uniform(-b, b, shape).astype(np.float32), name)

    def c(name, v):
        return numpy_helper.from_array(np.full(4, v, np.float32), name)

    inits = [u('c1.w', (4, 1, 3, 3), 9), u('c1.b', (4,), 9), c('bn.scale', 1), c('bn.bias', 0), c('bn.mean', 0),
             c('bn.var', 1), u('fc.w', (10, 256), 256), u('fc.b', (10,), 256)]
    nodes = [helper.make_node('Conv', ['input', 'c1.w', 'c1.b'], ['c1'], kernel_shape=[3, 3], pads=[1] * 4, name='conv'),
             helper.make_node('BatchNormalization', ['c1', 'bn.scale', 'bn.bias', 'bn.mean', 'bn.var'], ['bn'],
                              epsilon=1e-5, momentum=0.9, name='bn'),
             helper.make_node('Relu', ['bn'], ['r'], name='relu'),
             helper.make_node('Flatten', ['r'], ['f'], axis=1, name='flat'),
             helper.make_node('Gemm', ['f', 'fc.w', 'fc.b'], ['logits'], transB=1, name='fc')]
    if '--branches' in sys.argv[3:]:
        inits += [u('c2.w', (4, 4, 1, 1), 4), u('c2.b', (4,), 4), c('bn2.scale', 1), c('bn2.bias', 0),
                  c('bn2.mean', 0), c('bn2.var', 1)]
        nodes[3:3] = [helper.make_node('Conv', ['c1', 'c2.w', 'c2.b'], ['c2'], kernel_shape=[1, 1], name='conv2'),
                      helper.make_node('BatchNormalization', ['c2', 'bn2.scale', 'bn2.bias', 'bn2.mean', 'bn2.var'],
                                       ['bn2'], epsilon=1e-5, momentum=0.9, name='bn2'),
                      helper.make_node('Relu', ['bn2'], ['r2'], name='relu2'),
                      helper.make_node('Add', ['r1', 'r2'], ['r'], name='add')]
        nodes[2].output[0] = 'r1'
    g = helper.make_graph(nodes, 'bnnet', [helper.make_tensor_value_info('input', TensorProto.FLOAT, ['batch', 1, 8, 8])],
                          [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['batch', 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])
    m.ir_version = 7
    os.makedirs(out, exist_ok=True)
    onnx.save(m, os.path.join(out, 'model.onnx'))
    for f in ('x.npy', 'y.npy'):
        np.save(os.path.join(out, f), np.load(os.path.join(lenet, f)))


if __name__ == '__main__':
    main()

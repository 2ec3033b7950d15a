#!/usr/bin/env python3
"""An MLP of Gemms in both weight layouts, with data, for the pipeline's
test of weight gradients computed once per step.

usage: make_gemmnet.py OUTDIR [--trans-a]

OUTDIR/model.onnx: Gemm(16->32, W 16x32) -> Relu -> Gemm(32->24, W^T
24x32, transB 1, alpha 0.5) -> Relu -> Gemm(24->24, transB 1) -> Relu ->
Gemm(24->4, W 24x4, alpha 2), seeded weights; x.npy (64x16 float32) and
y.npy (64 int64 labels of 4 classes).  --trans-a: the first Relu's
output is transposed (32 x N) and the second Gemm reads it with transA 1.
"""
import os
import sys

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(11)
    os.makedirs(out, exist_ok=True)

    def w(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    ta = '--trans-a' in sys.argv[2:]
    nodes = [helper.make_node('Gemm', ['x', 'w0', 'b0'], ['h0'], name='fc0'),
             helper.make_node('Relu', ['h0'], ['r0'], name='relu0')]
    if ta:
        nodes += [helper.make_node('Transpose', ['r0'], ['r0t'], name='tr0', perm=[1, 0]),
                  helper.make_node('Gemm', ['r0t', 'w1', 'b1'], ['h1'], name='fc1', transA=1, transB=1, alpha=0.5)]
    else:
        nodes += [helper.make_node('Gemm', ['r0', 'w1', 'b1'], ['h1'], name='fc1', transB=1, alpha=0.5)]
    nodes += [helper.make_node('Relu', ['h1'], ['r1'], name='relu1'),
              helper.make_node('Gemm', ['r1', 'w2', 'b2'], ['h2'], name='fc2', transB=1),
              helper.make_node('Relu', ['h2'], ['r2'], name='relu2'),
              helper.make_node('Gemm', ['r2', 'w3', 'b3'], ['y'], name='fc3', alpha=2.0)]
    inits = [w('w0', (16, 32)), w('b0', (32,)), w('w1', (24, 32)), w('b1', (24,)), w('w2', (24, 24)),
             w('b2', (24,)), w('w3', (24, 4)), w('b3', (4,))]
    g = helper.make_graph(nodes, 'gemmnet', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 16])],
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N', 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), os.path.join(out, 'model.onnx'))
    np.save(os.path.join(out, 'x.npy'), rng.standard_normal((64, 16)).astype(np.float32))
    np.save(os.path.join(out, 'y.npy'), rng.integers(0, 4, 64).astype(np.int64))


if __name__ == '__main__':
    main()

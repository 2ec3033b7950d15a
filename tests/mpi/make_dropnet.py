#!/usr/bin/env python3
"""An MLP with two Dropout nodes, with data, for the pipeline's test.

usage: make_dropnet.py OUTDIR

OUTDIR/model.onnx: Gemm(16->32) -> Relu -> Dropout -> Gemm(32->32) ->
Dropout ('drop1') -> Gemm(32->4), seeded weights; x.npy (64x16 float32)
and y.npy (64 int64 labels of 4 classes).
"""
import os
import sys

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(5)
    os.makedirs(out, exist_ok=True)

    def w(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [helper.make_node('Gemm', ['x', 'w0', 'b0'], ['h0'], name='fc0'),
             helper.make_node('Relu', ['h0'], ['r0'], name='relu0'),
             helper.make_node('Dropout', ['r0'], ['d0'], name='drop0'),
             helper.make_node('Gemm', ['d0', 'w1', 'b1'], ['h1'], name='fc1'),
             helper.make_node('Dropout', ['h1'], ['d1'], name='drop1'),
             helper.make_node('Gemm', ['d1', 'w2', 'b2'], ['y'], name='fc2')]
    inits = [w('w0', (16, 32)), w('b0', (32,)), w('w1', (32, 32)), w('b1', (32,)), w('w2', (32, 4)), w('b2', (4,))]
    g = helper.make_graph(nodes, 'dropnet', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 16])],
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N', 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), os.path.join(out, 'model.onnx'))
    np.save(os.path.join(out, 'x.npy'), rng.standard_normal((64, 16)).astype(np.float32))
    np.save(os.path.join(out, 'y.npy'), rng.integers(0, 4, 64).astype(np.int64))


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Two LayerNorms whose parameters the exporter merged, with data.

usage: make_lnnet.py OUTDIR

OUTDIR/model.onnx (opset 17): Gemm(16->32) -> Relu -> LayerNormalization
(n1.weight, n1.bias) -> Gemm(32->32) -> Relu -> Add(skip) ->
LayerNormalization(n2.weight, n2.bias) -> Gemm(32->4), where n2.weight and
n2.bias are Identity(n1.weight) and Identity(n1.bias), as PyTorch's
exporter writes two fresh LayerNorms of one width (equal initializers
merged).  PyTorch trains them apart, so hpdlf must too, on one rank and
when a pipeline cuts the net between them.  x.npy: 64 x 16 floats, y.npy:
64 labels of 4 classes, seeded.
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

    def u(name, shape, fan):
        b = 1 / np.sqrt(fan)
        return numpy_helper.from_array(rng.uniform(-b, b, shape).astype(np.float32), name)

    inits = [u('a.weight', (32, 16), 16), u('a.bias', (32,), 16), u('b.weight', (32, 32), 32),
             u('b.bias', (32,), 32), u('c.weight', (4, 32), 32), u('c.bias', (4,), 32),
             numpy_helper.from_array(np.ones(32, np.float32), 'n1.weight'),
             numpy_helper.from_array(np.zeros(32, np.float32), 'n1.bias')]
    N = helper.make_node
    nodes = [N('Identity', ['n1.bias'], ['n2.bias']), N('Identity', ['n1.weight'], ['n2.weight']),
             N('Gemm', ['input', 'a.weight', 'a.bias'], ['ha'], transB=1, name='fc_a'),
             N('Relu', ['ha'], ['ra']),
             N('LayerNormalization', ['ra', 'n1.weight', 'n1.bias'], ['l1'], axis=-1, epsilon=1e-5, name='n1'),
             N('Gemm', ['l1', 'b.weight', 'b.bias'], ['hb'], transB=1, name='fc_b'),
             N('Relu', ['hb'], ['rb']),
             N('Add', ['rb', 'l1'], ['s']),
             N('LayerNormalization', ['s', 'n2.weight', 'n2.bias'], ['l2'], axis=-1, epsilon=1e-5, name='n2'),
             N('Gemm', ['l2', 'c.weight', 'c.bias'], ['logits'], transB=1, name='fc_c')]
    g = helper.make_graph(nodes, 'lnnet', [helper.make_tensor_value_info('input', TensorProto.FLOAT, ['N', 16])],
                          [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['N', 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out, 'model.onnx'))
    np.save(os.path.join(out, 'x.npy'), rng.standard_normal((64, 16)).astype(np.float32))
    np.save(os.path.join(out, 'y.npy'), rng.integers(0, 4, 64).astype(np.int64))


if __name__ == '__main__':
    main()

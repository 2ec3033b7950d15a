#!/usr/bin/python3
"""Write a small VGG-style conv net (seeded random weights) as ONNX with a
dynamic batch, and a labelled data set for training it: the model of the
overlap benchmark (bench/bench_dp.py).  Its backward is dominated by the
convolutions, its parameters by the classifier, whose gradients come
first: the shape where reducing gradients can hide behind backward.

usage: make_convnet.py OUTDIR [--rows N] [--size 32] [--width 32]

OUTDIR/model.onnx (input 'input' [batch, 3, size, size], output 'logits'),
OUTDIR/x.npy float32 [N, 3, size, size] and OUTDIR/y.npy int64 [N].
"""
import argparse
import os

import numpy as np
import torch
from torch import nn


def net(size, w, classes=10):
    return nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1), nn.ReLU(),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * w * (size // 4) ** 2, 256), nn.ReLU(), nn.Linear(256, classes))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--width", type=int, default=32)
    a = ap.parse_args()
    torch.manual_seed(1234)
    m = net(a.size, a.width).eval()
    os.makedirs(a.outdir, exist_ok=True)
    torch.onnx.export(m, torch.zeros(1, 3, a.size, a.size), os.path.join(a.outdir, "model.onnx"),
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=13,
                      do_constant_folding=False)
    rng = np.random.default_rng(7)
    np.save(os.path.join(a.outdir, "x.npy"), rng.standard_normal((a.rows, 3, a.size, a.size), dtype=np.float32))
    np.save(os.path.join(a.outdir, "y.npy"), rng.integers(0, 10, a.rows).astype(np.int64))


if __name__ == "__main__":
    main()

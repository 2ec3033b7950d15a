#!/usr/bin/python3
"""Write a ResNet-18-class network (seeded random weights) as ONNX with a
dynamic batch, and a small labelled data set for training it: the
ResNet row of the out-of-core benchmark (bench/bench_ooc_targets.py).

The layout is torchvision's ResNet-18 (a 7x7 stride-2 stem, max pooling,
four stages of two basic blocks with 64-128-256-512 channels, 1x1
projections where the shape changes, global average pooling, one linear
layer; 11.2 M parameters at 10 classes), written out here so that no
torchvision is needed.  Batch normalisation is left out (its training
mode is not what this benchmark measures); every convolution has a bias.

usage: make_resnet18.py OUTDIR [--rows N] [--size 64] [--classes 10]

OUTDIR/model.onnx (input 'input' [batch, 3, size, size], output 'logits'),
OUTDIR/x.npy float32 [N, 3, size, size] and OUTDIR/y.npy int64 [N].
"""
import argparse
import os

import numpy as np
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.proj = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x)))
        return torch.relu(y + (self.proj(x) if self.proj is not None else x))


def resnet18(classes):
    layers = [nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--classes", type=int, default=10)
    a = ap.parse_args()
    torch.manual_seed(1234)
    m = resnet18(a.classes).eval()
    os.makedirs(a.outdir, exist_ok=True)
    torch.onnx.export(m, torch.zeros(1, 3, a.size, a.size), os.path.join(a.outdir, "model.onnx"),
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=13)
    rng = np.random.default_rng(7)
    np.save(os.path.join(a.outdir, "x.npy"), rng.standard_normal((a.rows, 3, a.size, a.size), dtype=np.float32))
    np.save(os.path.join(a.outdir, "y.npy"), rng.integers(0, a.classes, a.rows).astype(np.int64))


if __name__ == "__main__":
    main()

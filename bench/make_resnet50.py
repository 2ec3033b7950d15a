#!/usr/bin/python3
"""Write ResNet-50 (torchvision, seeded random weights) as ONNX with a
dynamic batch, and a small labelled data set for training it.

usage: make_resnet50.py OUTDIR [--rows N] [--size 224] [--classes 1000]

OUTDIR/model.onnx (input 'input' [batch, 3, size, size], output 'logits'),
OUTDIR/x.npy float32 [N, 3, size, size] and OUTDIR/y.npy int64 [N]: what
`hpdlf-exec --train --plan --ranks N` needs to plan a step (the benchmark
of predicted scaling efficiency, bench/bench_dp_plan.sh).
"""
import argparse
import os

import numpy as np
import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    a = ap.parse_args()
    torch.manual_seed(1234)
    m = torchvision.models.resnet50(num_classes=a.classes).eval()
    x = torch.zeros(1, 3, a.size, a.size)
    os.makedirs(a.outdir, exist_ok=True)
    torch.onnx.export(m, x, os.path.join(a.outdir, "model.onnx"), input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13, training=torch.onnx.TrainingMode.EVAL, do_constant_folding=False)
    rng = np.random.default_rng(7)
    np.save(os.path.join(a.outdir, "x.npy"), rng.standard_normal((a.rows, 3, a.size, a.size), dtype=np.float32))
    np.save(os.path.join(a.outdir, "y.npy"), rng.integers(0, a.classes, a.rows).astype(np.int64))


if __name__ == "__main__":
    main()

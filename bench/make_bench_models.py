#!/usr/bin/python3
"""The benchmark's own exports (issue 16): real architectures at real sizes,
exported with torch.onnx.export from PyTorch modules built here.

usage: make_bench_models.py OUTDIR [--only NAME[,NAME...]] [--samples N]

For every model NAME it writes OUTDIR/NAME/ in the layout of tests/models:
  model.onnx       static shapes, batch as below; BatchNormalization kept as
                   nodes (training turns them into batch-statistics ones,
                   inference folds them), weights from a fixed seed
  model.pt         the same module traced with torch.jit in training mode
                   (PyTorch's side of hpdlf-bench-train trains this one, so
                   both train the same network from the same weights)
  x.npy, y.npy     N samples of inputs and int64 class labels
  train_sgd.json   {"batch", "lr"} as hpdlf-bench-train reads them

Models:
  resnet18     torchvision ResNet-18, 10 classes, 4x3x64x64
  mobilenetv2  torchvision MobileNetV2 (width 1.0), 10 classes, 1x3x224x224
  gpt2         GPT-2-style decoder: 4 blocks, d=128, 4 heads, 64 tokens,
               vocab 512, learned positions, causal mask, GELU, tied LM head;
               logits [B, vocab, T] (class axis 1, the axis hpdlf's and
               PyTorch's cross-entropy take), batch 4
  bert         BERT-style encoder: 4 layers, d=256, 4 heads, 64 tokens, vocab
               512, padding mask from token id 0 (additive -1e4), post-LN,
               GELU, classifier on the first token (2 classes), batch 4
  unet2d       2-D U-Net: 3 levels, base 16, Conv-BN-ReLU pairs, MaxPool,
               ConvTranspose 2x2 up, skip concatenations; 2 classes per
               pixel, 2x3x128x128

The zoo (ZOO below): more torchvision architectures as users export them,
at reduced resolution so that the whole benchmark stays within minutes:
inference at batch 1, 1x3x96x96 (DeepLabV3 1x3x128x128), training at batch
4, exported with a dynamic batch axis, 10 classes (DeepLabV3: 4 per pixel).  Dropout and stochastic depth are
set to p=0 so that PyTorch trains the same network as the export:
  squeezenet   squeezenet1_1 (Fire modules, ceil-mode MaxPool, Concat)
  googlenet    googlenet without aux heads (inception branches, MaxPool)
  densenet     densenet121 (BN-ReLU before every conv, growing Concats)
  resnext      resnext50_32x4d (grouped 3x3, 32 groups)
  mnasnet      mnasnet0_5 (depthwise 3x3/5x5)
  shufflenet   shufflenet_v2_x0_5 (channel shuffle, Split)
  effnetb0     efficientnet_b0 (depthwise, squeeze-excite, SiLU)
  mnv3small    mobilenet_v3_small (HardSwish, squeeze-excite)
  regnet       regnet_y_400mf (grouped, squeeze-excite)
  convnext     convnext_tiny (7x7 depthwise, LayerNorm, GELU)
  deeplabv3    deeplabv3_mobilenet_v3_large (dilated ASPP, Resize)
"""
import argparse
import json
import os
import sys
import warnings

import numpy as np

np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class Attention(nn.Module):
    def __init__(s, d, heads):
        super().__init__()
        s.h = heads
        s.qkv = nn.Linear(d, 3 * d)
        s.proj = nn.Linear(d, d)

    def forward(s, x, bias):
        b, t, d = x.shape
        q, k, v = s.qkv(x).split(d, dim=2)
        q = q.reshape(b, t, s.h, d // s.h).transpose(1, 2)
        k = k.reshape(b, t, s.h, d // s.h).transpose(1, 2)
        v = v.reshape(b, t, s.h, d // s.h).transpose(1, 2)
        att = (q @ k.transpose(2, 3)) * (1.0 / (d // s.h) ** 0.5) + bias
        y = F.softmax(att, dim=-1) @ v
        return s.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(s, d, heads, pre_ln):
        super().__init__()
        s.pre = pre_ln
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.att = Attention(d, heads)
        s.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(s, x, bias):
        if s.pre:  # GPT-2
            x = x + s.att(s.ln1(x), bias)
            return x + s.mlp(s.ln2(x))
        x = s.ln1(x + s.att(x, bias))  # BERT
        return s.ln2(x + s.mlp(x))


class GPT2(nn.Module):
    def __init__(s, vocab=512, d=128, heads=4, layers=4, t=64):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(vocab, d), nn.Embedding(t, d)
        s.blocks = nn.ModuleList([Block(d, heads, True) for _ in range(layers)])
        s.lnf = nn.LayerNorm(d)
        s.register_buffer("pos", torch.arange(t))
        s.register_buffer("causal", torch.triu(torch.full((t, t), -1e4), diagonal=1))

    def forward(s, tok):
        x = s.wte(tok) + s.wpe(s.pos)
        for blk in s.blocks:
            x = blk(x, s.causal)
        logits = s.lnf(x) @ s.wte.weight.t()
        return logits.transpose(1, 2)


class BERT(nn.Module):
    def __init__(s, vocab=512, d=256, heads=4, layers=4, t=64, classes=2):
        super().__init__()
        s.tok, s.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        s.ln = nn.LayerNorm(d)
        s.blocks = nn.ModuleList([Block(d, heads, False) for _ in range(layers)])
        s.head = nn.Linear(d, classes)
        s.register_buffer("posid", torch.arange(t))

    def forward(s, tok):
        bias = (tok == 0).to(torch.float32).reshape(tok.shape[0], 1, 1, tok.shape[1]) * -1e4
        x = s.ln(s.tok(tok) + s.pos(s.posid))
        for blk in s.blocks:
            x = blk(x, bias)
        return s.head(torch.tanh(x[:, 0]))


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class UNet2D(nn.Module):
    def __init__(s, cin=3, classes=2, base=16, levels=3):
        super().__init__()
        w = [base << i for i in range(levels + 1)]
        s.down = nn.ModuleList([conv_bn(cin if i == 0 else w[i - 1], w[i]) for i in range(levels)])
        s.mid = conv_bn(w[levels - 1], w[levels])
        s.up = nn.ModuleList([nn.ConvTranspose2d(w[i + 1], w[i], 2, stride=2) for i in reversed(range(levels))])
        s.dec = nn.ModuleList([conv_bn(2 * w[i], w[i]) for i in reversed(range(levels))])
        s.out = nn.Conv2d(w[0], classes, 1)

    def forward(s, x):
        skips = []
        for d in s.down:
            x = d(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = s.mid(x)
        for up, dec in zip(s.up, s.dec):
            x = dec(torch.cat([up(x), skips.pop()], 1))
        return s.out(x)


# name: (module builder, input shape, training batch, lr, input kind, classes, label shape per sample)
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (4, 3, 64, 64), 4, 0.01, "image", 10, ()),
    "mobilenetv2": (lambda: torchvision.models.mobilenet_v2(num_classes=10), (1, 3, 224, 224), 1, 0.01, "image", 10,
                    ()),
    "gpt2": (GPT2, (4, 64), 4, 0.01, "tokens", 512, (64,)),
    "bert": (BERT, (4, 64), 4, 0.01, "tokens", 2, ()),
    "unet2d": (UNet2D, (2, 3, 128, 128), 2, 0.01, "image", 2, (128, 128)),
}


class SegOut(nn.Module):
    """torchvision's segmentation models return {"out": ...}: export the tensor."""

    def __init__(s, m):
        super().__init__()
        s.m = m

    def forward(s, x):
        return s.m(x)["out"]


def no_drop(m):
    """Dropout and stochastic depth off: the export (eval) and PyTorch's
    training module (train mode) are then the same network."""
    for mod in m.modules():
        if isinstance(mod, (nn.Dropout, torchvision.ops.StochasticDepth)):
            mod.p = 0.0
    return m


def tv(name, **kw):
    return lambda: no_drop(getattr(torchvision.models, name)(**kw))


IMG = (1, 3, 96, 96)
ZOO = {
    "squeezenet": (tv("squeezenet1_1", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "googlenet": (tv("googlenet", num_classes=10, aux_logits=False, init_weights=True), IMG, 4, 0.01, "image", 10,
                  ()),
    "densenet": (tv("densenet121", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "resnext": (tv("resnext50_32x4d", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "mnasnet": (tv("mnasnet0_5", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "shufflenet": (tv("shufflenet_v2_x0_5", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "effnetb0": (tv("efficientnet_b0", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "mnv3small": (tv("mobilenet_v3_small", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "regnet": (tv("regnet_y_400mf", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "convnext": (tv("convnext_tiny", num_classes=10), IMG, 4, 0.01, "image", 10, ()),
    "deeplabv3": (lambda: SegOut(no_drop(torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        num_classes=4, weights_backbone=None, aux_loss=False))), (1, 3, 128, 128), 4, 0.01, "image", 4, (128, 128)),
}
MODELS.update(ZOO)


def inputs(kind, shape, g):
    if kind == "image":
        return torch.randn(shape, generator=g)
    tok = torch.randint(1, 512, shape, generator=g)
    tok[:, shape[1] * 3 // 4:] = 0  # padding at the end (BERT's mask; tokens for GPT)
    return tok


def make(name, out, samples):
    build, shape, batch, lr, kind, classes, lshape = MODELS[name]
    torch.manual_seed(16)
    m = build()
    g = torch.Generator().manual_seed(1616)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    x1 = inputs(kind, shape, g)
    m.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x1,), os.path.join(d, "model.onnx"), opset_version=13, input_names=["input"],
                          output_names=["output"], do_constant_folding=False,
                          training=torch.onnx.TrainingMode.PRESERVE,
                          # the zoo as users export: a dynamic batch (ShuffleNet's channel
                          # shuffle then reshapes by the batch it is given)
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}} if name in ZOO else None)
        m.train()
        xs = inputs(kind, (batch,) + tuple(shape[1:]), g)
        torch.jit.trace(m, (xs,), check_trace=False).save(os.path.join(d, "model.pt"))
    x = torch.cat([inputs(kind, (batch,) + tuple(shape[1:]), g) for _ in range(max(1, samples // batch))])
    y = torch.randint(0, classes, (len(x),) + lshape, generator=g)
    np.save(os.path.join(d, "x.npy"), x.numpy())
    np.save(os.path.join(d, "y.npy"), y.numpy().astype(np.int64))
    with open(os.path.join(d, "train_sgd.json"), "w") as f:
        json.dump({"batch": batch, "lr": lr}, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--samples", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name in a.only.split(","):
        if name not in MODELS:
            sys.exit("make_bench_models: unknown model %s (%s)" % (name, ", ".join(MODELS)))
        make(name, a.out, a.samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Write the models of the inference-fusion benchmark and test (exec/fuse*.c)
as torch.onnx exports with seeded random weights, each with an input .npy:

  gpt     a GPT-2-style decoder (minGPT): token + position embeddings,
          causal self-attention (masked_fill with -inf), LayerNorm, MLP
          with GELU (tanh form, as GPT-2's new_gelu), weight-tied head
  bert    a BERT-style encoder: LayerNorm, attention with an additive
          padding mask, MLP with F.gelu (erf form), a pooler
  resnet  torchvision's ResNet-18 (BatchNorm in eval mode) at 64x64
  mobile  torchvision's MobileNetV2 (Conv+BatchNorm+ReLU6 = Clip) at 64x64

usage: make_fuse_models.py OUTDIR [--models gpt,bert,resnet,mobile] [--opset 13]
       [--layers 4] [--dim 128] [--heads 4] [--tokens 64] [--batch 1]

OUTDIR/NAME.onnx and OUTDIR/NAME_x.npy (int64 tokens or float32 images).
Opset 13 makes torch 1.13 write LayerNorm as ReduceMean/Sub/Pow/ReduceMean/
Add/Sqrt/Div/Mul/Add (the pattern exec/fuse_ln.c folds); 17 writes
LayerNormalization.
"""
import argparse
import math
import os

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, d, h, t, causal):
        super().__init__()
        self.qkv, self.proj, self.h, self.causal = nn.Linear(d, 3 * d), nn.Linear(d, d), h, causal
        self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

    def forward(self, x, mask=None):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.causal:
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        if mask is not None:
            att = att + mask
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


def new_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, d, h, t, causal):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, h, t, causal)
        self.fc, self.out, self.causal = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), causal

    def forward(self, x, mask=None):
        if self.causal:  # GPT: pre-norm, tanh GELU
            x = x + self.attn(self.ln1(x))
            return x + self.out(new_gelu(self.fc(self.ln2(x))))
        x = self.ln1(x + self.attn(x, mask))  # BERT: post-norm, erf GELU
        return self.ln2(x + self.out(F.gelu(self.fc(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, h, t, layers):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList(Block(d, h, t, True) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1)).unsqueeze(0))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class BERT(nn.Module):
    def __init__(self, vocab, d, h, t, layers):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(Block(d, h, t, False) for _ in range(layers))
        self.pool = nn.Linear(d, d)

    def forward(self, idx):
        mask = ((idx == 0).float() * -10000.0).view(idx.size(0), 1, 1, idx.size(1))
        x = self.ln(self.tok(idx) + self.pos(torch.arange(idx.size(1)).unsqueeze(0)))
        for b in self.blocks:
            x = b(x, mask)
        return torch.tanh(self.pool(x[:, 0]))


def export(model, x, path, opset):
    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], opset_version=opset,
                          do_constant_folding=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--models", default="gpt,bert,resnet,mobile")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--image", type=int, default=64)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    for name in a.models.split(","):
        if name in ("gpt", "bert"):
            cls = GPT if name == "gpt" else BERT
            model = cls(1000, a.dim, a.heads, a.tokens, a.layers)
            x = rng.integers(1, 1000, (a.batch, a.tokens)).astype(np.int64)
            if name == "bert":
                x[:, -a.tokens // 4:] = 0  # padding the mask hides
        else:
            import torchvision
            model = torchvision.models.resnet18() if name == "resnet" else torchvision.models.mobilenet_v2()
            for m in model.modules():  # non-trivial BatchNorm statistics to fold
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
            x = rng.standard_normal((max(a.batch, 4), 3, a.image, a.image)).astype(np.float32)
        export(model, torch.from_numpy(x), os.path.join(a.outdir, name + ".onnx"), a.opset)
        np.save(os.path.join(a.outdir, name + "_x.npy"), x)
        print(name, os.path.join(a.outdir, name + ".onnx"))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Write the PyTorch reference trainings of tests/train/ref/ (run by hand).

Usage: make_train_refs.py OUT_DIR [NAME...]   (e.g. tests/train/ref bn_fresh)

Needs PyTorch (Debian's python3-torch 1.13), which the tests do not: they
only read what this writes.  For each small seeded model it writes into
OUT_DIR/NAME/: model.onnx (dynamic batch), x.npy, y.npy and train.json,
which lists trainings of the same initial weights with several optimizers
(SGD with momentum, Nesterov and weight decay, Adam, AdamW, Adam with other
betas and eps, and three learning-rate schedules: cosine with warmup for
SGD, linear with warmup for AdamW, step for Adam), each with the
loss of every step in PyTorch.  Step i trains on rows [(i*B) mod N, +B)
(wrapping), no shuffle, like `hpdlf-exec --train --no-shuffle`.

Models:
  bn_cnn       Conv+BatchNorm2d+ReLU+MaxPool twice, Linear+BatchNorm1d+ReLU,
               Linear; cross-entropy.  BatchNorm in train mode (batch
               statistics, running statistics updated with momentum 0.1).
               After each training the file also holds the running
               statistics and the eval-mode logits of infer_x.npy.
  transformer  int64 tokens -> Embedding + positional Embedding (Gather),
               two pre-norm encoder blocks written out (LayerNorm as
               ReduceMean/Sub/Pow/Sqrt/Div at opset 14, multi-head
               self-attention with Reshape/Transpose/MatMul/Softmax, exact
               GELU via Erf), mean pool, Linear; cross-entropy.
  encoder_nn   nn.TransformerEncoderLayer (GELU, dropout 0, batch_first),
               fused LayerNormalization at opset 17, last-token pooling;
               cross-entropy.
  gpt          next-token prediction: causal attention (Where with -inf),
               tanh GELU, the token embedding tied to the output projection,
               logits [B, V, T], 20% of the labels -100 (ignored).
  autoenc      a loss computed in the graph: output 'loss' =
               mean((decoder(encoder(x)) - x)^2) with LayerNorm and GELU;
               trained with --loss output:loss (y.npy is unused zeros).
  bn_fresh     Conv+BatchNorm2d(8)+ReLU+MaxPool, Linear+BatchNorm1d(12)+ReLU,
               Linear, exported at opset 13 straight after construction
               (PyTorch's default init, as users export before training):
               the exporter merges equal initializers, so each running
               statistic comes out as Identity(bias) or Identity(weight).
               SGD with momentum and Adam, 10 steps, running statistics
               and eval logits after training.

The other models get distinct_init() so that no initializers merge.
The models are exported in eval form (BatchNormalization with its running
statistics as initializers; hpdlf switches it to batch statistics for
training) with TrainingMode.PRESERVE, so the exporter does not fold
BatchNorm into the convolutions.
"""
import json
import math
import os
import sys

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 15

OPTIMIZERS = [
    dict(optimizer="sgd", lr=0.05, momentum=0.9, nesterov=False, weight_decay=1e-3),
    dict(optimizer="sgd", lr=0.02, momentum=0.9, nesterov=True, weight_decay=5e-3),
    dict(optimizer="adam", lr=3e-3, momentum=0.0, nesterov=False, weight_decay=1e-3),
    dict(optimizer="adamw", lr=3e-3, momentum=0.0, nesterov=False, weight_decay=0.05),
    dict(optimizer="adam", lr=3e-3, momentum=0.0, nesterov=False, weight_decay=0.0, betas=[0.8, 0.99], eps=1e-4),
    # learning-rate schedules (hpdlf-exec --lr-schedule, --warmup-steps)
    dict(optimizer="sgd", lr=0.05, momentum=0.9, nesterov=False, weight_decay=1e-3, schedule="cosine", warmup=3),
    dict(optimizer="adamw", lr=3e-3, momentum=0.0, nesterov=False, weight_decay=0.05, schedule="linear", warmup=2),
    dict(optimizer="adam", lr=3e-3, momentum=0.0, nesterov=False, weight_decay=1e-3, schedule="step:4,0.5"),
]


class BnCnn(nn.Module):
    def __init__(s):
        super().__init__()
        s.c1, s.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        s.c2, s.b2 = nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        s.l1, s.b3 = nn.Linear(64, 32, bias=False), nn.BatchNorm1d(32)
        s.l2 = nn.Linear(32, 10)

    def forward(s, x):
        x = F.max_pool2d(F.relu(s.b1(s.c1(x))), 2)
        x = F.max_pool2d(F.relu(s.b2(s.c2(x))), 2)
        x = F.relu(s.b3(s.l1(torch.flatten(x, 1))))
        return s.l2(x)


class Block(nn.Module):
    """Pre-norm encoder block with the attention written out."""

    def __init__(s, d, heads, ff, seq):
        super().__init__()
        s.h, s.dh, s.seq = heads, d // heads, seq
        s.n1, s.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.f1, s.f2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def attend(s, x):
        d = s.h * s.dh
        q, k, v = s.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(-1, s.seq, s.h, s.dh).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(s.dh), dim=-1)
        return s.o((a @ v).transpose(1, 2).reshape(-1, s.seq, d))

    def forward(s, x):
        x = x + s.attend(s.n1(x))
        return x + s.f2(F.gelu(s.f1(s.n2(x))))


class Transformer(nn.Module):
    def __init__(s, vocab=16, d=16, heads=2, ff=32, seq=8, blocks=2, classes=4):
        super().__init__()
        s.tok, s.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        s.register_buffer("positions", torch.arange(seq))
        s.blocks = nn.ModuleList(Block(d, heads, ff, seq) for _ in range(blocks))
        s.norm, s.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(s, t):
        x = s.tok(t) + s.pos(s.positions)
        for b in s.blocks:
            x = b(x)
        return s.head(s.norm(x).mean(dim=1))


class EncoderNn(nn.Module):
    def __init__(s, vocab=16, d=16, seq=8, classes=4):
        super().__init__()
        s.tok = nn.Embedding(vocab, d)
        s.pos = nn.Parameter(torch.randn(seq, d) * 0.1)
        s.enc = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, activation="gelu", batch_first=True)
        s.head = nn.Linear(d, classes)

    def forward(s, t):
        return s.head(s.enc(s.tok(t) + s.pos)[:, -1])


class Gpt(nn.Module):
    """Causal self-attention (masked_fill -inf: Where), tanh GELU, embedding
    tied to the output projection (Gather and MatMul share a weight),
    per-position logits [B, V, T] against labels with ignored (-100) ones."""

    def __init__(s, vocab=16, d=16, seq=8):
        super().__init__()
        s.tok, s.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(seq, d) * 0.1)
        s.n1, s.n2, s.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.f1, s.f2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        s.register_buffer("causal", torch.tril(torch.ones(seq, seq)) == 0)
        s.seq, s.d = seq, d

    def forward(s, t):
        x = s.tok(t) + s.pos
        q, k, v = (u.reshape(-1, s.seq, 2, s.d // 2).transpose(1, 2) for u in s.qkv(s.n1(x)).split(s.d, dim=-1))
        a = (q @ k.transpose(-2, -1) * (2.0 / s.d) ** 0.5).masked_fill(s.causal, float("-inf"))
        x = x + s.o((torch.softmax(a, dim=-1) @ v).transpose(1, 2).reshape(-1, s.seq, s.d))
        x = x + s.f2(F.gelu(s.f1(s.n2(x)), approximate="tanh"))
        return (s.n3(x) @ s.tok.weight.t()).transpose(1, 2)


class AutoEnc(nn.Module):
    def __init__(s):
        super().__init__()
        s.e, s.n, s.d = nn.Linear(128, 96), nn.LayerNorm(96), nn.Linear(96, 128)

    def forward(s, x):
        return ((s.d(F.gelu(s.n(s.e(x)))) - x) ** 2).mean()


class BnFresh(nn.Module):
    def __init__(s):
        super().__init__()
        s.c1, s.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        s.l1, s.b2 = nn.Linear(128, 12, bias=False), nn.BatchNorm1d(12)
        s.l2 = nn.Linear(12, 5)

    def forward(s, x):
        x = F.max_pool2d(F.relu(s.b1(s.c1(x))), 2)
        x = F.relu(s.b2(s.l1(torch.flatten(x, 1))))
        return s.l2(x)


FRESH_OPTIMIZERS = [
    dict(optimizer="sgd", lr=0.05, momentum=0.9, nesterov=False, weight_decay=0.0),
    dict(optimizer="adam", lr=5e-3, momentum=0.0, nesterov=False, weight_decay=0.0),
]


def distinct_init(m):
    """Norm parameters and running statistics off their 1/0 defaults: the
    exporter would otherwise merge equal initializers (all LayerNorm scales,
    a BatchNorm's bias and running mean) into one, tying weights that torch
    trains apart."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d)):
                mod.weight.copy_(1 + 0.1 * torch.randn(mod.weight.shape, generator=g))
                mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=g))
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                mod.running_mean.copy_(0.1 * torch.randn(mod.running_mean.shape, generator=g))
                mod.running_var.copy_(1 + 0.2 * torch.rand(mod.running_var.shape, generator=g))
            if isinstance(mod, nn.MultiheadAttention):
                mod.in_proj_bias.copy_(0.1 * torch.randn(mod.in_proj_bias.shape, generator=g))
                mod.out_proj.bias.copy_(0.1 * torch.randn(mod.out_proj.bias.shape, generator=g))


def check_untied(path, merged):
    """No Identity in the export, or (merged) every running statistic one."""
    import onnx
    ids = [n.output[0] for n in onnx.load(path).graph.node if n.op_type == "Identity"]
    if merged and sorted(ids) != sorted(k + s for k in ("b1", "b2") for s in (".running_mean", ".running_var")):
        raise SystemExit("%s: expected merged running statistics, got Identity outputs %s" % (path, ids))
    if ids and not merged:
        raise SystemExit("%s: the exporter tied initializers (%s)" % (path, ids[0]))


def make_data(name, rng):
    if name == "bn_fresh":
        x = rng.standard_normal((48, 3, 8, 8)).astype(np.float32)
        y = (x[:, 1].mean(axis=(1, 2)) > 0) * 2 + rng.integers(0, 3, 48)
        return x, y.astype(np.int64), rng.standard_normal((6, 3, 8, 8)).astype(np.float32)
    if name == "bn_cnn":
        x = rng.standard_normal((64, 3, 8, 8)).astype(np.float32)
        y = (x[:, 0, :4].mean(axis=(1, 2)) > 0) * 5 + rng.integers(0, 5, 64)
        return x, y.astype(np.int64), rng.standard_normal((8, 3, 8, 8)).astype(np.float32)
    if name == "gpt":
        x = rng.integers(0, 16, (64, 8)).astype(np.int64)
        y = np.concatenate([x[:, 1:], (x[:, :1] + 1) % 16], axis=1)  # next token
        y[rng.random(y.shape) < 0.2] = -100
        return x, y, None
    if name in ("transformer", "encoder_nn"):
        x = rng.integers(0, 16, (64, 8)).astype(np.int64)
        y = ((x == 3).sum(axis=1) + (x[:, 0] > 7) * 2) % 4  # tokens repeat: Gather's grad adds
        return x, y.astype(np.int64), None
    x = rng.standard_normal((64, 128)).astype(np.float32)
    return x, np.zeros(64, dtype=np.int64), None


def export(m, name, x, path):
    opset = 17 if name in ("encoder_nn", "gpt") else 13 if name == "bn_fresh" else 14
    out = "loss" if name == "autoenc" else "logits"
    axes = {"input": {0: "batch"}} if name == "autoenc" else {"input": {0: "batch"}, "logits": {0: "batch"}}
    m.eval()
    torch.onnx.export(m, torch.from_numpy(x[:2]), path, input_names=["input"], output_names=[out],
                      dynamic_axes=axes, opset_version=opset, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=name != "gpt")  # folding would untie gpt's tok.weight.t()


def make_optimizer(m, c):
    if c["optimizer"] == "sgd":
        return torch.optim.SGD(m.parameters(), lr=c["lr"], momentum=c["momentum"], nesterov=c["nesterov"],
                               weight_decay=c["weight_decay"])
    cls = torch.optim.Adam if c["optimizer"] == "adam" else torch.optim.AdamW
    return cls(m.parameters(), lr=c["lr"], betas=tuple(c.get("betas", (0.9, 0.999))), eps=c.get("eps", 1e-8),
               weight_decay=c["weight_decay"])


def make_scheduler(opt, c, steps):
    """Hugging Face's get_{constant,linear,cosine}_schedule_with_warmup
    factors through LambdaLR, or StepLR; None for a constant rate."""
    kind, w = c.get("schedule", "constant"), c.get("warmup", 0)
    if kind.startswith("step:"):
        n, g = kind[5:].split(",")
        return torch.optim.lr_scheduler.StepLR(opt, step_size=int(n), gamma=float(g))
    if kind == "constant" and not w:
        return None

    def factor(t):
        if t < w:
            return float(t) / float(max(1, w))
        if kind == "constant":
            return 1.0
        if kind == "linear":
            return max(0.0, float(steps - t) / float(max(1, steps - w)))
        progress = float(t - w) / float(max(1, steps - w))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(0.5) * 2.0 * progress)))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def train(m, c, x, y, batch, steps):
    opt = make_optimizer(m, c)
    sched = make_scheduler(opt, c, steps)
    m.train()
    losses, n = [], len(x)
    for i in range(steps):
        rows = [(i * batch + j) % n for j in range(batch)]
        xb, yb = torch.from_numpy(x[rows]), torch.from_numpy(y[rows])
        opt.zero_grad()
        out = m(xb)
        loss = out if out.dim() == 0 else F.cross_entropy(out, yb)
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        losses.append(float(loss))
    return losses


def bn_state(m, xi):
    st = {k: v.tolist() for k, v in m.state_dict().items() if "running_" in k}
    m.eval()
    with torch.no_grad():
        st["infer_logits"] = m(torch.from_numpy(xi)).tolist()
    return st


MODELS = (("bn_cnn", BnCnn), ("transformer", Transformer), ("encoder_nn", EncoderNn), ("autoenc", AutoEnc),
          ("gpt", Gpt), ("bn_fresh", BnFresh))


def main():
    out, only = sys.argv[1], sys.argv[2:]
    torch.set_num_threads(1)
    for k, (name, cls) in enumerate(MODELS):
        if only and name not in only:
            continue
        fresh = name == "bn_fresh"
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        rng = np.random.default_rng(100 + k)
        x, y, xi = make_data(name, rng)
        torch.manual_seed(100 + k)
        m = cls()
        if not fresh:
            distinct_init(m)
        init = m.state_dict()
        m = cls()
        m.load_state_dict(init)
        export(m, name, x, os.path.join(d, "model.onnx"))
        check_untied(os.path.join(d, "model.onnx"), fresh)
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "y.npy"), y)
        if xi is not None:
            np.save(os.path.join(d, "infer_x.npy"), xi)
        runs, steps = [], 10 if fresh else STEPS
        for c in FRESH_OPTIMIZERS if fresh else OPTIMIZERS:
            m = cls()
            m.load_state_dict(init)
            r = dict(c, batch=16, steps=steps, loss="output:loss" if name == "autoenc" else "cross-entropy")
            r["losses"] = train(m, c, x, y, 16, steps)
            if xi is not None:
                r["after"] = bn_state(m, xi)
            runs.append(r)
        with open(os.path.join(d, "train.json"), "w") as f:
            json.dump({"torch": torch.__version__, "runs": runs}, f, indent=0)
            f.write("\n")
        print(name, [round(r["losses"][-1], 4) for r in runs])
    return 0


if __name__ == "__main__":
    sys.exit(main())

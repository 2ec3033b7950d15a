#!/usr/bin/env python3
"""Training numerics against float64: hpdlf's losses stay as close to a
float64 PyTorch run as PyTorch's own float32 run does.

usage: check_numerics.py HPDLF_EXEC [PYTHON_WITH_TORCH]

Generates here (PyTorch, seeded) two small models and their data:
  resnet  a ResNet-like conv net: Conv+BatchNorm2d+ReLU stem, a basic
          residual block, a strided block with a 1x1 projection shortcut,
          global average pool, Linear; BatchNorm in training mode.
  resnet_fresh  the same net with PyTorch's default initialization, exported
          straight away: the exporter merges equal initializers, so every
          BatchNorm of one width reads its weight and bias as Identity of one
          shared tensor (as a torchvision ResNet-18 export does); PyTorch
          trains them apart, and so must hpdlf.
  resnext the stem, then two ResNeXt bottlenecks (1x1, 3x3 in groups of 4
          channels, 1x1; the second strided with a projection): grouped
          convolutions and their filter gradients (conv_grad_grp.c).
          Not one of issue 16's acceptance models: its losses are held
          within 1e-6 of float64's (relative) instead of the 2x rule, its
          trained tensors to the 2x rule as the others'.
  transformer  token + position embeddings, two pre-norm encoder blocks
          (fused LayerNormalization at opset 17, multi-head attention with
          Softmax, exact GELU), mean pool, Linear.
The ResNets see 16x16 images.  Each is trained for STEPS steps of SGD with
momentum from the same float32 initial weights three times: PyTorch in float64 (the reference), PyTorch in
float32, and hpdlf-exec --train.  Acceptance at every step i:

    |hpdlf_i - f64_i| <= 2 * |torch32_i - f64_i| + FLOOR * |f64_i|

FLOOR (2^-24, half an ulp of float32, the error of merely rounding the
float64 loss to float32) keeps a step where PyTorch's float32 run happens to
round onto the float64 loss from demanding better than float32 can write.
The worst ratio over the steps is printed.  The trained parameters and
running statistics after the last step (--export-onnx, matched by name),
a far finer measure than the losses, must likewise be within 2x PyTorch
float32's L2 distance to float64's.

ReLU makes that comparison a lottery unless the float64 run keeps away
from its kink: an input within ~1e-7 of 0 lies on either side depending on
float32 rounding alone, and one such flip changes the step's weight
gradients by ~1e-5 (100x float32's error) and the trajectories part for
good (a 32x32 batch-32 ResNet here passed the float64 run at 3e-8 from the
kink; hpdlf, exact in its reductions, rounded it to the other side at step
3).  So the generator takes the first data and weight seed from 5 on whose
float64 run keeps every ReLU input at least MARGIN (1e-6, ten times the
float32 runs' activation error) from 0, and says which.  The transformer
has no kink: seed 5.  If PyTorch is missing the test
is skipped (exit 77); tools/setup.sh installs python3-torch.
"""
import json
import os
import subprocess
import sys
import tempfile

STEPS = 10
FLOOR = 2.0 ** -24

GEN = r'''
import math, sys, json
SEEDS, MARGIN = 40, 1e-6
import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object
import torch, torch.nn as nn, torch.nn.functional as F

class Basic(nn.Module):
    def __init__(s, cin, cout, stride):
        super().__init__()
        s.c1, s.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        s.c2, s.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        s.proj = None
        if stride != 1 or cin != cout:
            s.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(s, x):
        y = s.b2(s.c2(relu(s.b1(s.c1(x)))))
        return relu(y + (x if s.proj is None else s.proj(x)))

class NeXt(nn.Module):
    """ResNeXt's bottleneck: 1x1, 3x3 in groups of 4 channels, 1x1."""
    def __init__(s, cin, width, cout, stride):
        super().__init__()
        s.a, s.ba = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        s.b, s.bb = nn.Conv2d(width, width, 3, stride, 1, groups=width // 4, bias=False), nn.BatchNorm2d(width)
        s.c, s.bc = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        s.proj = None
        if stride != 1 or cin != cout:
            s.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(s, x):
        y = s.bc(s.c(relu(s.bb(s.b(relu(s.ba(s.a(x))))))))
        return relu(y + (x if s.proj is None else s.proj(x)))

class ResNeXt(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem, s.bn = nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
        s.l1, s.l2 = NeXt(16, 32, 32, 1), NeXt(32, 64, 32, 2)
        s.fc = nn.Linear(32, 10)
    def forward(s, x):
        x = s.l2(s.l1(relu(s.bn(s.stem(x)))))
        return s.fc(x.mean(dim=(2, 3)))

class ResNet(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem, s.bn = nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
        s.l1, s.l2 = Basic(16, 16, 1), Basic(16, 32, 2)
        s.fc = nn.Linear(32, 10)
    def forward(s, x):
        x = s.l2(s.l1(relu(s.bn(s.stem(x)))))
        return s.fc(x.mean(dim=(2, 3)))

class Block(nn.Module):
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
    def __init__(s, vocab=32, d=32, heads=2, ff=64, seq=16, blocks=2, classes=4):
        super().__init__()
        s.tok = nn.Embedding(vocab, d)
        s.pos = nn.Parameter(torch.randn(seq, d) * 0.1)
        s.blocks = nn.ModuleList(Block(d, heads, ff, seq) for _ in range(blocks))
        s.norm, s.head = nn.LayerNorm(d), nn.Linear(d, classes)
    def forward(s, t):
        x = s.tok(t) + s.pos
        for b in s.blocks:
            x = b(x)
        return s.head(s.norm(x).mean(dim=1))

def distinct(m, g):
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.LayerNorm, nn.BatchNorm2d)):
                mod.weight.copy_(1 + 0.1 * torch.randn(mod.weight.shape, generator=g))
                mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=g))
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.copy_(0.1 * torch.randn(mod.running_mean.shape, generator=g))
                mod.running_var.copy_(1 + 0.2 * torch.rand(mod.running_var.shape, generator=g))

def train(m, x, y, cfg, dtype):
    m = m.to(dtype)
    opt = torch.optim.SGD(m.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    m.train()
    out, n, b = [], len(x), cfg["batch"]
    for i in range(cfg["steps"]):
        rows = [(i * b + j) % n for j in range(b)]
        xb = torch.from_numpy(x[rows])
        xb = xb.to(dtype) if xb.is_floating_point() else xb
        opt.zero_grad()
        loss = F.cross_entropy(m(xb), torch.from_numpy(y[rows]))
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out, {k: v.detach().double().numpy().copy() for k, v in m.state_dict().items() if v.is_floating_point()}

KINK = [float("inf"), False]  # nearest ReLU input to 0 in the float64 run; recording

def relu(x):
    if KINK[1] and x.dtype == torch.float64:
        KINK[0] = min(KINK[0], float(x.detach().abs().min()))
    return F.relu(x)

def make(name, seed, cfg):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    if name.startswith("res"):
        hw = cfg["hw"]
        m, x = ResNeXt() if name == "resnext" else ResNet(), rng.standard_normal((64, 3, hw, hw)).astype(np.float32)
        y = ((x[:, 0, :8].mean(axis=(1, 2)) > 0) * 5 + rng.integers(0, 5, 64)).astype(np.int64)
    else:
        m, x = Transformer(), rng.integers(0, 32, (64, 16)).astype(np.int64)
        y = (((x == 3).sum(axis=1) + (x[:, 0] > 15) * 2) % 4).astype(np.int64)
    if name != "resnet_fresh":
        distinct(m, g)
    return m, x, y

def main(name, d, cfg):
    torch.set_num_threads(1)
    for seed in range(5, 5 + SEEDS):
        m, x, y = make(name, seed, cfg)
        init = {k: v.clone() for k, v in m.state_dict().items()}
        KINK[:] = [float("inf"), True]
        f64, w64 = train(m, x, y, cfg, torch.float64)
        KINK[1] = False
        if KINK[0] >= MARGIN:
            break
    else:
        sys.exit("no seed in 5..%d keeps every ReLU input of the float64 run %g from 0 (nearest %g)" % (4 + SEEDS, MARGIN, KINK[0]))
    m.load_state_dict(init)
    m = m.float()
    m.eval()
    torch.onnx.export(m, torch.from_numpy(x[:2]), d + "/model.onnx", input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)  # folding renames transposed Linear weights
    np.save(d + "/x.npy", x)
    np.save(d + "/y.npy", y)
    np.savez(d + "/w_f64.npz", **w64)
    m.load_state_dict(init)
    f32, w32 = train(m, x, y, cfg, torch.float32)
    np.savez(d + "/w_f32.npz", **w32)
    json.dump({"f64": f64, "f32": f32, "seed": seed, "kink": KINK[0]}, open(d + "/ref.json", "w"))

main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
'''

CONFIGS = {
    "resnet": dict(lr=0.1, momentum=0.9, batch=16, steps=STEPS, hw=16),
    "resnet_fresh": dict(lr=0.1, momentum=0.9, batch=8, steps=STEPS, hw=16),
    # not one of issue 16's acceptance models: a check of grouped
    # convolutions' gradients, whose losses are compared at 1e-6 of float64
    # (a step where PyTorch's float32 loss lands within 1.7e-8 of float64's
    # asks the 2x rule for better than an ulp of 2.3; its weights keep it)
    "resnext": dict(lr=0.1, momentum=0.9, batch=8, steps=STEPS, hw=16, loss_rel=1e-6),
    "transformer": dict(lr=0.05, momentum=0.9, batch=16, steps=STEPS),
}

FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)
    return ok


def run(args, timeout=600):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def hpdlf_losses(exe, d, cfg, extra):
    log = os.path.join(d, "log.json")
    args = [exe, os.path.join(d, "model.onnx"), "--train", "--data", os.path.join(d, "x.npy"), "--labels",
            os.path.join(d, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", repr(cfg["lr"]),
            "--momentum", repr(cfg["momentum"]), "--batch", str(cfg["batch"]), "--steps", str(cfg["steps"]),
            "--no-shuffle", "--quiet", "--log-json", log, "--export-onnx", os.path.join(d, "trained.onnx")] + extra
    p = run(args)
    if p.returncode != 0:
        return None, p.stderr.strip()[-300:]
    with open(log) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()], ""


def weight_errors(d):
    """Distance of hpdlf's and PyTorch float32's trained parameters (every
    tensor both hold under one name, statistics included) to float64's."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    hp = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in onnx.load(os.path.join(d, "trained.onnx")).graph.initializer}
    w64, w32 = np.load(os.path.join(d, "w_f64.npz")), np.load(os.path.join(d, "w_f32.npz"))
    names = [k for k in w64.files if k in hp and w64[k].dtype.kind == "f" and hp[k].size == w64[k].size]
    eh = sum(float(np.sum((hp[k].ravel() - w64[k].ravel()) ** 2)) for k in names) ** 0.5
    et = sum(float(np.sum((w32[k].ravel() - w64[k].ravel()) ** 2)) for k in names) ** 0.5
    want = [k for k in w64.files if w64[k].dtype.kind == "f"]
    return (len(names) if len(names) == len(want) else -len(want)), eh, et


def check_model(exe, py, name, tmp):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    cfg = CONFIGS[name]
    p = run([py, "-c", GEN, name, d, json.dumps(cfg)])
    if not check(p.returncode == 0, "%s: PyTorch references generated %s" % (name, p.stderr.strip()[-300:] if p.returncode else "")):
        return
    with open(os.path.join(d, "ref.json")) as f:
        ref = json.load(f)
    print("     %s: seed %d, nearest ReLU input of the float64 run %.2e from 0" % (name, ref["seed"], ref["kink"]))
    if name == "resnet_fresh":
        import onnx
        ids = [n for n in onnx.load(os.path.join(d, "model.onnx")).graph.node if n.op_type == "Identity"]
        check(len(ids) >= 4, "%s: the export ties %d parameters and statistics through Identity" % (name, len(ids)))
    for threads in ("1", "2"):
        got, err = hpdlf_losses(exe, d, cfg, ["--threads", threads])
        if not check(got is not None and len(got) == STEPS, "%s --threads %s: trains %s" % (name, threads, err)):
            continue
        worst, bad, rel = 0.0, [], cfg.get("loss_rel")
        for i, (h, t, r) in enumerate(zip(got, ref["f32"], ref["f64"])):
            eh, et = abs(h - r), abs(t - r)
            allowed = rel * abs(r) if rel else 2 * et + FLOOR * abs(r)
            worst = max(worst, eh / (rel * abs(r)) if rel else eh / max(et, FLOOR * abs(r)))
            if eh > allowed:
                bad.append("step %d: hpdlf %.3e, torch f32 %.3e from f64" % (i, eh, et))
        print("     %s --threads %s: |hpdlf - f64| %s" % (name, threads, " ".join("%.1e" % abs(h - r)
                                                                     for h, r in zip(got, ref["f64"]))))
        print("     %s --threads %s: |f32 - f64|   %s" % (name, threads, " ".join("%.1e" % abs(t - r)
                                                                     for t, r in zip(ref["f32"], ref["f64"]))))
        nw, ewh, ewt = weight_errors(d)
        print("     %s --threads %s: %d trained tensors, |w_hpdlf - w64| %.3e, |w_f32 - w64| %.3e" % (name, threads, nw, ewh, ewt))
        check(nw > 0 and ewh <= 2 * ewt, "%s --threads %s: the %d trained tensors within 2x PyTorch float32's distance to "
              "float64 (%.2e against %.2e)" % (name, threads, nw, ewh, ewt))
        if rel:
            check(not bad, "%s --threads %s: %d steps within %g of float64, relative (worst ratio %.2f) %s"
                  % (name, threads, STEPS, rel, worst, "; ".join(bad)))
        else:
            check(not bad, "%s --threads %s: %d steps within 2x PyTorch float32's distance to float64 "
                  "(worst ratio %.2f) %s" % (name, threads, STEPS, worst, "; ".join(bad)))


def main():
    exe = sys.argv[1]
    py = sys.argv[2] if len(sys.argv) > 2 else "/usr/bin/python3"
    if run([py, "-c", "import torch"]).returncode != 0:
        print("SKIP: no PyTorch in %s (tools/setup.sh installs python3-torch)" % py)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        for name in CONFIGS:
            check_model(exe, py, name, tmp)
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Training convolutions whose kernel reaches past the input for every
output (exec/fuse_train_taps.c): the taps that read padding only are
dropped before autodiff.

usage: check_conv_taps.py HPDLF_EXEC WORKDIR

Writes with onnx.helper a net of such convolutions, as DeepLabV3's ASPP
has them: after a stride-2 stem (6x6 -> 3x3), a 3x3 at dilation 6 (only
the centre tap reads the input: a 1x1), the same grouped, a 5x5 at
dilation 2 with pads 4 (the middle 3x3 is left), a 3x1 at dilation 6 on
one axis only, a 3x3 at dilation 4 and stride 2 (a 1x1 at stride 2), and
a 3x3 at dilation 1 (nothing to drop); concatenated, pooled, a linear
layer.  Then a second net, written by this script with those kernels
already cut to their live taps and pads moved (what the pass should make),
and a 3-D net (3x3x3 at dilation 3 on 2x2x2).  Checks:
  * losses over 4 steps of SGD with momentum 0.9 and weight decay 0.01
    equal a float64 PyTorch run of the full kernels (torch.nn.functional,
    independent of hpdlf) within 2e-6 relative, for the 2-D and the 3-D net;
  * the FLOPs a step does (--log-json gflops x ms) are those of the net cut
    by hand within 0.5%, and below the full kernels' count by what the
    dead taps cost: the rewrite happened;
  * the exported weights of the dead taps moved by weight decay and
    momentum alone (their gradient is 0): W * (1 - lr wd)... as PyTorch's;
  * at the smallest budget --plan names, the losses are bitwise the in-core
    ones.
Exits 1 on any failure.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAILS = []
RNG = np.random.default_rng(11)
LR, MOM, WD, STEPS, BATCH = 0.05, 0.9, 0.01, 4, 4

# (name, kernel, dilation, pads (begin..., end...), stride, group): on the 3x3 map, 4 channels in, 4 out
BRANCHES = [("aspp6", (3, 3), (6, 6), (6, 6, 6, 6), (1, 1), 1),
            ("aspp6g", (3, 3), (6, 6), (6, 6, 6, 6), (1, 1), 2),
            ("k5d2", (5, 5), (2, 2), (4, 4, 4, 4), (1, 1), 1),
            ("k3x1", (3, 1), (6, 1), (6, 0, 6, 0), (1, 1), 1),
            ("s2d4", (3, 3), (4, 4), (4, 4, 4, 4), (2, 2), 1),
            ("plain", (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1)]


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILS.append(what)
    return ok


def live(n_in, k, d, pb, s):
    """Live taps [lo, hi] of one axis, by brute force over the outputs."""
    pe_out = (n_in + 2 * pb - d * (k - 1) - 1) // s + 1
    taps = [t for t in range(k) if any(0 <= o * s + t * d - pb < n_in for o in range(pe_out))]
    return taps[0], taps[-1]


def cut(w, kern, dil, pads, stride, n_in):
    """W and pads with the dead taps dropped (the expected rewrite)."""
    nd = len(kern)
    lo, hi, pb, pe = [], [], [], []
    for a in range(nd):
        l, h = live(n_in, kern[a], dil[a], pads[a], stride[a])
        out = (n_in + pads[a] + pads[nd + a] - dil[a] * (kern[a] - 1) - 1) // stride[a] + 1
        lo.append(l), hi.append(h)
        pb.append(pads[a] - l * dil[a])
        pe.append(max(0, (out - 1) * stride[a] + (kern[a] - 1) * dil[a] + 1 - n_in - pads[a] - (kern[a] - 1 - h) * dil[a]))
    sl = tuple([slice(None), slice(None)] + [slice(lo[a], hi[a] + 1) for a in range(nd)])
    return w[sl], tuple(pb + pe)


def net2d(path, ws, cut_by_hand):
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "stem.w"], ["s"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             mk("Relu", ["s"], ["sr"])]
    inits = [numpy_helper.from_array(ws["stem.w"], "stem.w")]
    outs = []
    for name, kern, dil, pads, stride, group in BRANCHES:
        w = ws[name + ".w"]
        if cut_by_hand:
            w, pads = cut(w, kern, dil, pads, stride, 3)
            kern = w.shape[2:]
        inits.append(numpy_helper.from_array(w, name + ".w"))
        nodes.append(mk("Conv", ["sr", name + ".w"], [name], kernel_shape=list(kern), dilations=list(dil),
                        pads=list(pads), strides=list(stride), group=group))
        nodes.append(mk("GlobalAveragePool", [name], [name + ".p"]))
        outs.append(name + ".p")
    nodes += [mk("Concat", outs, ["cat"], axis=1), mk("Flatten", ["cat"], ["f"]), mk("MatMul", ["f", "fc.w"], ["y"])]
    inits.append(numpy_helper.from_array(ws["fc.w"], "fc.w"))
    g = helper.make_graph(nodes, "taps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def net3d(path, ws):
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "c3.w", "c3.b"], ["c"], kernel_shape=[3, 3, 3], dilations=[3, 3, 3], pads=[3] * 6),
             mk("Relu", ["c"], ["r"]), mk("Flatten", ["r"], ["f"]), mk("MatMul", ["f", "fc3.w"], ["y"])]
    inits = [numpy_helper.from_array(ws[k], k) for k in ("c3.w", "c3.b", "fc3.w")]
    g = helper.make_graph(nodes, "taps3d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 2, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def torch_losses(ws, x, y, three_d):
    """Float64 PyTorch, full kernels, SGD with momentum and weight decay;
    the losses and the final weights."""
    import torch
    import torch.nn.functional as F
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in ws.items()}
    opt = torch.optim.SGD(list(p.values()), lr=LR, momentum=MOM, weight_decay=WD)
    out = []
    for s in range(STEPS):
        xb = torch.tensor(x[s * BATCH:(s + 1) * BATCH], dtype=torch.float64)
        yb = torch.tensor(y[s * BATCH:(s + 1) * BATCH])
        if three_d:
            h = F.relu(F.conv3d(xb, p["c3.w"], p["c3.b"], padding=3, dilation=3)).flatten(1) @ p["fc3.w"]
        else:
            r = F.relu(F.conv2d(xb, p["stem.w"], padding=1, stride=2))
            cols = []
            for name, kern, dil, pads, stride, group in BRANCHES:
                rp = F.pad(r, (pads[1], pads[3], pads[0], pads[2]))
                cols.append(F.conv2d(rp, p[name + ".w"], dilation=dil, stride=stride, groups=group).mean((2, 3)))
            h = torch.cat(cols, 1) @ p["fc.w"]
        loss = F.cross_entropy(h, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out, {k: v.detach().numpy() for k, v in p.items()}


def train(exe, model, tmp, tag, extra=()):
    log, exp = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".onnx")
    args = [exe, model, "--train", "--data", os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "y.npy"),
            "--batch", str(BATCH), "--steps", str(STEPS), "--no-shuffle", "--optimizer", "sgd", "--lr", str(LR),
            "--momentum", str(MOM), "--weight-decay", str(WD), "--threads", "2", "--quiet", "--log-json", log,
            "--export-onnx", exp] + list(extra)
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if not check(p.returncode == 0, "%s: exit %d %s" % (tag, p.returncode, p.stderr.strip()[-400:])):
        return None
    rows = [json.loads(l) for l in open(log) if l.strip()]
    w = {i.name: numpy_helper.to_array(i) for i in onnx.load(exp).graph.initializer}
    return [r["loss"] for r in rows], [r["gflops"] * r["ms"] * 1e6 for r in rows], w


def conv_flops(kern, cin_g, cout, out_vol, batch):
    return 2.0 * batch * cout * cin_g * int(np.prod(kern)) * out_vol


def rel(a, b):
    return max(abs(p - q) / abs(q) for p, q in zip(a, b))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    exe, tmp = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    f = lambda *s: (RNG.standard_normal(s) * 0.4).astype(np.float32)  # noqa: E731
    ws = {"stem.w": f(4, 3, 3, 3), "fc.w": f(4 * len(BRANCHES), 5)}
    for name, kern, dil, pads, stride, group in BRANCHES:
        ws[name + ".w"] = f(4, 4 // group, *kern)
    x = f(BATCH * STEPS, 3, 6, 6) * 2.5
    y = RNG.integers(0, 5, BATCH * STEPS).astype(np.int64)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "y.npy"), y)
    full, byhand = os.path.join(tmp, "taps.onnx"), os.path.join(tmp, "cut.onnx")
    net2d(full, ws, False)
    net2d(byhand, ws, True)
    a, b = train(exe, full, tmp, "full"), train(exe, byhand, tmp, "cut")
    if a and b:
        ref, wref = torch_losses(ws, x, y, False)
        check(rel(a[0], ref) <= 2e-6, "2-D losses %s, float64 PyTorch %s (rel %.2g)" % (a[0], ref, rel(a[0], ref)))
        check(rel(a[0], b[0]) <= 2e-6, "2-D losses equal the net cut by hand's (rel %.2g)" % rel(a[0], b[0]))
        # the FLOPs of a step: the full kernels' convs (forward, dX, dW) would add what the dead taps cost
        dead = 0.0
        for name, kern, dil, pads, stride, group in BRANCHES:
            kept = cut(ws[name + ".w"], kern, dil, pads, stride, 3)[0].shape[2:]
            o = (3 + pads[0] + pads[2] - dil[0] * (kern[0] - 1) - 1) // stride[0] + 1
            o *= (3 + pads[1] + pads[3] - dil[1] * (kern[1] - 1) - 1) // stride[1] + 1
            dead += 3 * (conv_flops(kern, 4 // group, 4, o, BATCH) - conv_flops(kept, 4 // group, 4, o, BATCH))
        fa, fb = np.median(a[1]), np.median(b[1])
        # (the Slice of W and its gradient add a little)
        check(fb <= fa <= fb + 0.05 * dead, "FLOPs a step %.0f, the net cut by hand's %.0f (+ the Slice's)" % (fa, fb))
        check(dead > 0.3 * fb, "the dead taps would cost %.0f FLOPs more a step (of %.0f)" % (dead, fb))
        for name, kern, dil, pads, stride, group in BRANCHES[:2]:
            k = name + ".w"
            centre = np.zeros(ws[k].shape, bool)
            centre[:, :, 1, 1] = True
            got, want = a[2][k][~centre], wref[k][~centre]
            check(np.allclose(got, want, rtol=1e-6, atol=1e-7) and not np.allclose(got, ws[k][~centre]),
                  "%s: dead taps moved by decay and momentum alone, as PyTorch's (max |d| %.2g)"
                  % (k, np.abs(got - want).max()))
        # out of core, at the smallest budget --plan names: bitwise
        p = subprocess.run([exe, full, "--train", "--data", os.path.join(tmp, "x.npy"), "--labels",
                            os.path.join(tmp, "y.npy"), "--batch", str(BATCH), "--steps", "1", "--plan"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        m = re.search(r"smallest budget .* = (\d+) bytes", p.stdout)
        if check(p.returncode == 0 and m, "--plan names the smallest budget: %s" % p.stderr.strip()[-300:]):
            c = train(exe, full, tmp, "ooc", ["--budget", m.group(1)])
            if c:
                check(c[0] == a[0], "at the smallest budget (%s B) losses bitwise the in-core ones: %s"
                      % (m.group(1), c[0]))
    w3 = {"c3.w": f(3, 2, 3, 3, 3), "c3.b": f(3), "fc3.w": f(3 * 8, 5)}
    x3 = f(BATCH * STEPS, 2, 2, 2, 2)
    np.save(os.path.join(tmp, "x.npy"), x3)
    net3d(os.path.join(tmp, "taps3d.onnx"), w3)
    d = train(exe, os.path.join(tmp, "taps3d.onnx"), tmp, "3d")
    if d:
        ref, _ = torch_losses(w3, x3, y, True)
        check(rel(d[0], ref) <= 2e-6, "3-D losses %s, float64 PyTorch %s (rel %.2g)" % (d[0], ref, rel(d[0], ref)))
        full3 = 3 * conv_flops((3, 3, 3), 2, 3, 8, BATCH)
        check(np.median(d[1]) < full3 / 4, "3-D FLOPs a step %.0f, the full 3x3x3 conv alone %.0f"
              % (np.median(d[1]), full3))
    if FAILS:
        print("%d failure(s)" % len(FAILS))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

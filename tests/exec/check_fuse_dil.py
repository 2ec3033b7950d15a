#!/usr/bin/env python3
"""Conv kernels cut to their live taps for inference (exec/fuse_dil.c).

usage: check_fuse_dil.py HPDLF_EXEC

Models written here (onnx.helper, seeded NumPy weights), one per input
shape, each Conv a graph output; per Conv the kernel --plan must name after
the cut ("-": left alone):

  aspp   1x8x6x6: 3x3 dilation 12 pad 12 (ASPP on a 6x6 map) -> 1x1; the
         same without bias, depthwise (group 8) and group 2 -> 1x1;
         SAME_UPPER -> 1x1; dilation 8 on rows only, 1 on columns -> 1x3;
         5x5 dilation 4 pad 8 (taps die partly) -> 3x3 dilation 4x4;
         3x3 dilation 2 pad 2 (every tap live) -> -
  stride 1x4x7x7: stride 2 dilation 10 pad 10 -> 1x1; stride 3,
         dilation 6, pads 6/0 (only the first tap dies) -> 2x2 dilation 6x6
  grow   1x3x3x3: stride 5, dilation 3, pads 1/4, where the live tap alone
         would need a negative begin pad: grown to 2x2 dilation 3x3
  keep   1x4x10x10: dilation 5, pads 2/0 and 0/2, where a cut would need a
         negative pad or change the output size -> - (both)
  d3     1x2x4x5x6: 3-D, dilation 8 pad 8 -> 1x1x1; dilation (6,1,1) ->
         1x3x3; 1-D (1x3x7) dilation 9 pad 9 -> 1, in model d1
  inf    the ASPP conv with W[0,0,0,0] = Inf on a dead tap
  big    1x512x3x3, 512 channels, dilation 6 pad 6 -> 1x1: its 1 MiB cut
         weight goes to the spill file under a budget

Checks: --plan lists exactly those cuts, the same under --budget 1G, none
with --no-fuse; every output within TOL * max|ref| of a float64 NumPy
convolution over ALL taps (padding skipped, as ONNX Runtime does; with
finite weights that is zero padding); the Inf model finite (ONNX Runtime's
value, the dropped tap is never multiplied); out of core at the smallest
budget bitwise the in-core outputs (the pass runs before planning in both).
"""
import itertools
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper

TOL = 2e-5
FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)
    return ok


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def ref_conv(x, w, b, strides, dil, pb, pe, group):
    """float64 N-D convolution over every tap; out-of-range positions skipped."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    nd = x.ndim - 2
    hs, ks = x.shape[2:], w.shape[2:]
    outs = [(hs[i] + pb[i] + pe[i] - (ks[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(nd)]
    m, cg = w.shape[0], w.shape[1]
    mg = m // group
    y = np.zeros((x.shape[0], m) + tuple(outs))
    for tap in itertools.product(*[range(k) for k in ks]):
        idx, mask = [], np.ones(tuple(outs), dtype=bool)
        for i in range(nd):
            pos = np.arange(outs[i]) * strides[i] - pb[i] + tap[i] * dil[i]
            ok = (pos >= 0) & (pos < hs[i])
            shape = [1] * nd
            shape[i] = outs[i]
            mask &= ok.reshape(shape)
            idx.append(np.clip(pos, 0, hs[i] - 1))
        patch = x[(slice(None), slice(None)) + np.ix_(*idx)]
        for gi in range(group):
            wt = w[(slice(gi * mg, (gi + 1) * mg), slice(None)) + tap]
            with np.errstate(invalid="ignore"):
                part = np.einsum("nc...,mc->nm...", patch[:, gi * cg:(gi + 1) * cg], wt)
            y[:, gi * mg:(gi + 1) * mg] += np.where(mask, part, 0.0)
    return y + (0 if b is None else b.astype(np.float64).reshape((1, m) + (1,) * nd))


class Model:
    def __init__(self, seed, xshape):
        self.rng, self.xshape, self.nodes, self.inits, self.ref, self.want = np.random.default_rng(seed), xshape, [], [], {}, []
        self.x = self.rng.standard_normal(xshape).astype(np.float32)

    def conv(self, name, m, k, want, group=1, strides=None, dil=None, pads=None, auto_pad=None, bias=True,
             poke=None):
        nd, cin = len(self.xshape) - 2, self.xshape[1]
        strides, dil = strides or [1] * nd, dil or [1] * nd
        w = (0.3 * self.rng.standard_normal((m, cin // group) + tuple(k))).astype(np.float32)
        if poke is not None:
            w[poke[0]] = poke[1]
        b = (0.3 * self.rng.standard_normal(m)).astype(np.float32) if bias else None
        self.inits.append(numpy_helper.from_array(w, name + "_w"))
        ins = [self.x_name, name + "_w"]
        if bias:
            self.inits.append(numpy_helper.from_array(b, name + "_b"))
            ins.append(name + "_b")
        kw = dict(kernel_shape=list(k), strides=strides, dilations=dil, group=group)
        if auto_pad:
            kw["auto_pad"] = auto_pad
            ek = [(k[i] - 1) * dil[i] + 1 for i in range(nd)]
            out = [(self.xshape[2 + i] + strides[i] - 1) // strides[i] for i in range(nd)]
            tot = [max((out[i] - 1) * strides[i] + ek[i] - self.xshape[2 + i], 0) for i in range(nd)]
            pb, pe = [t // 2 for t in tot], [t - t // 2 for t in tot]
        else:
            kw["pads"] = pads
            pb, pe = pads[:nd], pads[nd:]
        self.nodes.append(helper.make_node("Conv", ins, [name], name=name, **kw))
        self.ref[name] = ref_conv(self.x, w, b, strides, dil, pb, pe, group)
        if want != "-":
            self.want.append("Conv '%s': %s kernel to %s (taps reading only padding dropped)" % (
                name, "x".join(map(str, k)) + ("" if all(d == 1 for d in dil) else " dilation " + "x".join(map(str, dil))),
                want))

    x_name = "x"

    def save(self, path):
        g = helper.make_graph(self.nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.xshape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in self.ref], self.inits)
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def models():
    a = Model(16, [1, 8, 6, 6])
    a.conv("aspp", 5, [3, 3], "1x1", dil=[12, 12], pads=[12] * 4)
    a.conv("aspp_nobias", 5, [3, 3], "1x1", dil=[12, 12], pads=[12] * 4, bias=False)
    a.conv("aspp_dw", 8, [3, 3], "1x1", group=8, dil=[24, 24], pads=[24] * 4)
    a.conv("aspp_g2", 6, [3, 3], "1x1", group=2, dil=[36, 36], pads=[36] * 4)
    a.conv("aspp_same", 4, [3, 3], "1x1", dil=[12, 12], auto_pad="SAME_UPPER")
    a.conv("rows", 4, [3, 3], "1x3", dil=[8, 1], pads=[8, 1, 8, 1])
    a.conv("part", 3, [5, 5], "3x3 dilation 4x4", dil=[4, 4], pads=[8] * 4)
    a.conv("live", 3, [3, 3], "-", dil=[2, 2], pads=[2] * 4)
    s = Model(17, [1, 4, 7, 7])
    s.conv("s2", 4, [3, 3], "1x1", strides=[2, 2], dil=[10, 10], pads=[10] * 4)
    s.conv("s3", 4, [3, 3], "2x2 dilation 6x6", strides=[3, 3], dil=[6, 6], pads=[6, 6, 0, 0])
    gr = Model(18, [1, 3, 3, 3])
    gr.conv("grow", 2, [3, 3], "2x2 dilation 3x3", strides=[5, 5], dil=[3, 3], pads=[1, 1, 4, 4])
    kp = Model(19, [1, 4, 10, 10])
    kp.conv("keep_b", 3, [3, 3], "-", dil=[5, 5], pads=[2, 2, 0, 0])
    kp.conv("keep_e", 3, [3, 3], "-", dil=[5, 5], pads=[0, 0, 2, 2])
    d3 = Model(20, [1, 2, 4, 5, 6])
    d3.conv("c3", 3, [3, 3, 3], "1x1x1", dil=[8, 8, 8], pads=[8] * 6)
    d3.conv("c3_rows", 3, [3, 3, 3], "1x3x3", dil=[6, 1, 1], pads=[6, 1, 1, 6, 1, 1])
    d1 = Model(21, [1, 3, 7])
    d1.conv("c1", 2, [3], "1", dil=[9], pads=[9, 9])
    inf = Model(22, [1, 8, 6, 6])
    inf.conv("aspp_inf", 5, [3, 3], "1x1", dil=[12, 12], pads=[12] * 4, poke=((0, 0, 0, 0), np.inf))
    big = Model(23, [1, 512, 3, 3])  # a 1 MiB cut weight: under a budget, to the spill file
    big.conv("big", 512, [3, 3], "1x1", dil=[6, 6], pads=[6] * 4)
    return {"aspp": a, "stride": s, "grow": gr, "keep": kp, "d3": d3, "d1": d1, "inf": inf, "big": big}


def plan_lines(out):
    return sorted(re.findall(r"^  (Conv '.*\(taps reading only padding dropped\))$", out, re.M))


def outputs(exe, path, xpath, names, tag, extra):
    folder = os.path.dirname(path)
    args = [path, "--input", "x=" + xpath, "--quiet"]
    for k in names:
        args += ["--output", "%s=%s" % (k, os.path.join(folder, "%s_%s.npy" % (tag, k)))]
    rc, _, err = run(exe, args + extra)
    if not check(rc == 0, "%s: runs %s" % (tag, err.strip()[-300:])):
        return None
    return {k: np.load(os.path.join(folder, "%s_%s.npy" % (tag, k))) for k in names}


def smallest_budget(exe, path, xpath):
    budget = "1K"
    for _ in range(4):  # the planner names the smallest budget that works; follow it
        rc, _, err = run(exe, [path, "--input", "x=" + xpath, "--budget", budget, "--quiet", "--threads", "2"])
        mm = re.search(r"--budget (\S+)\)", err)
        if rc == 0 or not mm:
            return budget if rc == 0 else None
        budget = mm.group(1)
    return None


def check_model(exe, tmp, name, m):
    path, xpath = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + "_x.npy")
    m.save(path)
    np.save(xpath, m.x)
    want = sorted(m.want)
    for extra, w in (([], want), (["--budget", "1G"], want), (["--no-fuse"], [])):
        rc, out, err = run(exe, [path, "--plan"] + extra)
        got = plan_lines(out)
        check(rc == 0 and got == w, "%s: --plan %s cuts %s, got %s %s" % (name, " ".join(extra), w, got,
                                                                      err.strip()[-200:]))
    res = outputs(exe, path, xpath, list(m.ref), name + "f", ["--threads", "2"])
    if not res:
        return
    for k, ref in m.ref.items():
        scale = max(float(np.max(np.abs(ref))), 1e-30)
        ok = res[k].shape == ref.shape and np.all(np.isfinite(res[k]))
        err = float(np.max(np.abs(res[k] - ref))) if ok else float("inf")
        check(ok and err <= TOL * scale, "%s: %s %s vs float64 over all taps: max err %.2e (scale %.3g)" % (
            name, k, res[k].shape, err, scale))
    budget = smallest_budget(exe, path, xpath)
    if check(budget is not None, "%s: out of core runs at the smallest budget (%s)" % (name, budget)):
        ooc = outputs(exe, path, xpath, list(m.ref), name + "o", ["--budget", budget, "--threads", "2"])
        if ooc:
            check(all(np.array_equal(ooc[k], res[k]) for k in m.ref),
                  "%s: out of core at --budget %s bitwise the in-core outputs" % (name, budget))


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for name, m in models().items():
            check_model(exe, tmp, name, m)
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

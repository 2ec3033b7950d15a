#!/usr/bin/env python3
"""MobileNetV2's inverted residual blocks fused into FusedInvRes
(exec/fuse_ir.c, kernels/fused_ir.c).

usage: check_fuse_ir.py HPDLF_EXEC

A model written here (onnx.helper, seeded NumPy weights), 1x8x30x30:
  A  1x1 8->24 + Clip(0, 6), depthwise 3x3 + Clip, 1x1 24->8, + x  (fuses, with the Add)
  B  1x1 8->32 + Clip, depthwise 3x3 stride 2 + Clip, 1x1 32->12    (fuses; 15x15 out)
  C  like A on B's output, its expansion also a graph output       (must not fuse)
  D  like B on B's output, 8x8 out                                  (fuses, by blocks of channels)
Checks: --plan lists exactly the three blocks (and --no-fuse, --budget none);
every output bitwise --no-fuse (the block computes each element with the
unfused nodes' kernels), at 1 and 2 threads; within TOL * max|ref| of a
float64 NumPy evaluation; out of core (unfused, split) bitwise in core.
"""
import importlib.util
import os
import sys
import tempfile

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("cfp", os.path.join(HERE, "check_fuse_patterns.py"))
cfp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cfp)
check, run, M = cfp.check, cfp.run, cfp.M

TOL = 1e-5


def conv(x, w, b, stride=1, pad=0, group=1):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            if group == 1:
                y += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j])
            else:  # depthwise
                y += patch * w[None, :, 0, i, j, None, None]
    return y + b[None, :, None, None]


def block(m, x, xv, tag, cin, ce, cout, stride, residual, expand=True):
    """Nodes of one block on value x (float64 copy xv); its output name and value.
    expand=False: no expansion (MobileNetV2's first block), the depthwise Conv reads x."""
    P = m.P
    lo, hi = m.c(0.0), m.c(6.0)
    wd, bd = m.w(tag + "wd", (ce, 1, 3, 3), 0.5), m.w(tag + "bd", (ce,), 0.5)
    w2, b2 = m.w(tag + "w2", (cout, ce, 1, 1), 0.3), m.w(tag + "b2", (cout,), 0.3)
    if expand:
        w1, b1 = m.w(tag + "w1", (ce, cin, 1, 1), 0.5), m.w(tag + "b1", (ce,), 0.5)
        m.op("Conv", [x, w1, b1], tag + "c1", kernel_shape=[1, 1])
        m.op("Clip", [tag + "c1", lo, hi], tag + "e")
    m.op("Conv", [tag + "e" if expand else x, wd, bd], tag + "c2", kernel_shape=[3, 3], group=ce,
         strides=[stride, stride], pads=[1, 1, 1, 1])
    m.op("Clip", [tag + "c2", lo, hi], tag + "d")
    m.op("Conv", [tag + "d", w2, b2], tag + "p", kernel_shape=[1, 1])
    e = np.clip(conv(xv, P[w1].astype(np.float64), P[b1]), 0, 6) if expand else xv
    d = np.clip(conv(e, P[wd].astype(np.float64), P[bd], stride, 1, ce), 0, 6)
    y = conv(d, P[w2].astype(np.float64), P[b2])
    if residual:
        m.op("Add", [tag + "p", x], tag + "y")
        return tag + "y", y + xv, e
    return tag + "p", y, e


def model(path):
    m = M(1616)
    x = np.random.default_rng(7).standard_normal((1, 8, 30, 30)).astype(np.float32)
    a, av, _ = block(m, "x", x.astype(np.float64), "A", 8, 24, 8, 1, True)
    b, bv, _ = block(m, a, av, "B", 8, 32, 12, 2, False)
    c, cv, ce = block(m, b, bv, "C", 12, 36, 12, 1, True)
    d, dv, _ = block(m, b, bv, "D", 12, 24, 12, 2, False)
    f, fv, _ = block(m, "x", x.astype(np.float64), "F", 8, 8, 5, 1, False, expand=False)
    m.save(path, [1, 8, 30, 30], [b, c, d, "Ce", f])
    return x, {b: bv, c: cv, d: dv, "Ce": ce, f: fv}


def main():
    exe = sys.argv[1]
    # C's expansion is an output, so C fuses as a block without expansion
    # reading it (with its residual Add); F has none
    want = {"InvertedResidual+Add": 1, "InvertedResidual": 2, "InvertedResidual (no expansion)": 1,
            "InvertedResidual+Add (no expansion)": 1}
    with tempfile.TemporaryDirectory() as tmp:
        path, xpath = os.path.join(tmp, "ir.onnx"), os.path.join(tmp, "ir_x.npy")
        x, ref = model(path)
        np.save(xpath, x)
        rc, out, err = run(exe, [path, "--plan"])
        got = {k: v for k, v in cfp.plan_counts(out).items() if k.startswith("InvertedResidual")}
        check(rc == 0 and got == want, "--plan fuses the blocks %s, got %s %s" % (want, got, err.strip()[-200:]))
        for extra in (["--no-fuse"], ["--budget", "1G"]):
            rc, out, _ = run(exe, [path, "--plan"] + extra)
            check(rc == 0 and not any(k.startswith("InvertedResidual") for k in cfp.plan_counts(out)),
                  "--plan %s fuses no block" % " ".join(extra))
        res = {t: cfp.outputs(exe, path, xpath, list(ref), t, e)
               for t, e in (("f2", ["--threads", "2"]), ("f1", ["--threads", "1"]),
                            ("n2", ["--no-fuse", "--threads", "2"]))}
        if not all(res.values()):
            return 1
        for k in ref:
            scale = max(float(np.max(np.abs(ref[k]))), 1e-30)
            err = float(np.max(np.abs(res["f2"][k] - ref[k])))
            check(err <= TOL * scale, "%s: fused vs NumPy float64 max err %.2e (scale %.3g)" % (k, err, scale))
            check(np.array_equal(res["f2"][k], res["n2"][k]), "%s: fused bitwise --no-fuse" % k)
            check(np.array_equal(res["f2"][k], res["f1"][k]), "%s: fused, 2 threads bitwise 1" % k)
        budget = cfp.smallest_budget(exe, path, xpath)
        if check(budget is not None, "out of core runs at the smallest budget (%s)" % budget):
            ooc = cfp.outputs(exe, path, xpath, list(ref), "o", ["--budget", budget, "--threads", "2"])
            if ooc:
                check(all(np.array_equal(ooc[k], res["f2"][k]) for k in ref),
                      "out of core at --budget %s bitwise the in-core fused outputs" % budget)
    print("%d failed" % len(cfp.FAILS))
    return 1 if cfp.FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

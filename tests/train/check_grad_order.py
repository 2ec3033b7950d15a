#!/usr/bin/env python3
"""A whole Conv's backward computes its filter gradient before its data
gradient (issue 17, exec/autodiff_rules.c r_conv).

The filter gradient reads X and dY, not W: run first, it hides the load of
W, which out of core is evicted after the forward when the budget is
tight, while the data gradient and the fused update that read W follow.
ResNet-18 trained at 50% of its peak stalled 14 ms a step on its last
layers' 9-MiB weights with the data gradient first.

Model (written here): convolutions down to 256 channels at 4x4, then two
256x256 3x3 Convs (2.25 MiB of weights each) and a Gemm, trained 2 SGD
steps at a batch of 8 in core and at 40% of the in-core tensor peak (the
smallest budget named when that is more).  From --plan-dot's schedule of
the budgeted run: for each Conv, its ConvGradFilter runs before its
ConvGradData, and both exist, or, where the filter gradient is fused
with the update into a ConvGradFilterUpdate (exec/fuse_grad_update.c:
dW never whole), the data gradient runs before it (it reads the W the
update overwrites); the budgeted run is really out of core (it
loads the heavy weights in the step); the exported weights are byte for
byte the in-core ones, with 1 and 2 threads.

usage: check_grad_order.py HPDLF_EXEC WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

FAILS = []
STEP_RE = re.compile(r'label="(\d+): (\S+) +[0-9.]+ ms\\n([^"]+)"')
LOAD_RE = re.compile(r'load (\S+) \(')
SMALLEST_RE = re.compile(r"the smallest budget that works is (\d+)")
CONVS = ("c0", "c1", "c2", "c3", "c4")


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)
    return ok


def make_model(d):
    import onnx
    from onnx import TensorProto, helper, numpy_helper as nh
    rng = np.random.default_rng(5)

    def w(*s):
        return (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32)
    inits = [nh.from_array(v, n) for n, v in (
        ("c0.w", w(16, 3, 3, 3)), ("c1.w", w(64, 16, 3, 3)), ("c2.w", w(256, 64, 3, 3)), ("c3.w", w(256, 256, 3, 3)),
        ("c4.w", w(256, 256, 3, 3)), ("fc.w", w(10, 256)), ("fc.b", np.zeros(10, np.float32)))]
    p1, s2 = dict(pads=[1, 1, 1, 1]), dict(pads=[1, 1, 1, 1], strides=[2, 2])
    nodes, prev = [], "x"
    for i, kw in enumerate((p1, s2, s2, p1, p1)):
        nodes += [helper.make_node("Conv", [prev, "c%d.w" % i], ["a%d" % i], name="c%d" % i, **kw),
                  helper.make_node("Relu", ["a%d" % i], ["r%d" % i], name="r%d" % i)]
        prev = "r%d" % i
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["g"], name="g"),
              helper.make_node("Flatten", ["g"], ["f"], name="f"),
              helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "gradorder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="check_grad_order")
    onnx.checker.check_model(m)
    path = os.path.join(d, "model.onnx")
    onnx.save(m, path)
    x, y = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
    np.save(x, rng.standard_normal((16, 3, 16, 16)).astype(np.float32))
    np.save(y, rng.integers(0, 10, 16).astype(np.int64))
    return path, x, y


def run(exe, args, work):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600, env=dict(os.environ, TMPDIR=work))
    return p.returncode, p.stderr.strip()


def main():
    exe, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model, x, y = make_model(work)
    base = [model, "--train", "--data", x, "--labels", y, "--loss", "cross-entropy", "--optimizer", "sgd", "--lr",
            "0.05", "--batch", "8", "--steps", "2", "--no-shuffle", "--quiet"]
    st = os.path.join(work, "incore.json")
    ref = {}
    for t in (1, 2):
        ref[t] = os.path.join(work, "incore_t%d.onnx" % t)
        rc, err = run(exe, base + ["--threads", str(t), "--export-onnx", ref[t], "--stats-json", st], work)
        if not check(rc == 0, "in core, %d thread(s): exit %d %s" % (t, rc, err)):
            return
    with open(st) as f:
        budget = int(json.load(f)["tensor_peak_bytes"] * 0.4)
    dot = os.path.join(work, "plan.dot")
    rc, err = run(exe, base + ["--threads", "2", "--budget", str(budget), "--plan", "--plan-dot", dot], work)
    m = SMALLEST_RE.search(err)
    if rc == 2 and m:
        budget = int(m.group(1))
        rc, err = run(exe, base + ["--threads", "2", "--budget", str(budget), "--plan", "--plan-dot", dot], work)
    if not check(rc == 0, "--plan at %d B: exit %d %s" % (budget, rc, err)):
        return
    with open(dot) as f:
        text = f.read()
    found = STEP_RE.findall(text)
    steps = {name: int(k) for k, op, name in found}
    for c in CONVS:
        gf = [s for n, s in steps.items() if n.startswith(c + "/") and "/ConvGradFilter#" in n]
        gd = [s for n, s in steps.items() if n.startswith(c + "/") and "/ConvGradData#" in n]
        fu = [int(k) for k, op, n in found if op == "ConvGradFilterUpdate" and n.startswith(c + ".w/")]
        if fu:  # fused with the update (exec/fuse_grad_update.c): after the data gradient, which reads the old W
            check(not gf and len(gd) == 1 and gd[0] < fu[0],
                  "%s: ConvGradData (step %s) before the fused ConvGradFilterUpdate (step %s)" % (c, gd, fu))
            continue
        if c == "c0":  # the first Conv has no data gradient (x is not trained)
            check(len(gf) == 1, "%s: one ConvGradFilter (%s)" % (c, gf))
            continue
        check(len(gf) == 1 and len(gd) == 1 and gf[0] < gd[0],
              "%s: ConvGradFilter (step %s) before ConvGradData (step %s)" % (c, gf, gd))
    loads = LOAD_RE.findall(text)
    # whole, or in blocks kept for their update (c3.w.part0, c3.w.cat0: split_weight.h)
    heavy = [w for w in ("c3.w", "c4.w") if any(l == w or l.startswith(w + ".") for l in loads)]
    check(len(heavy) == 2, "at %d B the heavy weights are loaded in the step (%d loads)" % (budget, len(loads)))
    for t in (1, 2):
        out = os.path.join(work, "ooc_t%d.onnx" % t)
        rc, err = run(exe, base + ["--threads", str(t), "--budget", str(budget), "--export-onnx", out], work)
        if not check(rc == 0, "at %d B, %d thread(s): exit %d %s" % (budget, t, rc, err)):
            continue
        with open(out, "rb") as a, open(ref[t], "rb") as b:
            check(a.read() == b.read(), "at %d B, %d thread(s): exported model bitwise the in-core one" % (budget, t))


if __name__ == "__main__":
    main()
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("all checks passed")

#!/usr/bin/env python3
"""Out-of-core inference fuses the epilogues too (issue 17, exec/fuse.c
hp_fuse_after_split): once the graph is cut for the budget, each band's
Conv and its band of the residual Add and Relu run as one FusedConv, as the
whole node does in core, instead of three kernels and two more passes over
memory.

Model (written here): a stem Conv+Relu whose output (4x32x64x64, 2 MiB) is
cut into bands under a budget, a residual block (Conv+Relu, Conv+Add+Relu),
pooling, a strided Conv+Relu, global pooling and Gemm+Relu.  At 40% and 30%
of the in-core tensor peak:

  - --plan-dot's steps: the stem runs as several bands, each a FusedConv;
    at 40% (4 bands) no Relu nor Add runs on its own (every epilogue fused,
    the bands' as the whole nodes', the residual's too);
  - at 40% --plan lists at least as many Conv+Relu, Conv+Add+Relu and
    Gemm+Relu fusions as in core;
  - the output is bitwise the in-core (fused) output, and the run's
    --profile shows FusedConv.

A fused node holds the addend beside the product's inputs and output, so
a match stays unfused where it would need more than the graph's largest
step and than three quarters of the budget (at 30% the residual's bands
do).  So the smallest budget --plan names is the one --no-fuse names, the
run at it is bitwise in core, and one byte less is refused with exit 2.

usage: check_ooc_fuse.py HPDLF_EXEC WORKDIR
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

FAILS = []
SHAPE = (4, 16, 64, 64)


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)
    return ok


def make_model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper as nh
    rng = np.random.default_rng(5)

    def w(*s, sc=None):
        return (rng.standard_normal(s) * (sc or 1 / np.sqrt(np.prod(s[1:])))).astype(np.float32)
    inits = [nh.from_array(v, n) for n, v in (
        ("c0.w", w(32, 16, 3, 3)), ("c0.b", w(32, sc=0.1)), ("c1.w", w(32, 32, 3, 3)), ("c1.b", w(32, sc=0.1)),
        ("c2.w", w(32, 32, 3, 3)), ("c3.w", w(64, 32, 3, 3)), ("c3.b", w(64, sc=0.1)),
        ("fc.w", w(10, 64)), ("fc.b", w(10, sc=0.1)))]
    p1, s2 = dict(pads=[1, 1, 1, 1]), dict(pads=[1, 1, 1, 1], strides=[2, 2])
    nodes = [helper.make_node("Conv", ["x", "c0.w", "c0.b"], ["a0"], name="c0", **p1),
             helper.make_node("Relu", ["a0"], ["r0"], name="r0"),
             helper.make_node("Conv", ["r0", "c1.w", "c1.b"], ["a1"], name="c1", **p1),
             helper.make_node("Relu", ["a1"], ["r1"], name="r1"),
             helper.make_node("Conv", ["r1", "c2.w"], ["a2"], name="c2", **p1),
             helper.make_node("Add", ["a2", "r0"], ["s2"], name="s2"),
             helper.make_node("Relu", ["s2"], ["r2"], name="r2"),
             helper.make_node("MaxPool", ["r2"], ["p2"], name="p2", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p2", "c3.w", "c3.b"], ["a3"], name="c3", **s2),
             helper.make_node("Relu", ["a3"], ["r3"], name="r3"),
             helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="g"),
             helper.make_node("Flatten", ["g"], ["f"], name="f"),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["h"], name="fc", transB=1),
             helper.make_node("Relu", ["h"], ["y"], name="ry")]
    g = helper.make_graph(nodes, "oocfuse", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SHAPE[0], 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="check_ooc_fuse")
    onnx.checker.check_model(m)
    onnx.save(m, path)


def run(exe, args, tmp):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600, env=dict(os.environ, TMPDIR=tmp))
    return p.returncode, p.stdout, p.stderr.strip()


def steps_of(dot):
    """(op, node name) of the plan's steps, from --plan-dot's step labels."""
    with open(dot) as f:
        return re.findall(r'label="\d+: (\S+) +[0-9.]+ ms\\n([^"]+)"', f.read())


def counts(out):
    return {k: int(v) for k, v in re.findall(r"^  ([A-Z][\w+ ()-]*?): (\d+)$", out, re.M)}


def smallest(out):
    m = re.search(r"smallest budget .*= (\d+) bytes", out)
    return int(m.group(1)) if m else None


def same(path, yref):
    y = np.load(path)
    return y.dtype == yref.dtype and y.shape == yref.shape and y.tobytes() == yref.tobytes()


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "oocfuse.onnx")
    make_model(model)
    x = os.path.join(work, "x.npy")
    np.save(x, np.random.default_rng(9).standard_normal(SHAPE).astype(np.float32))
    ref, sj = os.path.join(work, "y_incore.npy"), os.path.join(work, "incore.json")
    rc, _, err = run(exe, [model, "--input", "x=" + x, "--output", "y=" + ref, "--threads", "2", "--quiet",
                           "--stats-json", sj], work)
    if not check(rc == 0, "in core: exit %d %s" % (rc, err)):
        return
    with open(sj) as f:
        peak = json.load(f)["tensor_peak_bytes"]
    yref = np.load(ref)
    rc, out, err = run(exe, [model, "--threads", "2", "--plan"], work)
    incore = counts(out)
    check(rc == 0 and all(incore.get(k, 0) == 1 for k in ("Conv+Add+Relu", "Gemm+Relu")) and
          incore.get("Conv+Relu", 0) == 3, "in core --plan fuses 3 Conv+Relu, Conv+Add+Relu, Gemm+Relu: %s" % incore)
    for frac in (0.4, 0.3):
        b, tag = int(peak * frac), "at %d%% of %d B" % (round(100 * frac), peak)
        dot, out_y = (os.path.join(work, "%s_%g" % (n, frac)) for n in ("plan.dot", "y.npy"))
        rc, out, err = run(exe, [model, "--budget", str(b), "--threads", "2", "--plan", "--plan-dot", dot], work)
        if not check(rc == 0, "%s: --plan (exit %d %s)" % (tag, rc, err)):
            continue
        steps = steps_of(dot)
        stem = [op for op, n in steps if n.startswith("c0/")]
        check(len(stem) >= 2 and all(op == "FusedConv" for op in stem),
              "%s: the stem runs as %d bands, each a FusedConv: %s" % (tag, len(stem), stem))
        if frac == 0.4:
            loose = [(op, n) for op, n in steps if op in ("Relu", "Add")]
            check(not loose, "%s: no Relu nor Add runs on its own: %s" % (tag, loose))
            got = counts(out)
            check(all(got.get(k, 0) >= v for k, v in incore.items() if k != "Packed weights"),
                  "%s: --plan lists at least the in-core fusions %s: %s" % (tag, incore, got))
        rc, _, err = run(exe, [model, "--budget", str(b), "--input", "x=" + x, "--output", "y=" + out_y, "--threads",
                               "2", "--iterations", "2", "--profile"], work)
        if not check(rc == 0, "%s: runs (exit %d %s)" % (tag, rc, err[-300:])):
            continue
        check(same(out_y, yref), "%s: output bitwise the in-core one" % tag)
        check(" FusedConv " in err, "%s: --profile shows FusedConv" % tag)
    rc, out, err = run(exe, [model, "--threads", "2", "--plan"], work)
    rc2, out2, err2 = run(exe, [model, "--threads", "2", "--plan", "--no-fuse"], work)
    least, plain = smallest(out), smallest(out2)
    if not check(rc == 0 and rc2 == 0 and least and least == plain,
                 "the smallest budget --plan names (%s) is --no-fuse's (%s) %s %s" % (least, plain, err, err2)):
        return
    out_y = os.path.join(work, "y_least.npy")
    rc, _, err = run(exe, [model, "--budget", str(least), "--input", "x=" + x, "--output", "y=" + out_y,
                           "--threads", "2", "--quiet"], work)
    if check(rc == 0, "runs at the smallest budget %d (exit %d %s)" % (least, rc, err[-300:])):
        check(same(out_y, yref), "at the smallest budget %d: output bitwise the in-core one" % least)
    rc, _, err = run(exe, [model, "--budget", str(least - 1), "--input", "x=" + x, "--threads", "2", "--quiet"], work)
    check(rc == 2, "one byte less (%d) is refused with exit 2 (%d %s)" % (least - 1, rc, err[-200:]))


if __name__ == "__main__":
    main()
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("all checks passed")

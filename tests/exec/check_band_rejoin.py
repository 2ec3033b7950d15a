#!/usr/bin/env python3
"""Inference cut into batch bands joins them back before the layers whose
weights outweigh their activations (issue 17, exec/split_band.c
rejoin_here), so that out of core each such weight is read once an
iteration, not once a band.

Model (written here): a stem whose activations are large (a 3x3 Conv to 16
channels at 8x3x128x128, 8 MiB of output) and must be cut, then strided
convolutions and pooling down to 4x4, then three 256x256 3x3 Convs (2.25
MiB of weights each, 128 KiB of activations) with residual Adds, global
pooling and a Gemm: the shape of a ResNet, whose last layers hold most of
its weights.  At 50%, 30% and 25% of the in-core tensor peak:

  - the output is bitwise the in-core output;
  - the stem runs as several bands (the run is cut) and each of the three
    heavy Convs as one whole node (--plan-dot's steps);
  - at 50% and 30%, the bytes loaded in the last iteration (--stats-json
    run_bytes_loaded) are at most 1.4x the model's weights and input,
    the state read once (before the join: 1.7x at 50%, 2.0x at 30%).

usage: check_band_rejoin.py HPDLF_EXEC WORKDIR
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

FAILS = []
HEAVY = ("c3", "c4", "c5")


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)
    return ok


def make_model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper as nh
    rng = np.random.default_rng(3)

    def w(*s, sc=None):
        return (rng.standard_normal(s) * (sc or 1 / np.sqrt(np.prod(s[1:])))).astype(np.float32)
    inits = [nh.from_array(v, n) for n, v in (
        ("c0.w", w(16, 3, 3, 3)), ("c0.b", w(16, sc=0.1)), ("c1.w", w(64, 16, 3, 3)), ("c2.w", w(256, 64, 3, 3)),
        ("c3.w", w(256, 256, 3, 3)), ("c3.b", w(256, sc=0.1)), ("c4.w", w(256, 256, 3, 3)),
        ("c5.w", w(256, 256, 3, 3)), ("fc.w", w(10, 256)), ("fc.b", w(10, sc=0.1)))]
    p1, s2 = dict(pads=[1, 1, 1, 1]), dict(pads=[1, 1, 1, 1], strides=[2, 2])
    nodes = [helper.make_node("Conv", ["x", "c0.w", "c0.b"], ["a0"], name="c0", **p1),
             helper.make_node("Relu", ["a0"], ["r0"], name="r0"),
             helper.make_node("MaxPool", ["r0"], ["p0"], name="p0", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p0", "c1.w"], ["a1"], name="c1", **s2),
             helper.make_node("Relu", ["a1"], ["r1"], name="r1"),
             helper.make_node("Conv", ["r1", "c2.w"], ["a2"], name="c2", **s2),
             helper.make_node("Relu", ["a2"], ["r2"], name="r2"),
             helper.make_node("MaxPool", ["r2"], ["p2"], name="p2", kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Conv", ["p2", "c3.w", "c3.b"], ["a3"], name="c3", **p1),
             helper.make_node("Add", ["a3", "p2"], ["s3"], name="s3"),
             helper.make_node("Relu", ["s3"], ["r3"], name="r3"),
             helper.make_node("Conv", ["r3", "c4.w"], ["a4"], name="c4", **p1),
             helper.make_node("Relu", ["a4"], ["r4"], name="r4"),
             helper.make_node("Conv", ["r4", "c5.w"], ["a5"], name="c5", **p1),
             helper.make_node("Add", ["a5", "r3"], ["s5"], name="s5"),
             helper.make_node("GlobalAveragePool", ["s5"], ["g"], name="g"),
             helper.make_node("Flatten", ["g"], ["f"], name="f"),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "rejoin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 3, 128, 128])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="check_band_rejoin")
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return sum(int(np.prod(t.dims)) * 4 for t in inits) + 8 * 3 * 128 * 128 * 4


def run(exe, args, tmp):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600, env=dict(os.environ, TMPDIR=tmp))
    return p.returncode, p.stderr.strip()


def steps_of(dot):
    """The node names of the plan's steps, from --plan-dot's step labels."""
    with open(dot) as f:
        return re.findall(r'label="\d+: \S+ +[0-9.]+ ms\\n([^"]+)"', f.read())


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "rejoin.onnx")
    state = make_model(model)
    x = os.path.join(work, "x.npy")
    np.save(x, np.random.default_rng(7).standard_normal((8, 3, 128, 128)).astype(np.float32))
    ref, sj = os.path.join(work, "y_incore.npy"), os.path.join(work, "incore.json")
    rc, err = run(exe, [model, "--input", "x=" + x, "--output", "y=" + ref, "--threads", "2", "--quiet",
                        "--stats-json", sj], work)
    if not check(rc == 0, "in core: exit %d %s" % (rc, err)):
        return
    with open(sj) as f:
        peak = json.load(f)["tensor_peak_bytes"]
    yref = np.load(ref)
    for frac in (0.5, 0.3, 0.25):
        b, tag = int(peak * frac), "at %d%% of %d B" % (round(100 * frac), peak)
        dot, out, st = (os.path.join(work, "%s_%g" % (n, frac)) for n in ("plan.dot", "y.npy", "stats.json"))
        rc, err = run(exe, [model, "--budget", str(b), "--threads", "2", "--plan", "--plan-dot", dot], work)
        if not check(rc == 0, "%s: --plan (exit %d %s)" % (tag, rc, err)):
            continue
        names = steps_of(dot)
        stem = [n for n in names if n.startswith("c0/")]
        check(len(stem) >= 2, "%s: the stem Conv runs as %d bands" % (tag, len(stem)))
        for h in HEAVY:
            parts = [n for n in names if n == h or n.startswith(h + "/")]
            check(parts == [h], "%s: Conv %s runs whole (%s)" % (tag, h, parts))
        rc, err = run(exe, [model, "--budget", str(b), "--input", "x=" + x, "--output", "y=" + out, "--threads", "2",
                            "--iterations", "2", "--quiet", "--stats-json", st], work)
        if not check(rc == 0, "%s: runs (exit %d %s)" % (tag, rc, err)):
            continue
        y = np.load(out)
        check(y.dtype == yref.dtype and y.shape == yref.shape and y.tobytes() == yref.tobytes(),
              "%s: output bitwise the in-core one" % tag)
        if frac < 0.3:
            continue
        with open(st) as f:
            loaded = json.load(f).get("run_bytes_loaded", -1)
        check(0 <= loaded <= 1.4 * state, "%s: %d bytes loaded an iteration, %.2fx the weights and input (<= 1.4)"
              % (tag, loaded, loaded / state))


if __name__ == "__main__":
    main()
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("all checks passed")

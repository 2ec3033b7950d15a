#!/usr/bin/env python3
"""Cross-entropy over a sequence model's last axis.

usage: check_classes_last.py HPDLF_EXEC TMP

A language model's logits are [N, T, V] and its labels [N, T]: the classes
are on the last axis, where cross-entropy (PyTorch's F.cross_entropy, ONNX's
SoftmaxCrossEntropyLoss) takes them on axis 1.  hpdlf-exec --train sees from
the label file's shape that they are last and puts them on axis 1 for the
loss.  The model built here is an embedding (Gather) and a projection
(MatMul, Add): 3 SGD steps and the validation loss and accuracy (the same
file) must equal a float64 NumPy run of the same model within 1e-5
(relative), with one label at ignore_index -100; the same run at a budget
of a third of the in-core tensor peak (or the smallest that works, more
here: the model is tiny) gives bitwise the same losses; labels
of another length are refused with status 2 naming both shapes; with MPI,
--pipeline 2 refuses the classes last (status 2, saying what to do) and
labels of another length.
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

N, T, D, V, B, STEPS, LR = 6, 5, 8, 11, 2, 3, 0.5
FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)
    return ok


def model(e, w, b):
    """Written as torch exports a Linear in training mode (MatMul by the
    Transpose of the [V, D] weight, then Add), which training fuses into a
    Gemm (exec/fuse_train_linear.c): the fusion rebuilt the graph without
    the loss's Transpose when that was added first."""
    nodes = [helper.make_node("Gather", ["emb", "idx"], ["h"]), helper.make_node("Transpose", ["w"], ["wt"]),
             helper.make_node("MatMul", ["h", "wt"], ["m"]), helper.make_node("Add", ["m", "b"], ["logits"])]
    g = helper.make_graph(nodes, "lm", [helper.make_tensor_value_info("idx", TensorProto.INT64, ["N", T])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", T, V])],
                          [numpy_helper.from_array(e, "emb"), numpy_helper.from_array(w.T.copy(), "w"),
                           numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def ce(logits, y):
    """Mean cross-entropy over the labels that count, its gradient, the
    count of right arg-maxes."""
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    keep = y != -100
    n = keep.sum()
    yy = np.where(keep, y, 0)
    loss = -np.log(np.take_along_axis(p, yy[..., None], -1)[..., 0])[keep].sum() / n
    g = p.copy()
    np.put_along_axis(g, yy[..., None], np.take_along_axis(g, yy[..., None], -1) - 1, -1)
    g *= keep[..., None] / n
    right = ((logits.argmax(-1) == y) & keep).sum()
    return loss, g, right, n


def reference(e, w, b, x, y):
    e, w, b = e.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    losses = []
    for s in range(STEPS):
        xb, yb = x[s * B:(s + 1) * B], y[s * B:(s + 1) * B]
        h = e[xb]
        loss, g, _, _ = ce(h @ w + b, yb)
        losses.append(loss)
        dw = np.einsum("ntd,ntv->dv", h, g)
        db = g.sum((0, 1))
        de = np.zeros_like(e)
        np.add.at(de, xb, g @ w.T)
        e, w, b = e - LR * de, w - LR * dw, b - LR * db
    loss, _, right, n = ce(e[x] @ w + b, y)
    return losses, loss, right / n


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stderr


def main():
    exe, tmp = sys.argv[1], sys.argv[2]
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(5)
    e = rng.standard_normal((V, D)).astype(np.float32)
    w = (rng.standard_normal((D, V)) / 3).astype(np.float32)
    b = (rng.standard_normal(V) / 10).astype(np.float32)
    x = rng.integers(0, V, (N, T)).astype(np.int64)
    y = rng.integers(0, V, (N, T)).astype(np.int64)
    y[1, 2] = -100
    path = {k: os.path.join(tmp, k) for k in ("model.onnx", "x.npy", "y.npy", "y_long.npy", "st.json")}
    onnx.save(model(e, w, b), path["model.onnx"])
    np.save(path["x.npy"], x)
    np.save(path["y.npy"], y)
    np.save(path["y_long.npy"], np.zeros((N, T + 1), np.int64))
    ref, vloss, vacc = reference(e, w, b, x, y)
    base = [path["model.onnx"], "--train", "--data", path["x.npy"], "--labels", path["y.npy"], "--loss",
            "cross-entropy", "--optimizer", "sgd", "--lr", str(LR), "--batch", str(B), "--steps", str(STEPS),
            "--no-shuffle", "--quiet", "--val-data", path["x.npy"], "--val-labels", path["y.npy"]]
    got = {}
    for key, extra in (("in core", ["--stats-json", path["st.json"]]), ("budget", None)):
        tag = key
        if extra is None:  # a third, or the smallest budget that works if more (a tiny model)
            budget = json.load(open(path["st.json"]))["tensor_peak_bytes"] // 3
            rc, err = run(exe, base + ["--plan", "--budget", str(budget)])
            m = re.search(r"the smallest budget that works is (\d+)", err)
            extra = ["--budget", str(max(budget, int(m.group(1)) if m else 0))]
            tag = "at %s B" % extra[1]
        log = os.path.join(tmp, tag.replace(" ", "_") + ".jsonl")
        rc, err = run(exe, base + extra + ["--log-json", log])
        if not check(rc == 0, "%s: exit %d %s" % (tag, rc, err.strip()[-300:])):
            return
        got[key] = [json.loads(l) for l in open(log) if '"loss"' in l]
    losses = [r["loss"] for r in got["in core"]]
    worst = max(abs(a - r) / abs(r) for a, r in zip(losses, ref))
    check(worst <= 1e-5, "losses %s, float64 NumPy %s (worst relative %.2g)"
          % (["%.6f" % v for v in losses], ["%.6f" % v for v in ref], worst))
    last = got["in core"][-1]
    check(abs(last.get("val_loss", np.nan) - vloss) <= 1e-5 * vloss and last.get("val_accuracy") == vacc,
          "validation loss %s and accuracy %s, NumPy %.6f and %.6f"
          % (last.get("val_loss"), last.get("val_accuracy"), vloss, vacc))
    check([r["loss"] for r in got["budget"]] == losses, "under a budget the losses are the in-core ones")
    pipeline(exe, base, path["y_long.npy"])
    rc, err = run(exe, base[:5] + [path["y_long.npy"]] + base[6:])
    check(rc == 2 and "samples are 6 but the loss wants labels of 11 per sample" in err and
          "or 5 with the classes on its last axis" in err, "labels of %d a sample refused: exit %d %s"
          % (T + 1, rc, err.strip()[-200:]))


def pipeline(exe, base, y_long):
    """--pipeline (2 stages) does not take the classes last: status 2 and a
    line saying what to do; labels of another length are refused there too
    (they failed at the first step with 'label out of range').  Skipped
    without MPI."""
    mpirun = shutil.which("mpirun")
    if os.environ.get("HPDLF_TEST_HAVE_MPI") != "1" or not mpirun:
        print("skip --pipeline: no MPI")
        return
    launch = [mpirun, "--oversubscribe", "-np", "2"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    args = base[:base.index("--val-data")]  # (validation is not the point here)
    for labels, want in ((None, "with the classes on its last axis, which --pipeline does not take"),
                         (y_long, "samples are 6 but the loss wants labels of 11 per sample")):
        a = list(args)
        if labels:
            a[a.index("--labels") + 1] = labels
        p = subprocess.run(launch + [exe] + a + ["--pipeline", "2", "--micro-batches", "2"], capture_output=True,
                           text=True, timeout=300, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        check(p.returncode == 2 and want in p.stderr, "--pipeline 2%s: exit %d, '%s' %s"
              % (" with labels of 6" if labels else "", p.returncode, want,
                 "" if want in p.stderr else p.stderr.strip()[-300:]))


if __name__ == "__main__":
    main()
    print("%d failed" % len(FAILS))
    sys.exit(1 if FAILS else 0)

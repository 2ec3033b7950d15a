#!/usr/bin/env python3
"""hpdlf-exec --train against PyTorch on BatchNorm and transformer models.

usage: check_train_refs.py HPDLF_EXEC REF_DIR

REF_DIR/NAME/ holds model.onnx, x.npy, y.npy and train.json, written by
tools/make_train_refs.py with PyTorch 1.13 (run by hand: the tests need no
torch).  train.json lists trainings (SGD with momentum, Nesterov and weight
decay, Adam, AdamW) with PyTorch's loss at every step; for the BatchNorm
model also the running statistics after training and the eval-mode logits
of infer_x.npy.  Checks, for every model and training:
  - in core, every step's loss within 1e-3 relative of PyTorch's;
  - out of core (SGD with Nesterov momentum or AdamW, the optimizers with
    state, taking turns over the models), at 25% of the in-core tensor peak or, where one operator
    needs more, at the smallest budget the planner names, the losses are
    bitwise the in-core ones and the store moved bytes (paging happened);
  - with BatchNorm: the model --export-onnx writes holds running statistics
    within 1e-3 of PyTorch's (so momentum and the unbiased variance are
    right), and hpdlf-exec runs it (inference: running statistics) to
    PyTorch's eval-mode logits.
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

class Report:
    """Results of one model's checks (models run two at a time)."""

    def __init__(s, index):
        s.index = index
        s.lines, s.fails, s.passed, s.worst = [], 0, 0, 0.0

    def check(s, ok, what):
        s.lines.append(("ok   " if ok else "FAIL ") + what)
        s.fails += not ok
        s.passed += bool(ok)
        return ok


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def log_rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_args(folder, r):
    a = [os.path.join(folder, "model.onnx"), "--train", "--data", os.path.join(folder, "x.npy"),
         "--labels", os.path.join(folder, "y.npy"), "--loss", r["loss"], "--optimizer", r["optimizer"],
         "--lr", repr(r["lr"]), "--momentum", repr(r["momentum"]), "--weight-decay", repr(r["weight_decay"]),
         "--batch", str(r["batch"]), "--steps", str(r["steps"]), "--no-shuffle", "--quiet", "--threads", "1"]
    return a + (["--nesterov"] if r["nesterov"] else [])


def label(r):
    return "%s%s wd %g" % (r["optimizer"], " nesterov" if r["nesterov"] else "", r["weight_decay"])


def ooc_budget(exe, args, peak, tmp):
    """25% of the in-core peak, or the smallest budget the planner names."""
    b = peak // 4
    rc, _, err = run(exe, args + ["--budget", str(b), "--steps", "1", "--log-json", os.path.join(tmp, "probe.json")])
    m = re.search(r"smallest budget that works is (\d+) bytes", err)
    return b if rc == 0 or not m else int(m.group(1))


def read_onnx_inits(path):
    import onnx
    from onnx import numpy_helper
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def check_after(check, exe, folder, name, r, exported, tmp):
    """Running statistics and eval-mode logits of the trained model."""
    after, W = r["after"], read_onnx_inits(exported)
    worst = 0.0
    for k, want in after.items():
        if k == "infer_logits":
            continue
        want = np.array(want, dtype=np.float64)
        have = W.get(k, np.full(want.shape, np.inf)).astype(np.float64)
        worst = max(worst, float(np.max(np.abs(have - want) / np.maximum(np.abs(want), 1e-2))))
    n = len(after) - 1
    check(n > 0 and worst <= 1e-3, "%s %s: %d exported running statistics vs PyTorch, max rel err %.2e"
          % (name, label(r), n, worst))
    out = os.path.join(tmp, "logits.npy")
    rc, _, err = run(exe, [exported, "--input", "input=" + os.path.join(folder, "infer_x.npy"),
                           "--output", "logits=" + out, "--quiet"])
    if not check(rc == 0, "%s %s: the exported model runs: exit %d %s" % (name, label(r), rc, err.strip()[-300:])):
        return
    want = np.array(after["infer_logits"], dtype=np.float64)
    err = float(np.max(np.abs(np.load(out) - want)) / max(1.0, np.max(np.abs(want))))
    check(err <= 1e-3, "%s %s: inference with the running statistics gives PyTorch's eval logits, max err %.2e"
          % (name, label(r), err))


def check_run(rep, exe, folder, r, tmp):
    check = rep.check
    name = os.path.basename(folder)
    args = train_args(folder, r)
    log, stats, exported = (os.path.join(tmp, n) for n in ("in.json", "stats.json", "trained.onnx"))
    extra = ["--export-onnx", exported] if "after" in r else []
    rc, _, err = run(exe, args + ["--log-json", log, "--stats-json", stats] + extra)
    if not check(rc == 0, "%s %s in core: exit %d %s" % (name, label(r), rc, err.strip()[-300:])):
        return
    got = [row["loss"] for row in log_rows(log)]
    want = np.array(r["losses"], dtype=np.float64)
    rel = float(np.max(np.abs(np.array(got) - want) / np.abs(want))) if len(got) == len(want) else float("inf")
    rep.worst = max(rep.worst, rel)
    check(rel <= 1e-3, "%s %s: %d losses vs PyTorch, max rel err %.2e" % (name, label(r), len(got), rel))
    if "after" in r:
        check_after(check, exe, folder, name, r, exported, tmp)
    if not (r["nesterov"] if rep.index % 2 == 0 else r["optimizer"] == "adamw"):
        return  # out of core: one optimizer per model, alternating, keeps the test short
    with open(stats) as f:
        peak = json.load(f)["tensor_peak_bytes"]
    budget = ooc_budget(exe, args, peak, tmp)
    log2 = os.path.join(tmp, "ooc.json")
    rc, _, err = run(exe, args + ["--budget", str(budget), "--log-json", log2])
    what = "%s %s out of core at %d B (%.0f%% of the %d B peak)" % (name, label(r), budget, 100.0 * budget / peak, peak)
    if not check(rc == 0 and budget < peak, "%s: exit %d %s" % (what, rc, err.strip()[-300:])):
        return
    rows = log_rows(log2)
    moved = sum(t["bytes_read"] + t["bytes_written"] for row in rows for t in row["tiers"].values())
    check([row["loss"] for row in rows] == got and moved > 0,
          "%s: losses bitwise the in-core ones, %d bytes paged" % (what, moved))


def check_model(exe, index, folder):
    rep = Report(index)
    with tempfile.TemporaryDirectory() as tmp, open(os.path.join(folder, "train.json")) as f:
        for r in json.load(f)["runs"]:
            check_run(rep, exe, folder, r, tmp)
    return rep


def main():
    exe, ref = sys.argv[1], sys.argv[2]
    folders = [os.path.join(ref, n) for n in sorted(os.listdir(ref)) if os.path.exists(os.path.join(ref, n, "train.json"))]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        reps = list(pool.map(lambda k: check_model(exe, k, folders[k]), range(len(folders))))
    for rep in reps:
        print("\n".join(rep.lines))
    fails = sum(r.fails for r in reps)
    print("worst loss error vs PyTorch over all models, optimizers and steps: %.2e relative"
          % max([r.worst for r in reps] or [float("inf")]))
    print("%d passed, %d failed" % (sum(r.passed for r in reps), fails))
    return 1 if fails or not reps else 0


if __name__ == "__main__":
    sys.exit(main())

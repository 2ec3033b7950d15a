#!/usr/bin/env python3
"""hpdlf-exec --train against PyTorch on BatchNorm and transformer models.

usage: check_train_refs.py HPDLF_EXEC REF_DIR

REF_DIR/NAME/ holds model.onnx, x.npy, y.npy and train.json, written by
tools/make_train_refs.py with PyTorch 1.13 (run by hand: the tests need no
torch).  train.json lists trainings (SGD with momentum, Nesterov and weight
decay, Adam, AdamW, Adam with --betas and --eps, and --lr-schedule: cosine
with warmup for SGD, linear with warmup for AdamW, step:4,0.5 for Adam,
against LambdaLR with Hugging Face's factors and StepLR) with PyTorch's
loss at every step; for the BatchNorm
model also the running statistics after training and the eval-mode logits
of infer_x.npy.  Checks, for every model and training:
  - in core, every step's loss within 1e-3 relative of PyTorch's;
  - out of core (SGD with Nesterov momentum or AdamW, the optimizers with
    state, taking turns over the models), at 25% of the in-core tensor peak or, where one operator
    needs more, at the smallest budget the planner names, the losses are
    bitwise the in-core ones and the store moved bytes (paging happened);
    a named smallest budget runs and one byte less is refused naming it;
  - with BatchNorm: the model --export-onnx writes passes onnx.checker
    (full check), holds running statistics within 1e-3 of PyTorch's (so
    momentum and the unbiased variance are right), and hpdlf-exec runs it
    (inference: running statistics) to PyTorch's eval-mode logits;
  - a model exported straight after construction (bn_fresh: the exporter
    merged each running statistic with the equal weight or bias into an
    Identity of it) trains as PyTorch does, with the statistics apart from
    the parameters, and its export has them as initializers, no Identity;
    the same for a variant written here in which each BatchNorm reads one
    initializer as both bias and running mean, weight and running variance;
    and a checkpoint half way with --resume gives bitwise a straight run's
    losses and exported model; so does, for the first model's step-schedule
    Adam run, a run stopped by SIGTERM at its first checkpoint and resumed.
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
    if "betas" in r:
        a += ["--betas", "%r,%r" % tuple(r["betas"])]
    if "eps" in r:
        a += ["--eps", repr(r["eps"])]
    if "schedule" in r:
        a += ["--lr-schedule", r["schedule"]]
    if r.get("warmup"):
        a += ["--warmup-steps", str(r["warmup"])]
    return a + (["--nesterov"] if r["nesterov"] else [])


def label(r):
    return "%s%s wd %g%s%s" % (r["optimizer"], " nesterov" if r["nesterov"] else "", r["weight_decay"],
                              " betas %g,%g eps %g" % (*r["betas"], r["eps"]) if "betas" in r else "",
                              " lr %s warmup %d" % (r["schedule"], r.get("warmup", 0)) if "schedule" in r else "")


def ooc_budget(exe, args, peak, tmp):
    """25% of the in-core peak, or the smallest budget the planner names."""
    b = peak // 4
    rc, _, err = run(exe, args + ["--budget", str(b), "--steps", "1", "--log-json", os.path.join(tmp, "probe.json")])
    m = re.search(r"smallest budget that works is (\d+) bytes", err)
    return (b, False) if rc == 0 or not m else (int(m.group(1)), True)


def check_named_floor(check, exe, args, budget, what, tmp):
    """One byte below the figure a refusal named is refused (exit 2) naming
    that figure again: the split at the figure is the one a run there makes."""
    rc, _, err = run(exe, args + ["--budget", str(budget - 1), "--steps", "1",
                                  "--log-json", os.path.join(tmp, "probe.json")])
    m = re.search(r"smallest budget that works is (\d+) bytes", err)
    check(rc == 2 and m and int(m.group(1)) == budget,
          "%s: one byte less is refused (exit %d) naming %s" % (what, rc, m.group(1) if m else "nothing"))


def read_onnx_inits(path):
    import onnx
    from onnx import numpy_helper
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def checker_errors(path):
    """onnx.checker's complaint about the model, or None."""
    import onnx
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
    except Exception as e:  # the checker raises its own ValidationError, and shape inference others
        return str(e).strip()[:300] or type(e).__name__
    return None


def identities(path):
    import onnx
    return [n.output[0] for n in onnx.load(path).graph.node if n.op_type == "Identity"]


def share_initializers(src, dst):
    """src with every Identity(initializer) replaced by the initializer
    itself: BatchNorm nodes then read one initializer in two roles."""
    import onnx
    m = onnx.load(src)
    alias = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Identity"}
    keep = [n for n in m.graph.node if n.op_type != "Identity"]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    for n in m.graph.node:
        for j, name in enumerate(n.input):
            n.input[j] = alias.get(name, name)
    onnx.save(m, dst)
    return len(alias)


def check_after(check, exe, folder, name, r, exported, tmp):
    """Running statistics and eval-mode logits of the trained model."""
    after, W = r["after"], read_onnx_inits(exported)
    err = checker_errors(exported)
    check(err is None, "%s %s: onnx.checker accepts the exported model%s" % (name, label(r), ": " + err if err else ""))
    ids = identities(exported)
    check(not ids, "%s %s: no Identity left in the exported model %s" % (name, label(r), ids))
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


def check_run(rep, exe, folder, r, tmp, ooc, model=None, name=None):
    check = rep.check
    name = name or os.path.basename(folder)
    args = train_args(folder, r)
    if model:
        args[0] = model
    log, stats, exported = (os.path.join(tmp, n) for n in ("in.json", "stats.json", "trained.onnx"))
    extra = ["--export-onnx", exported] if "after" in r or ooc else []
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
    if not ooc:
        return  # out of core: one optimizer per model, alternating, keeps the test short
    with open(stats) as f:
        peak = json.load(f)["tensor_peak_bytes"]
    budget, named = ooc_budget(exe, args, peak, tmp)
    log2, exported2 = os.path.join(tmp, "ooc.json"), os.path.join(tmp, "trained_ooc.onnx")
    rc, _, err = run(exe, args + ["--budget", str(budget), "--log-json", log2, "--export-onnx", exported2])
    what = "%s %s out of core at %d B (%.0f%% of the %d B peak)" % (name, label(r), budget, 100.0 * budget / peak, peak)
    if not check(rc == 0 and budget < peak, "%s: exit %d %s" % (what, rc, err.strip()[-300:])):
        return
    if named:
        check_named_floor(check, exe, args, budget, what, tmp)
    rows = log_rows(log2)
    moved = sum(t["bytes_read"] + t["bytes_written"] for row in rows for t in row["tiers"].values())
    check([row["loss"] for row in rows] == got and moved > 0,
          "%s: losses bitwise the in-core ones, %d bytes paged" % (what, moved))
    # the weights too: a loss can round alike while weights differ by an ulp
    # (weight gradients summed band by band or block by block in another
    # order did)
    want_w, got_w = read_onnx_inits(exported), read_onnx_inits(exported2)
    differ = sorted(k for k in want_w if k not in got_w or want_w[k].tobytes() != got_w[k].tobytes())
    check(want_w and not differ, "%s: the %d exported tensors bitwise the in-core export%s"
          % (what, len(want_w), " (differ: %s)" % differ[:6] if differ else ""))


def check_resume(rep, exe, folder, r, tmp, by_signal=False):
    """Half the steps, a checkpoint, --resume to the end: the losses and the
    exported model (split statistics included) are bitwise those of the
    straight run check_run just made (tmp/in.json, tmp/trained.onnx).
    by_signal: the first half is the whole run stopped by a SIGTERM during
    its first checkpoint (HPDLF_TEST_TERM_IN_CHECKPOINT), as a preempted
    job is, so that a learning-rate schedule keeps its total steps."""
    name, args, half = os.path.basename(folder), train_args(folder, r), r["steps"] // 2
    ck, out = os.path.join(tmp, "ck_sig" if by_signal else "ck"), os.path.join(tmp, "b.onnx")
    logs = [os.path.join(tmp, n + ".json") for n in "ab"]
    first = args + (["--steps", str(half)] if not by_signal else []) + ["--checkpoint", ck, "--checkpoint-every",
                                                                       str(half), "--log-json", logs[0]]
    env = dict(os.environ, HPDLF_TEST_TERM_IN_CHECKPOINT="1") if by_signal else None
    if by_signal:  # check_run exports only runs with statistics or out of core: the straight run here
        rc, _, err = run(exe, args + ["--log-json", os.path.join(tmp, "in.json"), "--export-onnx",
                                      os.path.join(tmp, "trained.onnx")])
        if rc != 0:
            rep.check(False, "%s %s straight run: exit %d %s" % (name, label(r), rc, err.strip()[-300:]))
            return
    for a, want in ((first, 143 if by_signal else 0),
                    (args + ["--checkpoint", ck, "--resume", "--log-json", logs[1], "--export-onnx", out], 0)):
        p = subprocess.run([exe] + a, capture_output=True, text=True, timeout=300, env=env)
        rc, err, env = p.returncode, p.stderr, None
        if rc != want:
            rep.check(False, "%s %s resume: exit %d %s" % (name, label(r), rc, err.strip()[-300:]))
            return
    full = [x["loss"] for x in log_rows(os.path.join(tmp, "in.json"))]
    parts = [x["loss"] for x in log_rows(logs[0]) + log_rows(logs[1])]
    with open(os.path.join(tmp, "trained.onnx"), "rb") as f, open(out, "rb") as g:
        same = f.read() == g.read()
    rep.check(full == parts and len(full) == r["steps"] and same,
              "%s %s: checkpoint at step %d and --resume: losses and exported model bitwise a straight run's"
              % (name, label(r), half))


def ooc_run(index, runs):
    """The training run out of core: Nesterov SGD and AdamW take turns over
    the models; a model with neither pages its last training."""
    want = [k for k, r in enumerate(runs) if (r["nesterov"] if index % 2 == 0 else r["optimizer"] == "adamw")
            and "betas" not in r]
    return want[0] if want else len(runs) - 1


def check_model(exe, index, folder):
    rep = Report(index)
    name = os.path.basename(folder)
    with tempfile.TemporaryDirectory() as tmp, open(os.path.join(folder, "train.json")) as f:
        runs = json.load(f)["runs"]
        for k, r in enumerate(runs):
            check_run(rep, exe, folder, r, tmp, k == ooc_run(index, runs))
        if index == 0 and "schedule" in runs[-1]:  # a schedule preempted and resumed: the straight run's bits
            check_resume(rep, exe, folder, runs[-1], tmp, by_signal=True)
        src = os.path.join(folder, "model.onnx")
        if identities(src):  # merged by the exporter: resume, and one initializer in two roles
            check_resume(rep, exe, folder, runs[-1], tmp)
            shared = os.path.join(tmp, "shared.onnx")
            n = share_initializers(src, shared)
            rep.check(not identities(shared) and n > 0, "%s: %d Identity aliases replaced by shared initializers"
                      % (name, n))
            check_run(rep, exe, folder, runs[0], tmp, False, shared, name + " (shared initializers)")
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

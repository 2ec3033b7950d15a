#!/usr/bin/env python3
"""Training with hpdlf-exec --train against reference trajectories.

usage: check_train.py HPDLF_EXEC MODELS_DIR

Each model folder holds model.onnx, x.npy, y.npy and train_sgd.json /
train_adam.json: the loss of every step of the same training in PyTorch
1.13 (made outside this project).  Checks:
  - every step's loss within 1e-3 relative of PyTorch's, in core;
  - out of core at 25% of the in-core tensor peak (or, where one operator
    alone needs more than that, at the smallest budget the planner
    names: at that one; HPDLF_TRAIN_STRICT_BUDGET=1 refuses that fallback) the losses
    are the in-core ones within 1e-5 relative where operators were split into bands
    (weight gradients sum over bands) or weights partitioned (blocks sum in another
    order), else bitwise; and bitwise with --no-split at the planner's minimum;
  - --resume from a checkpoint continues with bitwise the same losses, in
    core, out of core and with --shuffle;
  - a crash (SIGKILL) half way through writing a checkpoint leaves the
    previous one, and resuming from it gives bitwise the same losses;
  - a damaged checkpoint is refused; .npz data trains like .npy;
  - --export-onnx writes a valid model (inline and as external data) whose
    weights, run by numpy, give the loss the next training step logs, and
    that hpdlf-exec runs to the same logits;
  - mismatched data, labels and model give exit status 2 and one clear line.
"""
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np

from trainlib import FAILS, PASSED, check, run  # noqa: E402 (beside this script)


def losses(path):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return [(r["step"], r["loss"]) for r in rows]


def train_args(folder, ref, extra=()):
    return [os.path.join(folder, "model.onnx"), "--train", "--data", os.path.join(folder, "x.npy"),
            "--labels", os.path.join(folder, "y.npy"), "--loss", ref["loss"], "--optimizer", ref["optimizer"],
            "--lr", repr(ref["lr"]), "--momentum", repr(ref["momentum"]), "--batch", str(ref["batch"]),
            "--steps", str(ref["steps"]), "--shuffle" if ref["shuffle"] else "--no-shuffle", "--quiet"] + list(extra)


def ooc_budget(exe, args, peak, tmp):
    """25% of the in-core peak, or the fallback when one operator needs more."""
    b = peak // 4
    log = os.path.join(tmp, "probe.json")
    rc, _, err = run(exe, args + ["--budget", str(b), "--steps", "1", "--log-json", log])
    m = re.search(r"smallest budget that works is (\d+) bytes", err)
    if rc == 0 or not m or os.environ.get("HPDLF_TRAIN_STRICT_BUDGET") == "1":
        return b, ""
    need = int(m.group(1))
    return need, " (25%% = %d B is below the %d B one operator needs: that)" % (b, need)


def check_model(exe, folder, opt, tmp):
    name = os.path.basename(folder)
    with open(os.path.join(folder, "train_%s.json" % opt)) as f:
        ref = json.load(f)
    args = train_args(folder, ref)
    log, stats = os.path.join(tmp, "in.json"), os.path.join(tmp, "stats.json")
    rc, _, err = run(exe, args + ["--log-json", log, "--stats-json", stats])
    if not check(rc == 0, "%s %s in core: exit %d %s" % (name, opt, rc, err.strip()[-300:])):
        return
    got = losses(log)
    steps = [s for s, _ in got]
    check(steps == list(range(ref["steps"])), "%s %s: one log line per step" % (name, opt))
    want = np.array(ref["losses"], dtype=np.float64)
    have = np.array([l for _, l in got], dtype=np.float64)
    rel = float(np.max(np.abs(have - want) / np.abs(want))) if len(have) == len(want) else float("inf")
    check(rel <= 1e-3, "%s %s: %d losses vs PyTorch, max rel err %.2e" % (name, opt, len(have), rel))
    with open(stats) as f:
        peak = json.load(f)["tensor_peak_bytes"]
    budget, note = ooc_budget(exe, args, peak, tmp)
    log2, stats2 = os.path.join(tmp, "ooc.json"), os.path.join(tmp, "ooc_stats.json")
    rc, _, err = run(exe, args + ["--budget", str(budget), "--log-json", log2, "--stats-json", stats2])
    if check(rc == 0, "%s %s out of core at %d B%s: exit %d %s" % (name, opt, budget, note, rc, err.strip()[-300:])):
        with open(stats2) as f:
            parts = json.load(f).get("partitioned_weights", 0)
        oc = np.array([l for _, l in losses(log2)], dtype=np.float64)
        rel_in = float(np.max(np.abs(oc - have) / np.abs(have))) if len(oc) == len(have) else float("inf")
        rel_pt = float(np.max(np.abs(oc - want) / np.abs(want))) if len(oc) == len(want) else float("inf")
        check(rel_in <= 1e-5 and rel_pt <= 1e-3, "%s %s: out of core (%d weights partitioned): max rel err %.2e vs "
              "in core, %.2e vs PyTorch" % (name, opt, parts, rel_in, rel_pt))
    rc, _, err = run(exe, args + ["--budget", str(peak // 4), "--no-split", "--steps", "1"])
    m = re.search(r"smallest budget that works is (\d+) bytes", err)
    if rc != 0 and m:
        log3 = os.path.join(tmp, "nosplit.json")
        rc, _, err = run(exe, args + ["--budget", m.group(1), "--no-split", "--log-json", log3])
        check(rc == 0 and losses(log3) == got,
              "%s %s: unsplit at the planner's minimum %s B: losses bitwise equal to in-core %s" %
              (name, opt, m.group(1), err.strip()[-200:]))


def check_resume(exe, folder, tmp, extra, label):
    with open(os.path.join(folder, "train_adam.json")) as f:
        ref = json.load(f)
    ref = dict(ref, steps=20)
    args = train_args(folder, ref, extra)
    full, part, ck = (os.path.join(tmp, n) for n in ("full.json", "part.json", "ck"))
    shutil.rmtree(ck, ignore_errors=True)
    rc1, _, e1 = run(exe, args + ["--log-json", full])
    rc2, _, e2 = run(exe, args + ["--log-json", part, "--checkpoint", ck, "--checkpoint-every", "4", "--steps", "11"])
    rc3, _, e3 = run(exe, args + ["--log-json", part, "--checkpoint", ck, "--resume"])
    if not check(rc1 == rc2 == rc3 == 0, "%s: runs exit 0 (%s)" % (label, (e1 + e2 + e3).strip()[-300:])):
        return
    a, b = losses(full), losses(part)
    check([s for s, _ in b] == list(range(20)) and a == b,
          "%s: 11 steps + resume to 20 give bitwise the losses of 20 steps" % label)


def check_crash(exe, folder, tmp):
    with open(os.path.join(folder, "train_sgd.json")) as f:
        ref = json.load(f)
    ref = dict(ref, steps=16)
    args = train_args(folder, ref, ["--checkpoint", os.path.join(tmp, "ckc"), "--checkpoint-every", "4"])
    ck = os.path.join(tmp, "ckc")
    shutil.rmtree(ck, ignore_errors=True)
    full, part = os.path.join(tmp, "cfull.json"), os.path.join(tmp, "cpart.json")
    run(exe, train_args(folder, ref, ["--log-json", full]))
    rc, _, err = run(exe, args + ["--log-json", part], env={"HPDLF_TEST_KILL_IN_CHECKPOINT": "3"})
    check(rc == -9, "crash: killed half way through the 3rd checkpoint (exit %d)" % rc)
    check(os.path.exists(os.path.join(ck, "checkpoint.hpck")), "crash: the previous checkpoint is still there")
    rc, _, err = run(exe, args + ["--log-json", part, "--resume"])
    b = losses(part)
    steps = [s for s, _ in b]
    check(rc == 0 and steps == list(range(11)) + list(range(8, 16)),
          "crash: resumed from step 8, the 2nd checkpoint (exit %d, steps %s) %s" % (rc, steps, err.strip()[-200:]))
    a = dict(losses(full))
    check(all(a[s] == l for s, l in b), "crash: every loss before and after the crash equals the uninterrupted run")
    # a damaged checkpoint is refused, not resumed from
    path = os.path.join(ck, "checkpoint.hpck")
    with open(path, "r+b") as f:
        f.seek(4096 + 17)
        byte = f.read(1)
        f.seek(4096 + 17)
        f.write(bytes([byte[0] ^ 0x40]))
    rc, _, err = run(exe, args + ["--resume"])
    check(rc != 0 and "checksum" in err and len(err.strip().splitlines()) == 1,
          "damaged checkpoint refused: exit %d: %s" % (rc, err.strip()))


def check_npz_and_errors(exe, folder, tmp):
    x, y = np.load(os.path.join(folder, "x.npy")), np.load(os.path.join(folder, "y.npy"))
    npz = os.path.join(tmp, "data.npz")
    np.savez(npz, x=x, y=y)
    model = os.path.join(folder, "model.onnx")
    base = [model, "--train", "--batch", "16", "--steps", "3", "--quiet"]
    l1, l2 = os.path.join(tmp, "npy.json"), os.path.join(tmp, "npz.json")
    rc1, _, e1 = run(exe, base + ["--data", os.path.join(folder, "x.npy"), "--labels", os.path.join(folder, "y.npy"),
                                  "--log-json", l1])
    rc2, _, e2 = run(exe, base + ["--data", npz, "--log-json", l2])
    check(rc1 == 0 and rc2 == 0 and losses(l1) == losses(l2), "npz data trains like npy (%s%s)" % (e1, e2))
    np.savez_compressed(os.path.join(tmp, "c.npz"), x=x, y=y)
    bad = {
        "samples of another shape": (x[:, :, :4, :], y),
        "float64 data for a float32 input": (x.astype(np.float64), y),
        "float labels for cross-entropy": (x, y.astype(np.float32)),
        "labels with another sample count": (x, y[:-1]),
        "labels with an extra dim": (x, y[:, None]),
    }
    for what, (bx, by) in bad.items():
        px, py = os.path.join(tmp, "bx.npy"), os.path.join(tmp, "by.npy")
        np.save(px, bx)
        np.save(py, by)
        rc, _, err = run(exe, base + ["--data", px, "--labels", py])
        check(rc == 2 and len(err.strip().splitlines()) == 1 and ("bx.npy" in err or "by.npy" in err),
              "bad data (%s): exit %d: %s" % (what, rc, err.strip()))
    rc, _, err = run(exe, base + ["--data", os.path.join(tmp, "c.npz")])
    check(rc == 2 and "savez_compressed" in err, "compressed npz: exit %d: %s" % (rc, err.strip()))
    rc, _, err = run(exe, base + ["--data", os.path.join(folder, "x.npy"), "--labels", os.path.join(folder, "y.npy"),
                                  "--batch", "16", "--loss", "hinge"])
    check(rc == 2, "unknown loss: exit %d: %s" % (rc, err.strip()))


def mlp_forward(W, x):
    h = x
    for i, layer in enumerate(("l1", "l2", "l3")):
        h = h @ W[layer + ".weight"].T.astype(np.float64) + W[layer + ".bias"]
        if i < 2:
            h = np.maximum(h, 0)
    return h


def check_export(exe, folder, tmp):
    import onnx
    from onnx import numpy_helper

    with open(os.path.join(folder, "train_sgd.json")) as f:
        ref = json.load(f)
    args = train_args(folder, ref)
    out, outx, log = (os.path.join(tmp, n) for n in ("ex.onnx", "exx.onnx", "l41.json"))
    rc1, _, e1 = run(exe, args + ["--export-onnx", out])
    rc2, _, e2 = run(exe, args + ["--export-onnx", outx], env={"HPDLF_EXPORT_EXTERNAL_DATA": "1"})
    rc3, _, e3 = run(exe, args + ["--steps", str(ref["steps"] + 1), "--log-json", log])
    if not check(rc1 == rc2 == rc3 == 0, "export: runs exit 0 %s" % (e1 + e2 + e3).strip()[-300:]):
        return
    check(os.path.exists(outx + ".data") and os.path.getsize(outx) < 4096, "export: external data in FILE.data")
    models = [onnx.load(p) for p in (out, outx)]
    for m in models:
        onnx.checker.check_model(m)
    W, Wx = ({i.name: numpy_helper.to_array(i) for i in m.graph.initializer} for m in models)
    check(W.keys() == Wx.keys() and all(np.array_equal(W[k], Wx[k]) for k in W), "export: inline = external weights")
    x, y = np.load(os.path.join(folder, "x.npy")), np.load(os.path.join(folder, "y.npy"))
    b, n = ref["batch"], len(x)
    rows = [(ref["steps"] * b + k) % n for k in range(b)]
    z = mlp_forward(W, x[rows].astype(np.float64))
    z = z - z.max(axis=1, keepdims=True)
    loss = float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(b), y[rows]]))
    want = losses(log)[-1][1]
    check(abs(loss - want) <= 1e-5 * abs(want), "export: numpy loss of the exported weights %.7f = logged step %d loss %.7f"
          % (loss, ref["steps"], want))
    xin = os.path.join(tmp, "xin.npy")
    np.save(xin, x[rows])
    ref_logits = mlp_forward(W, x[rows].astype(np.float64))
    for p in (out, outx):
        lo = os.path.join(tmp, "logits.npy")
        rc, _, err = run(exe, [p, "--input", "input=" + xin, "--output", "logits=" + lo, "--quiet"])
        ok = rc == 0 and np.max(np.abs(np.load(lo) - ref_logits)) <= 1e-4 * max(1, np.max(np.abs(ref_logits)))
        check(ok, "export: hpdlf-exec runs %s to numpy's logits %s" % (os.path.basename(p), err.strip()))


def main():
    exe, models = sys.argv[1], sys.argv[2]
    rc, _, err = run(exe, [os.path.join(models, "unet3d_tiny", "model.onnx"), "--iterations", "1", "--quiet"])
    if rc != 0 and "is not supported" in err:
        print("SKIP: this build lacks kernels the reference models need: " + err.strip())
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(models)):
            folder = os.path.join(models, name)
            for opt in ("sgd", "adam"):
                if os.path.exists(os.path.join(folder, "train_%s.json" % opt)):
                    check_model(exe, folder, opt, tmp)
        lenet = os.path.join(models, "lenet")
        check_resume(exe, lenet, tmp, [], "resume in core")
        check_resume(exe, lenet, tmp, ["--budget", "1200K"], "resume out of core")
        check_resume(exe, lenet, tmp, ["--shuffle", "--seed", "7"], "resume with --shuffle")
        check_crash(exe, lenet, tmp)
        check_npz_and_errors(exe, lenet, tmp)
        check_export(exe, os.path.join(models, "mlp"), tmp)
    print("%d passed, %d failed" % (PASSED[0], len(FAILS)))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

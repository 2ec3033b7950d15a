#!/usr/bin/env python3
"""Issue 5's acceptance check, by hand: for each reference model (a folder
with model.onnx, x.npy, y.npy, train_sgd.json, train_adam.json), train with
hpdlf-exec as the JSON says, in core and at 25% of the in-core tensor peak,
and compare every step's loss with PyTorch's.

  tools/check_reference_training.py HPDLF_EXEC MODELS_DIR [NAME ...]

Prints one line per model and optimizer; exits 1 if a loss is off by more
than 1e-3 relative or a run fails."""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np


def losses(path):
    with open(path) as f:
        return np.array([json.loads(l)["loss"] for l in f if l.strip()], dtype=np.float64)


def peak_bytes(stderr):
    m = re.search(r"tensor memory ([0-9.]+) (KiB|MiB|GiB)", stderr)
    return int(float(m.group(1)) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)])


def main():
    exe, root, names = sys.argv[1], sys.argv[2], sys.argv[3:] or ["mlp", "lenet", "unet3d_tiny", "unet3d"]
    bad = 0
    tmp = tempfile.mkdtemp(prefix="hpdlf-refs-")
    for name in names:
        d = os.path.join(root, name)
        for opt in ("sgd", "adam"):
            with open(os.path.join(d, "train_%s.json" % opt)) as f:
                ref = json.load(f)
            want = np.array(ref["losses"], dtype=np.float64)
            args = [exe, os.path.join(d, "model.onnx"), "--train", "--data", os.path.join(d, "x.npy"), "--labels",
                    os.path.join(d, "y.npy"), "--loss", "cross-entropy", "--optimizer", opt, "--lr", str(ref["lr"]),
                    "--batch", str(ref["batch"]), "--steps", str(ref["steps"]), "--no-shuffle"]
            if opt == "sgd":
                args += ["--momentum", str(ref.get("momentum", 0))]
            log_in, log_25 = (os.path.join(tmp, "%s_%s_%s.json" % (name, opt, k)) for k in ("in", "25"))
            p = subprocess.run(args + ["--log-json", log_in], capture_output=True, text=True)
            if p.returncode:
                print("%s %s: in-core run failed: %s" % (name, opt, p.stderr.strip()[-300:]))
                bad = 1
                continue
            budget = peak_bytes(p.stderr) // 4
            q = subprocess.run(args + ["--budget", str(budget), "--log-json", log_25], capture_output=True, text=True)
            got = losses(log_in)
            e_in = float(np.max(np.abs(got - want) / np.abs(want)))
            if q.returncode:
                print("%s %s: in core %.1e; at 25%% (%d B) failed: %s" % (name, opt, e_in, budget,
                                                                     q.stderr.strip()[-300:]))
                bad = 1
                continue
            ooc = losses(log_25)
            e_oc = float(np.max(np.abs(ooc - want) / np.abs(want)))
            e_io = float(np.max(np.abs(ooc - got) / np.abs(got)))
            rss = re.search(r"peak RSS ([0-9.]+ \w+)", q.stderr)
            ok = e_in <= 1e-3 and e_oc <= 1e-3 and len(ooc) == len(want)
            bad |= not ok
            print("%-12s %-4s %s  max rel err vs PyTorch: in core %.1e, at 25%% (%d B, peak RSS %s) %.1e; "
                  "25%% vs in core %.1e" % (name, opt, "ok  " if ok else "FAIL", e_in, budget,
                                            rss.group(1) if rss else "?", e_oc, e_io))
    return bad


if __name__ == "__main__":
    sys.exit(main())

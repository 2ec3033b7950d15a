#!/usr/bin/env python3
"""Every training budget from the smallest the planner names up to the
in-core peak runs: none is refused in between.

usage: check_budget_range.py HPDLF_EXEC MODEL_DIR

MODEL_DIR holds model.onnx, x.npy and y.npy (tests/models/lenet: two
convolutions, batch 64).  The forward graph is split before autodiff, while
a Relu's gradient needs three of its activations (y, dy, dx): budgets
between the forward's and the backward's largest op once split nothing
and were refused naming the unsplit figure (lenet: 400000-819199 bytes,
while 204800-300000 ran).  Checks:
  - --plan names a smallest budget S; S - 1 is refused
    with exit status 2 naming S again;
  - S and budgets spread from S to just under the in-core tensor peak
    (geometrically, plus the peak minus one byte) train with exit status 0,
    page (bytes through the tiers), and give the in-core losses (to 1e-5
    relative: band weight gradients are sums over bands, DESIGN.md).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

STEPS = 4


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    exe, d = sys.argv[1], sys.argv[2]
    args = [os.path.join(d, "model.onnx"), "--train", "--data", os.path.join(d, "x.npy"), "--labels",
            os.path.join(d, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.05",
            "--batch", "64", "--steps", str(STEPS), "--no-shuffle", "--quiet"]
    fails = 0

    def check(ok, what):
        nonlocal fails
        print(("ok   " if ok else "FAIL ") + what)
        fails += not ok
        return ok

    with tempfile.TemporaryDirectory() as tmp:
        log, stats = os.path.join(tmp, "in.json"), os.path.join(tmp, "stats.json")
        rc, _, err = run(exe, args + ["--log-json", log, "--stats-json", stats])
        if not check(rc == 0, "in core: exit %d %s" % (rc, err.strip()[-300:])):
            return 1
        want = [r["loss"] for r in rows(log)]
        with open(stats) as f:
            peak = json.load(f)["tensor_peak_bytes"]
        rc, out, err = run(exe, args + ["--budget", str(peak), "--plan"])
        m = re.search(r"smallest budget +\S+ \S+ = (\d+) bytes", out)
        if not check(rc == 0 and m, "--plan names a smallest budget (exit %d)" % rc):
            return 1
        floor = int(m.group(1))
        rc, _, err = run(exe, args + ["--budget", str(floor - 1)])
        m = re.search(r"smallest budget that works is (\d+) bytes", err)
        check(rc == 2 and m and int(m.group(1)) == floor,
              "%d B (one byte under the named %d) refused: exit %d naming %s"
              % (floor - 1, floor, rc, m.group(1) if m else "nothing"))
        budgets, b = [], floor
        while b < peak:
            budgets.append(b)
            b = int(b * 1.25)
        budgets.append(peak - 1)
        for b in budgets:
            log2 = os.path.join(tmp, "ooc.json")
            rc, _, err = run(exe, args + ["--budget", str(b), "--log-json", log2])
            if not check(rc == 0, "%d B (%.0f%% of the %d B peak): exit %d %s"
                         % (b, 100.0 * b / peak, peak, rc, err.strip()[-300:])):
                continue
            got = [r["loss"] for r in rows(log2)]
            moved = sum(t["bytes_read"] + t["bytes_written"] for r in rows(log2) for t in r["tiers"].values())
            rel = max(abs(g - w) / abs(w) for g, w in zip(got, want)) if len(got) == len(want) else float("inf")
            check(rel <= 1e-5 and moved > 0, "%d B: %d losses within %.1e of in core, %d bytes paged"
                  % (b, len(got), rel, moved))
    print("%d failed" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

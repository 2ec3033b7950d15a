#!/usr/bin/env python3
"""Inference on real-world exported models against the framework's outputs.

usage: check_exports.py HPDLF_EXEC EXPORTS_DIR [NAME...]

Every folder of EXPORTS_DIR with a cases.json (written by tools/make_exports.py:
PyTorch exports with dynamic axes at several opsets, and Paddle2ONNX-style
models written by hand) holds model.onnx and, per case (two dynamic shapes),
the input files and the framework's outputs.  hpdlf-exec runs each case with
1 and 2 threads; every output must match within 1e-4 * max(1, max|ref|).
One line per (model, case, threads).  NAME... restricts to those folders.

Each model must also compile (hpdlf-exec --plan) with only the shapes of its
inputs (--shape): the shape subgraphs fold without binding any input as a
constant, so token ids and masks stay run-time inputs (hpdlf-exec binds small
input files and retries when an operator needs a constant; this rules that
out).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run_case(exe, folder, case, tmp, threads):
    args = [exe, os.path.join(folder, "model.onnx"), "--threads", str(threads), "--quiet"]
    for name, f in case["inputs"].items():
        args += ["--input", "%s=%s" % (name, os.path.join(folder, f))]
    outs = {}
    for name in case["outputs"]:
        outs[name] = os.path.join(tmp, "%s_%s_%s_t%d.npy" % (os.path.basename(folder), case["name"], name,
                                                              threads))
        args += ["--output", "%s=%s" % (name, outs[name])]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return "exit %d: %s" % (p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "")
    worst = 0.0
    for name, f in case["outputs"].items():
        ref = np.load(os.path.join(folder, f))
        y = np.load(outs[name])
        if y.shape != ref.shape or y.dtype != ref.dtype:
            return "%s: got %s %s, expected %s %s" % (name, y.dtype, y.shape, ref.dtype, ref.shape)
        tol = 1e-4 * max(1.0, float(np.max(np.abs(ref)))) if ref.size else 0.0
        err = float(np.max(np.abs(y.astype(np.float64) - ref))) if ref.size else 0.0
        if not err <= tol:
            return "%s: max |hpdlf - ref| = %.3g > %.3g" % (name, err, tol)
        worst = max(worst, err / tol if tol else 0.0)
    return "ok:%.3f" % worst


def check_runtime_inputs(exe, folder, case):
    """None if the model compiles with every input left to run time."""
    args = [exe, os.path.join(folder, "model.onnx"), "--plan"]
    for name, f in case["inputs"].items():
        shape = np.load(os.path.join(folder, f), mmap_mode="r").shape
        args += ["--shape", "%s=%s" % (name, "x".join(str(d) for d in shape))]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return "exit %d: %s" % (p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "")
    return None


def main():
    exe, root = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])
    failures = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(root)):
            folder = os.path.join(root, name)
            meta = os.path.join(folder, "cases.json")
            if not os.path.exists(meta) or (only and name not in only):
                continue
            with open(meta) as f:
                cases = json.load(f)["cases"]
            total += 1
            why = check_runtime_inputs(exe, folder, cases[0])
            if why:
                failures += 1
                print("FAIL %-20s %-18s inputs at run time: %s" % (name, "compile", why))
            else:
                print("ok   %-20s %-18s inputs at run time" % (name, "compile"))
            for case in cases:
                for threads in (1, 2):
                    total += 1
                    r = run_case(exe, folder, case, tmp, threads)
                    if r.startswith("ok:"):
                        print("ok   %-20s %-18s threads=%d err/tol=%s" % (name, case["name"], threads, r[3:]))
                    else:
                        failures += 1
                        print("FAIL %-20s %-18s threads=%d: %s" % (name, case["name"], threads, r))
    print("%d of %d cases passed" % (total - failures, total))
    return 1 if failures or not total else 0


if __name__ == "__main__":
    sys.exit(main())

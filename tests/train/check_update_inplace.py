#!/usr/bin/python3
"""The optimizer update writes its state in place (issue 17).

usage: check_update_inplace.py HPDLF_EXEC WORKDIR

An update holding W, dW and W' (with momentum also B and B'; Adam m, v,
m', v') needed 5 W with momentum and 7 W with Adam at once for a weight
W, where W' written over W's bytes (and B' over B, m' over m, v' over v)
needs 3 W and 4 W.  An MLP whose 4-MiB middle weight makes its update
the largest step (--no-split: no weight blocks) names a smallest budget
of under 4 W with momentum and 5.5 W with Adam; trained there, its
losses and exported weights are bitwise the in-core ones.  Written with
onnx.helper and seeded numpy into WORKDIR (removed when everything
passes).  Exits 1 on failure.

A Conv's backward runs its filter gradient first, and its update was then
ready before the data gradient had read W: the update ran between the
two and could not write W' over W (W, dW and W' at once; the trainer then
kept W in blocks for the update, and ResNet-18 at 25% moved 1.8x the
bytes).  The graph's order now makes the update wait for every other
reader of W.  A conv net whose 2.25-MiB 3x3 weight Wc makes its update
the largest step, trained with plain SGD: --no-split names a smallest
budget under 3 Wc (W and dW: its filter gradient's 2.8 Wc is the floor
now, the update's 3.2 Wc was), runs there bitwise in core, and at 3 Wc
without --no-split keeps the weight whole (no blocks), bitwise in core.
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

SMALLEST_RE = re.compile(r"smallest budget .*= (\d+) bytes")
W = 1024 * 1024 * 4
failures = []


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)
    return ok


def write_model(path, rng):
    dims = [16, 1024, 1024, 4]
    inits, nodes, prev = [], [], "x"
    for i in range(3):
        b = 1 / np.sqrt(dims[i])
        inits.append(numpy_helper.from_array(rng.uniform(-b, b, (dims[i], dims[i + 1])).astype(np.float32), "w%d" % i))
        nodes.append(helper.make_node("Gemm", [prev, "w%d" % i], ["h%d" % i]))
        prev = "h%d" % i
        if i < 2:
            nodes.append(helper.make_node("Relu", [prev], ["r%d" % i]))
            prev = "r%d" % i
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def write_convnet(path, rng):
    w1 = (rng.standard_normal((256, 16, 3, 3)) * 0.08).astype(np.float32)
    w2 = (rng.standard_normal((256, 256, 3, 3)) * 0.02).astype(np.float32)
    b2 = (rng.standard_normal(256) * 0.1).astype(np.float32)
    w3 = (rng.standard_normal((10, 256)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["h2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h2"], ["r2"]), helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
                          [numpy_helper.from_array(v, n) for n, v in (("w1", w1), ("w2", w2), ("b2", b2), ("w3", w3))])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def check_conv(exe, work, rng):
    wc = 256 * 256 * 9 * 4
    model, x, y = (os.path.join(work, n) for n in ("conv.onnx", "cx.npy", "cy.npy"))
    write_convnet(model, rng)
    np.save(x, rng.standard_normal((16, 16, 8, 8)).astype(np.float32))
    np.save(y, rng.integers(0, 10, 16).astype(np.int64))
    base = [exe, model, "--train", "--data", x, "--labels", y, "--loss", "cross-entropy", "--optimizer", "sgd",
            "--lr", "0.01", "--batch", "8", "--steps", "3", "--no-shuffle", "--threads", "2", "--quiet"]
    p = subprocess.run(base + ["--no-split", "--budget", "1G", "--plan"], capture_output=True, text=True, timeout=300)
    m = SMALLEST_RE.search(p.stdout + p.stderr)
    if not check(p.returncode == 0 and m, "conv sgd: --plan names a smallest budget"):
        return
    small = int(m.group(1))
    check(small < 3 * wc, "conv sgd: smallest budget %.2f Wc < 3 Wc (the update after the data gradient, in place)"
          % (small / wc))
    runs = {}
    for tag, extra in (("incore", []), ("small", ["--no-split", "--budget", str(small)]),
                       ("whole", ["--budget", str(3 * wc)])):
        log, exp, st = (os.path.join(work, "conv-%s.%s" % (tag, e)) for e in ("jsonl", "onnx", "json"))
        p = subprocess.run(base + extra + ["--log-json", log, "--export-onnx", exp, "--stats-json", st],
                           capture_output=True, text=True, timeout=600)
        if check(p.returncode == 0, "conv sgd %s: exit 0 (%s)" % (tag, p.stderr.strip()[-200:])):
            with open(log) as f:
                runs[tag] = ([json.loads(l)["loss"] for l in f if l.strip()], weights(exp))
            with open(st) as f:
                parts = json.load(f).get("partitioned_weights", 0)
            if tag == "whole":
                check(parts == 0, "conv sgd at 3 Wc: the 3x3 weight kept whole (%d partitioned)" % parts)
    for tag in ("small", "whole"):
        if tag in runs and "incore" in runs:
            check(runs[tag] == runs["incore"], "conv sgd %s: losses %s and exported weights bitwise in core"
                  % (tag, runs[tag][0]))


def weights(path):
    return {t.name: numpy_helper.to_array(t).tobytes() for t in onnx.load(path).graph.initializer}


def main():
    exe, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = np.random.default_rng(7)
    model = os.path.join(work, "mlp.onnx")
    write_model(model, rng)
    x, y = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
    np.save(x, rng.standard_normal((32, 16)).astype(np.float32))
    np.save(y, rng.integers(0, 4, 32).astype(np.int64))
    for opt, most in ((["--optimizer", "sgd", "--momentum", "0.9"], 4), (["--optimizer", "adam"], 5.5)):
        name = opt[1] + ("-momentum" if len(opt) > 2 else "")
        base = [exe, model, "--train", "--data", x, "--labels", y, "--loss", "cross-entropy", "--lr", "0.01",
                "--batch", "8", "--steps", "4", "--no-shuffle", "--threads", "2", "--quiet"] + opt
        p = subprocess.run(base + ["--no-split", "--budget", "1G", "--plan"], capture_output=True, text=True, timeout=300)
        m = SMALLEST_RE.search(p.stdout + p.stderr)
        if not check(p.returncode == 0 and m, "%s: --plan names a smallest budget" % name):
            continue
        small = int(m.group(1))
        check(small < most * W, "%s: smallest budget %.2f W < %.1f W (the update in place)" % (name, small / W, most))
        runs = {}
        for tag, extra in (("incore", []), ("small", ["--no-split", "--budget", str(small)])):
            log, exp = os.path.join(work, "%s-%s.jsonl" % (name, tag)), os.path.join(work, "%s-%s.onnx" % (name, tag))
            p = subprocess.run(base + extra + ["--log-json", log, "--export-onnx", exp], capture_output=True, text=True,
                               timeout=600)
            if check(p.returncode == 0, "%s %s: exit 0 (%s)" % (name, tag, p.stderr.strip()[-200:])):
                with open(log) as f:
                    runs[tag] = ([json.loads(l)["loss"] for l in f if l.strip()], weights(exp))
        if len(runs) == 2:
            check(runs["small"][0] == runs["incore"][0], "%s: losses at the smallest budget bitwise in core %s"
                  % (name, runs["small"][0]))
            check(runs["small"][1] == runs["incore"][1], "%s: exported weights bitwise in core" % name)
    check_conv(exe, work, rng)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

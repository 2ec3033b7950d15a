#!/usr/bin/python3
"""A Conv's filter gradient fused with its optimizer update (issue 17).

usage: check_grad_update_fuse.py HPDLF_EXEC WORKDIR

exec/fuse_grad_update.c turns each ConvGradFilter whose dW only its
update reads (where the filter gradient takes the packed register tiles
of kernels/conv_grad_reg.c) and that update into one ConvGradFilterUpdate,
which applies the update to dW a piece at a time: dW is never whole.  A
ResNet-like net (3x3 convs of 64 to 256 channels on 8x8 to 2x2 planes, a
residual add, two stride-2 convs) written with onnx.helper and seeded
numpy into WORKDIR (removed when everything passes) is trained for 3
steps with plain SGD, SGD with momentum, Nesterov and weight decay, Adam
and AdamW:

- unfused (HPDLF_FUSE_GRAD_UPDATE=0) in core is the reference;
- fused in core (2 threads) and fused at a budget that pages (a third of
  the in-core tensor peak, or --plan's smallest budget if more: the
  run's --stats-json shows bytes written below DRAM), with 1 and 2
  threads: losses and exported weights bitwise the reference;
- the fused path is taken: --trace shows ConvGradFilterUpdate kernels
  (at least 3 a step: the three convs of 128 and 256 channels) and
  the unfused run none;
- with plain SGD, --plan's smallest budget is lower fused than unfused
  (the largest weight's update held W and dW at once).

Skips (77) on a CPU without AVX-512 (the packed tiles need it: nothing
is fused there).  Exits 1 on failure.
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
failures = []


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)
    return ok


def write_model(path, rng):
    inits, nodes = [], []

    def conv(name, x, cin, cout, stride):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name + ".w"))
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.01).astype(np.float32), name + ".b"))
        nodes.append(helper.make_node("Conv", [x, name + ".w", name + ".b"], [name], pads=[1, 1, 1, 1],
                                      strides=[stride, stride]))
        nodes.append(helper.make_node("Relu", [name], [name + ".r"]))
        return name + ".r"

    h = conv("c1", "x", 16, 64, 1)       # 8x8
    h = conv("c2", h, 64, 128, 2)        # 4x4
    r = conv("c3", h, 128, 128, 1)
    nodes.append(helper.make_node("Add", [h, r], ["res"]))
    h = conv("c4", "res", 128, 256, 2)   # 2x2
    h = conv("c5", h, 256, 256, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [h], ["p"]))
    nodes.append(helper.make_node("Flatten", ["p"], ["f"]))
    inits.append(numpy_helper.from_array((rng.standard_normal((10, 256)) * 0.06).astype(np.float32), "fc.w"))
    nodes.append(helper.make_node("Gemm", ["f", "fc.w"], ["y"], transB=1))
    g = helper.make_graph(nodes, "resnetlike", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def weights(path):
    return {t.name: numpy_helper.to_array(t).tobytes() for t in onnx.load(path).graph.initializer}


def run(cmd, env, work, tag, extra):
    log, exp, st, tr = (os.path.join(work, "%s.%s" % (tag, e)) for e in ("jsonl", "onnx", "stats.json", "trace.json"))
    p = subprocess.run(cmd + extra + ["--log-json", log, "--export-onnx", exp, "--stats-json", st, "--trace", tr],
                       capture_output=True, text=True, timeout=600, env=env)
    if not check(p.returncode == 0, "%s: exit 0 (%s)" % (tag, p.stderr.strip()[-300:])):
        return None
    with open(log) as f:
        losses = [json.loads(l)["loss"] for l in f if l.strip()]
    with open(st) as f:
        stats = json.load(f)
    with open(tr) as f:
        cats = [e.get("cat") for e in json.load(f) if e.get("ph") == "X"]
    return {"losses": losses, "weights": weights(exp), "stats": stats, "fused": cats.count("ConvGradFilterUpdate")}


def smallest(cmd, env):
    p = subprocess.run(cmd + ["--budget", "1G", "--plan"], capture_output=True, text=True, timeout=300, env=env)
    m = SMALLEST_RE.search(p.stdout + p.stderr)
    return int(m.group(1)) if p.returncode == 0 and m else None


def written_below(stats):
    return sum(t.get("bytes_written", 0) for name, t in stats.get("tiers", {}).items() if name != "dram")


def check_optimizer(exe, work, model, x, y, opt):
    name = "-".join(a.strip("-") for a in opt[1:])
    lr = "0.001" if opt[1].startswith("adam") else "0.01"
    base = [exe, model, "--train", "--data", x, "--labels", y, "--loss", "cross-entropy", "--lr", lr,
            "--batch", "8", "--steps", "3", "--no-shuffle", "--quiet"] + opt
    fused_env, unfused_env = dict(os.environ), dict(os.environ)
    fused_env.pop("HPDLF_FUSE_GRAD_UPDATE", None)
    unfused_env["HPDLF_FUSE_GRAD_UPDATE"] = "0"
    ref = run(base + ["--threads", "2"], unfused_env, work, name + "-unfused", [])
    if not ref:
        return
    check(ref["fused"] == 0, "%s unfused: no ConvGradFilterUpdate ran (%d)" % (name, ref["fused"]))
    incore = run(base + ["--threads", "2"], fused_env, work, name + "-fused", [])
    peak = ref["stats"].get("tensor_peak_bytes", 0)
    small = smallest(base + ["--threads", "2"], fused_env)
    if not check(peak > 0 and small, "%s: in-core tensor peak %d, fused smallest budget %s" % (name, peak, small)):
        return
    budget = max(peak // 3, small)
    runs = [("fused in core", incore)]
    for threads in ("1", "2"):
        r = run(base + ["--threads", threads], fused_env, work, "%s-fused-%st" % (name, threads),
                ["--budget", str(budget)])
        if r:
            check(written_below(r["stats"]) > 0, "%s at %d bytes, %s threads: pages (%d bytes written below DRAM)"
                  % (name, budget, threads, written_below(r["stats"])))
        runs.append(("fused at %d bytes, %s threads" % (budget, threads), r))
    for what, r in runs:
        if not r:
            continue
        check(r["fused"] >= 3 * 3, "%s %s: %d ConvGradFilterUpdate kernels in 3 steps (>= 9)" % (name, what, r["fused"]))
        check(r["losses"] == ref["losses"], "%s %s: losses %s bitwise unfused" % (name, what, r["losses"]))
        check(r["weights"] == ref["weights"], "%s %s: exported weights bitwise unfused" % (name, what))
    if opt[1] == "sgd" and len(opt) == 2:
        unfused_small = smallest(base + ["--threads", "2"], unfused_env)
        check(unfused_small and small < unfused_small, "%s: smallest budget fused %s < unfused %s bytes"
              % (name, small, unfused_small))


def main():
    exe, work = sys.argv[1], sys.argv[2]
    with open("/proc/cpuinfo") as f:
        if " avx512f" not in f.read():
            print("skip: no AVX-512 (the packed tiles, and so the fusion, need it)")
            return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = np.random.default_rng(17)
    model, x, y = (os.path.join(work, n) for n in ("resnetlike.onnx", "x.npy", "y.npy"))
    write_model(model, rng)
    np.save(x, rng.standard_normal((24, 16, 8, 8)).astype(np.float32))
    np.save(y, rng.integers(0, 10, 24).astype(np.int64))
    for opt in (["--optimizer", "sgd"], ["--optimizer", "sgd", "--momentum", "0.9", "--nesterov", "--weight-decay",
                                          "0.0005"], ["--optimizer", "adam"], ["--optimizer", "adamw"]):
        check_optimizer(exe, work, model, x, y, opt)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Recompute or swap (issue 17, exec/remat.h): training step time at 25% of
the in-core tensor peak with recomputation (the default) and without it
(--no-recompute: every activation kept or swapped), against in core.  Ends
with one JSON line.

usage: build/bench/bench_recompute.py [HPDLF_EXEC] [--rounds R] [--steps N]
                                      [--threads T] [--tier nvme=PATH]

The model, generated here: BLOCKS blocks of a Gemm (WIDTH x WIDTH) and
three element-wise activations (Tanh, Sigmoid, Tanh), batch BATCH,
cross-entropy, SGD with momentum: activations cheap to compute again and
dear to page.  Each round runs the three configurations one after the
other (so that the machine's load hits them alike); a configuration's time
is the median over rounds of the median per-step time of --log-json (the
first two steps left out); the fastest single step of each is printed
too (on a loaded machine the least disturbed figure).  Also printed: --plan's stash figures (bytes
kept, swapped, recomputed, recompute FLOPs) and predicted step times, and
the bytes each run moved through the tier.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper

BATCH, WIDTH, BLOCKS, CLASSES = 512, 512, 6, 10
EXE = "@HPDLF_EXEC_PATH@"
STASH_RE = re.compile(r"backward's stash +(.*)")
PRED_RE = re.compile(r"predicted step time +([0-9.]+) ms")


def write_model(path):
    rng = np.random.default_rng(3)
    nodes, inits, cur = [], [], "x"
    for b in range(BLOCKS):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w%d" % b))
        nodes.append(helper.make_node("Gemm", [cur, "w%d" % b], ["g%d" % b], name="gemm%d" % b))
        cur = "g%d" % b
        for e, op in enumerate(["Tanh", "Sigmoid", "Tanh"]):
            nodes.append(helper.make_node(op, [cur], ["e%d_%d" % (b, e)], name="%s%d_%d" % (op.lower(), b, e)))
            cur = "e%d_%d" % (b, e)
    w = (rng.standard_normal((WIDTH, CLASSES)) / np.sqrt(WIDTH)).astype(np.float32)
    inits.append(numpy_helper.from_array(w, "wout"))
    nodes.append(helper.make_node("Gemm", [cur, "wout"], ["logits"], name="head"))
    g = helper.make_graph(nodes, "eltmlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    np.save(path + ".x.npy", rng.standard_normal((BATCH * 4, WIDTH)).astype(np.float32))
    np.save(path + ".y.npy", rng.integers(0, CLASSES, BATCH * 4).astype(np.int64))


def run(args):
    p = subprocess.run([EXE] + args, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        sys.exit("hpdlf-exec %s failed: %s" % (" ".join(args), p.stderr.strip()[-500:]))
    return p.stdout


def step_ms(args, tmp, tag):
    log, st = os.path.join(tmp, tag + ".log"), os.path.join(tmp, tag + ".stats")
    run(args + ["--log-json", log, "--stats-json", st])
    with open(log) as f:
        ms = [json.loads(line)["ms"] for line in f if line.strip()]
    tiers = json.load(open(st)).get("tiers", {})
    moved = sum(t.get("bytes_read", 0) + t.get("bytes_written", 0) for k, t in tiers.items() if k != "dram")
    body = ms[2:] if len(ms) > 4 else ms
    return (statistics.median(body), min(body)), json.load(open(st)), moved


def opt(argv, name, default):
    return argv[argv.index(name) + 1] if name in argv else default


def main(argv):
    global EXE
    if len(argv) > 1 and not argv[1].startswith("--"):
        EXE = argv[1]
    rounds, steps, threads = int(opt(argv, "--rounds", "3")), int(opt(argv, "--steps", "10")), opt(argv, "--threads", "1")
    tier = ["--tier", opt(argv, "--tier", "")] if "--tier" in argv else []
    tmp = tempfile.mkdtemp(prefix="bench_recompute.")
    try:
        model = os.path.join(tmp, "eltmlp.onnx")
        write_model(model)
        args = [model, "--train", "--data", model + ".x.npy", "--labels", model + ".y.npy", "--loss", "cross-entropy",
                "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9", "--batch", str(BATCH),
                "--steps", str(steps), "--no-shuffle", "--quiet", "--threads", threads] + tier
        _, st, _ = step_ms(args, tmp, "probe")
        peak = st["tensor_peak_bytes"]
        budget = peak // 4
        plans = {}
        for tag, extra in (("recompute", []), ("swap", ["--no-recompute"])):
            out = run(args + ["--plan", "--budget", str(budget)] + extra)
            m, p = STASH_RE.search(out), PRED_RE.search(out)
            plans[tag] = {"stash": m.group(1) if m else "", "predicted_ms": float(p.group(1)) if p else 0}
            print("plan %-9s at %d bytes: %s; predicted step %.1f ms" % (tag, budget, plans[tag]["stash"],
                                                                       plans[tag]["predicted_ms"]))
        conf = {"incore": [], "recompute": ["--budget", str(budget)], "swap": ["--budget", str(budget), "--no-recompute"]}
        times, best = {k: [] for k in conf}, {k: [] for k in conf}
        moved = {}
        for r in range(rounds):
            for k, extra in conf.items():
                (ms, lo), _, mv = step_ms(args + extra, tmp, k)
                times[k].append(ms)
                best[k].append(lo)
                moved[k] = mv
                print("round %d %-9s %8.2f ms/step (fastest step %.2f), tier moved %d bytes/run" % (r, k, ms, lo, mv))
        med = {k: statistics.median(v) for k, v in times.items()}
        fastest = {k: min(v) for k, v in best.items()}
        res = {"bench": "recompute", "model": "eltmlp %dx(Gemm %d + 3 element-wise), batch %d" % (BLOCKS, WIDTH, BATCH),
               "threads": int(threads), "rounds": rounds, "steps": steps, "incore_peak_bytes": peak,
               "budget_bytes": budget, "incore_ms": round(med["incore"], 3), "recompute_ms": round(med["recompute"], 3),
               "swap_ms": round(med["swap"], 3),
               "swap_over_recompute": round(med["swap"] / med["recompute"], 3),
               "recompute_over_incore": round(med["recompute"] / med["incore"], 3),
               "swap_over_incore": round(med["swap"] / med["incore"], 3),
               "fastest_step_ms": {k: round(v, 3) for k, v in fastest.items()},
               "fastest_swap_over_recompute": round(fastest["swap"] / fastest["recompute"], 3),
               "tier_bytes_recompute": moved["recompute"], "tier_bytes_swap": moved["swap"],
               "plan_recompute": plans["recompute"], "plan_swap": plans["swap"]}
        print(json.dumps(res))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

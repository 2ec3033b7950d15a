#!/usr/bin/python3
"""Bytes moved per training step when the parameters exceed the budget (issue 17).

usage: check_traffic.py HPDLF_EXEC WORKDIR

With the update run as soon as its gradient is there, a step reads each
weight for the forward and the backward and the optimizer state once, and
writes the updated weight and state once; gradients need never reach the
disk.  Per step the spill tier may move at most

    Adam  7 P,  SGD with momentum  5 P,  plain SGD  3 P

(P the parameter bytes) plus the activations: every forward activation and
its gradient written out once and read back once, 2 A.  An MLP of 7 Gemms
1024 wide (25 MiB of parameters) trains at a budget of 16 MiB; the bytes
each steady step (after the first) read and wrote, from --log-json's tier
counters, must stay within the bound, and the losses must equal the in-core
run's bit for bit; at the end the spill tier holds at most the state
(3 P, 2 P, P: the weights and their moments, once) plus 2 A, and --plan's predicted tier footprint is that too.
Within a step too: the state's previous version is freed after its last
reader, so the most the tiers ever held at once (--stats-json
tier_peak_bytes, the store's placement peak) is at least the state and
at most the state plus 2 A, and within --plan's predicted footprint (the
plan's order walked) plus one weight (the task net may write a new
version back before a release the plan puts first).  With Adam, a spill
tier of just that size (--tier nvme=FILE:SIZE) trains the same losses (at
the end-of-step release it needed 5.8 P).  Written with
onnx.helper and seeded numpy into WORKDIR (removed when everything passes).  Prints the figures; exits 1 on failure.
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

BATCH, WIDTH, LAYERS, NIN, NOUT = 64, 1024, 6, 1024, 10
failures = []
HOLDS_RE = re.compile(r"tier nvme0 .*holds ([0-9.]+) (B|KiB|MiB|GiB)")
FOOT_RE = re.compile(r"tier footprint +([0-9.]+) (B|KiB|MiB|GiB)")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
PLAN_IO_RE = re.compile(r"tier \S+ +read [^(]*\((\d+) bytes\).*written [^(]*\((\d+) bytes\)")
CHUNK_SLACK = 512 << 10  # the batch (256 KiB) staged through the tier


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)
    return ok


def write_model(path, rng):
    inits, nodes, prev = [], [], "x"
    dims = [NIN] + [WIDTH] * LAYERS + [NOUT]
    for i in range(len(dims) - 1):
        b = 1 / np.sqrt(dims[i])
        inits.append(numpy_helper.from_array(rng.uniform(-b, b, (dims[i], dims[i + 1])).astype(np.float32), "w%d" % i))
        inits.append(numpy_helper.from_array(np.zeros(dims[i + 1], np.float32), "b%d" % i))
        nodes.append(helper.make_node("Gemm", [prev, "w%d" % i, "b%d" % i], ["h%d" % i]))
        prev = "h%d" % i
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [prev], ["r%d" % i]))
            prev = "r%d" % i
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", NIN])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", NOUT])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    params = sum(dims[i] * dims[i + 1] + dims[i + 1] for i in range(len(dims) - 1)) * 4
    # forward activations (x, each Gemm's and Relu's output) and the
    # gradients of all but x
    fwd = BATCH * (NIN + LAYERS * 2 * WIDTH + NOUT) * 4
    return params, fwd + (fwd - BATCH * NIN * 4)


def steps(log):
    with open(log) as f:
        return [json.loads(l) for l in f if l.strip()]


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    exe, tmp = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rng = np.random.default_rng(23)
    model = os.path.join(tmp, "mlp.onnx")
    p, a = write_model(model, rng)
    np.save(os.path.join(tmp, "x.npy"), rng.standard_normal((4 * BATCH, NIN)).astype(np.float32))
    np.save(os.path.join(tmp, "y.npy"), rng.integers(0, NOUT, 4 * BATCH).astype(np.int64))
    budget = 16 << 20
    print("parameters %d B, activations and their gradients %d B (%.2f P), budget %d B" % (p, a, a / p, budget))
    check(p > budget, "the parameters (%d B) exceed the budget (%d B)" % (p, budget))
    for opt, extra, k, ks in (("adam", [], 7, 3), ("sgd", ["--momentum", "0.9"], 5, 2), ("sgd", [], 3, 1)):
        what = opt + (" momentum" if extra else "")
        args = [model, "--train", "--data", os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "y.npy"),
                "--loss", "cross-entropy", "--optimizer", opt, "--lr", "0.001", "--batch", str(BATCH),
                "--steps", "4", "--no-shuffle", "--threads", "2"] + extra
        logs, peak = {}, None
        for b in (0, budget):
            log = os.path.join(tmp, "log%d.jsonl" % b)
            stat = os.path.join(tmp, "stats%d.json" % b)
            r = subprocess.run([exe] + args + ["--log-json", log, "--stats-json", stat] +
                               (["--budget", str(b)] if b else []),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
            if not check(r.returncode == 0, "%s at %d B: exit %d %s" % (what, b, r.returncode, r.stderr[-300:])):
                break
            logs[b] = steps(log)
            held = HOLDS_RE.search(r.stderr)
            if b:
                with open(stat) as f:
                    peak = json.load(f).get("tier_peak_bytes")
                check(peak is not None and ks * p <= peak <= ks * p + 2 * a + (1 << 20),
                      "%s: the tiers held at most %s B at once: at least the state (%d P) and at most it plus 2 A "
                      "(and the batch) = %d B" % (what, peak, ks, ks * p + 2 * a + (1 << 20)))
                check(held and float(held.group(1)) * UNITS[held.group(2)] <= ks * p + 2 * a,
                      "%s: the spill tier holds %s at the end, at most the state (%d P) plus 2 A = %d B"
                      % (what, "%s %s" % held.groups() if held else "(not reported)", ks, ks * p + 2 * a))
        if len(logs) < 2:
            continue
        r = subprocess.run([exe] + args + ["--plan", "--budget", str(budget)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=900)
        fp = FOOT_RE.search(r.stdout)
        io = PLAN_IO_RE.search(r.stdout)
        plan_rd, plan_wr = (int(io.group(1)), int(io.group(2))) if io else (None, None)
        if check(r.returncode == 0 and fp, "%s --plan prints the tier footprint: %s" % (what, fp and fp.group(0))):
            foot = float(fp.group(1)) * UNITS[fp.group(2)]
            check(ks * p <= foot <= ks * p + 2 * a + (1 << 20),
                  "%s --plan: tier footprint %d B is the state (%d P) plus at most 2 A (and the batch)"
                  % (what, foot, ks))
            check(peak is not None and peak <= foot + WIDTH * WIDTH * 4,
                  "%s: the measured tier peak %s B is within --plan's footprint %d B plus one weight (%d B)"
                  % (what, peak, foot, WIDTH * WIDTH * 4))
            if opt == "adam":
                size = (int(foot) + WIDTH * WIDTH * 4 + (2 << 20)) >> 20  # MiB, and a header's room
                log = os.path.join(tmp, "tier.jsonl")
                r = subprocess.run([exe] + args + ["--log-json", log, "--budget", str(budget), "--tier",
                                                   "nvme=%s:%dM" % (os.path.join(tmp, "small.spill"), size)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
                check(r.returncode == 0 and [x["loss"] for x in steps(log)] == [x["loss"] for x in logs[0]],
                      "%s: a spill tier of %d MiB (%.2f P) trains the in-core losses: exit %d %s"
                      % (what, size, (size << 20) / p, r.returncode, r.stderr[-300:]))
        check([s["loss"] for s in logs[budget]] == [s["loss"] for s in logs[0]],
              "%s: the losses out of core are bitwise the in-core ones" % what)
        bound = k * p + 2 * a
        # the first step writes the weights below once and then the step's
        # state, never the optimizer state's initial zeros (a chunk never
        # written reads as zeros)
        w0 = logs[budget][0]["tiers"]["nvme0"]["bytes_written"]
        check(w0 <= (ks + 1) * p + 2 * a + CHUNK_SLACK, "%s step %d: wrote %.2f P <= the weights and the state (%d P) "
              "+ 2 A" % (what, logs[budget][0]["step"], w0 / p, ks + 1))
        # schema 1 logs cumulative tier counters: a step's traffic is the growth
        for prev, s in zip(logs[budget], logs[budget][1:]):
            t, t0 = s["tiers"]["nvme0"], prev["tiers"]["nvme0"]
            rd = t["bytes_read"] - t0["bytes_read"]
            wr = t["bytes_written"] - t0["bytes_written"]
            moved = rd + wr
            check(0 < moved <= bound, "%s step %d: read %.2f P, wrote %.2f P, moved %.2f P <= %d P + 2 A = %.2f P"
                  % (what, s["step"], rd / p, wr / p, moved / p, k, bound / p))
            # the runtime moves what the plan says (state values rotate
            # between steps as the plan models it), within the slack of
            # the data batch staged through the tier
            check(plan_rd is not None and rd <= plan_rd + CHUNK_SLACK and wr <= plan_wr + CHUNK_SLACK,
                  "%s step %d: read %d B, wrote %d B, within --plan's %s and %s B (+%d)"
                  % (what, s["step"], rd, wr, plan_rd, plan_wr, CHUNK_SLACK))
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

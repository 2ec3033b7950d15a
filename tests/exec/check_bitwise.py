#!/usr/bin/python3
"""Out-of-core outputs must be bitwise identical to in-core ones (issue 4).

usage: check_bitwise.py HPDLF_EXEC WORKDIR [--models a,b,...] [--fractions 0.9,0.5,...] [--keep]

Writes small models (onnx.helper, seeded numpy) and their inputs into WORKDIR
(emptied first; removed when everything passes unless --keep), then for every
model:
  * runs hpdlf-exec in core with --threads 1 and 2 (the references; the
    2-thread run twice, it must repeat bit for bit), reading the in-core
    tensor peak from --stats-json;
  * control: --no-split at the smallest budget that allows it (out of core,
    nothing split);
  * --budget 1 must exit 2 with one line on stderr saying "the smallest
    budget that works is N bytes" (as documented), giving N, the same N
    with --plan;
  * runs at every fraction of the peak (a fraction below N must be refused
    the same way, naming the same N, and is then covered by the run at N)
    and at N, with --threads 1 and 2; --plan at each budget counts the
    kernels, more than in core meaning operators were split (stats-json's
    partitioned_weights counts weights cut into blocks: "+Nw");
  * compares every output, byte for byte, with the in-core output of the
    same thread count.
Threads 1 against 2 is reported (in core and at each budget) but is not
required to agree.  Prints a table; exits 1 on any mismatch or failed run.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object
import onnx
from onnx import TensorProto, helper, numpy_helper

MIN_RE = re.compile(r"the smallest budget that works is (\d+) bytes")
THREADS = (1, 2)
FRACTIONS = (0.9, 0.5, 0.25)

# ---- models ----


class Builder:
    """A graph under construction: seeded initializers, nodes, one input."""

    def __init__(self, name, seed):
        self.name, self.rng = name, np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def tmp(self, what):
        self.n += 1
        return "%s%d" % (what, self.n)

    def param(self, shape, bound):
        name = self.tmp("p")
        a = self.rng.uniform(-bound, bound, shape).astype(np.float32)
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def op(self, op_type, inputs, **attrs):
        y = self.tmp(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [y], **attrs))
        return y

    def conv(self, x, cin, cout, k, nsp, stride=1, pad=None):
        pad = k // 2 if pad is None else pad
        w = self.param((cout, cin) + (k,) * nsp, 1.0 / np.sqrt(cin * k ** nsp))
        b = self.param((cout,), 0.1)
        return self.op("Conv", [x, w, b], kernel_shape=[k] * nsp, strides=[stride] * nsp, pads=[pad] * 2 * nsp)

    def up(self, x, cin, cout, nsp):
        w = self.param((cin, cout) + (2,) * nsp, 1.0 / np.sqrt(cin))
        b = self.param((cout,), 0.1)
        return self.op("ConvTranspose", [x, w, b], kernel_shape=[2] * nsp, strides=[2] * nsp)

    def bn(self, x, c):
        scale = (1 + 0.2 * self.rng.standard_normal(c)).astype(np.float32)
        mean = (0.1 * self.rng.standard_normal(c)).astype(np.float32)
        var = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
        names = []
        for a in (scale, self.rng.uniform(-0.1, 0.1, c).astype(np.float32), mean, var):
            names.append(self.tmp("bn"))
            self.inits.append(numpy_helper.from_array(a, names[-1]))
        return self.op("BatchNormalization", [x] + names, epsilon=1e-5)

    def pool(self, kind, x, k, nsp, stride=None, pad=0):
        return self.op(kind, [x], kernel_shape=[k] * nsp, strides=[stride or k] * nsp, pads=[pad] * 2 * nsp)

    def save(self, folder, xshape, yshape):
        self.nodes[-1].output[0] = "y"
        g = helper.make_graph(self.nodes, self.name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, yshape)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        onnx.checker.check_model(m)
        path = os.path.join(folder, self.name + ".onnx")
        onnx.save(m, path)
        x = self.rng.standard_normal(xshape).astype(np.float32)
        np.save(os.path.join(folder, self.name + "_x.npy"), x)
        return path


def unet3(name, seed, xshape, c):
    """Conv 3x3x3 / Relu / MaxPool 2 / Conv / ConvTranspose k=s=2 / channel
    Concat skip / Conv 1x1 / Softmax over channels."""
    b = Builder(name, seed)
    n, cin, d, h, w = xshape
    r1 = b.op("Relu", [b.conv("x", cin, c, 3, 3)])
    p = b.pool("MaxPool", r1, 2, 3)
    r2 = b.op("Relu", [b.conv(p, c, 2 * c, 3, 3)])
    u = b.up(r2, 2 * c, c, 3)
    cat = b.op("Concat", [u, r1], axis=1)
    r3 = b.op("Relu", [b.conv(cat, 2 * c, c, 3, 3)])
    head = b.conv(r3, c, 4, 1, 3)
    b.op("Softmax", [head], axis=1)
    return b, [n, 4, d, h, w]


def big2d(name, seed, xshape):
    """Batch 1, large image (split along H): Conv 3x3 / BatchNormalization /
    Relu / Conv 3x3 stride 2 (im2col) / Sigmoid / AveragePool 2 / Conv 1x1 /
    Tanh / Add (residual)."""
    b = Builder(name, seed)
    n, cin, h, w = xshape
    r = b.op("Relu", [b.bn(b.conv("x", cin, 8, 3, 2), 8)])
    s = b.op("Sigmoid", [b.conv(r, 8, 16, 3, 2, stride=2, pad=1)])
    p = b.pool("AveragePool", s, 2, 2)
    t = b.op("Tanh", [b.conv(p, 16, 16, 1, 2)])
    b.op("Add", [t, p])
    return b, [n, 16, h // 4, w // 4]


def onein(name, seed, xshape):
    """A Conv with 1 input channel (5x5), Tanh, MaxPool, Conv 3x3 and a
    1-channel Conv head plus Sigmoid."""
    b = Builder(name, seed)
    n, _, h, w = xshape
    t = b.op("Tanh", [b.conv("x", 1, 8, 5, 2)])
    p = b.pool("MaxPool", t, 2, 2)
    r = b.op("Relu", [b.conv(p, 8, 8, 3, 2)])
    b.op("Sigmoid", [b.conv(r, 8, 1, 3, 2)])
    return b, [n, 1, h // 2, w // 2]


def batch2d(name, seed, xshape):
    """Batch 8, small planes (split along the batch): Conv 3x3 /
    BatchNormalization / Relu / MaxPool / Conv 3x3 stride 2 / Sigmoid / Conv
    1x1 / AveragePool 3 pad 1 / Tanh / Add."""
    b = Builder(name, seed)
    n, cin, h, w = xshape
    r = b.op("Relu", [b.bn(b.conv("x", cin, 16, 3, 2), 16)])
    p = b.pool("MaxPool", r, 2, 2)
    s = b.op("Sigmoid", [b.conv(p, 16, 16, 3, 2, stride=2, pad=1)])
    c = b.conv(s, 16, 16, 1, 2)
    a = b.op("Tanh", [b.pool("AveragePool", c, 3, 2, stride=1, pad=1)])
    b.op("Add", [a, s])
    oh = (h // 2 + 1) // 2
    return b, [n, 16, oh, (w // 2 + 1) // 2]


MODELS = {  # name: (builder, seed, input shape, extra arguments)
    "unet3_big": (unet3, 11, [1, 2, 8, 32, 32], (8,)),      # 32x32 planes: rows of a plane per tile
    "unet3_small": (unet3, 12, [1, 2, 24, 8, 8], (12,)),    # 8x8 planes: several planes per tile
    "big2d": (big2d, 13, [1, 8, 192, 192], ()),             # batch 1: split along H
    "onein": (onein, 14, [1, 1, 160, 160], ()),             # 1 input channel
    "batch16": (batch2d, 15, [8, 8, 16, 16], ()),           # batch 8: split along the batch
    "batch12": (batch2d, 16, [8, 4, 12, 12], ()),
}


def make_models(folder, only):
    paths = {}
    for name, (fn, seed, xshape, extra) in MODELS.items():
        if not only or name in only:
            b, yshape = fn(name, seed, xshape, *extra)
            paths[name] = b.save(folder, xshape, yshape)
    return paths


# ---- runs ----


def run(exe, args, timeout=300):
    t = time.monotonic()
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t


def load_outputs(d):
    return {f[:-4]: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".npy")}


def compare(ref, got):
    """(equal, max |diff|, elements whose bits differ, note)"""
    if sorted(ref) != sorted(got):
        return False, float("nan"), -1, "outputs %s, expected %s" % (sorted(got), sorted(ref))
    eq, mx, nd = True, 0.0, 0
    for k in ref:
        a, b = ref[k], got[k]
        if a.dtype != b.dtype or a.shape != b.shape:
            return False, float("nan"), -1, "%s: %s %s, expected %s %s" % (k, b.dtype, b.shape, a.dtype, a.shape)
        if a.tobytes() == b.tobytes():
            continue
        eq = False
        bits = a.reshape(-1).view(np.uint8).reshape(a.size, -1) != b.reshape(-1).view(np.uint8).reshape(b.size, -1)
        nd += int(np.count_nonzero(bits.any(axis=1)))
        with np.errstate(invalid="ignore"):
            mx = max(mx, float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return eq, mx, nd, ""


class Checker:
    def __init__(self, exe, work):
        self.exe, self.work = exe, work
        self.rows, self.failures = [], []

    def plan_kernels(self, model, budget, extra=()):
        args = [model, "--plan"] + (["--budget", str(budget)] if budget else []) + list(extra)
        rc, out, err, _ = run(self.exe, args)
        m = re.search(r": (\d+) kernels", out + err)
        return int(m.group(1)) if rc == 0 and m else -rc if rc else None

    def exec_once(self, name, model, x, budget, threads, extra=(), rep=0):
        """(outputs, stats) of one run, or (None, why)."""
        tag = "%s_b%d_t%d%s_%d" % (name, budget, threads, "".join(extra), rep)
        d = os.path.join(self.work, tag)
        os.makedirs(d, exist_ok=True)
        stats = os.path.join(self.work, tag + ".json")
        args = [model, "--input", "x=" + x, "--threads", str(threads), "--output-dir", d, "--stats-json", stats]
        if budget:
            args += ["--budget", str(budget)]
        rc, _, err, secs = run(self.exe, args + list(extra))
        if rc != 0:
            return None, "exit %d: %s" % (rc, err.strip().splitlines()[-1] if err.strip() else "")
        with open(stats) as f:
            st = json.load(f)
        st["secs"] = secs
        return (load_outputs(d), st), None

    def probe_min(self, model, x, budget, extra=()):
        """A run under a budget below the minimum: (N or None, problem)."""
        rc, _, err, _ = run(self.exe, [model, "--input", "x=" + x, "--budget", str(budget)] + list(extra))
        m = MIN_RE.search(err)
        lines = [l for l in err.splitlines() if l.strip()]
        if rc != 2 or not m or len(lines) != 1:
            return None, "--budget %d%s: exit %d, stderr %r (expected exit 2 and one line with %r)" % (
                budget, "".join(" " + e for e in extra), rc, err.strip()[-400:], MIN_RE.pattern)
        return int(m.group(1)), None

    def fail(self, what):
        self.failures.append(what)

    def in_core(self, name, model, x):
        """The references; the 2-thread one run twice (it must repeat bit for bit)."""
        ref = {}
        for t in THREADS:
            for rep in range(2 if t > 1 else 1):
                r, why = self.exec_once(name, model, x, 0, t, rep=rep)
                if why:
                    self.fail("%s in core threads=%d: %s" % (name, t, why))
                    return None
                if rep == 0:
                    ref[t] = r
                    continue
                eq, mx, nd, note = compare(ref[t][0], r[0])
                self.rows.append((name, "in core", 0, t, "", "rerun", eq, mx, nd, r[1]["secs"]))
                if not eq:
                    self.fail("%s in core threads=%d: a second run differs (%d elements) %s" % (name, t, nd, note))
        eq, mx, nd, _ = compare(ref[1][0], ref[2][0])
        self.rows.append((name, "in core", ref[1][1]["tensor_peak_bytes"], "-", "", "t1 vs t2 (info)", eq, mx, nd, 0))
        return ref

    def check_model(self, name, model, x, fractions):
        ref = self.in_core(name, model, x)
        if not ref:
            return
        peak = ref[1][1]["tensor_peak_bytes"]
        k0 = self.plan_kernels(model, 0)
        # control: out of core without splitting, at the smallest budget that allows it
        nmin_ns, why = self.probe_min(model, x, 1, ["--no-split"])
        if why:
            self.fail("%s: %s" % (name, why))
        else:
            self.check_budget(name, model, x, ref, k0, "nosplit", nmin_ns, ["--no-split"])
        nmin, why = self.probe_min(model, x, 1)
        if why:
            self.fail("%s: %s" % (name, why))
            return
        nplan, why = self.probe_min(model, x, 1, ["--plan"])
        if nplan != nmin:
            self.fail("%s --budget 1: a run says the smallest budget is %d bytes, --plan says %s" % (
                name, nmin, nplan if nplan else why))
        done = set()
        for f in fractions:
            b = int(peak * f)
            if b >= nmin:
                self.check_budget(name, model, x, ref, k0, "%.2f" % f, b)
                done.add(b)
                continue
            # the documented refusal; this fraction is covered by the run at nmin
            n2, why = self.probe_min(model, x, b)
            if why or n2 != nmin:
                self.fail("%s at %.2f of the peak: %s" % (name, f, why or "smallest budget %d, not %d" % (n2, nmin)))
            self.rows.append((name, "%.2f" % f, b, "-", "", "exit 2, min %d" % (n2 or 0), None, 0, 0, 0))
        if nmin not in done:
            self.check_budget(name, model, x, ref, k0, "min", nmin)

    def check_budget(self, name, model, x, ref, k0, label, budget, extra=()):
        k = self.plan_kernels(model, budget, extra)
        split = "?" if k0 is None or k is None else "plan exit %d" % -k if k < 0 else "%d->%d" % (k0, k) if k != k0 else "no"
        outs = {}
        for t in THREADS:
            r, why = self.exec_once(name, model, x, budget, t, extra)
            if why:
                self.fail("%s --budget %d threads=%d: %s" % (name, budget, t, why))
                self.rows.append((name, label, budget, t, split, "run failed", False, 0, 0, 0))
                continue
            outs[t] = r[0]
            wsplit = r[1].get("partitioned_weights", 0)
            eq, mx, nd, note = compare(ref[t][0], r[0])
            self.rows.append((name, label, budget, t, split + (" +%dw" % wsplit if wsplit else ""),
                              "vs in core t%d" % t, eq, mx, nd, r[1]["secs"]))
            if not eq:
                self.fail("%s --budget %d%s threads=%d (split %s): %s%d elements differ from in core, "
                          "max |diff| %.3g" % (name, budget, "".join(" " + e for e in extra), t, split,
                                               note + "; " if note else "", nd, mx))
        if len(outs) == 2:
            eq, mx, nd, _ = compare(outs[1], outs[2])
            self.rows.append((name, label, budget, "-", "", "t1 vs t2 (info)", eq, mx, nd, 0))

    def table(self, header):
        if header:
            print("%-12s %-7s %10s %3s %-12s %-18s %-5s %10s %8s %6s" % (
                "model", "budget", "bytes", "thr", "split", "compared", "equal", "max|diff|", "ndiff", "secs"))
        for name, label, b, t, split, what, eq, mx, nd, secs in self.rows:
            e = "-" if eq is None else ("yes" if eq else "NO")
            print("%-12s %-7s %10s %3s %-12s %-18s %-5s %10.3g %8d %6.2f" % (
                name, label, b or "", t, split, what, e, mx, nd, secs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("work")
    ap.add_argument("--models", default="", help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS))
    ap.add_argument("--jobs", type=int, default=2, help="models checked at once")
    ap.add_argument("--keep", action="store_true", help="keep WORKDIR's outputs")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    os.environ.setdefault("TMPDIR", a.work)
    only = set(m for m in a.models.split(",") if m)
    fractions = [float(f) for f in a.fractions.split(",") if f]
    t0 = time.monotonic()
    paths = make_models(a.work, only)
    checkers = {name: Checker(a.exe, a.work) for name in paths}

    def one(name):
        checkers[name].check_model(name, paths[name], os.path.join(a.work, name + "_x.npy"), fractions)

    # hpdlf-exec spends most of a small run starting up: two at once halve the wall time
    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
        list(pool.map(one, paths))
    failures = [f for c in checkers.values() for f in c.failures]
    for i, c in enumerate(checkers.values()):
        c.table(i == 0)
    print()
    for f in failures:
        print("FAIL " + f)
    print("%d failure(s), %d model(s), %.1f s" % (len(failures), len(paths), time.monotonic() - t0))
    if not failures and not a.keep:
        shutil.rmtree(a.work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

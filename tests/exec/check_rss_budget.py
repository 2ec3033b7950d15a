#!/usr/bin/python3
"""From 64 MiB on, --budget bounds the peak RSS of the whole process (issue 17).

usage: check_rss_budget.py HPDLF_EXEC WORKDIR

Writes its models with onnx.helper and seeded numpy into WORKDIR (emptied
first, removed when everything passes), then:
  * inference: an MLP of 9 Gemms 1792 wide (98 MiB of weights) in core and
    at 64 and 96 MiB: the peak RSS each run records (--stats-json
    peak_rss_bytes, getrusage's ru_maxrss) is within the budget, while the
    in-core run's exceeds 96 MiB (so the budget is what held it; the figure
    is VmHWM, which execve starts afresh, unlike ru_maxrss); outputs
    bitwise the in-core ones;
  * inference of MatMul(x, Transpose(W)) with a 64 MiB W (how torch
    exports Linear layers on 3-D activations without constant folding):
    hpdlf computes the transpose once; under a budget it goes to a file
    (exec/fuse_const.c), not to memory beside the budget: peak RSS within
    64 and 96 MiB, outputs bitwise the in-core ones, and the smallest
    budget --plan names counts the transpose folded as the run does;
  * inference of 6 Conv 3x3 512->512 + BatchNormalization + Relu (54 MiB
    of weights): the BatchNorms are folded into the Convs' weights, under
    a budget into a file too (exec/fuse.c), not into memory beside it:
    peak RSS within 64 and 96 MiB, outputs bitwise the in-core ones;
  * training: an MLP of 7 Gemms 1024 wide with Adam (weights, gradients and
    moments: a tensor peak of about 150 MiB in core) at 64 and 96 MiB: the
    peak RSS is within the budget, the losses those of the in-core run
    (1e-5);
  * training an EfficientNet-like net of 48 MBConv blocks (1x1 expand,
    depthwise 3x3, squeeze-excite, SiLU, BatchNorm; about 900 nodes, 4.6
    MiB of weights) at 64 and 80 MiB: peak RSS within the budget.  Building
    and planning its training step frees more heap than the run keeps; it
    peaked at 112% and 107% of those budgets while glibc held those pages
    (exec/session.c trims them before the store's pool is touched).  And
    at 64 MiB over a pmem pool emulated on /dev/shm, whose pages touched
    through the mapping count in the resident set (store/tier_pmem.c
    unmaps them after each transfer; it peaked at 137% before).  The pool
    is 1G: how much of the backward's stash the plan swaps rather than
    recomputes follows the measured speeds (196 to 759 MiB of the ~770 MiB
    stash seen with caches measured under load); a 512M pool was refused
    now and then before the recomputation choice weighed the tier's room
    (exec/remat.c hp_remat_plan_room), and 1G keeps this test about RSS;
  * the smallest budget --plan names: the same at two given budgets; a run
    at it works, one byte less exits 2 naming it.  Once where it is above
    64 MiB (one MatMul with a 64 MiB weight, --no-split: the process's
    fixed overhead is part of it) and once below (the training MLP, where
    the budget bounds tensors).
  * --plan's predicted peak RSS is printed and within the budget.
Prints a table of the figures; exits 1 on any failure.
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

MIB = 1 << 20
MIN_RE = re.compile(r"the smallest budget that works is (\d+) bytes")
PLAN_MIN_RE = re.compile(r"smallest budget .* = (\d+) bytes")
PLAN_RSS_RE = re.compile(r"peak RSS \(predicted\) +([0-9.]+) (KiB|MiB|GiB|B)")
failures = []


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)
    return ok


def run(exe, args):
    p = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    return p.returncode, p.stdout, p.stderr


def mlp(path, width, layers, nin, nout, rng):
    inits, nodes, prev = [], [], "x"
    dims = [nin] + [width] * layers + [nout]
    for i in range(len(dims) - 1):
        b = 1 / np.sqrt(dims[i])
        inits.append(numpy_helper.from_array(rng.uniform(-b, b, (dims[i], dims[i + 1])).astype(np.float32), "w%d" % i))
        inits.append(numpy_helper.from_array(np.zeros(dims[i + 1], np.float32), "b%d" % i))
        nodes.append(helper.make_node("Gemm", [prev, "w%d" % i, "b%d" % i], ["h%d" % i]))
        prev = "h%d" % i
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [prev], ["r%d" % i]))
            prev = "r%d" % i
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", nin])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", nout])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return prev


def matmul(path, rng):
    w = rng.uniform(-0.03, 0.03, (1024, 16384)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16384])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def tmatmul(path, rng):
    w = rng.uniform(-0.03, 0.03, (8192, 2048)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
                           helper.make_node("MatMul", ["x", "wt"], ["y"])], "tmm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 2048])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 8192])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def bnconv(path, rng):
    inits, nodes, prev = [], [], "x"
    for i in range(6):
        inits += [numpy_helper.from_array(rng.uniform(-0.02, 0.02, (512, 512, 3, 3)).astype(np.float32), "w%d" % i),
                  numpy_helper.from_array(rng.uniform(0.5, 1.5, 512).astype(np.float32), "s%d" % i),
                  numpy_helper.from_array(rng.uniform(-0.1, 0.1, 512).astype(np.float32), "b%d" % i),
                  numpy_helper.from_array(rng.uniform(-0.1, 0.1, 512).astype(np.float32), "m%d" % i),
                  numpy_helper.from_array(rng.uniform(0.5, 2.0, 512).astype(np.float32), "v%d" % i)]
        nodes += [helper.make_node("Conv", [prev, "w%d" % i], ["c%d" % i], pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", ["c%d" % i, "s%d" % i, "b%d" % i, "m%d" % i, "v%d" % i],
                                   ["n%d" % i]),
                  helper.make_node("Relu", ["n%d" % i], ["r%d" % i])]
        prev = "r%d" % i
    g = helper.make_graph(nodes, "bnconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512, 4, 4])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 512, 4, 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return prev


def mbconv(path, blocks, c, hw, rng):
    """EfficientNet's block, 48 times: many small nodes and tensors."""
    inits, nodes = [], []

    def t(a, name):
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return name

    def node(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], **kw))
        return out

    def bn(src, ch, tag):
        return node("BatchNormalization", [src, t(np.ones(ch), "bg" + tag), t(np.zeros(ch), "bb" + tag),
                                           t(np.zeros(ch), "bm" + tag), t(np.ones(ch), "bv" + tag)], "bn" + tag)

    def silu(src, tag):
        return node("Mul", [src, node("Sigmoid", [src], "sg" + tag)], "si" + tag)

    prev = node("Conv", ["x", t(rng.normal(0, 0.3, (c, 3, 3, 3)), "w_in")], "h_in", pads=[1, 1, 1, 1])
    for i in range(blocks):
        e = 4 * c
        a = silu(bn(node("Conv", [prev, t(rng.normal(0, (2 / c) ** .5, (e, c, 1, 1)), "we%d" % i)], "ex%d" % i), e,
                    "e%d" % i), "e%d" % i)
        a = silu(bn(node("Conv", [a, t(rng.normal(0, 0.3, (e, 1, 3, 3)), "wd%d" % i)], "dw%d" % i, pads=[1, 1, 1, 1],
                         group=e), e, "d%d" % i), "d%d" % i)
        s = silu(node("Conv", [node("GlobalAveragePool", [a], "gp%d" % i), t(rng.normal(0, 0.1, (8, e, 1, 1)),
                                                                              "ws1%d" % i),
                               t(np.zeros(8), "bs1%d" % i)], "s1%d" % i), "s%d" % i)
        s = node("Sigmoid", [node("Conv", [s, t(rng.normal(0, 0.1, (e, 8, 1, 1)), "ws2%d" % i),
                                           t(np.zeros(e), "bs2%d" % i)], "s2%d" % i)], "ss%d" % i)
        p = node("Conv", [node("Mul", [a, s], "se%d" % i), t(rng.normal(0, (1 / e) ** .5, (c, e, 1, 1)), "wp%d" % i)],
                 "pj%d" % i)
        prev = node("Add", [bn(p, c, "p%d" % i), prev], "o%d" % i)
    y = node("MatMul", [node("Flatten", [node("GlobalAveragePool", [prev], "gp")], "fl"),
                        t(rng.normal(0, 0.1, (c, 10)), "fw")], "y")
    g = helper.make_graph(nodes, "mbconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, hw, hw])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["batch", 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def mbconv_checks(exe, tmp):
    rows = []
    pool = "/dev/shm/hpdlf-rss-budget-%d.pool" % os.getpid()
    for budget, tier in ((64 * MIB, None), (80 * MIB, None), (64 * MIB, pool)):
        st = os.path.join(tmp, "s.json")
        what = "MBConv training at %d MiB%s" % (budget // MIB, " over a pmem pool on /dev/shm" if tier else "")
        rc, _, err = run(exe, [os.path.join(tmp, "mb.onnx"), "--train", "--data", os.path.join(tmp, "xmb.npy"),
                               "--labels", os.path.join(tmp, "ymb.npy"), "--batch", "4", "--steps", "2", "--threads",
                               "2", "--quiet", "--stats-json", st, "--budget", str(budget)] +
                         (["--tier", "pmem=%s:1G" % tier] if tier else []))
        if tier and os.path.exists(tier):
            os.unlink(tier)
        if not check(rc == 0, "%s: exit %d %s" % (what, rc, err.strip()[-300:])):
            continue
        s = stats_of(st)
        rss = s["peak_rss_bytes"]
        rows.append(("train mbconv" + (" pm" if tier else ""), budget, rss, s["tensor_peak_bytes"]))
        check(rss <= budget, "%s: peak RSS %d B (%.1f MiB) within the budget" % (what, rss, rss / MIB))
        blas_check(s, what)
        if tier:
            moved = sum(t.get("bytes_written", 0) for t in s.get("tiers", {}).values())
            check(moved > 0, "%s: the pool was used (%d bytes written)" % (what, moved))
    return rows


def stats_of(path):
    with open(path) as f:
        return json.load(f)


def blas_check(s, what):
    """The fixed overhead reserved OpenBLAS's buffers by a bound per core
    (exec/blas_bound.c): no sgemm call of the run touched more of a buffer
    (kernels/blas.c's model, tests/kernels/test_blas.c holds it to the
    resident pages), and none ran threaded (one buffer per calling core)."""
    check(s["blas_call_bytes_max"] <= s["blas_buffer_bound_bytes"] and s["blas_threaded_calls"] == 0,
          "%s: sgemm touched %d B of a buffer (bound %d B), %d threaded calls of %d"
          % (what, s["blas_call_bytes_max"], s["blas_buffer_bound_bytes"], s["blas_threaded_calls"], s["blas_calls"]))


def infer_checks(exe, tmp, out, model="infer.onnx", x="xi.npy", what="inference"):
    rows = []
    model, x = os.path.join(tmp, model), os.path.join(tmp, x)
    ref = None
    for budget in (0, 64 * MIB, 96 * MIB):
        st, y = os.path.join(tmp, "s.json"), os.path.join(tmp, "y%d.npy" % budget)
        args = [model, "--input", "x=" + x, "--iterations", "2", "--threads", "2", "--quiet", "--stats-json", st,
                "--output", "%s=%s" % (out, y)] + (["--budget", str(budget)] if budget else [])
        rc, _, err = run(exe, args)
        if not check(rc == 0, "%s at %d B: exit %d %s" % (what, budget, rc, err.strip()[-300:])):
            continue
        s = stats_of(st)
        rss = s["peak_rss_bytes"]
        rows.append((what[:12], budget, rss, s["tensor_peak_bytes"]))
        if budget == 0:
            ref = np.load(y)
            check(rss > 96 * MIB, "%s in core: peak RSS %d B exceeds 96 MiB (the budgets below bind)" % (what, rss))
            continue
        check(rss <= budget, "%s at %d MiB: peak RSS %d B (%.1f MiB) within the budget"
              % (what, budget // MIB, rss, rss / MIB))
        blas_check(s, "%s at %d MiB" % (what, budget // MIB))
        if ref is not None:
            check(np.array_equal(np.load(y), ref), "%s at %d MiB: outputs bitwise the in-core ones"
                  % (what, budget // MIB))
    return rows


def losses(path):
    with open(path) as f:
        return [json.loads(l)["loss"] for l in f if l.strip()]


def train_args(tmp):
    return [os.path.join(tmp, "train.onnx"), "--train", "--data", os.path.join(tmp, "x.npy"), "--labels",
            os.path.join(tmp, "y.npy"), "--loss", "cross-entropy", "--optimizer", "adam", "--lr", "0.001",
            "--batch", "64", "--no-shuffle", "--threads", "2", "--quiet"]


def train_checks(exe, tmp):
    rows = []
    ref = None
    for budget in (0, 64 * MIB, 96 * MIB):
        st, log = os.path.join(tmp, "s.json"), os.path.join(tmp, "log%d.jsonl" % budget)
        args = train_args(tmp) + ["--steps", "3", "--stats-json", st, "--log-json", log] + \
            (["--budget", str(budget)] if budget else [])
        rc, _, err = run(exe, args)
        if not check(rc == 0, "training at %d B: exit %d %s" % (budget, rc, err.strip()[-300:])):
            continue
        s = stats_of(st)
        rss = s["peak_rss_bytes"]
        rows.append(("train adam", budget, rss, s["tensor_peak_bytes"]))
        if budget == 0:
            ref = losses(log)
            check(rss > 96 * MIB, "training in core: peak RSS %d B exceeds 96 MiB (the budgets below bind)" % rss)
            continue
        check(rss <= budget, "training at %d MiB: peak RSS %d B (%.1f MiB) within the budget"
              % (budget // MIB, rss, rss / MIB))
        blas_check(s, "training at %d MiB" % (budget // MIB))
        if ref is not None:
            got = losses(log)
            check(len(got) == len(ref) and max(abs(a - b) for a, b in zip(got, ref)) <= 1e-5,
                  "training at %d MiB: losses %s, in core %s" % (budget // MIB, got, ref))
    return rows


def plan_figures(exe, args, budget):
    rc, out, err = run(exe, args + ["--plan", "--budget", str(budget)])
    m, r = PLAN_MIN_RE.search(out), PLAN_RSS_RE.search(out)
    if not check(rc == 0 and m and r, "--plan --budget %d: exit %d, smallest budget and predicted RSS printed %s"
                 % (budget, rc, err.strip()[-300:])):
        return None, None
    unit = {"B": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30}[r.group(2)]
    return int(m.group(1)), float(r.group(1)) * unit


def smallest_checks(exe, what, args, budgets, above):
    """The smallest budget is the same at both given budgets, runs, and one byte less is refused naming it."""
    mins = []
    for b in budgets:
        n, rss = plan_figures(exe, args, b)
        if n is None:
            return
        mins.append(n)
        # below 64 MiB the budget bounds tensors: the process stays under 64 MiB
        check(rss <= max(b, 64 * MIB), "%s --plan --budget %d: predicted peak RSS %d B within max(it, 64 MiB)"
              % (what, b, rss))
    if not check(mins[0] == mins[1], "%s: --plan names the smallest budget %d at --budget %d and %d at %d"
                 % (what, mins[0], budgets[0], mins[1], budgets[1])):
        return
    n = mins[0]
    check((n >= 64 * MIB) == above, "%s: the smallest budget %d B is %s 64 MiB" % (what, n, "above" if above else "below"))
    rc, _, err = run(exe, args + ["--budget", str(n)])
    check(rc == 0, "%s at its smallest budget %d B: exit %d %s" % (what, n, rc, err.strip()[-300:]))
    rc, _, err = run(exe, args + ["--budget", str(n - 1)])
    m = MIN_RE.search(err)
    check(rc == 2 and m and int(m.group(1)) == n and len(err.strip().splitlines()) == 1,
          "%s at one byte less (%d B): exit %d, one line naming %d: %r" % (what, n - 1, rc, n, err.strip()[-300:]))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    exe, tmp = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rng = np.random.default_rng(17)
    out = mlp(os.path.join(tmp, "infer.onnx"), 1792, 8, 1792, 10, rng)
    mlp(os.path.join(tmp, "train.onnx"), 1024, 6, 1024, 10, rng)
    matmul(os.path.join(tmp, "mm.onnx"), rng)
    tmatmul(os.path.join(tmp, "tmm.onnx"), rng)
    bn_out = bnconv(os.path.join(tmp, "bn.onnx"), rng)
    mbconv(os.path.join(tmp, "mb.onnx"), 48, 48, 24, rng)
    np.save(os.path.join(tmp, "xmb.npy"), rng.standard_normal((8, 3, 24, 24)).astype(np.float32))
    np.save(os.path.join(tmp, "ymb.npy"), rng.integers(0, 10, 8).astype(np.int64))
    np.save(os.path.join(tmp, "xb.npy"), rng.standard_normal((1, 512, 4, 4)).astype(np.float32))
    np.save(os.path.join(tmp, "xt.npy"), rng.standard_normal((2, 16, 2048)).astype(np.float32))
    np.save(os.path.join(tmp, "xi.npy"), rng.standard_normal((64, 1792)).astype(np.float32))
    np.save(os.path.join(tmp, "xm.npy"), rng.standard_normal((1, 1024)).astype(np.float32))
    np.save(os.path.join(tmp, "x.npy"), rng.standard_normal((256, 1024)).astype(np.float32))
    np.save(os.path.join(tmp, "y.npy"), rng.integers(0, 10, 256).astype(np.int64))
    rows = infer_checks(exe, tmp, out)
    rows += infer_checks(exe, tmp, "y", "tmm.onnx", "xt.npy", "transposed W")
    rows += infer_checks(exe, tmp, bn_out, "bn.onnx", "xb.npy", "Conv+BN")
    rows += train_checks(exe, tmp)
    rows += mbconv_checks(exe, tmp)
    smallest_checks(exe, "MatMul 64 MiB weight, --no-split",
                    [os.path.join(tmp, "mm.onnx"), "--input", "x=" + os.path.join(tmp, "xm.npy"), "--no-split",
                     "--quiet"], (1 << 30, 256 * MIB), True)
    smallest_checks(exe, "MatMul of a transposed 64 MiB weight",
                    [os.path.join(tmp, "tmm.onnx"), "--input", "x=" + os.path.join(tmp, "xt.npy"), "--quiet"],
                    (1 << 30, 32 * MIB), False)
    smallest_checks(exe, "MLP training, Adam", train_args(tmp) + ["--steps", "1"], (1 << 30, 16 * MIB), False)
    print("%-12s %12s %14s %14s" % ("run", "budget", "peak RSS", "tensor peak"))
    for what, b, rss, tp in rows:
        print("%-12s %12s %11.1f MiB %11.1f MiB" % (what, "in core" if not b else "%d MiB" % (b // MIB), rss / MIB,
                                                     tp / MIB))
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

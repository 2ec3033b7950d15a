#!/usr/bin/env python3
"""A batch of one cut into rows makes no zero halo gradients (issue 17).

Under a budget a batch of one is cut into bands of rows, and each band's
data gradient of a Conv is the whole kernel's rows for the input rows the
band owns (split_grad.c).  Its window is a Concat of its band and halo
rows of its neighbours, so autodiff splits that gradient again
(ConcatGrad), makes each halo piece a band-sized tensor (SliceGrad) and
adds it to the neighbour's gradient (GradSum).  When a band owns the rows
of its own input band, every halo piece is zero: split_grad_zero.c leaves
those pieces, their SliceGrads, their places in the GradSums and the
window's Pad and ConcatGrad out (the 3-D U-Net at a quarter of its peak
made 52 band-sized zero tensors a step and wrote 20 MiB of them below
DRAM).

Models: a chain of four 3x3 Convs with Relus at 1x3x96x96 (mse), written
here, and the 3-D U-Net of the out-of-core benchmark (tools/make_unet3d.py,
48^3 volumes from tools/make_volumes.py, cross-entropy, SGD as the
benchmark's row), the chain at 30% and 40% of its in-core tensor peak
(--stats-json tensor_peak_bytes), the U-Net at 25% (the benchmark's
21.8 MiB; at 50% it is not cut); the smallest budget the planner names
when that is more.  From --plan-dot's
schedule (the plan of one step):
  - the run is cut into row bands: a Conv of the forward runs as several
    band nodes, and exact band gradients ('.../exact/ConvGradData') exist;
  - no SliceGrad of a band's rows ('.../bandN/SliceM/SliceGrad') and no Pad
    remains; the only ConcatGrads left are those of the Concat that joins
    the output's bands and (U-Net) of the skip connections' channel
    Concats;
  - no GradSum remains in the chain (each band's gradient has one part);
  - no value named after a SliceGrad or a GradSum is written below DRAM.
Then 2 SGD steps: the exported weights are byte for byte the
in-core run's (a zero dropped that was not zero, or a piece given to the
wrong band, changes them).

usage: check_band_zero.py HPDLF_EXEC SOURCE_DIR WORKDIR
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

FAILS = []
STEP_RE = re.compile(r'label="(\d+): (\S+) +[0-9.]+ ms\\n([^"]+)"')
IO_RE = re.compile(r'write-back (\S+) \(')


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)
    return ok


def chain(d):
    """x [1,3,96,96] -> 4 x (Conv 3x3 pads 1, Relu but the last) -> y [1,2,96,96]."""
    rng = np.random.default_rng(11)
    chans = [3, 8, 8, 8, 2]
    nodes, inits, cur = [], [], "x"
    for i in range(4):
        w = (rng.standard_normal((chans[i + 1], chans[i], 3, 3)) * 0.3).astype(np.float32)
        b = (rng.standard_normal(chans[i + 1]) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, "w%d" % i), numpy_helper.from_array(b, "b%d" % i)]
        out = "y" if i == 3 else "a%d" % i
        nodes.append(helper.make_node("Conv", [cur, "w%d" % i, "b%d" % i], [out], name="c%d" % i,
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        if i < 3:
            nodes.append(helper.make_node("Relu", [out], ["r%d" % i], name="relu%d" % i))
            cur = "r%d" % i
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 96, 96])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 96, 96])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = os.path.join(d, "chain.onnx")
    onnx.save(m, path)
    np.save(os.path.join(d, "chain_x.npy"), rng.standard_normal((2, 3, 96, 96)).astype(np.float32))
    np.save(os.path.join(d, "chain_y.npy"), rng.standard_normal((2, 2, 96, 96)).astype(np.float32))
    return [path, "--data", os.path.join(d, "chain_x.npy"), "--labels", os.path.join(d, "chain_y.npy"),
            "--loss", "mse"]


def run(exe, args, work):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TMPDIR=work))
    return p.returncode, p.stdout + p.stderr


def plan(exe, args, budget, work, tag):
    dot = os.path.join(work, tag + ".dot")
    rc, out = run(exe, args + ["--budget", str(budget), "--plan", "--plan-dot", dot], work)
    if not check(rc == 0, "%s: --plan runs (%s)" % (tag, out.strip()[-200:])):
        return None, None
    with open(dot) as f:
        text = f.read()
    steps = sorted((int(m.group(1)), m.group(2), m.group(3)) for m in STEP_RE.finditer(text))
    return steps, IO_RE.findall(text)


def weights(path):
    return {i.name: numpy_helper.to_array(i).tobytes() for i in onnx.load(path).graph.initializer}


def check_plan(name, tag, steps, written, unet):
    ops = [s[1] for s in steps]
    names = [s[2] for s in steps]
    convs = {}
    for op, nm in zip(ops, names):
        if op == "Conv" and "#" not in nm:
            convs.setdefault(re.sub(r"/Conv\d+$", "", nm), []).append(nm)
    check(any(len(v) > 1 for v in convs.values()), "%s: a Conv runs as several bands (%s)"
          % (tag, {k: len(v) for k, v in sorted(convs.items())}))
    check(any("/exact/ConvGradData" in nm for nm in names),
          "%s: exact band gradients of the Convs are made" % tag)
    left = sorted(nm for op, nm in zip(ops, names) if op == "Pad" or (op == "SliceGrad" and "/band" in nm))
    check(not left, "%s: no SliceGrad of a band's rows, no Pad (%d: %s)" % (tag, len(left), left[:4]))
    cg = sorted(nm for op, nm in zip(ops, names) if op == "ConcatGrad")
    if unet:
        bad = [nm for nm in cg if not (nm.startswith("cat_") or nm.startswith("logits/"))]
        check(not bad, "%s: the only ConcatGrads left are of channel Concats and the logits (%s)" % (tag, bad[:4]))
    else:
        bad = [nm for nm in cg if not nm.startswith("y/")]
        check(not bad, "%s: the only ConcatGrad left is of the Concat that joins y's bands (%s)" % (tag, bad[:4]))
        gs = [nm for op, nm in zip(ops, names) if op == "GradSum"]
        check(not gs, "%s: no GradSum (%s)" % (tag, gs[:4]))
    bad = [w for w in written if ("SliceGrad" in w and "/band" in w) or "/GradSum" in w]
    check(not bad, "%s: no SliceGrad or GradSum output written below DRAM (%s)" % (tag, bad[:4]))


def budget_at(exe, a, want, work):
    """want, or the smallest budget the planner names when it refuses want."""
    rc, out = run(exe, a + ["--budget", str(want), "--plan"], work)
    m = re.search(r"smallest budget that works is (\d+) bytes", out)
    return int(m.group(1)) if rc == 2 and m else want


def one(exe, name, args, work, unet, fracs):
    common = ["--train", "--optimizer", "sgd", "--lr", "0.02", "--steps", "2", "--batch", "1", "--no-shuffle",
              "--quiet", "--threads", "2"]
    a = args + common
    ref, stats = os.path.join(work, name + "_in.onnx"), os.path.join(work, name + "_in.json")
    rc, out = run(exe, a + ["--export-onnx", ref, "--stats-json", stats], work)
    if not check(rc == 0, "%s in core: exit %d %s" % (name, rc, out.strip()[-300:])):
        return
    with open(stats) as f:
        peak = json.load(f)["tensor_peak_bytes"]
    want = weights(ref)
    for frac in fracs:
        budget = budget_at(exe, a, int(peak * frac), work)
        tag = "%s at %d B (%g of %d)" % (name, budget, frac, peak)
        steps, written = plan(exe, a, budget, work, "%s_%d" % (name, budget))
        if steps is None:
            continue
        check_plan(name, tag, steps, written, unet)
        got_path = os.path.join(work, "%s_%d.onnx" % (name, budget))
        rc, out = run(exe, a + ["--budget", str(budget), "--export-onnx", got_path], work)
        if not check(rc == 0, "%s: runs (exit %d %s)" % (tag, rc, out.strip()[-300:])):
            continue
        got = weights(got_path)
        differ = sorted(k for k in want if got.get(k) != want[k])
        check(want and not differ, "%s: %d exported tensors bitwise the in-core ones%s"
              % (tag, len(want), " (differ: %s)" % differ if differ else ""))


def unet3d(src, d):
    onnx_path, x, y = (os.path.join(d, n) for n in ("unet3d.onnx", "unet3d_x.npy", "unet3d_y.npy"))
    subprocess.run([sys.executable, os.path.join(src, "tools", "make_unet3d.py"), onnx_path], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, os.path.join(src, "tools", "make_volumes.py"), x, y, "--n", "2"], check=True,
                   stdout=subprocess.DEVNULL)
    return [onnx_path, "--data", x, "--labels", y, "--loss", "cross-entropy"]


def main():
    exe, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    one(exe, "chain", chain(work), work, False, (0.3, 0.4))
    one(exe, "unet3d", unet3d(src, work), work, True, (0.25,))
    shutil.rmtree(work, ignore_errors=True)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

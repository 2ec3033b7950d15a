#!/usr/bin/env python3
"""Generate ONNX's own backend node tests and convert them for the runner.

usage: gen_cases.py OUTDIR [STAMP]

Runs `onnx.backend.test.cmd_tools generate-data` (from Debian's python3-onnx)
into OUTDIR/raw, then writes for every node case OUTDIR/cases/NAME/ holding
model.onnx, the tensors of each test_data_set_N as .npy, and a manifest
(one line per tensor: "input|output SET NAME FILE", or "skip REASON"; plus
"outofscope REASON" for training-only and random operators).
"""
import os
import shutil
import sys

import numpy as np

# NumPy 1.24 removed these aliases; onnx 1.12's generators still use them.
for alias, typ in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if alias not in np.__dict__:
        setattr(np, alias, typ)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402


def generate(raw):
    from onnx.backend.test.cmd_tools import main
    argv = sys.argv
    sys.argv = ["generate-data", "generate-data", "-o", raw]
    try:
        main()
    finally:
        sys.argv = argv


# Operators whose outputs are random draws: no reference data can match them.
RANDOM_OPS = {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"}


def out_of_scope(model):
    """Why a case is outside what hpdlf runs (training-only operators,
    random draws), or None."""
    for n in model.graph.node:
        if n.domain == "ai.onnx.preview.training":
            return "training-only operator %s (ai.onnx.preview.training)" % n.op_type
        if n.domain in ("", "ai.onnx") and n.op_type in RANDOM_OPS:
            return "random operator %s: outputs are draws no reference can match" % n.op_type
    return None


def convert_case(src, dst):
    model = onnx.load(os.path.join(src, "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    in_names = [i.name for i in model.graph.input if i.name not in inits]
    out_names = [o.name for o in model.graph.output]
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "model.onnx"), os.path.join(dst, "model.onnx"))
    lines = []
    sets = sorted(d for d in os.listdir(src) if d.startswith("test_data_set_"))
    for s, dset in enumerate(sets):
        for kind, names in (("input", in_names), ("output", out_names)):
            for k, name in enumerate(names):
                pb = os.path.join(src, dset, "%s_%d.pb" % (kind, k))
                if not os.path.exists(pb):
                    continue
                t = onnx.TensorProto()
                with open(pb, "rb") as f:
                    try:
                        t.ParseFromString(f.read())
                        arr = numpy_helper.to_array(t)
                    except Exception as e:  # sequences, optionals, maps
                        return ["skip %s %d is not a tensor (%s)" % (kind, k, type(e).__name__)]
                if arr.dtype.kind in "OUS":
                    return ["skip %s %d has dtype %s" % (kind, k, arr.dtype)]
                fname = "%s_%d_%d.npy" % (kind, s, k)
                np.save(os.path.join(dst, fname), np.require(arr, requirements="C"))  # keeps 0-d arrays 0-d
                lines.append("%s %d %s %s" % (kind, s, name, fname))
    why = out_of_scope(model)
    if why:
        lines.append("outofscope " + why)
    return lines


def main():
    out = sys.argv[1]
    raw = os.path.join(out, "raw")
    if not os.path.isdir(os.path.join(raw, "node")):
        generate(raw)
    cases = os.path.join(out, "cases")
    node = os.path.join(raw, "node")
    n = 0
    for name in sorted(os.listdir(node)):
        dst = os.path.join(cases, name)
        try:
            lines = convert_case(os.path.join(node, name), dst)
        except Exception as e:
            os.makedirs(dst, exist_ok=True)
            lines = ["skip cannot convert (%s: %s)" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")]
        with open(os.path.join(dst, "manifest"), "w") as f:
            f.write("\n".join(lines) + "\n")
        n += 1
    stamp = sys.argv[2] if len(sys.argv) > 2 else os.path.join(out, "stamp")
    with open(stamp, "w") as f:
        f.write("%d\n" % n)
    print("generated %d cases in %s" % (n, cases))


if __name__ == "__main__":
    main()

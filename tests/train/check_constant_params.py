#!/usr/bin/env python3
"""Training a model whose weights are Constant nodes, and --freeze.

usage: check_constant_params.py HPDLF_EXEC

One small CNN (Conv, BatchNormalization, Relu, Flatten, MatMul + bias
Add) is written twice: weights and BatchNorm statistics as initializers,
and as Constant nodes (as Paddle2ONNX and tf2onnx write them, the conv
weight behind two Identity nodes).  Both must train to the same losses,
and report the same parameters; the Constant one exports a model whose
trained weights are initializers that equal the initializer run's.
--freeze keeps the matching parameters bit for bit (checked in the export)
while the others change; a pattern matching nothing, or --freeze without
--train, is status 2.

A GroupNorm written as exporters decompose it (Reshape, then
InstanceNormalization with Constant nodes of ones and zeros, Reshape back,
Mul and Add by the real weight and bias) is trained with only its weight
and bias: the ones and zeros stay constants, both as Paddle2ONNX would
write the model and as PyTorch does (producer "pytorch", whose Constant
nodes are never parameters: here also a Normalize-like Mul by a Constant
vector).  Where PyTorch is installed the losses must equal nn.GroupNorm's
(training the ones and zeros too parted from them at step 2).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(3)
FAILS = []


def weights():
    f = lambda *s: (RNG.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    return {"conv.w": f(4, 2, 3, 3), "conv.b": f(4), "bn.scale": 1 + f(4), "bn.bias": f(4),
            "bn.mean": f(4) * 0.1, "bn.var": 1 + np.abs(f(4)), "fc.w": f(4 * 6 * 6, 3), "fc/b:0": f(3)}


def build(w, as_constants):
    mk = helper.make_node
    conv_w = "conv.w"
    nodes = []
    if as_constants:
        nodes += [mk("Constant", [], [k], value=numpy_helper.from_array(v, k)) for k, v in w.items()]
        nodes += [mk("Identity", ["conv.w"], ["conv.w.id1"]), mk("Identity", ["conv.w.id1"], ["conv.w.id2"])]
        conv_w = "conv.w.id2"
    nodes += [mk("Conv", ["x", conv_w, "conv.b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
              mk("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["bn"]),
              mk("Relu", ["bn"], ["r"]), mk("Flatten", ["r"], ["f"]), mk("MatMul", ["f", "fc.w"], ["mm"]),
              mk("Add", ["mm", "fc/b:0"], ["logits"])]
    inits = [] if as_constants else [numpy_helper.from_array(v, k) for k, v in w.items()]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 6, 6])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def build_groupnorm(w, producer):
    """x [N, 4, 6, 6] (times a Constant vector for PyTorch) -> GroupNorm(2
    groups) as decomposed -> Relu -> Flatten -> MatMul + bias."""
    mk = helper.make_node
    c = lambda name, v: mk("Constant", [], [name], value=numpy_helper.from_array(np.asarray(v), name))  # noqa: E731
    nodes = [c("gn.shape1", np.array([0, 2, -1], np.int64)), c("gn.ones", np.ones(2, np.float32)),
             c("gn.zeros", np.zeros(2, np.float32)), c("gn.shape2", np.array([0, 4, 6, 6], np.int64))]
    src = "x"
    if producer == "pytorch":
        nodes += [c("norm.std", w["norm.std"]), mk("Mul", ["x", "norm.std"], ["xs"])]
        src = "xs"
    nodes += [mk("Reshape", [src, "gn.shape1"], ["g1"]),
              mk("InstanceNormalization", ["g1", "gn.ones", "gn.zeros"], ["g2"], epsilon=1e-5),
              mk("Reshape", ["g2", "gn.shape2"], ["g3"]), mk("Mul", ["g3", "gn.weight"], ["g4"]),
              mk("Add", ["g4", "gn.bias"], ["g5"]), mk("Relu", ["g5"], ["r"]), mk("Flatten", ["r"], ["f"]),
              mk("MatMul", ["f", "fc.w"], ["mm"]), mk("Add", ["mm", "fc.b"], ["logits"])]
    inits = [numpy_helper.from_array(w[k], k) for k in ("gn.weight", "gn.bias", "fc.w", "fc.b")]
    g = helper.make_graph(nodes, "gn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name=producer)


def torch_groupnorm_losses(w, x, y, with_std):
    """The same net in PyTorch (nn.GroupNorm), SGD as train() runs it; None
    without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    gn = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        gn.weight.copy_(torch.from_numpy(w["gn.weight"].reshape(4)))
        gn.bias.copy_(torch.from_numpy(w["gn.bias"].reshape(4)))
    fw = torch.nn.Parameter(torch.from_numpy(w["fc.w"].copy()))
    fb = torch.nn.Parameter(torch.from_numpy(w["fc.b"].copy()))
    std = torch.from_numpy(w["norm.std"])
    opt = torch.optim.SGD([gn.weight, gn.bias, fw, fb], lr=0.1, momentum=0.9)
    out = []
    for i in range(6):
        xb = torch.from_numpy(x[8 * i:8 * i + 8])
        if with_std:
            xb = xb * std
        logits = torch.relu(gn(xb)).flatten(1) @ fw + fb
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y[8 * i:8 * i + 8]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out


def check_groupnorm(exe, tmp, x, y):
    f = lambda *s: (RNG.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    w = {"gn.weight": 1 + f(4, 1, 1), "gn.bias": f(4, 1, 1), "fc.w": f(4 * 36, 3), "fc.b": f(3),
         "norm.std": (1 + np.abs(f(1, 4, 1, 1))).astype(np.float32)}
    for producer in ("PaddlePaddle", "pytorch"):
        path = os.path.join(tmp, "gn_%s.onnx" % producer)
        onnx.save(build_groupnorm(w, producer), path)
        losses, line, trained = train(exe, tmp, path, "gn_" + producer, ["--no-shuffle", "--loss", "cross-entropy"])
        if not losses:
            continue
        if "trained (4 tensors)" not in line:
            FAILS.append("GroupNorm (%s): summary '%s': want only its weight and bias and fc's trained" %
                         (producer, line.strip()))
            continue
        moved = [k for k in ("gn.ones", "gn.zeros", "norm.std") if k in trained and
                 not np.array_equal(trained[k], np.ones(2) if k == "gn.ones" else
                                    np.zeros(2) if k == "gn.zeros" else w[k])]
        if moved:
            FAILS.append("GroupNorm (%s): the export changed %s" % (producer, moved))
            continue
        ref = torch_groupnorm_losses(w, x, y, producer == "pytorch")
        if ref is None:
            print("ok   GroupNorm (%s): %s (PyTorch missing: losses not compared)" % (producer, line.strip()))
            continue
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, ref))
        if worst > 1e-5:
            FAILS.append("GroupNorm (%s): losses %s, PyTorch's %s (worst relative %.2g)" %
                         (producer, losses, ref, worst))
        else:
            print("ok   GroupNorm (%s): 4 tensors trained, losses within %.1g of nn.GroupNorm's" % (producer, worst))


def train(exe, tmp, model, tag, extra=()):
    log = os.path.join(tmp, tag + ".jsonl")
    out = os.path.join(tmp, tag + "_trained.onnx")
    p = subprocess.run([exe, model, "--train", "--data", os.path.join(tmp, "x.npy"), "--labels",
                        os.path.join(tmp, "y.npy"), "--batch", "8", "--steps", "6", "--optimizer", "sgd", "--lr",
                        "0.1", "--momentum", "0.9", "--log-json", log, "--export-onnx", out] + list(extra),
                       capture_output=True, text=True, timeout=600)
    if p.returncode:
        FAILS.append("%s: exit %d: %s" % (tag, p.returncode, p.stderr.strip()))
        return None, None, None
    losses = [json.loads(l)["loss"] for l in open(log) if l.strip()]
    params = [l for l in p.stderr.splitlines() if "parameters:" in l]
    g = onnx.load(out).graph
    trained = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    # frozen Constant-node weights stay Constant nodes
    trained.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node if n.op_type == "Constant"})
    return losses, params[0] if params else "", trained


def main():
    exe = sys.argv[1]
    w = weights()
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), RNG.standard_normal((32, 2, 6, 6)).astype(np.float32))
        np.save(os.path.join(tmp, "y.npy"), RNG.integers(0, 3, 32).astype(np.int64))
        gx = RNG.standard_normal((48, 4, 6, 6)).astype(np.float32)
        gy = RNG.integers(0, 3, 48).astype(np.int64)
        gdir = os.path.join(tmp, "gn")
        os.mkdir(gdir)
        np.save(os.path.join(gdir, "x.npy"), gx)
        np.save(os.path.join(gdir, "y.npy"), gy)
        check_groupnorm(exe, gdir, gx, gy)
        paths = {}
        for tag, const in (("inits", False), ("consts", True)):
            paths[tag] = os.path.join(tmp, tag + ".onnx")
            onnx.save(build(w, const), paths[tag])
        li, pi, ti = train(exe, tmp, paths["inits"], "inits")
        lc, pc, tc = train(exe, tmp, paths["consts"], "consts")
        if li and lc:
            if li != lc:
                FAILS.append("losses differ: initializers %s, Constant nodes %s" % (li, lc))
            elif not li[-1] < li[0]:
                FAILS.append("the loss did not fall: %s" % li)
            else:
                print("ok   same losses both ways: %s" % ["%.5f" % x for x in li])
            for tag, line, want in (("inits", pi, "trained (6 tensors), 0 frozen"),
                                    ("consts", pc, "trained (6 tensors), 0 frozen (0 tensors); 8 tensors were Constant")):
                if want not in line:
                    FAILS.append("%s: summary '%s' lacks '%s'" % (tag, line, want))
            consts = build(w, True)
            kinds = {n.output[0] for n in onnx.load(os.path.join(tmp, "consts_trained.onnx")).graph.node
                     if n.op_type == "Constant"}
            if kinds:
                FAILS.append("the export still has Constant nodes for %s" % sorted(kinds))
            for k in w:
                if k not in tc or k not in ti or not np.array_equal(tc[k], ti[k]):
                    FAILS.append("exported '%s' differs between the two writings (or is missing)" % k)
            if not np.array_equal(ti["fc.w"], w["fc.w"]) and not np.array_equal(ti["bn.mean"], w["bn.mean"]):
                print("ok   exports equal, weights and statistics trained (%d Constant nodes before)" %
                      sum(n.op_type == "Constant" for n in consts.graph.node))
            else:
                FAILS.append("training left fc.w or bn.mean unchanged")
        lf, pf, tf = train(exe, tmp, paths["consts"], "frozen", ["--freeze", "conv.*", "--freeze", "bn.scale"])
        if lf:
            kept = all(np.array_equal(tf[k], w[k]) for k in ("conv.w", "conv.b", "bn.scale"))
            moved = not np.array_equal(tf["fc.w"], w["fc.w"]) and not np.array_equal(tf["bn.bias"], w["bn.bias"])
            if not kept or not moved or "frozen (3 tensors)" not in pf or lf == lc:
                FAILS.append("--freeze: kept %s, others moved %s, summary '%s'" % (kept, moved, pf))
            else:
                print("ok   --freeze conv.* bn.scale: %s" % pf.strip())
        p = subprocess.run([exe, paths["inits"], "--train", "--data", os.path.join(tmp, "x.npy"), "--labels",
                            os.path.join(tmp, "y.npy"), "--batch", "8", "--steps", "1", "--freeze", "nothing*"],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 2 or "--freeze nothing*: no parameter name matches" not in p.stderr:
            FAILS.append("--freeze matching nothing: exit %d: %s" % (p.returncode, p.stderr.strip()))
        p = subprocess.run([exe, paths["inits"], "--freeze", "conv.*"], capture_output=True, text=True, timeout=300)
        if p.returncode != 2 or "--freeze" not in p.stderr:
            FAILS.append("--freeze without --train: exit %d: %s" % (p.returncode, p.stderr.strip()))
    for f in FAILS:
        print("FAIL " + f)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Bad input to hpdlf-exec: one clear line on stderr and exit status 2.

usage: check_bad_input.py HPDLF_EXEC MODEL_DIR

MODEL_DIR is a reference model folder (model.onnx, infer_x.npy); the broken
variants are made here in a temporary folder.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper


def expect(exe, args, status, words, what):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=120)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    problems = []
    if p.returncode != status:
        problems.append("exit %d, expected %d" % (p.returncode, status))
    if status and len(lines) < 1:
        problems.append("no message on stderr")
    if status and not any(all(w in l for w in words) for l in lines):
        problems.append("no stderr line names %s" % words)
    if p.returncode < 0 or "Sanitizer" in p.stderr:
        problems.append("crashed")
    if problems:
        print("FAIL %s: %s\n     stderr: %s" % (what, "; ".join(problems), p.stderr.strip()[:500]))
        return 1
    print("ok   %s: %s" % (what, lines[0] if lines else "(exit 0)"))
    return 0


def main():
    exe, src = sys.argv[1], sys.argv[2]
    model = os.path.join(src, "model.onnx")
    x = np.load(os.path.join(src, "infer_x.npy"))
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        p = lambda n: os.path.join(d, n)  # noqa: E731
        data = open(model, "rb").read()
        open(p("truncated.onnx"), "wb").write(data[: len(data) // 2])
        open(p("garbage.onnx"), "wb").write(bytes(range(256)) * 64)
        np.save(p("x_f64.npy"), x.astype(np.float64))
        np.save(p("x_bad_shape.npy"), np.zeros((x.shape[0], x.shape[1] + 3) + x.shape[2:], np.float32))
        open(p("not_npy.npy"), "wb").write(b"hello")
        # an unknown operator, named in the message
        m = onnx.load(model)
        m.graph.node[0].op_type = "FrobnicateND"
        m.graph.node[0].name = "frob0"
        onnx.save(m, p("unknown_op.onnx"))
        # a Conv/Gemm whose weight does not fit its input
        g = helper.make_graph(
            [helper.make_node("MatMul", ["a", "w"], ["y"], name="mm0")], "g",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [helper.make_tensor("w", TensorProto.FLOAT, [4, 5], np.zeros(20, np.float32))])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p("shape_mismatch.onnx"))
        # external data that is missing
        w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], np.ones(9, np.float32))
        w.data_location = TensorProto.EXTERNAL
        w.ClearField("raw_data")
        w.ClearField("float_data")
        for k, v in (("location", "weights.bin"), ("offset", "0"), ("length", "36")):
            e = w.external_data.add()
            e.key, e.value = k, v
        g = helper.make_graph(
            [helper.make_node("MatMul", ["a", "w"], ["y"], name="mm0")], "g",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p("missing_ext.onnx"))

        cases = [
            ([p("nonexistent.onnx")], 2, ["nonexistent.onnx"], "missing model file"),
            ([p("truncated.onnx")], 2, ["truncated.onnx"], "truncated protobuf"),
            ([p("garbage.onnx")], 2, ["garbage.onnx"], "corrupt protobuf"),
            ([p("unknown_op.onnx"), "--shape", "input=" + "x".join(map(str, x.shape))], 2,
             ["frob0", "FrobnicateND"], "unknown operator"),
            ([p("shape_mismatch.onnx")], 2, ["mm0", "MatMul"], "shape mismatch"),
            ([p("missing_ext.onnx")], 2, ["weights.bin"], "missing external data"),
            ([model, "--input", "input=" + p("x_f64.npy")], 2, ["input"], "wrong .npy dtype"),
            ([model, "--input", "input=" + p("x_bad_shape.npy")], 2, ["input"], "wrong .npy shape"),
            ([model, "--input", "input=" + p("not_npy.npy")], 2, ["not_npy.npy"], "not a .npy file"),
            ([model, "--input", "input=" + p("absent.npy")], 2, ["absent.npy"], "missing input file"),
            ([model, "--input", "nosuch=" + os.path.join(src, "infer_x.npy")], 2, ["nosuch"], "unknown input name"),
            ([model, "--budget", "12Q"], 2, ["--budget"], "bad size"),
            ([model, "--frobnicate"], 2, ["option"], "unknown option"),
            ([], 2, ["model"], "no model"),
        ]
        for args, status, words, what in cases:
            fails += expect(exe, args, status, words, what)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

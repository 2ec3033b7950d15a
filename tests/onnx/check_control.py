#!/usr/bin/env python3
"""If, Loop and Scan folded on import, against NumPy.

usage: check_control.py HPDLF_EXEC

Models written here with python3-onnx: an If whose condition is a Constant
(both branches, reading outer-scope values), a Loop with a constant trip
count carrying a tensor and emitting scan outputs (its body reads the
iteration number and an outer-scope input), one whose body's condition
turns false (a Constant) after the first iteration, one that runs while
i + 1 < 3 (folded from the iteration number), a Loop whose body holds an If
reading both the loop body's locals and the main graph's inputs (nested
outer-scope references), Scans at opsets 9 and 8 with reversed directions
and a non-zero axis; folded at shape inference: an If on a scalar graph
input, an If on Shape(x)[0] == 3, a Loop whose trip count is a scalar graph
input; and the refusals: an If and a Loop whose condition and trip count
come from a float tensor's values, a Loop whose body decides to stop at run
time.
Every output must match a NumPy reference computed here.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

EXE = None
TMP = None
FAILS = []
RNG = np.random.default_rng(19)
F = TensorProto.FLOAT


def vi(name, dtype=F, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr), name + "_t"))


def model(nodes, inputs, outputs, opset):
    g = helper.make_graph(nodes, "m", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m) if all(o.type.tensor_type.HasField("shape") for o in outputs) else None
    return m


def run(m, name, feeds, outs):
    path = os.path.join(TMP, name + ".onnx")
    onnx.save(m, path)
    args = [EXE, path, "--quiet"]
    for k, v in feeds.items():
        f = os.path.join(TMP, "%s_in_%s.npy" % (name, k))
        np.save(f, v)
        args += ["--input", "%s=%s" % (k, f)]
    files = {o: os.path.join(TMP, "%s_out_%s.npy" % (name, o)) for o in outs}
    for o in outs:
        args += ["--output", "%s=%s" % (o, files[o])]
    return subprocess.run(args, capture_output=True, text=True, timeout=300), files


def check(m, name, feeds, refs, tol=1e-5):
    p, files = run(m, name, feeds, list(refs))
    if p.returncode != 0:
        FAILS.append("%s: exit %d: %s" % (name, p.returncode, p.stderr.strip()))
        return
    for o, ref in refs.items():
        y = np.load(files[o])
        if y.shape != ref.shape:
            FAILS.append("%s/%s: shape %s, expected %s" % (name, o, y.shape, ref.shape))
            continue
        err = float(np.max(np.abs(y.astype(np.float64) - ref)))
        if not err <= tol * max(1.0, float(np.max(np.abs(ref)))):
            FAILS.append("%s/%s: max |hpdlf - numpy| = %.3g" % (name, o, err))
        else:
            print("ok   %-16s %-6s max|err| %.2e" % (name, o, err))


def refused(m, name, feeds, outs, words):
    p, _ = run(m, name, feeds, outs)
    if p.returncode != 2 or any(w not in p.stderr for w in words):
        FAILS.append("%s: expected exit 2 naming %s, got exit %d: %s" % (name, words, p.returncode, p.stderr.strip()))
    else:
        print("ok   %-16s refused: %s" % (name, p.stderr.strip().splitlines()[-1]))


def if_const(cond, opset):
    """Branches read the outer x and w; the condition is an Identity of a Constant."""
    then_b = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t0"]),
                                helper.make_node("Relu", ["t0"], ["t_out"])], "then", [], [vi("t_out")])
    else_b = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"])], "else", [], [vi("e_out")])
    nodes = [const("c0", np.array(cond)), helper.make_node("Identity", ["c0"], ["c"]),
             helper.make_node("If", ["c"], ["y"], name="pick", then_branch=then_b, else_branch=else_b)]
    m = model(nodes, [vi("x", F, [3, 4]), vi("w", F, [4])], [vi("y", F, [3, 4])], opset)
    x, w = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    ref = np.maximum(x * w, 0) if cond else -x
    check(m, "if_%s_op%d" % (cond, opset), {"x": x, "w": w}, {"y": ref.astype(np.float64)})


def loop_body(with_if):
    """y_out = 0.5*y_in + x*i (x outer); scan output y_out*2.  With with_if,
    the update goes through an If (constant condition) whose branch reads the
    body's y_in and the main graph's x."""
    nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Cast", ["i"], ["fi"], to=F),
             const("half", np.array(0.5, np.float32)),
             const("two", np.array(2.0, np.float32))]
    if with_if:
        br = helper.make_graph([helper.make_node("Mul", ["y_in", "half"], ["a"]),
                                helper.make_node("Mul", ["x", "fi"], ["b"]),
                                helper.make_node("Add", ["a", "b"], ["br_out"])], "br", [], [vi("br_out")])
        other = helper.make_graph([helper.make_node("Identity", ["y_in"], ["o_out"])], "other", [], [vi("o_out")])
        nodes += [const("k", np.array(True)),
                  helper.make_node("If", ["k"], ["y_out"], name="inner", then_branch=br, else_branch=other)]
    else:
        nodes += [helper.make_node("Mul", ["y_in", "half"], ["a"]), helper.make_node("Mul", ["x", "fi"], ["b"]),
                  helper.make_node("Add", ["a", "b"], ["y_out"])]
    nodes.append(helper.make_node("Mul", ["y_out", "two"], ["s_out"]))
    return helper.make_graph(nodes, "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
                                             vi("y_in")], [vi("cond_out", TensorProto.BOOL, []), vi("y_out"), vi("s_out")])


def loop_ref(x, y0, n):
    y, scans = y0.astype(np.float64), []
    for i in range(n):
        y = 0.5 * y + x.astype(np.float64) * i
        scans.append(2 * y)
    return y, np.stack(scans)


def loop_const(trip, with_if, opset, name):
    nodes = [const("M", np.array(trip, np.int64)), const("C", np.array(True)),
             helper.make_node("Loop", ["M", "C", "y0"], ["y", "s"], name="unrolled", body=loop_body(with_if))]
    m = model(nodes, [vi("x", F, [2, 3]), vi("y0", F, [2, 3])], [vi("y"), vi("s")], opset)
    x, y0 = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)
    y, s = loop_ref(x, y0, trip)
    check(m, name, {"x": x, "y0": y0}, {"y": y, "s": s})


def loop_stop():
    """The body's condition is a Constant false: one iteration of the five."""
    body = loop_body(False)
    body.node[0].CopyFrom(const("cond_out", np.array(False)))
    nodes = [const("M", np.array(5, np.int64)),
             helper.make_node("Loop", ["M", "", "y0"], ["y", "s"], name="stops", body=body)]
    m = model(nodes, [vi("x", F, [2, 3]), vi("y0", F, [2, 3])], [vi("y"), vi("s")], 13)
    x, y0 = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)
    y, s = loop_ref(x, y0, 1)
    check(m, "loop_stop", {"x": x, "y0": y0}, {"y": y, "s": s})
    # while i + 1 < 3 (folded from the iteration number): three of the ten
    body = loop_body(False)
    body.node[0].CopyFrom(helper.make_node("Less", ["i1", "three"], ["cond_out"]))
    body.node.extend([const("one", np.array(1, np.int64)), const("three", np.array(3, np.int64)),
                      helper.make_node("Add", ["i", "one"], ["i1"])])
    nodes = [const("M", np.array(10, np.int64)), const("C", np.array(True)),
             helper.make_node("Loop", ["M", "C", "y0"], ["y", "s"], name="while3", body=body)]
    m = model(nodes, [vi("x", F, [2, 3]), vi("y0", F, [2, 3])], [vi("y"), vi("s")], 13)
    y, s = loop_ref(x, y0, 3)
    check(m, "loop_while", {"x": x, "y0": y0}, {"y": y, "s": s})


def scan9():
    """Two scan inputs: a forward along axis 1, b reversed along axis 0;
    scan output 0 reversed and stacked on axis 1."""
    body = helper.make_graph([helper.make_node("Add", ["acc", "a"], ["t"]), helper.make_node("Mul", ["t", "b"], ["acc_out"]),
                              helper.make_node("Identity", ["acc_out"], ["s"])], "body",
                             [vi("acc", F, [2]), vi("a", F, [2]), vi("b", F, [2])], [vi("acc_out", F, [2]), vi("s", F, [2])])
    node = helper.make_node("Scan", ["acc0", "A", "B"], ["acc", "S"], name="sc", body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 0], scan_input_directions=[0, 1], scan_output_axes=[1],
                            scan_output_directions=[1])
    m = model([node], [vi("acc0", F, [2]), vi("A", F, [2, 5]), vi("B", F, [5, 2])], [vi("acc"), vi("S")], 16)
    acc0, A, B = (RNG.standard_normal(s).astype(np.float32) for s in ([2], [2, 5], [5, 2]))
    acc, outs = acc0.astype(np.float64), []
    for t in range(5):
        acc = (acc + A[:, t]) * B[4 - t]
        outs.append(acc)
    check(m, "scan9", {"acc0": acc0, "A": A, "B": B}, {"acc": acc, "S": np.stack(outs[::-1], axis=1)})


def scan8():
    """Opset 8: batch axis 0, time axis 1, the scan input reversed."""
    body = helper.make_graph([helper.make_node("Add", ["acc", "a"], ["acc_out"]),
                              helper.make_node("Mul", ["acc_out", "a"], ["s"])], "body",
                             [vi("acc", F, [3]), vi("a", F, [3])], [vi("acc_out", F, [3]), vi("s", F, [3])])
    node = helper.make_node("Scan", ["", "acc0", "X"], ["acc", "S"], name="sc8", body=body, num_scan_inputs=1,
                            directions=[1])
    m = model([node], [vi("acc0", F, [2, 3]), vi("X", F, [2, 4, 3])], [vi("acc"), vi("S")], 8)
    acc0, X = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 4, 3)).astype(np.float32)
    acc, S = acc0.astype(np.float64).copy(), np.zeros((2, 4, 3))
    for b in range(2):
        for t in range(4):
            acc[b] = acc[b] + X[b, 3 - t]
            S[b, t] = acc[b] * X[b, 3 - t]
    check(m, "scan8", {"acc0": acc0, "X": X}, {"acc": acc, "S": S})


def deferred():
    """Folded at shape inference, not at import: an If on a scalar graph
    input (hpdlf-exec binds one-element inputs as constants), an If on
    Shape(x)[0] == 3 (known once x's shape is), and a Loop whose trip count
    is a scalar graph input."""
    then_b = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "t", [], [vi("t")])
    else_b = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "e", [], [vi("e")])
    m = model([helper.make_node("If", ["c"], ["y"], name="in_if", then_branch=then_b, else_branch=else_b)],
              [vi("c", TensorProto.BOOL, []), vi("x", F, [2])], [vi("y")], 13)
    x = RNG.standard_normal(2).astype(np.float32)
    for c in (True, False):
        check(m, "if_input_%s" % c, {"c": np.array(c), "x": x}, {"y": (x if c else -x).astype(np.float64)})
    m = model([helper.make_node("Shape", ["x"], ["sh"]), const("zero", np.array(0, np.int64)),
               helper.make_node("Gather", ["sh", "zero"], ["d0"]), const("three", np.array(3, np.int64)),
               helper.make_node("Equal", ["d0", "three"], ["c"]),
               helper.make_node("If", ["c"], ["y"], name="shape_if", then_branch=then_b, else_branch=else_b)],
              [vi("x", F, ["n"])], [vi("y")], 13)
    for n in (3, 4):
        x = RNG.standard_normal(n).astype(np.float32)
        check(m, "if_shape_%d" % n, {"x": x}, {"y": (x if n == 3 else -x).astype(np.float64)})
    m = model([const("C", np.array(True)),
               helper.make_node("Loop", ["M", "C", "y0"], ["y", "s"], name="in_loop", body=loop_body(False))],
              [vi("M", TensorProto.INT64, []), vi("x", F, [2]), vi("y0", F, [2])], [vi("y"), vi("s")], 13)
    x, y0 = RNG.standard_normal(2).astype(np.float32), RNG.standard_normal(2).astype(np.float32)
    y, s = loop_ref(x, y0, 3)
    check(m, "loop_input_trip", {"M": np.array(3, np.int64), "x": x, "y0": y0}, {"y": y, "s": s})


def refusals():
    """Decisions that need the data: a condition and a trip count computed
    from a float tensor's values, a body condition read from a graph input."""
    then_b = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "t", [], [vi("t")])
    else_b = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "e", [], [vi("e")])
    m = model([helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0), const("z", np.array(0, np.float32)),
               helper.make_node("Greater", ["sx", "z"], ["c"]),
               helper.make_node("If", ["c"], ["y"], name="rt_if", then_branch=then_b, else_branch=else_b)],
              [vi("x", F, [2])], [vi("y")], 11)
    refused(m, "if_runtime", {"x": np.ones(2, np.float32)}, ["y"],
            ["If 'rt_if'", "condition is computed at run time"])
    m = model([const("C", np.array(True)), helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0),
               helper.make_node("Cast", ["sx"], ["M"], to=TensorProto.INT64),
               helper.make_node("Loop", ["M", "C", "y0"], ["y", "s"], name="rt_loop", body=loop_body(False))],
              [vi("x", F, [2]), vi("y0", F, [2])], [vi("y"), vi("s")], 13)
    refused(m, "loop_runtime", {"x": np.ones(2, np.float32), "y0": np.ones(2, np.float32)},
            ["y"], ["Loop 'rt_loop'", "trip count is computed at run time"])
    body = loop_body(False)
    body.node[0].CopyFrom(helper.make_node("Less", ["i", "lim"], ["cond_out"]))
    m = model([const("M", np.array(3, np.int64)), const("C", np.array(True)),
               helper.make_node("Loop", ["M", "C", "y0"], ["y", "s"], name="rt_cond", body=body)],
              [vi("lim", TensorProto.INT64, []), vi("x", F, [2]), vi("y0", F, [2])], [vi("y"), vi("s")], 13)
    refused(m, "loop_cond", {"lim": np.array(2, np.int64), "x": np.ones(2, np.float32), "y0": np.ones(2, np.float32)},
            ["y"], ["Loop 'rt_cond'", "body's condition is computed at run time"])


def main():
    global EXE, TMP
    EXE = sys.argv[1]
    with tempfile.TemporaryDirectory() as TMP:
        for opset in (11, 13, 21):
            if_const(True, opset)
            if_const(False, opset)
        loop_const(4, False, 13, "loop4")
        loop_const(1, False, 11, "loop1")
        loop_const(3, True, 16, "loop_nested_if")
        loop_stop()
        scan9()
        scan8()
        deferred()
        refusals()
    for f in FAILS:
        print("FAIL " + f)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

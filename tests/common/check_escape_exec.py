#!/usr/bin/env python3
"""Names from a model never reach the terminal raw (issue 22): hpdlf-exec's
error for a model whose tensor names hold a newline, terminal escapes (ESC
[2J clears the screen, the UTF-8 C1 CSI) and bytes that are not UTF-8 is one
line on stderr with those characters escaped, exit status 2; the notes it
prints itself (a dynamic input's dim) and --plan's node name are escaped too.

usage: check_escape_exec.py HPDLF_EXEC
"""
import os
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper

EXE = sys.argv[1]
EVIL = "x\n\x1b[2Jhpdlf-exec: forged\r\u009b31m\u202e"
EVIL_ESCAPED = "x\\n\\e[2Jhpdlf-exec: forged\\r\\u009b31m\\u202e"
FAILS = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail), flush=True)
    if not ok:
        FAILS.append(what)


def save(graph, path):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with open(path, "wb") as f:
        f.write(m.SerializeToString())


def run(*args):
    r = subprocess.run([EXE] + list(args), capture_output=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def clean(err):
    """One line, nothing a terminal acts on, valid UTF-8."""
    text = err.decode("utf-8", "strict")
    bad = [c for c in text[:-1] if ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u2029\u202e"]
    return text.count("\n") == 1 and text.endswith("\n") and not bad


def main():
    with tempfile.TemporaryDirectory() as tmp:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
        # a node input nobody produces
        undef = os.path.join(tmp, "undef.onnx")
        save(helper.make_graph([helper.make_node("Relu", [EVIL], ["y"], name="relu")], "g", [x], [y]), undef)
        rc, out, err = run(undef)
        check(rc == 2, "undefined input: exit 2", "%d %r" % (rc, err))
        check(clean(err), "undefined input: one clean line on stderr", repr(err))
        check(EVIL_ESCAPED.encode() in err, "undefined input: the name shown escaped", repr(err))
        # the node's own name, and bytes that are not UTF-8
        g = helper.make_graph([helper.make_node("Relu", ["ghost"], ["y"], name="n")], "g", [x], [y])
        g.node[0].name = EVIL
        g.node[0].input[0] = "gh\xffost"  # set as str; rewritten as raw bytes below
        data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
        data = data.replace("gh\xffost".encode(), b"gh\xff\xfeost")  # same length
        bytes_model = os.path.join(tmp, "bytes.onnx")
        with open(bytes_model, "wb") as f:
            f.write(data)
        rc, out, err = run(bytes_model)
        check(rc == 2, "invalid UTF-8 name: exit 2", "%d %r" % (rc, err))
        check(clean(err), "invalid UTF-8 name: one clean line on stderr", repr(err))
        check(b"gh\\xff\\xfeost" in err, "invalid UTF-8 name: bytes shown as \\xNN", repr(err))
        # a graph output nobody produces
        noprod = os.path.join(tmp, "noprod.onnx")
        save(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                               [helper.make_tensor_value_info(EVIL, TensorProto.FLOAT, [4])]), noprod)
        rc, out, err = run(noprod)
        check(rc == 2 and clean(err) and EVIL_ESCAPED.encode() in err, "unproduced output: one escaped line", repr(err))
        # a valid model with an evil input name and dim_param: its notes and --plan
        dyn = os.path.join(tmp, "dyn.onnx")
        xin = helper.make_tensor_value_info(EVIL, TensorProto.FLOAT, ["N\n\x1b[31m", 4])
        save(helper.make_graph([helper.make_node("Relu", [EVIL], ["y"], name=EVIL)], "g", [xin],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N\n\x1b[31m", 4])]), dyn)
        rc, out, err = run(dyn, "--plan")
        check(rc == 0, "dynamic input --plan: exit 0", "%d %r" % (rc, err))
        check(clean(err) and EVIL_ESCAPED.encode() in err and b"N\\n\\e[31m" in err,
              "dynamic input note: one escaped line", repr(err))
        check(b"\x1b" not in out and b"\r" not in out and EVIL.encode() not in out and out.count(b"\n") > 2,
              "--plan output has no raw control characters", repr(out))
        check(EVIL_ESCAPED.encode() in out, "--plan names the node escaped", repr(out))
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

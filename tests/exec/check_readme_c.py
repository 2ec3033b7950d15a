#!/usr/bin/env python3
"""The README's C API example, word for word (issue 20, item 9): the code
block after the `readme-c-example` marker is compiled with -Wall -Werror
against the built libhpdlf and run on the MLP; its output must match
onnxruntime's (infer_y_ort.npy), and a missing file must fail cleanly.

usage: check_readme_c.py README.md CC INCLUDE_DIR LIBHPDLF_SO MODEL_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def main():
    readme, cc, inc, lib, folder = sys.argv[1:6]
    text = open(readme).read()
    m = re.search(r"<!-- readme-c-example[^>]*-->\s*```c\n(.*?)```", text, re.S)
    if not check(m is not None, "README holds the marked C example"):
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "infer.c"), os.path.join(tmp, "infer")
        with open(src, "w") as f:
            f.write(m.group(1))
        libdir = os.path.dirname(os.path.abspath(lib))
        r = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", src, "-o", exe, "-I", inc, "-L", libdir,
                            "-lhpdlf", "-Wl,-rpath," + libdir], capture_output=True, text=True, timeout=120)
        if not check(r.returncode == 0, f"the example compiles: {r.stderr.strip()[-500:]}"):
            return 1
        out = os.path.join(tmp, "y.npy")
        r = subprocess.run([exe, os.path.join(folder, "model.onnx"), os.path.join(folder, "infer_x.npy"), out],
                           capture_output=True, text=True, timeout=120)
        if check(r.returncode == 0 and os.path.exists(out), f"the example runs: exit {r.returncode} {r.stderr!r}"):
            got, want = np.load(out), np.load(os.path.join(folder, "infer_y_ort.npy"))
            check(got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5),
                  f"its output matches onnxruntime's (max diff {np.abs(got - want).max():.3g})")
        r = subprocess.run([exe, os.path.join(folder, "model.onnx"), os.path.join(tmp, "missing.npy"), out],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and "missing.npy" in r.stderr, f"a missing input: exit {r.returncode} {r.stderr!r}")
        r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "usage" in r.stderr, f"no arguments: exit {r.returncode}")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

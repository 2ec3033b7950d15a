#!/usr/bin/env python3
"""Each public header compiles alone (STYLE.md's promise).

    check_headers.py CC INCLUDE_DIR

For every include/hpdlf/*.h, a C11 translation unit whose only line is
`#include "hpdlf/X.h"` must compile with -Wall -Wextra -Werror -pedantic,
with no feature-test macro (a user's plain `cc -std=c11`), and a second
include of the same header must change nothing (include guards).
"""
import glob
import os
import subprocess
import sys
import tempfile

FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"]


def compile_one(cc, inc, tmp, text):
    src = os.path.join(tmp, "one.c")
    with open(src, "w") as f:
        f.write(text)
    return subprocess.run([cc] + FLAGS + ["-I", inc, src], capture_output=True, text=True)


def main():
    cc, inc = sys.argv[1:3]
    headers = sorted(glob.glob(os.path.join(inc, "hpdlf", "*.h")))
    if not headers:
        print(f"FAIL: no headers under {inc}/hpdlf", file=sys.stderr)
        return 1
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for h in headers:
            line = f'#include "hpdlf/{os.path.basename(h)}"\n'
            before = bad
            for what, text in (("alone", line), ("twice", line + line)):
                r = compile_one(cc, inc, tmp, text)
                if r.returncode:
                    bad += 1
                    print(f"FAIL: {os.path.basename(h)} {what}:\n{r.stderr}", file=sys.stderr)
            if bad == before:
                print(f"{os.path.basename(h)}: compiles alone")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

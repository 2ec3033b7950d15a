#!/usr/bin/env python3
"""libhpdlf.so exports exactly what the public headers declare.

    check_symbols.py CC LIB INCLUDE_DIR

The declarations come from the compiler, not from the generator of the
version script (tools/public_api.py): gcc -aux-info lists every function a
translation unit including all of include/hpdlf/*.h declares, with the file
it comes from; extern objects are read from the headers' `extern` lines.
The exports are the defined dynamic symbols of the library (nm -D).  Any
difference, in either direction, fails.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile


def declared(cc, inc):
    headers = sorted(glob.glob(os.path.join(inc, "hpdlf", "*.h")))
    if not headers:
        sys.exit(f"no headers under {inc}/hpdlf")
    names = set()
    with tempfile.TemporaryDirectory() as tmp:
        src, aux = os.path.join(tmp, "all.c"), os.path.join(tmp, "aux.txt")
        with open(src, "w") as f:
            f.writelines(f'#include "hpdlf/{os.path.basename(h)}"\n' for h in headers)
        cmd = [cc, "-std=c11", "-fsyntax-only", "-I", inc, src]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"the public headers do not compile:\n{r.stderr}")
        r = subprocess.run(cmd + ["-aux-info", aux], capture_output=True, text=True)
        if r.returncode or not os.path.exists(aux):
            print(f"SKIP: {cc} has no -aux-info (GCC's): {r.stderr}")
            sys.exit(77)
        with open(aux) as f:
            for line in f:
                m = re.match(r"/\* (.*?):\d+:\w+ \*/ (.*)", line)
                if not m or os.path.dirname(os.path.realpath(m.group(1))) != \
                        os.path.realpath(os.path.join(inc, "hpdlf")):
                    continue
                fn = re.search(r"([A-Za-z_]\w*) \(", m.group(2))
                if not fn:
                    sys.exit(f"cannot read aux-info line {line!r}")
                names.add(fn.group(1))
    for h in headers:
        with open(h) as f:
            text = f.read()
        names |= set(re.findall(r"^extern\s[^(;{]*?([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*;", text, re.M))
    return names


def exported(lib):
    r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"nm {lib}: {r.stderr}")
    names = set()
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] != "A":  # A: the version node itself
            names.add(f[2].split("@")[0])
    return names


def main():
    cc, lib, inc = sys.argv[1:4]
    decl, exp = declared(cc, inc), exported(lib)
    print(f"{len(decl)} declared in {inc}/hpdlf, {len(exp)} exported by {lib}")
    extra, missing = sorted(exp - decl), sorted(decl - exp)
    for n in extra:
        print(f"FAIL: {n} is exported but no public header declares it", file=sys.stderr)
    for n in missing:
        print(f"FAIL: {n} is declared in a public header but not exported", file=sys.stderr)
    if len(decl) < 50:
        print("FAIL: implausibly few declarations found", file=sys.stderr)
        return 1
    return 1 if extra or missing else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The public ABI changes only compatibly unless the soname changes.

    check_abi.py LAYOUT_EXE LIB RECORD            check
    check_abi.py --update LAYOUT_EXE LIB RECORD   record the current ABI

The rule (include/hpdlf/graph.h, README "Building by hand"): users see the
public structs by value (struct hp_value, hp_node, hp_graph, the options
and statistics structs) and link the exported functions, so these changes
need a new soname (hpdlf_soversion in meson.build):
  - a struct's size or alignment, a member's offset or size, a member added
    before the end (structs whose first member is `size_t size` may grow at
    the end: callers say which size they know);
  - an enum constant's value;
  - a struct, member, constant or exported symbol removed.
Additions (a new struct, constant or function, a member at the end of a
growable struct) keep the soname.  RECORD (hpdlf.abi) holds the soname and
the ABI that goes with it: LAYOUT_EXE (built from the headers by
tools/public_api.py layout) prints the types, nm -D the symbols.  The test
fails on an incompatible change under the recorded soname, on a soname that
differs from the record, and on additions not yet recorded.  --update
records; under an unchanged soname it refuses incompatible changes.
"""
import os
import re
import subprocess
import sys


def soname(lib):
    r = subprocess.run(["readelf", "-d", "-W", lib], capture_output=True, text=True)
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", r.stdout)
    if not m:
        sys.exit(f"no SONAME in {lib}: {r.stderr}")
    return m.group(1)


def current(exe, lib):
    lines = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.splitlines()
    r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True)
    syms = sorted({f[2].split("@")[0] for f in map(str.split, r.stdout.splitlines())
                   if len(f) == 3 and f[1] != "A"})
    return lines + [f"symbol {s}" for s in syms]


def parse(lines):
    """{'struct X' | 'struct X.m' | 'enum C' | 'symbol S': [numbers]}"""
    d = {}
    for l in lines:
        f = l.split()
        d[f[0] + " " + f[1]] = [int(x) for x in f[2:]]
    return d


def compare(rec, now):
    """(incompatible changes, additions) from the recorded ABI to now."""
    bad, added = [], []
    growable = {k.split()[1].split(".")[0] for k, v in rec.items()
                if k.startswith("struct ") and k.endswith(".size") and v[0] == 0}
    for k, v in rec.items():
        if k not in now:
            bad.append(f"{k} removed")
            continue
        w = now[k]
        name = k.split()[1]
        if k.startswith("struct ") and "." not in name and name in growable:
            if w[0] < v[0] or w[1] != v[1]:
                bad.append(f"{k}: size/align {v} -> {w}")
            elif w != v:
                added.append(f"{k}: grew {v[0]} -> {w[0]}")
        elif w != v:
            bad.append(f"{k}: {v} -> {w}")
    for k, w in now.items():
        if k in rec:
            continue
        base = k.split()[1].split(".")[0]
        if k.startswith("struct ") and "." in k and f"struct {base}" in rec:
            if base not in growable or w[0] < rec[f"struct {base}"][0]:
                bad.append(f"{k} added inside struct {base} (offset {w[0]})")
                continue
        added.append(f"{k} added")
    return bad, added


def read_record(path):
    with open(path) as f:
        lines = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]
    if not lines or not lines[0].startswith("soname "):
        sys.exit(f"{path}: the first line must be 'soname NAME'")
    return lines[0].split(None, 1)[1], lines[1:]


def write_record(path, name, lines):
    with open(path, "w") as f:
        f.write("# The public ABI of this soname (tests/api/check_abi.py): layout of the\n"
                "# public types, enum values, exported symbols.  Record after a change:\n"
                "#   python3 tests/api/check_abi.py --update build/tests/api/abi_layout"
                " build/libhpdlf.so hpdlf.abi\n"
                "# (refused for an incompatible change until hpdlf_soversion in meson.build is bumped).\n")
        f.write(f"soname {name}\n")
        f.writelines(l + "\n" for l in lines)


def main():
    args = sys.argv[1:]
    update = args[:1] == ["--update"]
    exe, lib, record = args[1:] if update else args
    name, now = soname(lib), current(exe, lib)
    if len(now) < 100:
        print(f"FAIL: implausibly short ABI from {exe} and {lib}", file=sys.stderr)
        return 1
    rec_name, rec = read_record(record) if os.path.exists(record) else (None, [])
    bad, added = compare(parse(rec), parse(now))
    if update:
        if rec_name == name and bad:
            print("\n".join(bad) + f"\nrefused: incompatible changes under {name}: bump hpdlf_soversion first",
                  file=sys.stderr)
            return 1
        write_record(record, name, now)
        print(f"recorded {len(now)} lines for {name}")
        return 0
    if rec_name != name:
        print(f"FAIL: the soname is {name} but {record} records {rec_name}: record the new ABI "
              "with --update", file=sys.stderr)
        return 1
    for l in bad:
        print(f"FAIL: incompatible: {l}", file=sys.stderr)
    for l in added:
        print(f"FAIL: not recorded: {l}", file=sys.stderr)
    if bad:
        print(f"FAIL: the public ABI changed incompatibly but the soname is still {name}: "
              "bump hpdlf_soversion in meson.build, then record with --update", file=sys.stderr)
    elif added:
        print("FAIL: compatible additions: record them with --update (same soname)", file=sys.stderr)
    if bad or added:
        return 1
    print(f"{name}: {len(now)} ABI lines as recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())

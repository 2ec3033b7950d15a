#!/usr/bin/python3
"""bench/trace_steps.py on a synthetic trace of known parts: four steps
of 25 ms each on compute lane 1 (two kernels of 10 and 5 ms, a pin of
2 ms, a stall of 3 ms, two write-back spans of one batch the worker fired,
overlapping: 4 ms together, 1 ms of nothing), a load on I/O lane 100, and
the same steps with no stall, pin or I/O as the base.  The medians and the
difference must come out as built; a first step (left out) of another
length must not count.

usage: check_trace_steps.py TRACE_STEPS.py"""
import json
import os
import subprocess
import sys
import tempfile


def step(ev, t0, ooc):
    def x(tid, cat, name, ts, dur, nbytes=None):
        e = {"ph": "X", "pid": 1, "tid": tid, "ts": (t0 + ts) * 1e3, "dur": dur * 1e3, "cat": cat, "name": name}
        if nbytes is not None:
            e["args"] = {"bytes": nbytes}
        ev.append(e)
    x(1, "Conv", "k0", 0, 10)
    if not ooc:
        x(1, "Relu", "k1", 10, 15)
        return
    x(1, "pin", "k1", 10, 2)
    x(1, "stall", "stall", 12, 3)
    x(1, "write-back", "w", 15, 3, 1 << 20)
    x(1, "write-back", "b", 16, 3, 1 << 20)
    x(1, "Relu", "k1", 19, 5)
    x(100, "load", "w", 2, 5, 3 << 20)


def trace(path, ooc):
    ev = [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "compute worker 0"}}]
    ev.append({"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 70e3, "cat": "Conv", "name": "k0"})  # step 0
    for i in range(4):
        step(ev, 100 + 25 * i, ooc)
    with open(path, "w") as f:
        json.dump(ev, f)


def main():
    tool = sys.argv[1]
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "ooc.json"), os.path.join(d, "incore.json")
        trace(a, True)
        trace(b, False)
        p = subprocess.run([sys.executable, tool, a, b], capture_output=True, text=True)
        print(p.stdout, p.stderr)
        out = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {}
        m, base = out.get(a, {}).get("median_ms", {}), out.get(b, {}).get("median_ms", {})
        want = {"span": 25, "kernel": 15, "pin": 2, "stall": 3, "io": 4, "gap": 1}
        for k, v in want.items():
            ok = abs(m.get(k, -1) - v) < 1e-6
            fails += not ok
            print("%s %s %.3f ms (built %d)" % ("ok  " if ok else "FAIL", k, m.get(k, -1), v))
        ok = out.get(a, {}).get("steps") == 4 and abs(base.get("kernel", -1) - 25) < 1e-6 and base.get("gap") == 0
        fails += not ok
        print("%s steps %s after the first, base kernel %s gap %s" % ("ok  " if ok else "FAIL", out.get(a, {}).get(
            "steps"), base.get("kernel"), base.get("gap")))
        ok = "write-back 2.1 MB" in p.stdout and "load 3.1 MB" in p.stdout and "difference" in p.stdout
        fails += not ok
        print("%s bytes a step and the difference printed" % ("ok  " if ok else "FAIL"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

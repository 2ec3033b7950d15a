#!/usr/bin/python3
"""Where a step's wall time goes on the compute lanes of an hpdlf-exec
--trace (issue 17: out of core against in core, step by step).  Ends with
one JSON line.

usage: bench/trace_steps.py TRACE.json [BASE.json] [--lane N] [--top K]

A step starts where the trace's first kernel (the first span of an
operator on a compute lane) starts again; the first step is left out (it
loads and compiles what later steps find ready).  For each later step the
compute lane's time (--lane, default 1: worker 0) is split into

  kernel   spans of operators (their op_type as category)
  stall    the worker waited for a load, a write-back or the budget
  io       loads and write-backs the worker fired and waited for itself
           (the union of their spans: a batch's spans overlap)
  pin      making room for a kernel's tensors, and unpin giving it back
           (spans of 50 us or more; HPDLF_TRACE_PIN_US=0 at the run
           traces every one)
  gap      the rest: the net's scheduling, waits for its or the store's
           lock, the thread preempted

and the medians over the steps are printed, with the steps' bytes per
I/O kind (all lanes) and the --top K nodes whose stalls and pins cost
most (summed over the steps, with the kernel each came before).  With
BASE.json (an in-core trace of the same model, for instance) the medians
of both and their difference are printed side by side.
"""
import collections
import json
import statistics
import sys

KINDS = ("kernel", "stall", "io", "pin", "gap")
IO = ("load", "write-back", "evict")


def events(path):
    with open(path) as f:
        t = json.load(f)
    return t["traceEvents"] if isinstance(t, dict) else t


def kind(e):
    c = e.get("cat", "")
    if c in ("stall",):
        return "stall"
    if c in IO:
        return "io"
    if c in ("pin", "unpin"):
        return "pin"
    return "kernel"


def union(spans):
    total, end = 0.0, None
    for s, t in sorted(spans):
        if end is None or s > end:
            total += t - s
            end = t
        elif t > end:
            total += t - end
            end = t
    return total


def steps(path, lane):
    ev = [e for e in events(path) if e.get("ph") == "X"]
    comp = sorted((e for e in ev if e.get("tid") == lane), key=lambda e: e["ts"])
    kernels = [e for e in comp if kind(e) == "kernel"]
    if not kernels:
        raise ValueError("%s: no kernel spans on lane %d" % (path, lane))
    first = kernels[0]["name"]
    starts = [e["ts"] for e in kernels if e["name"] == first]
    rows, costly = [], collections.defaultdict(float)
    for a, b in zip(starts[1:], starts[2:] + [None]):
        if b is None:  # the last step ends with its last span
            b = max(e["ts"] + e["dur"] for e in comp if e["ts"] >= a)
        inside = [e for e in comp if a <= e["ts"] < b]
        r = dict.fromkeys(KINDS, 0.0)
        for e in inside:
            if kind(e) != "io":
                r[kind(e)] += e["dur"] / 1e3
        r["io"] = union([(e["ts"], e["ts"] + e["dur"]) for e in inside if kind(e) == "io"]) / 1e3
        r["span"] = (b - a) / 1e3
        r["gap"] = r["span"] - sum(r[k] for k in KINDS if k != "gap")
        moved = collections.Counter()
        for e in ev:
            if e.get("cat") in IO and a <= e["ts"] < b:
                moved[e["cat"]] += e.get("args", {}).get("bytes", 0)
        r["bytes"] = dict(moved)
        rows.append(r)
        for i, e in enumerate(inside):
            if kind(e) in ("stall", "pin"):
                nxt = next((x["name"] for x in inside[i + 1:] if kind(x) == "kernel"), "(step end)")
                costly[(e["cat"], nxt)] += e["dur"] / 1e3
    return rows, costly


def medians(rows):
    return {k: statistics.median(r[k] for r in rows) for k in ("span",) + KINDS}


def main(argv):
    lane, top, paths = 1, 8, []
    it = iter(argv)
    for a in it:
        if a == "--lane":
            lane = int(next(it))
        elif a == "--top":
            top = int(next(it))
        else:
            paths.append(a)
    if len(paths) not in (1, 2):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = {"bench": "trace_steps", "lane": lane}
    try:
        runs = [(p, *steps(p, lane)) for p in paths]
    except (OSError, ValueError, KeyError) as e:
        print("trace_steps.py: %s" % e, file=sys.stderr)
        return 2
    for p, rows, costly in runs:
        if not rows:
            print("trace_steps.py: %s: fewer than two steps" % p, file=sys.stderr)
            return 2
        m = medians(rows)
        moved = collections.Counter()
        for r in rows:
            moved.update(r["bytes"])
        print("%s: %d steps after the first, medians (ms): %s" % (p, len(rows), "  ".join(
            "%s %.1f" % (k, m[k]) for k in ("span",) + KINDS)))
        if moved:
            print("  bytes a step: %s" % "  ".join("%s %.1f MB" % (k, v / len(rows) / 1e6)
                                                  for k, v in sorted(moved.items())))
        for (cat, nxt), ms in sorted(costly.items(), key=lambda x: -x[1])[:top]:
            print("  %-5s before %-45s %.2f ms a step" % (cat, nxt, ms / len(rows)))
        out[p] = {"steps": len(rows), "median_ms": m}
    if len(runs) == 2:
        a, b = medians(runs[0][1]), medians(runs[1][1])
        print("difference (%s - %s): %s" % (paths[0], paths[1], "  ".join(
            "%s %+.1f" % (k, a[k] - b[k]) for k in ("span",) + KINDS)))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

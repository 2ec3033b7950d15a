#!/usr/bin/python3
"""Where a step's time goes, from hpdlf-exec --trace (issue 17: out of
core against in core).  Ends with one JSON line.

usage: bench/ooc_step_breakdown.py TRACE.json [--ref TRACE.json] [--skip N]

Each run of the session (a training step, an inference iteration) is a
span on the "session runs" lane (tid 300).  Per run it takes:
  gap_us      from the end of the run before to its start: the caller's
              time (a trainer reads the next batch there: out of core,
              from a data set paged from its file, a device round trip)
  run_us      the run itself
  kernel_us   kernels on the compute lanes (tid < 100), by operator class
  stall_us    the compute lanes waiting for I/O ("stall" spans), and
  stalls      how many times
  io_spans    loads and write-backs on the I/O lanes (100 <= tid < 200),
              one per value a batch moved, and their bytes
and prints the medians over the runs after the first --skip (default 1:
the first run warms up).  --ref: a trace of the same model in core (or
at another budget), printed beside it with the ratios.

Example (LeNet trained at a quarter of its in-core tensor peak):
  L=tests/models/lenet; A="$L/model.onnx --train --data $L/x.npy
    --labels $L/y.npy --loss cross-entropy --optimizer sgd --lr 0.05
    --batch 64 --steps 40 --no-shuffle"
  build/tools/hpdlf-exec $A --trace /tmp/in.json
  build/tools/hpdlf-exec $A --budget 265508 --trace /tmp/ooc.json
  bench/ooc_step_breakdown.py /tmp/ooc.json --ref /tmp/in.json
"""
import json
import statistics
import sys

RUN_LANE, IO_LO, IO_HI = 300, 100, 200
NOT_KERNELS = {"stall", "load", "write-back", "evict", "run"}


def runs_of(path, skip):
    with open(path) as f:
        ev = json.load(f)
    if isinstance(ev, dict):
        ev = ev.get("traceEvents", [])
    spans = sorted((e for e in ev if e.get("ph") == "X"), key=lambda e: e["ts"])
    runs = [e for e in spans if e.get("tid") == RUN_LANE]
    if not runs:
        sys.exit("%s: no session runs (tid %d): a trace of an older build?" % (path, RUN_LANE))
    out = []
    for k, r in enumerate(runs):
        t0, t1 = r["ts"], r["ts"] + r["dur"]
        d = {"gap_us": t0 - (runs[k - 1]["ts"] + runs[k - 1]["dur"]) if k else 0.0, "run_us": r["dur"],
             "kernel_us": 0.0, "stall_us": 0.0, "stalls": 0, "io_spans": 0, "io_bytes": 0, "classes": {}}
        for e in spans:
            if e["ts"] < t0 or e["ts"] >= t1 or e.get("tid") == RUN_LANE:
                continue
            tid, cat = e.get("tid", 0), e.get("cat", "")
            if tid < IO_LO and cat == "stall":
                d["stall_us"] += e["dur"]
                d["stalls"] += 1
            elif tid < IO_LO and cat not in NOT_KERNELS:
                d["kernel_us"] += e["dur"]
                d["classes"][cat] = d["classes"].get(cat, 0.0) + e["dur"]
            elif IO_LO <= tid < IO_HI:
                d["io_spans"] += 1
                d["io_bytes"] += e.get("args", {}).get("bytes", 0)
        out.append(d)
    return out[skip:] if len(out) > skip else out


def medians(runs):
    keys = ("gap_us", "run_us", "kernel_us", "stall_us", "stalls", "io_spans", "io_bytes")
    m = {k: statistics.median(r[k] for r in runs) for k in keys}
    m["step_us"] = statistics.median(r["gap_us"] + r["run_us"] for r in runs)
    classes = {c for r in runs for c in r["classes"]}
    m["classes"] = {c: statistics.median(r["classes"].get(c, 0.0) for r in runs) for c in sorted(classes)}
    m["runs"] = len(runs)
    return m


def main(argv):
    path, ref, skip = None, None, 1
    it = iter(argv)
    for a in it:
        if a == "--ref":
            ref = next(it)
        elif a == "--skip":
            skip = int(next(it))
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            path = a
    if not path:
        print(__doc__, file=sys.stderr)
        return 2
    m = medians(runs_of(path, skip))
    r = medians(runs_of(ref, skip)) if ref else None
    rows = [("step (gap + run)", "step_us"), ("  gap before the run", "gap_us"), ("  run", "run_us"),
            ("    kernels", "kernel_us"), ("    stalls", "stall_us"), ("    stall count", "stalls"),
            ("    I/O spans", "io_spans"), ("    I/O bytes", "io_bytes")]
    print("%-26s %12s%s" % ("median per run", "trace", "%12s %8s" % ("ref", "ratio") if r else ""))
    for label, k in rows:
        line = "%-26s %12.1f" % (label, m[k])
        if r:
            line += "%12.1f %8s" % (r[k], "%.2f" % (m[k] / r[k]) if r[k] else "-")
        print(line)
    print("kernels by class (us):")
    for c in sorted(set(m["classes"]) | set(r["classes"] if r else ()), key=lambda c: -m["classes"].get(c, 0)):
        line = "  %-24s %12.1f" % (c, m["classes"].get(c, 0.0))
        if r:
            line += "%12.1f" % r["classes"].get(c, 0.0)
        print(line)
    print(json.dumps({"bench": "ooc_step_breakdown", "trace": path, "median": m, "ref": r}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""One --log-json schema for inference and training (issue 20, item 3).

usage: check_log_schema.py HPDLF_EXEC HPDLF_STORE_INSPECT MODEL_DIR   (model.onnx, x.npy, y.npy)

Real runs, in core and out of core, of inference and training: every line
parses, has the documented keys with their types ("schema": 1), the step
counts 0, 1, 2, ..., time and the cumulative tier counters never go back,
and each per-step rate times the step time is the counter's growth over
that step.  --stats-json carries the schema and keeps the tiers (objects
only) apart from the prefetch counters.  --plot of the training log draws
the loss as logged and a bandwidth that is never negative and whose area
is the bytes the log says moved; --csv has one row per line and the same
figures.
"""
import csv
import json
import math
import os
import sys
import subprocess
import tempfile
import xml.etree.ElementTree as ET

fails = 0
COMMON = {"schema": int, "mode": str, "step": int, "steps": int, "time_s": float, "ms": float,
          "gflops": float, "stall_ms": float, "resident_bytes": int, "budget_bytes": int, "rss_bytes": int,
          "tiers": dict}
TRAIN = {"loss": float, "lr": float, "epoch": int, "samples_per_s": float, "checkpoint": bool}
# training out of core: the data set's read-ahead (exec/train_data.c)
OOC_TRAIN = {"bytes_read_ahead": int, "bytes_read_ahead_taken": int, "bytes_read_ahead_lost": int}
TIER = {"used": int, "bytes_read": int, "bytes_written": int, "read_bytes_per_s": float,
        "write_bytes_per_s": float}


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def typed(v, t):
    if t is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if t is int:
        return isinstance(v, int) and not isinstance(v, bool)
    return isinstance(v, t)


def check_lines(tag, rows, mode, budget, ooc):
    want = dict(COMMON, **(TRAIN if mode == "train" else {}), **(OOC_TRAIN if mode == "train" and ooc else {}))
    bad = [(i, k) for i, r in enumerate(rows) for k, t in want.items() if k not in r or not typed(r[k], t)]
    check(not bad, f"{tag}: every line has the documented keys and types {bad[:5]}")
    extra = [k for r in rows for k in r if k not in want]
    check(not extra, f"{tag}: no undocumented keys {sorted(set(extra))}")
    if bad:
        return
    check(all(r["schema"] == 1 and r["mode"] == mode for r in rows), f"{tag}: schema 1, mode {mode}")
    check([r["step"] for r in rows] == list(range(len(rows))) and all(r["steps"] == len(rows) for r in rows),
          f"{tag}: step 0..{len(rows) - 1} of steps {len(rows)}")
    check(all(b["time_s"] >= a["time_s"] for a, b in zip(rows, rows[1:])), f"{tag}: time_s never goes back")
    check(all(r["ms"] > 0 and r["stall_ms"] >= 0 and r["rss_bytes"] > 0 and r["budget_bytes"] == budget
              for r in rows), f"{tag}: ms > 0, stall_ms >= 0, rss, budget_bytes {budget}")
    names = set(rows[0]["tiers"])
    check(all(names == set(r["tiers"]) for r in rows), f"{tag}: the same tiers on every line")
    check((len(names) >= 2 and "dram" in names) if ooc else not names, f"{tag}: tiers {sorted(names)}")
    for name in names:
        tiers = [r["tiers"][name] for r in rows]
        bad = [k for t in tiers for k, ty in TIER.items() if not typed(t.get(k), ty)]
        if not check(not bad, f"{tag}: tier {name} keys and types {bad[:3]}"):
            continue
        for k, rate in (("bytes_read", "read_bytes_per_s"), ("bytes_written", "write_bytes_per_s")):
            grow = [b[k] - a[k] for a, b in zip(tiers, tiers[1:])]
            check(all(g >= 0 for g in grow), f"{tag}: {name}.{k} is cumulative (never goes back)")
            est = [t[rate] * r["ms"] / 1e3 for t, r in zip(tiers[1:], rows[1:])]
            check(all(abs(e - g) <= 0.02 * g + 8192 for e, g in zip(est, grow)),
                  f"{tag}: {name}.{rate} x ms = the growth of {k} "
                  f"({[round(e) for e in est[:3]]} vs {grow[:3]})")
    if ooc and budget:
        check(all(r["tiers"]["dram"]["used"] == r["resident_bytes"] <= budget for r in rows),
              f"{tag}: dram used = resident_bytes <= the budget")
        moved = rows[-1]["tiers"]
        check(sum(t["bytes_read"] + t["bytes_written"] for n, t in moved.items() if n != "dram") > 0,
              f"{tag}: bytes went below DRAM")


def check_stats(tag, path, mode, ooc):
    with open(path) as f:
        st = json.load(f)
    check(st.get("schema") == 1 and st.get("mode") == mode, f"{tag}: --stats-json schema 1, mode {mode}")
    tiers = st.get("tiers")
    check(isinstance(tiers, dict) and all(isinstance(v, dict) and set(v) == {"used", "bytes_read", "bytes_written"}
                                          for v in tiers.values()),
          f"{tag}: --stats-json tiers hold tier objects only {sorted(tiers or {})}")
    if ooc:
        pf = st.get("prefetch")
        check(isinstance(pf, dict) and set(pf) == {"prefetches", "hits", "late", "hit_rate"} and "dram" in tiers,
              f"{tag}: --stats-json prefetch counters apart from the tiers {pf}")


def svg_checks(inspect, log, rows, tmp):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inspect"))
    os.environ.setdefault("INSPECT", inspect)
    import check_plot as cp
    svg = os.path.join(tmp, "train.svg")
    r = subprocess.run([inspect, "--plot", svg, log], capture_output=True, text=True, timeout=60)
    if not check(r.returncode == 0, f"--plot of the training log: exit {r.returncode} {r.stderr.strip()}"):
        return
    root = ET.parse(svg).getroot()
    s = cp.series(root)
    check({"loss", "io bandwidth: read", "io bandwidth: write", "memory: dram", "memory: budget"} <= set(s),
          f"--plot series: loss, bandwidth, memory per tier and the budget ({sorted(s)})")
    if "loss" in s:
        got = [v for t, v in cp.levels_of(root, "loss", "loss")]
        want = [r["loss"] for r in rows]
        span = max(want) - min(want) + 1e-9
        check(len(got) == len(want) and all(abs(g - w) < 0.02 * span + 1e-3 for g, w in zip(got, want)),
              f"--plot loss follows the log ({len(got)} points)")
    yv, xv, _ = cp.axes(cp.panel(root, "io"))
    for d, key in (("read", "bytes_read"), ("write", "bytes_written")):
        g = s.get("io bandwidth: " + d)
        if g is None:
            continue
        levels = [yv(y) for a, b, y in cp.steps(g)]
        check(all(v >= -1e-6 * max(levels + [1]) for v in levels), f"--plot {d} bandwidth never negative")
        area = cp.area(g, yv, xv)
        moved = sum(t[key] for n, t in rows[-1]["tiers"].items()) - \
            sum(t[key] for n, t in rows[0]["tiers"].items()) + \
            sum(t[d + "_bytes_per_s"] * rows[0]["ms"] / 1e3 for t in rows[0]["tiers"].values())
        check(abs(area - moved) <= 0.03 * moved + 65536,
              f"--plot {d} bandwidth area {area / 1e6:.2f} MB = the {moved / 1e6:.2f} MB logged")


def csv_checks(inspect, log, rows, tmp):
    out = os.path.join(tmp, "train.csv")
    r = subprocess.run([inspect, "--csv", out, log], capture_output=True, text=True, timeout=60)
    if not check(r.returncode == 0, f"--csv: exit {r.returncode} {r.stderr.strip()}"):
        return
    with open(out, newline="") as f:
        table = list(csv.DictReader(f))
    check(len(table) == len(rows), f"--csv: one row per line ({len(table)} of {len(rows)})")
    ok = all(int(t["step"]) == r["step"] and float(t["loss"]) == r["loss"] and
             int(t["tiers.dram.used"]) == r["tiers"]["dram"]["used"] and t["checkpoint"] in ("true", "false")
             for t, r in zip(table, rows))
    check(ok, "--csv: step, loss, tiers.dram.used and checkpoint as in the log")
    r = subprocess.run([inspect, "--csv", out], capture_output=True, text=True)
    check(r.returncode == 2, f"--csv without an input: exit {r.returncode}")


def run(args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stderr


def main():
    exe, inspect, folder = (os.path.abspath(a) for a in sys.argv[1:4])
    model = os.path.join(folder, "model.onnx")
    train = [exe, model, "--train", "--data", os.path.join(folder, "x.npy"), "--labels",
             os.path.join(folder, "y.npy"), "--batch", "4", "--steps", "10", "--quiet"]
    infer = [exe, model, "--iterations", "8", "--quiet"]
    budget = 200 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        for mode, base in (("train", train), ("infer", infer)):
            for ooc in (False, True):
                tag = f"{mode} {'out of core' if ooc else 'in core'}"
                log, stats = os.path.join(tmp, f"{mode}{ooc}.jsonl"), os.path.join(tmp, f"{mode}{ooc}.json")
                rc, err = run(base + ["--log-json", log, "--stats-json", stats] +
                              (["--budget", str(budget), "--tier", "nvme=" + os.path.join(tmp, "spill")] if ooc else []))
                if not check(rc == 0, f"{tag}: exit {rc} {err.strip()[-300:]}"):
                    continue
                with open(log) as f:
                    rows = [json.loads(line) for line in f]
                check_lines(tag, rows, mode, budget if ooc else 0, ooc)
                check_stats(tag, stats, mode, ooc)
                if mode == "train" and ooc:
                    svg_checks(inspect, log, rows, tmp)
                    csv_checks(inspect, log, rows, tmp)
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""hpdlf-store-inspect --plot: a trace built here with known memory levels
and I/O spans is drawn; the SVG is parsed as XML, its series found by their
titles, and their values read back through the axis tick labels: memory
levels must match the counters, the area under the bandwidth curve must
equal the bytes of the spans, the busy curve's area their duration.

    check_plot.py [OUT.svg]   also keep the picture (docs/plot-example.svg)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

INSPECT = os.environ["INSPECT"]
NS = {"s": "http://www.w3.org/2000/svg"}
MiB = 1 << 20
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


# memory levels (bytes) per tier, each held from its time (s) to the next
MEM = {"dram": [(0.0, 64 * MiB), (0.25, 192 * MiB), (0.5, 256 * MiB), (0.75, 96 * MiB)],
       "nvme": [(0.0, 0), (0.25, 128 * MiB), (0.5, 384 * MiB), (0.75, 512 * MiB)]}
END = 1.0


def make_trace(with_bytes=True):
    ev = [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "compute (kernels)"}},
          {"ph": "M", "pid": 1, "tid": 100, "name": "thread_name", "args": {"name": "I/O queue"}}]
    spans = []
    for i in range(100):  # a load of 4 MiB every 10 ms, 2 ms long; a write-back every 20 ms
        t = i * 0.01
        spans.append(("load", t, 0.002, 4 * MiB))
        if i % 2 == 0:
            spans.append(("write-back", t + 0.004, 0.003, 2 * MiB))
        ev.append({"ph": "X", "pid": 1, "tid": 1, "ts": t * 1e6, "dur": 8000, "cat": "Conv", "name": f"conv{i}"})
    for cat, t, d, b in spans:
        e = {"ph": "X", "pid": 1, "tid": 100, "ts": t * 1e6, "dur": d * 1e6, "cat": cat, "name": f"w{t:.3f}"}
        if with_bytes:
            e["args"] = {"bytes": b}
        ev.append(e)
    for k in range(4):
        ev.append({"ph": "C", "pid": 1, "ts": MEM["dram"][k][0] * 1e6, "name": "resident bytes",
                   "args": {"dram": MEM["dram"][k][1], "nvme": MEM["nvme"][k][1]}})
    ev.append({"ph": "C", "pid": 1, "ts": END * 1e6, "name": "resident bytes",
               "args": {"dram": MEM["dram"][-1][1], "nvme": MEM["nvme"][-1][1]}})
    ev.append({"ph": "C", "pid": 1, "ts": 0, "name": "queue depth", "args": {"value": 3}})  # not memory
    return "[\n" + ",\n".join(json.dumps(e) for e in ev) + "\n]\n", spans


def plot(tmp, text, name="in.json", extra=()):
    src = os.path.join(tmp, name)
    out = os.path.join(tmp, name + ".svg")
    with open(src, "w") as f:
        f.write(text)
    r = subprocess.run([INSPECT, "--plot", out, *extra, src], capture_output=True, text=True, timeout=30)
    return r.returncode, out, r.stderr


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "%": 0.01, "": 1}


def axes(panel):
    """Maps pixel -> value for the panel's value axis and the time axis."""
    texts = panel.findall("s:text", NS)
    yt = [(float(t.get("y")) - 4, float(t.text)) for t in texts if t.get("text-anchor") == "end"]
    xt = [(float(t.get("x")), float(t.text)) for t in texts
          if t.get("text-anchor") == "middle" and re.fullmatch(r"[-\d.e+]+", t.text or "")]
    label = [t.text for t in texts if t.get("transform")][0]
    m = re.search(r"\(([A-Za-z%]+?)(?:/s)?\)$", label)
    unit = m.group(1) if m else ""  # a plain number (the loss)
    tlabel = [t.text for t in texts if (t.text or "").startswith("time since")][0]
    tscale = 1e-3 if "(ms)" in tlabel else 1.0
    (y0, v0), (y1, v1) = yt[0], yt[-1]
    (x0, s0), (x1, s1) = xt[0], xt[-1]
    yv = lambda y: (v0 + (y - y0) * (v1 - v0) / (y1 - y0)) * UNITS[unit]
    xv = lambda x: (s0 + (x - x0) * (s1 - s0) / (x1 - x0)) * tscale
    return yv, xv, label


def steps(g):
    """A step path 'M x y H x V y ...' as [(x_start, x_end, y)]."""
    d = g.find("s:path", NS).get("d")
    toks = re.findall(r"([MHV])\s*([-\d.]+)(?:\s+([-\d.]+))?", d)
    x, y, out = None, None, []
    for cmd, a, b in toks:
        if cmd == "M":
            x, y = float(a), float(b)
        elif cmd == "H":
            out.append((x, float(a), y))
            x = float(a)
        else:
            y = float(a)
    return out


def series(root):
    return {g.find("s:title", NS).text: g for g in root.iter("{http://www.w3.org/2000/svg}g")
            if g.get("class") == "series"}


def panel(root, pid):
    return [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("id") == pid][0]


def area(g, yv, xv):
    return sum(yv(y) * (xv(b) - xv(a)) for a, b, y in steps(g))


def test_bytes(tmp, keep):
    text, spans = make_trace()
    rc, out, err = plot(tmp, text, extra=["--title", "synthetic trace (tests/inspect/check_plot.py): 2 tiers, loads and write-backs"])
    check(rc == 0, f"--plot: exit {rc}: {err}")
    root = ET.parse(out).getroot()
    check(root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("version") == "1.1", "SVG 1.1 root")
    s = series(root)
    want = {"memory: resident bytes: dram", "memory: resident bytes: nvme", "io bandwidth: read",
            "io bandwidth: write"}
    check(set(s) == want, f"series {sorted(s)}")
    yv, xv, label = axes(panel(root, "memory"))
    for tier, levels in MEM.items():
        segs = steps(s[f"memory: resident bytes: {tier}"])
        got = [(round(xv(a), 3), yv(y)) for a, b, y in segs]
        for (t, v), (gt, gv) in zip(levels, got):
            check(abs(gt - t) < 0.005 and abs(gv - v) < 0.01 * 512 * MiB,
                  f"{tier}: level {gv / MiB:.1f} MiB at {gt} s, want {v / MiB} MiB at {t} s")
    yv, xv, label = axes(panel(root, "io"))
    check("bandwidth" in label, f"io axis label {label!r}")
    for d, cat in (("read", "load"), ("write", "write-back")):
        total = sum(b for c, t, dur, b in spans if c == cat)
        got = area(s[f"io bandwidth: {d}"], yv, xv)
        check(abs(got - total) < 0.02 * total, f"{d}: area {got / MiB:.1f} MiB, spans hold {total / MiB} MiB")
    if keep:
        with open(out) as f, open(keep, "w") as g:
            g.write(f.read())


def test_busy(tmp):
    text, spans = make_trace(with_bytes=False)
    rc, out, err = plot(tmp, text, "busy.json")
    check(rc == 0, f"busy: exit {rc}")
    root = ET.parse(out).getroot()
    s = series(root)
    check({"io busy: read", "io busy: write"} <= set(s), f"busy series {sorted(s)}")
    check(any("no byte counts" in (t.text or "") for t in root.iter("{http://www.w3.org/2000/svg}text")),
          "busy panel says the spans carry no byte counts")
    yv, xv, label = axes(panel(root, "io"))
    busy = sum(dur for c, t, dur, b in spans if c == "load")
    got = area(s["io busy: read"], yv, xv)
    check(abs(got - busy) < 0.02 * busy, f"busy area {got:.4f} s, spans last {busy:.4f} s")


def test_inputs(tmp):
    text, _ = make_trace()
    rc, out, err = plot(tmp, text.rstrip().rstrip("]").rstrip(), "cut.json")
    check(rc == 0 and len(series(ET.parse(out).getroot())) == 4, f"trace without ']': exit {rc} {err}")
    rc, out, err = plot(tmp, json.dumps({"traceEvents": json.loads(text)}), "obj.json")
    check(rc == 0, f"object trace: exit {rc} {err}")

    lines, used, rd = [], 0, 0
    for i in range(20):
        used = (i % 5) * 8 * MiB
        rd += 16 * MiB
        lines.append(json.dumps({"step": i, "ms": 50.0, "loss": 1.0,
                                 "tiers": {"dram": {"used": used, "bytes_read": rd, "bytes_written": 0},
                                           "nvme0": {"used": 64 * MiB, "bytes_read": 0, "bytes_written": rd}}}))
    rc, out, err = plot(tmp, "\n".join(lines) + "\n", "log.jsonl")
    check(rc == 0, f"log input: exit {rc}: {err}")
    if rc == 0:
        root = ET.parse(out).getroot()
        s = series(root)
        check({"memory: dram", "memory: nvme0", "io bandwidth: read", "io bandwidth: write"} <= set(s),
              f"log series {sorted(s)}")
        yv, xv, _ = axes(panel(root, "io"))
        levels = [yv(y) for a, b, y in steps(s["io bandwidth: read"])]
        check(all(abs(v - 16 * MiB / 0.05) < 0.01 * 16 * MiB / 0.05 for v in levels),
              f"log bandwidth {[round(v / MiB) for v in levels]} MiB/s, want 320")

    plain = "\n".join(json.dumps({"iteration": i, "ms": 12.5, "gflops": 3.0}) for i in range(5)) + "\n"
    rc, out, err = plot(tmp, plain, "plain.jsonl")
    check(rc == 2 and "no memory counters and no I/O" in err, f"log without tier data: exit {rc} {err!r}")
    rc, out, err = plot(tmp, "not json at all\n", "bad.txt")
    check(rc == 2 and "bad.txt" in err, f"garbage: exit {rc} {err!r}")
    r = subprocess.run([INSPECT, "--plot", os.path.join(tmp, "x.svg"), os.path.join(tmp, "missing.json")],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "missing.json" in r.stderr, f"missing input: {r.returncode} {r.stderr!r}")
    rc, out, err = plot(tmp, text, "ok.json", extra=[])
    r = subprocess.run([INSPECT, "--plot", "/nonexistent-dir/x.svg", os.path.join(tmp, "ok.json")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "x.svg" in r.stderr, f"unwritable output: {r.returncode} {r.stderr!r}")


def levels_of(root, name, pid):
    yv, xv, _ = axes(panel(root, pid))
    return [(xv(a), yv(y)) for a, b, y in steps(series(root)[name])]


def test_logs(tmp):
    """--log-json files of every kind: schema 1 (per-step rates beside
    cumulative counters, the loss, the budget), training logs from before
    the schema (per-step deltas: they drew a zero line with a negative
    spike), a resumed run appending to its log (counters start again)."""
    ms, n = 40.0, 12
    loss = [2.5 - 0.15 * i for i in range(n)]
    rd = [(i % 3 + 1) * 4 * MiB for i in range(n)]  # bytes read in step i
    wr = [2 * MiB if i % 2 else 0 for i in range(n)]
    v1, old, resumed = [], [], []
    for i in range(n):
        cum_r, cum_w = sum(rd[:i + 1]), sum(wr[:i + 1])
        tiers = {"dram": {"used": 3 * MiB, "bytes_read": 0, "bytes_written": 0, "read_bytes_per_s": 0,
                          "write_bytes_per_s": 0},
                 "nvme0": {"used": (i + 1) * MiB, "bytes_read": cum_r, "bytes_written": cum_w,
                           "read_bytes_per_s": rd[i] / (ms / 1e3), "write_bytes_per_s": wr[i] / (ms / 1e3)}}
        v1.append({"schema": 1, "mode": "train", "step": i, "steps": n, "time_s": (i + 1) * ms / 1e3, "ms": ms,
                   "gflops": 1.0, "stall_ms": 0.5, "resident_bytes": 3 * MiB, "budget_bytes": 4 * MiB,
                   "rss_bytes": 20 * MiB, "tiers": tiers, "loss": loss[i], "epoch": 0, "samples_per_s": 100.0,
                   "checkpoint": False})
        old.append({"step": i, "loss": loss[i], "ms": ms, "epoch": 0, "samples_per_s": 100.0, "gflops": 1.0,
                    "tiers": {"dram": {"bytes_read": 0, "bytes_written": 0},
                              "nvme0": {"bytes_read": rd[i], "bytes_written": wr[i]}}})
        half = i if i < n // 2 else i - n // 2  # a second process from step n/2: counters from 0 again
        c_r = sum(rd[:i + 1]) if i < n // 2 else sum(rd[n // 2:i + 1])
        resumed.append({"step": i, "ms": ms, "tiers": {"nvme0": {"used": MiB, "bytes_read": c_r,
                                                                 "bytes_written": 0}}, "n": half})
    for name, rows, first in (("v1", v1, 0), ("old", old, 0), ("resumed", resumed, 1)):
        rc, out, err = plot(tmp, "".join(json.dumps(r) + "\n" for r in rows), name + ".jsonl")
        if not check(rc == 0, f"log {name}: exit {rc}: {err}"):
            continue
        root = ET.parse(out).getroot()
        got = levels_of(root, "io bandwidth: read", "io")
        want = [(i * ms / 1e3, rd[i] / (ms / 1e3)) for i in range(first, n)]
        check(all(v >= 0 for t, v in got), f"log {name}: no negative bandwidth {[round(v / MiB) for t, v in got]}")
        check(len(got) == len(want) and all(abs(gt - t) < 1e-3 and abs(gv - v) < 0.01 * v
                                             for (gt, gv), (t, v) in zip(got, want)),
              f"log {name}: read bandwidth per step {[round(v / MiB) for t, v in got]} MiB/s, "
              f"want {[round(v / MiB) for t, v in want]}")
        if "loss" in rows[0]:
            s = series(root)
            check("loss" in s, f"log {name}: a loss series ({sorted(s)})")
            if "loss" in s:
                got = [v for t, v in levels_of(root, "loss", "loss")]
                check(len(got) == n and all(abs(g - w) < 0.01 for g, w in zip(got, loss)),
                      f"log {name}: loss {[round(g, 2) for g in got]}, want {[round(w, 2) for w in loss]}")
    rc, out, err = plot(tmp, "".join(json.dumps(r) + "\n" for r in v1), "v1b.jsonl")
    if rc == 0:
        root = ET.parse(out).getroot()
        s = series(root)
        check({"memory: dram", "memory: nvme0", "memory: budget"} <= set(s), f"v1 memory series {sorted(s)}")
        got = [v for t, v in levels_of(root, "memory: nvme0", "memory")]
        check(all(abs(g - (i + 1) * MiB) < 0.01 * n * MiB for i, g in enumerate(got)),
              f"v1 nvme0 memory {[round(g / MiB, 1) for g in got]} MiB")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_bytes(tmp, sys.argv[1] if len(sys.argv) > 1 else None)
        test_busy(tmp)
        test_inputs(tmp)
        test_logs(tmp)
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("all plot checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "%": 0.01}


def axes(panel):
    """Maps pixel -> value for the panel's value axis and the time axis."""
    texts = panel.findall("s:text", NS)
    yt = [(float(t.get("y")) - 4, float(t.text)) for t in texts if t.get("text-anchor") == "end"]
    xt = [(float(t.get("x")), float(t.text)) for t in texts
          if t.get("text-anchor") == "middle" and re.fullmatch(r"[-\d.e+]+", t.text or "")]
    label = [t.text for t in texts if t.get("transform")][0]
    unit = re.search(r"\(([A-Za-z%]+?)(?:/s)?\)$", label).group(1)
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


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_bytes(tmp, sys.argv[1] if len(sys.argv) > 1 else None)
        test_busy(tmp)
        test_inputs(tmp)
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("all plot checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark statistics of hpdlf-exec (issue 20, item 2): --warmup runs are
neither measured nor logged; the summary's and --stats-json's figures are
the ones computed here from the logged per-iteration times (nearest-rank
percentiles); --duration measures at least that long; --warmup/--duration
with --train are refused.

usage: check_bench_stats.py HPDLF_EXEC MODEL_DIR
"""
import json
import math
import os
import subprocess
import sys
import tempfile

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1


def rank(sorted_ms, p):
    k = math.ceil(p / 100 * len(sorted_ms))
    return sorted_ms[min(max(k, 1), len(sorted_ms)) - 1]


def main():
    exe, folder = sys.argv[1], sys.argv[2]
    model = os.path.join(folder, "model.onnx")
    with tempfile.TemporaryDirectory() as tmp:
        log, stats = os.path.join(tmp, "log.jsonl"), os.path.join(tmp, "stats.json")
        r = subprocess.run([exe, model, "--iterations", "37", "--warmup", "4", "--log-json", log,
                            "--stats-json", stats], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"runs (exit {r.returncode}: {r.stderr.strip()[-200:]!r})")
        with open(log) as f:
            lines = [json.loads(l) for l in f]
        with open(stats) as f:
            st = json.load(f)
        check(len(lines) == 37 and st["iterations"] == 37 and st["warmup"] == 4,
              f"37 measured iterations logged, warm-up left out ({len(lines)} lines, stats {st['iterations']})")
        ms = sorted(l["ms"] for l in lines)
        want = {"ms_min": ms[0], "ms_max": ms[-1], "ms_median": ms[len(ms) // 2], "ms_mean": sum(ms) / len(ms),
                "ms_p50": rank(ms, 50), "ms_p90": rank(ms, 90), "ms_p95": rank(ms, 95), "ms_p99": rank(ms, 99)}
        for k, v in want.items():
            check(abs(st[k] - v) <= 1e-9 * max(1.0, abs(v)), f"{k} {st[k]} is {v} from the logged times")
        check("p99" in r.stderr and "after 4 warm-up" in r.stderr, "the summary shows the percentiles and the warm-up")
        # --profile: per node and per operator type, over the measured runs only
        r = subprocess.run([exe, model, "--iterations", "9", "--warmup", "2", "--profile", "--stats-json", stats],
                           capture_output=True, text=True, timeout=120)
        with open(stats) as f:
            prof = json.load(f).get("profile", {})
        nodes, types = prof.get("by_node", []), prof.get("by_op_type", [])
        check(r.returncode == 0 and nodes and all(n["calls"] == 9 for n in nodes),
              f"--profile counts the 9 measured calls of every node, not the warm-up ({[n['calls'] for n in nodes]})")
        check(abs(sum(n["total_ms"] for n in nodes) - prof.get("kernel_ms", -1)) < 1e-9 and
              abs(sum(t["total_ms"] for t in types) - prof.get("kernel_ms", -1)) < 1e-6 and
              abs(sum(n["share"] for n in nodes) - 1) < 1e-9,
              "node times sum to the kernel time, and so do the operator types; shares sum to 1")
        check("by operator type" in r.stderr, "the profile table is printed")
        r = subprocess.run([exe, model, "--duration", "0.4", "--quiet", "--stats-json", stats], capture_output=True,
                           text=True, timeout=120)
        with open(stats) as f:
            st = json.load(f)
        check(r.returncode == 0 and st["wall_ms"] >= 400 and st["iterations"] > 1,
              f"--duration 0.4 measures at least 0.4 s ({st['wall_ms']:.0f} ms, {st['iterations']} iterations)")
        r = subprocess.run([exe, model, "--train", "--warmup", "2"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "--warmup" in r.stderr, f"--warmup with --train is exit 2 ({r.returncode})")
        r = subprocess.run([exe, model, "--duration", "abc"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "--duration" in r.stderr, f"--duration abc is exit 2 ({r.returncode})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Issue 17: out of core, the trainer reads the next batch of a data set
larger than the budget during the step before it, and trains bitwise.

LeNet's x.npy (458 KB) is larger than every budget below, so each batch
is paged from the file.  The next batch's chunks are read during the
run, from the step on which the plan leaves room for them to its end
(hp_session_set_ahead, hs_readahead), into frames the store takes back
when it needs them; the gathers between the runs take them with no read
(the read before each step cost LeNet at a quarter of its peak one
device round trip, 170-400 us of a ~3 ms step).

For LeNet (batch 64, SGD), without and with --shuffle, at a quarter and
a half of its in-core tensor peak and at the smallest budget --plan
names (the data set is larger than the first and the last), 1 and 2
threads:
  - the losses are bitwise the in-core run's;
  - every step but the last reads at least the next batch's bytes ahead
    (where the plan's room was taken, the rest at the run's end), and
    bytes_read_ahead_taken (--log-json) grows every steady step: the
    read-ahead is taken; at most a quarter of what was read ahead is
    lost (its frames went before the gather: read twice).  With the
    gather in the rows' order a shuffled batch lost three quarters at
    half the peak (a chunk holding two of its rows read once for each);
  - tensors held (--stats-json tensor_peak_bytes, and resident_bytes
    after each step) stay within the budget.

usage: check_read_ahead.py HPDLF_EXEC LENET_DIR WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

FAILS = []
STEPS = 12
BATCH, ROW = 64, 8 * 8 * 4 + 8  # a sample of x (1x8x8 float32) and its int64 label
SMALLEST_RE = re.compile(r"smallest budget that works is (\d+)")


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILS.append(what)
    return ok


def run(exe, args, what, ok_codes=(0,)):
    r = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    check(r.returncode in ok_codes, "%s: exit %d %s" % (what, r.returncode, r.stderr[-400:]))
    return r


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    exe, lenet, tmp = os.path.abspath(sys.argv[1]), sys.argv[2], os.path.abspath(sys.argv[3])
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    x = os.path.join(lenet, "x.npy")
    base = [os.path.join(lenet, "model.onnx"), "--train", "--data", x, "--labels", os.path.join(lenet, "y.npy"),
            "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.05", "--batch", "64", "--steps", str(STEPS),
            "--quiet"]
    for order in (["--no-shuffle"], ["--shuffle", "--seed", "5"]):
        for threads in ("1", "2"):
            args = base + order + ["--threads", threads]
            tag = "%s t%s" % (order[0], threads)
            log0, st0 = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "in.json")
            run(exe, args + ["--log-json", log0, "--stats-json", st0], "%s in core" % tag)
            ref = [s["loss"] for s in lines(log0)]
            with open(st0) as f:
                peak = json.load(f)["tensor_peak_bytes"]
            r = run(exe, args + ["--budget", "1", "--plan"], "%s --budget 1 --plan" % tag, ok_codes=(2,))
            m = SMALLEST_RE.search(r.stderr)
            if not check(m is not None, "%s: --plan names the smallest budget" % tag):
                continue
            for budget in (peak // 4, peak // 2, int(m.group(1))):
                what = "%s at %d" % (tag, budget)
                if budget != peak // 2:
                    check(os.path.getsize(x) > budget, "%s: the data set (%d B) is larger than the budget" %
                          (what, os.path.getsize(x)))
                log, stf = os.path.join(tmp, "b.jsonl"), os.path.join(tmp, "b.json")
                run(exe, args + ["--budget", str(budget), "--log-json", log, "--stats-json", stf], what)
                got = lines(log)
                check([s["loss"] for s in got] == ref, "%s: the losses are bitwise the in-core ones" % what)
                taken = [s.get("bytes_read_ahead_taken", 0) for s in got]
                check(all(b > a for a, b in zip(taken[1:], taken[2:])),
                      "%s: every steady step takes read-ahead (cumulative %s)" % (what, taken))
                # the whole next batch, not the part the store had room
                # for at the plan's step (2 threads at a quarter: half)
                ra = [s.get("bytes_read_ahead", 0) for s in got]
                deltas = [b - a for a, b in zip(ra, ra[1:-1])]
                check(all(d >= BATCH * ROW for d in deltas),
                      "%s: each step reads the next batch's %d B ahead (%s)" % (what, BATCH * ROW, deltas))
                ahead, lost = got[-1].get("bytes_read_ahead", 0), got[-1].get("bytes_read_ahead_lost", 0)
                check(ahead > 0 and 4 * lost <= ahead, "%s: %d B read ahead, %d B of it lost" % (what, ahead, lost))
                with open(stf) as f:
                    tp = json.load(f)["tensor_peak_bytes"]
                res = max(s["resident_bytes"] for s in got)
                check(tp <= budget and res <= budget, "%s: tensors held %d B at most, %d B after a step" %
                      (what, tp, res))
    if FAILS:
        print("%d failure(s)" % len(FAILS))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

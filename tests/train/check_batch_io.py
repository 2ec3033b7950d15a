#!/usr/bin/env python3
"""A training step out of core does not write back and read again the batch
the caller just wrote, and moves what --plan says it moves (issue 17).

The trainer writes the next batch (the data and the labels, graph inputs)
before every run.  The plan started its steady-state run with them absent:
the run's prologue wrote the fresh batch back to the spill tier at once
(synchronously, before the first kernel) and the steps read it in again,
and --plan's figures counted neither write (LeNet at a quarter of its
peak: 20 KiB a step more written than --plan said).  Now the steady state
starts with the batch resident and dirty, as the cold run does where it
fits, and a batch that does not fit is counted as the prologue's write.

For the shipped LeNet (batch 64, SGD) at budgets that page, every steady
step (after the first) must write exactly --plan's bytes written to the
spill tier and load exactly --plan's bytes read (read, or taken back from
the frames a clean chunk kept when it left DRAM: bytes_kept, which one
of the budgets must use), and the losses must be bitwise the in-core
run's.  (Reads had one 4 KiB block of slack: the
trainer's read of the loss after the run, which the plan had written back
and evicted, was a load of its own.  The runtime now keeps a copy of small
graph outputs from the step that writes them, so that read costs no I/O.)

usage: check_batch_io.py HPDLF_EXEC LENET_DIR WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

FAILS = []
BUDGETS = (265508, 300000, 400000)
STEPS = 6
# (compute: dispatch us, memory GB/s, then FLOP and GFLOP/s of four sgemm
# sizes; tier: read MB/s, write MB/s, read and write latency us)
PINNED = (
    ("loaded", [0.0341, 11.73, 442368, 23.33, 7077888, 39.5, 95551488, 55.29, 764411904, 55.29],
     [1615.57, 549.87, 9.42, 0.1]),
    ("slow memory", [0.03, 3, 442368, 15, 7077888, 30, 95551488, 40, 764411904, 59], [1600, 550, 5, 0.1]),
    ("fast disk", [0.03, 11.7, 442368, 16, 7077888, 19, 95551488, 46, 764411904, 69], [2500, 2000, 5, 50]),
)
PLAN_IO_RE = re.compile(r"tier nvme0 +read [^(]*\((\d+) bytes\).*written [^(]*\((\d+) bytes\)")


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILS.append(what)
    return ok


def run(exe, args, what, env=None):
    r = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600, env=env)
    check(r.returncode == 0, "%s: exit %d %s" % (what, r.returncode, r.stderr[-400:]))
    return r


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def pin_speed(cache, compute, tier):
    """Rewrite the figures of every compute and tier model in the private
    cache (exec/speed_cache.c: magic, key, one figure a line, crc32c of all
    before the sum line), keeping each file's key."""
    d = os.path.join(cache, "hpdlf")
    n = 0
    for f in sorted(os.listdir(d)):
        kind = f.split("-")[0]
        if kind not in ("compute", "tier"):
            continue
        with open(os.path.join(d, f)) as fh:
            head = fh.read().split("\n")[:2]
        body = "\n".join(head) + "\n" + "".join("%.9g\n" % v for v in (compute if kind == "compute" else tier))
        with open(os.path.join(d, f), "w") as fh:
            fh.write(body + "sum %08x\n" % crc32c(body.encode()))
        n += 1
    return n


def steps(path):
    with open(path) as f:
        return [x for x in (json.loads(line) for line in f if line.strip()) if "loss" in x]


def at_budgets(exe, args, tmp, ref, env, pre, read_MBps=None):
    """At each budget: --plan's spill-tier bytes, then a run's steps moving
    exactly those, with the in-core losses (env: the speed model's cache,
    whose tier reads at read_MBps if given)."""
    kept_any = False
    for b in BUDGETS:
        r = run(exe, args + ["--plan", "--budget", str(b)], pre + "--plan at %d" % b, env)
        if read_MBps:
            check("(%.0f MB/s" % read_MBps in r.stdout, pre + "--plan at %d plans with the pinned model" % b)
        io = PLAN_IO_RE.search(r.stdout)
        if not check(io is not None, pre + "--plan at %d names the spill tier's bytes: %s" % (b, io and io.group(0))):
            continue
        plan_rd, plan_wr = int(io.group(1)), int(io.group(2))
        check(plan_wr > 0, pre + "at %d the plan pages (writes %d B a step)" % (b, plan_wr))
        log = os.path.join(tmp, "b%d.jsonl" % b)
        run(exe, args + ["--budget", str(b), "--log-json", log], pre + "run at %d" % b, env)
        got = steps(log) if os.path.exists(log) else []
        check([s["loss"] for s in got] == ref, pre + "at %d the losses are bitwise the in-core ones" % b)
        for prev, s in zip(got, got[1:]):
            t, t0 = s["tiers"]["nvme0"], prev["tiers"]["nvme0"]
            rd = t["bytes_read"] - t0["bytes_read"]
            kept = t["bytes_kept"] - t0["bytes_kept"]
            wr = t["bytes_written"] - t0["bytes_written"]
            kept_any = kept_any or kept > 0
            check(wr == plan_wr, pre + "at %d step %d wrote %d B, --plan says %d B" % (b, s["step"], wr, plan_wr))
            check(rd + kept == plan_rd, pre + "at %d step %d read %d B and took %d B back from kept frames, --plan says "
                  "%d B" % (b, s["step"], rd, kept, plan_rd))
    # the write-backs read again before their frames were needed elsewhere
    # are not read (exec/runtime.c: keep_clean); whether a frame is still
    # there when its load comes is the runtime's timing, so this is expected
    # of the measured model's plans only: under the pinned slow-memory model
    # a loaded CI run took none back (every load read, and read + kept still
    # equalled the plan's bytes).  At some budget, not the tightest: the plan
    # there now keeps its small values resident (exec/plan_evict.c,
    # VICTIM_SMALL_LAST), and they were the write-backs read again soon
    check(kept_any or read_MBps, pre + "at one of the budgets some loads took their kept frames back")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    exe, lenet, tmp = os.path.abspath(sys.argv[1]), sys.argv[2], os.path.abspath(sys.argv[3])
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    args = [os.path.join(lenet, "model.onnx"), "--train", "--data", os.path.join(lenet, "x.npy"), "--labels",
            os.path.join(lenet, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.05",
            "--batch", "64", "--no-shuffle", "--threads", "2", "--steps", str(STEPS), "--quiet"]
    log0 = os.path.join(tmp, "incore.jsonl")
    run(exe, args + ["--log-json", log0], "in core")
    ref = [s["loss"] for s in steps(log0)] if os.path.exists(log0) else None
    check(ref is not None and len(ref) == STEPS, "in core: %d losses logged" % (len(ref or [])))
    at_budgets(exe, args, tmp, ref, os.environ, "")
    cache = os.path.join(tmp, "cache")
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    run(exe, args + ["--plan", "--budget", str(BUDGETS[0])], "--plan in a private cache", env)
    for name, compute, tier in PINNED:
        if check(pin_speed(cache, compute, tier) >= 2, "%s: a compute and a tier model pinned" % name):
            at_budgets(exe, args, tmp, ref, env, name + ": ", tier[0])
    if FAILS:
        print("%d failure(s)" % len(FAILS))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

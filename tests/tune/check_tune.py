#!/usr/bin/env python3
"""hpdlf-exec --tune: the trial runner, through whatever search is linked
(nothing here depends on which configuration wins).  K=2 trials complete
with a well-formed log; the best trial's printed flags train it again to
its logged figure and its exported weights evaluate to it in PyTorch; the
process tree's peak memory (proportional set sizes) stays within --budget
with a data set that K copies would not fit, and strace sees each data
file opened once; SIGKILL of the runner and a re-run end with the log of
an uninterrupted search, and the trials of a runner killed before they
started do not train on; a diverging configuration is marked failed and
the search goes on; bad SPECs are status 2.  Usage: check_tune.py HPDLF_EXEC"""
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunelib as T  # noqa: E402

STATES = {"running", "promoted", "stopped", "done", "failed"}


def spec(path, space, trials, max_steps, seed=1, metric="val_loss"):
    with open(path, "w") as f:
        json.dump({"space": space, "objective": {"metric": metric, "mode": "min"},
                   "budget": {"unit": "steps", "min": max(1, max_steps // 3), "max": max_steps},
                   "trials": trials, "algorithm": "asha", "reduction_factor": 3, "seed": seed}, f)
    return path


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def well_formed(lines, metric, tag):
    ok = bool(lines)
    open_jobs = {}
    for l in lines:
        ok &= isinstance(l.get("trial"), int) and isinstance(l.get("config"), dict) and \
            isinstance(l.get("step"), int) and l.get("state") in STATES and l.get("event") in ("start", "result")
        if l.get("event") == "start":
            ok &= l["trial"] not in open_jobs and l["step"] < l.get("to_step", -1)
            open_jobs[l["trial"]] = l
        else:
            s = open_jobs.pop(l.get("trial"), None)
            ok &= s is not None and s["to_step"] == l["step"] and s["config"] == l["config"]
            ok &= metric in l and ((l[metric] is None) == (l["state"] == "failed"))
    T.check(ok and not open_jobs, f"{tag}: log well-formed, every job started has its result ({len(lines)} lines)")


def tree_pss(pid):
    """Sum of Pss over pid and its descendants (bytes)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


class Env:
    def __init__(self, exe, d):
        self.exe, self.d = exe, d
        self.model = os.path.join(d, "m.onnx")
        T.make_model(self.model)
        T.make_data(os.path.join(d, "train.npz"), 300)
        self.vx, self.vy = T.make_data(os.path.join(d, "val.npz"), 120, seed=2)

    def args(self, log, sp, k, extra=()):
        return [self.model, "--train", "--data", os.path.join(self.d, "train.npz"), "--val-data",
                os.path.join(self.d, "val.npz"), "--batch", "16", "--tune", sp, "--tune-log", log,
                "--parallel", str(k), "--threads", "2"] + list(extra)


def main_run(e):
    d = e.d
    sp = spec(os.path.join(d, "s1.json"), {"lr": {"log_uniform": [0.005, 0.2]}, "momentum": {"uniform": [0.0, 0.9]},
                                          "optimizer": {"choice": ["sgd", "adam"]}}, 5, 18)
    log, best = os.path.join(d, "t1.jsonl"), os.path.join(d, "best.onnx")
    rc, out, err = T.run(e.exe, e.args(log, sp, 2, ["--export-onnx", best]))
    T.check(rc == 0, f"--parallel 2: completes (rc {rc}) {err.strip()[-400:]}")
    if rc:
        return
    lines = read_log(log)
    well_formed(lines, "val_loss", "--parallel 2")
    other = os.path.join(d, "s1b.json")
    with open(sp) as f, open(other, "w") as g:
        json.dump(dict(json.load(f), seed=99), g)
    before = open(log).read()
    rc2, _, err2 = T.run(e.exe, e.args(log, other, 2))
    T.check(rc2 == 2 and "differ" in err2 and open(log).read() == before,
            f"a log resumed with another SPEC: status 2, the log untouched ({rc2}) {err2.strip()}")
    results = [l for l in lines if l["event"] == "result" and l["state"] != "failed"]
    cmd = [l for l in out.splitlines() if l.strip()]
    T.check(len(cmd) == 1 and "--steps" in cmd[0], f"the best trial's flags on stdout: {cmd}")
    if not cmd or not results:
        return
    argv = shlex.split(cmd[0])
    rlog = os.path.join(d, "repro.jsonl")
    rc, _, err = T.run(argv[0], argv[1:] + ["--log-json", rlog, "--quiet"])
    T.check(rc == 0, f"the printed command trains (rc {rc}) {err.strip()[-300:]}")
    steps = int(argv[argv.index("--steps") + 1])
    figure = [l["val_loss"] for l in read_log(rlog) if "val_loss" in l][-1] if rc == 0 else None
    logged = [l["val_loss"] for l in results if l["step"] == steps and figure is not None
              and abs(l["val_loss"] - figure) <= 1e-9 * max(1, abs(figure))]
    T.check(bool(logged), f"... to a val_loss {figure} the log holds for a trial at step {steps}")
    ref, _ = T.torch_eval(best, e.vx, e.vy)
    T.check(figure is not None and abs(ref - figure) <= 1e-5 * max(1, abs(ref)),
            f"--export-onnx: the best weights evaluate in PyTorch to {ref} (logged {figure})")
    T.check(not any(os.path.exists(os.path.join(d, f)) for f in ("x.npy",)), "nothing written beside the data")


def memory_run(e):
    """A validation set of ~96 MiB, a budget that holds it once but not twice
    beside the two trials' budgets: the tree's peak Pss stays under it."""
    d = os.path.join(e.d, "mem")
    os.makedirs(d)
    vx = os.path.join(d, "big.npz")
    T.make_data(vx, 375000, seed=3)
    data = os.path.getsize(vx)
    budget = data + 2 * (72 << 20) + (24 << 20)
    sp = spec(os.path.join(d, "s.json"), {"lr": {"log_uniform": [0.01, 0.1]}}, 2, 4)
    log = os.path.join(d, "t.jsonl")
    args = [e.model, "--train", "--data", os.path.join(e.d, "train.npz"), "--val-data", vx, "--batch", "64",
            "--tune", sp, "--tune-log", log, "--parallel", "2", "--budget", str(budget), "--threads", "2"]
    p = subprocess.Popen([e.exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while p.poll() is None:
        peak = max(peak, tree_pss(p.pid))
        time.sleep(0.02)
    out, err = p.communicate()
    T.check(p.returncode == 0, f"memory: completes (rc {p.returncode}) {err.strip()[-300:]}")
    lines = read_log(log) if p.returncode == 0 else []
    T.check(sum(1 for l in lines if l["event"] == "result" and l["state"] != "failed") >= 1,
            "memory: trials finished")
    T.check(peak <= budget, f"memory: peak Pss of the process tree {peak >> 20} MiB within --budget "
            f"{budget >> 20} MiB (data {data >> 20} MiB; two copies would be {(2 * data) >> 20} MiB)")
    T.check(peak > data // 2, f"memory: the measurement sees the data ({peak >> 20} MiB)")


def open_once(e):
    if not shutil.which("strace"):
        print("skip open-once: no strace")
        return
    d = e.d
    sp = spec(os.path.join(d, "s2.json"), {"lr": {"log_uniform": [0.01, 0.1]}}, 3, 6)
    log, tr = os.path.join(d, "t2.jsonl"), os.path.join(d, "strace.txt")
    p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", tr, e.exe] +
                       e.args(log, sp, 2, ["--export-onnx", os.path.join(d, "b2.onnx")]),
                       capture_output=True, text=True, timeout=600)
    T.check(p.returncode == 0, f"under strace: completes (rc {p.returncode}) {p.stderr.strip()[-300:]}")
    with open(tr) as f:
        text = f.read()
    for name in ("train.npz", "val.npz"):
        n = sum(1 for line in text.splitlines() if os.path.join(d, name) in line and "ENOENT" not in line)
        T.check(n == 1, f"{name} opened {n} time(s) by the whole process tree (3 trials, an export)")


def wait_gone(pids, timeout=30):
    end = time.time() + timeout
    while time.time() < end and any(os.path.exists(f"/proc/{p}") and
                                    open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
                                    for p in pids):
        time.sleep(0.02)


def resume_run(e):
    d = e.d
    sp = spec(os.path.join(d, "s3.json"), {"lr": {"log_uniform": [0.005, 0.2]}, "momentum": {"uniform": [0, 0.9]}},
              6, 60, seed=7)
    full = os.path.join(d, "full.jsonl")
    rc, _, err = T.run(e.exe, e.args(full, sp, 2))
    T.check(rc == 0, f"uninterrupted: completes (rc {rc}) {err.strip()[-300:]}")
    cut = os.path.join(d, "cut.jsonl")
    p = subprocess.Popen([e.exe] + e.args(cut, sp, 2), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None and (not os.path.exists(cut) or len(open(cut).read().splitlines()) < 4):
        time.sleep(0.005)
    kids = children_of(p.pid)
    p.send_signal(signal.SIGKILL)
    p.wait()
    wait_gone(kids)
    before = read_log(cut) if os.path.exists(cut) else []
    T.check(0 < len(before) < len(read_log(full)), f"killed mid-search ({len(before)} lines logged)")
    starts = {}
    done = []  # (trial, from, to) of the jobs finished before the kill
    for l in before:
        if l["event"] == "start":
            starts[l["trial"]] = l["step"]
        else:
            done.append((l["trial"], starts.pop(l["trial"]), l["step"]))
    rc, _, err = T.run(e.exe, e.args(cut, sp, 2))
    T.check(rc == 0, f"re-run: resumes and completes (rc {rc}) {err.strip()[-300:]}")
    T.check(open(cut).read() == open(full).read(), "the resumed log equals the uninterrupted one, line for line")
    once = True
    for trial, a, b in done:  # a trial's --log-json: each step of a finished job trained once
        steps = [l["step"] for l in read_log(os.path.join(cut + ".d", f"trial-{trial}", "log.jsonl"))]
        once &= all(steps.count(k) == 1 for k in range(a, b))
    T.check(bool(done) and once, f"finished jobs not run again ({done})")
    rc, _, _ = T.run(e.exe, e.args(cut, sp, 2))
    T.check(rc == 0 and open(cut).read() == open(full).read(), "a third run of a finished search adds nothing")


def orphan_run(e):
    """The runner killed while its trials are forked but not yet started (a
    loaded machine, HPDLF_TEST_TRIAL_START_US): no trial trains on.  Such an
    orphan trained its job beside the twin a resumed search started, in the
    same checkpoint directory and log."""
    d = e.d
    sp = spec(os.path.join(d, "s6.json"), {"lr": {"log_uniform": [0.01, 0.1]}}, 2, 6)
    log, slow = os.path.join(d, "t6.jsonl"), 2.0
    p = subprocess.Popen([e.exe] + e.args(log, sp, 2), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, HPDLF_TEST_TRIAL_START_US=str(int(slow * 1e6))))
    kids, t0 = [], time.time()
    while p.poll() is None and time.time() < t0 + 60:
        before = time.time()  # the trials seen next were forked after this
        if (kids := children_of(p.pid)):
            break
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.wait()
    late = time.time() - before
    time.sleep(slow)
    wait_gone(kids)
    trained = [t for t in os.listdir(log + ".d") if os.path.exists(os.path.join(log + ".d", t, "log.jsonl"))] \
        if os.path.isdir(log + ".d") else []
    T.check(bool(kids) and late < slow, f"the runner killed with trials forked and not yet started ({len(kids)}, "
            f"killed at most {late:.2f} s after their fork)")
    T.check(not trained, f"no trial of the killed runner trained on: {trained}")


def failing_run(e):
    d = e.d
    sp = spec(os.path.join(d, "s4.json"), {"lr": {"choice": [0.05, 1e9]}}, 8, 9)
    log = os.path.join(d, "t4.jsonl")
    rc, out, err = T.run(e.exe, e.args(log, sp, 2, ["--optimizer", "sgd"]))
    T.check(rc == 0, f"diverging trials: the search completes (rc {rc}) {err.strip()[-300:]}")
    lines = read_log(log) if rc == 0 else []
    well_formed(lines, "val_loss", "diverging")
    res = [l for l in lines if l["event"] == "result"]
    failed = [l for l in res if l["state"] == "failed"]
    T.check(failed and all(l["config"]["lr"] == 1e9 and l["val_loss"] is None for l in failed),
            f"lr 1e9 trials marked failed, figure null ({len(failed)} of {len(res)})")
    T.check(any(l["state"] != "failed" for l in res) and res and
            any(l["trial"] > failed[0]["trial"] for l in lines if failed),
            "the search went on past a failed trial")
    T.check("--lr 0.05 " in out, f"the best is a trial that did not fail: {out.strip()}")


def tty_run(e):
    """stderr a terminal: the table redrawn in place, no plain event lines."""
    import pty
    import threading
    d = e.d
    sp = spec(os.path.join(d, "s5.json"), {"lr": {"log_uniform": [0.01, 0.1]}}, 3, 30)
    master, slave = pty.openpty()
    chunks = []

    def drain():
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:
                return
            if not b:
                return
            chunks.append(b)
    t = threading.Thread(target=drain, daemon=True)
    t.start()
    p = subprocess.run([e.exe] + e.args(os.path.join(d, "t5.jsonl"), sp, 2), stderr=slave, stdout=subprocess.PIPE,
                       timeout=600, env=dict(os.environ, COLUMNS="120"))
    os.close(slave)
    t.join(5)
    text = b"".join(chunks).decode(errors="replace")
    T.check(p.returncode == 0, f"on a terminal: completes (rc {p.returncode})")
    T.check("running of 2" in text and "rungs:" in text and "best trial" in text and "\033[" in text,
            "on a terminal: the table (running, rungs, best so far) redrawn in place")
    T.check("tune: trial 0 started" not in text, "on a terminal: no plain event lines")


def usage_errors(e):
    d = e.d
    good = spec(os.path.join(d, "ok.json"), {"lr": {"log_uniform": [0.01, 0.1]}}, 1, 2)
    log = os.path.join(d, "u.jsonl")
    base = [e.model, "--train", "--data", os.path.join(d, "train.npz"), "--val-data", os.path.join(d, "val.npz"),
            "--batch", "16"]
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write("{not json")
    nospace = os.path.join(d, "nospace.json")
    with open(nospace, "w") as f:
        json.dump({"space": 5, "objective": {"metric": "val_loss", "mode": "min"},
                   "budget": {"unit": "steps", "min": 1, "max": 2}, "trials": 1, "algorithm": "asha", "seed": 1}, f)
    for what, args, word in [
            ("missing SPEC file", ["--tune", os.path.join(d, "nope.json"), "--tune-log", log], "nope.json"),
            ("SPEC not JSON", ["--tune", bad, "--tune-log", log], "bad.json"),
            ("SPEC space not an object", ["--tune", nospace, "--tune-log", log], "space"),
            ("--tune without --tune-log", ["--tune", good], "--tune-log"),
            ("--tune with --steps", ["--tune", good, "--tune-log", log, "--steps", "3"], "--steps"),
            ("--parallel without --tune", ["--parallel", "2", "--steps", "3"], "--tune")]:
        rc, _, err = T.run(e.exe, base + args)
        T.check(rc == 2 and word in err and len(err.strip().splitlines()) <= 2,
                f"{what}: status 2 naming it ({rc}) {err.strip()}")
    T.check(not os.path.exists(log), "no log written by a refused search")


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        e = Env(exe, d)
        usage_errors(e)
        main_run(e)
        failing_run(e)
        resume_run(e)
        orphan_run(e)
        open_once(e)
        tty_run(e)
        memory_run(e)
    if T.FAILS:
        print(f"{len(T.FAILS)} failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

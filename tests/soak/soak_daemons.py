#!/usr/bin/env python3
"""Soak: training against three hpdlf-store daemons under --replicas 2, one
daemon SIGKILLed and restarted on its port every few minutes (issue 23,
item 7).

While an undisturbed local run of the same training goes alongside, the
soak checks that
- every loss the disturbed run logs equals, bit for bit, the undisturbed
  run's at the same step (0 wrong losses);
- every kill gets its verdict (the run's "is gone" warning) and the chunks
  the daemon held are copied anew, and every restarted daemon rejoins;
- RSS stays flat: the training process and every daemon life are sampled
  every 10 s, the growth from the first sample after warm-up to the last
  is reported (and must stay under 16 MiB);
- no extent leaks: the daemons' used bytes, sampled every minute with the
  run alive, stay flat (the last sample within 8 MiB of the first after
  warm-up; a leak of one 4 KiB chunk a step would add hundreds of MiB);
  after the run ends, every daemon is back to 0 used bytes.

usage: soak_daemons.py HPDLF_EXEC HPDLF_STORE MODEL_DIR [MINUTES] [KILL_EVERY_S] [SEED]
"""
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class Daemon:
    def __init__(self, exe, tmp, token):
        self.exe, self.tmp, self.token, self.port = exe, tmp, token, free_port()
        self.where = "127.0.0.1:%d" % self.port
        self.lives = []  # per life: [first rss after warm-up, last rss]
        self.start()

    def start(self):
        pf = os.path.join(self.tmp, "port.%d.%d" % (self.port, len(self.lives)))
        self.p = subprocess.Popen([self.exe, "--listen", self.where, "--dram", "256M", "--token-file", self.token,
                                   "--port-file", pf, "--log-level", "warn"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.born = time.time()
        self.lives.append([None, None])
        for _ in range(600):
            if os.path.exists(pf) and open(pf).read().strip():
                return
            if self.p.poll() is not None:
                raise RuntimeError("daemon %s exited at start" % self.where)
            time.sleep(0.05)
        raise RuntimeError("daemon %s did not start" % self.where)

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def sample(self, warm):
        r = rss(self.p.pid) if self.p.poll() is None else None
        if r is not None:
            if self.lives[-1][0] is None and time.time() - self.born > warm:
                self.lives[-1][0] = r
            self.lives[-1][1] = r

    def used(self, store, token):
        r = subprocess.run([store, "stat", "--store", self.where, "--token-file", token], capture_output=True,
                           text=True, timeout=60)
        m = re.search(r"used\D*(\d+)", r.stdout)
        return int(m.group(1)) if m else None, r.stdout.strip()


def losses(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if "loss" in d:
                    out[d["step"]] = d["loss"]
    return out


def last_line(path):
    last = None
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - 65536))
        for line in f.read().splitlines():
            try:
                last = json.loads(line)
            except ValueError:
                pass
    return last


def count(path, needle):
    return open(path, errors="replace").read().count(needle) if os.path.exists(path) else 0


def wait_count(path, needle, n, limit):
    t0 = time.time()
    while time.time() - t0 < limit:
        if count(path, needle) >= n:
            return time.time() - t0
        time.sleep(0.05)
    return None


def wait_count2(path, needles, n, limit):
    t0 = time.time()
    while time.time() - t0 < limit:
        if sum(count(path, x) for x in needles) >= n:
            return time.time() - t0
        time.sleep(0.05)
    return None


def main():
    exe, store, folder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    minutes = float(sys.argv[4]) if len(sys.argv) > 4 else 30
    every = float(sys.argv[5]) if len(sys.argv) > 5 else 150
    rnd = random.Random(int(sys.argv[6]) if len(sys.argv) > 6 else 1)
    warm = min(60.0, minutes * 60 / 4)
    base = [exe, os.path.join(folder, "model.onnx"), "--train", "--data", os.path.join(folder, "x.npy"), "--labels",
            os.path.join(folder, "y.npy"), "--loss", "cross-entropy", "--optimizer", "adam", "--lr", "0.001",
            "--batch", "16", "--shuffle", "--seed", "7", "--steps", "100000000", "--budget", "256K", "--quiet"]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        with open(token, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(token, 0o600)
        daemons = [Daemon(store, tmp, token) for _ in range(3)]
        log, ref_log, err = (os.path.join(tmp, n) for n in ("soak.jsonl", "ref.jsonl", "soak.err"))
        env = dict(os.environ, HPDLF_LOG_LEVEL="warn")
        ref = subprocess.Popen(base + ["--log-json", ref_log], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(err, "w") as ef:
            run = subprocess.Popen(base + ["--store", ",".join(d.where for d in daemons), "--token-file", token,
                                           "--replicas", "2", "--log-json", log], stdout=subprocess.DEVNULL,
                                   stderr=ef, env=env)
        t0, next_kill, kills, rss_run = time.time(), time.time() + every, [], [None, None]
        used, next_used = [], time.time() + warm
        try:
            while time.time() - t0 < minutes * 60 and run.poll() is None:
                time.sleep(10 if next_kill - time.time() > 10 else max(0.0, next_kill - time.time()))
                r = rss(run.pid)
                if r is not None and time.time() - t0 > warm:
                    rss_run = [rss_run[0] or r, r]
                for d in daemons:
                    d.sample(warm)
                if time.time() >= next_used:
                    used.append(sum(d.used(store, token)[0] or 0 for d in daemons if d.p.poll() is None))
                    next_used = time.time() + 60
                if time.time() >= next_kill and time.time() - t0 < minutes * 60 - 60:
                    kills.append(kill_restart(rnd.choice(daemons), err, len(kills)))
                    next_kill = time.time() + every
            alive = run.poll() is None
            if not alive:
                failures.append("the soaked run ended by itself: exit %s: %s" % (run.returncode,
                                                                                   open(err).read()[-600:]))
            if alive:
                used.append(sum(d.used(store, token)[0] or 0 for d in daemons))
            leak = {"daemons_used_first_last_max": [used[0], used[-1], max(used)] if used else None,
                    "ok": not used or used[-1] - used[0] <= 8 * MIB}
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGTERM)
                run.wait()
        # the undisturbed run must reach the soaked run's last step
        got = losses(log)
        last = max(got) if got else 0
        for _ in range(3600):
            if ref.poll() is not None or (losses(ref_log) and max(losses(ref_log)) >= last):
                break
            time.sleep(1)
        ref.send_signal(signal.SIGKILL)
        ref.wait()
        want = losses(ref_log)
        bad = [(s, l, want.get(s)) for s, l in got.items() if want.get(s) != l]
        time.sleep(2)  # the leases of the ended run expire
        after = [d.used(store, token)[0] for d in daemons]
        for d in daemons:
            d.p.send_signal(signal.SIGTERM)
            d.p.wait()
        growth = [(l[1] - l[0]) if l[0] is not None and l[1] is not None else None for d in daemons for l in d.lives]
        run_growth = rss_run[1] - rss_run[0] if rss_run[0] is not None else None
        if bad:
            failures.append("%d losses differ from the undisturbed run, first %s" % (len(bad), bad[:3]))
        for k in kills:
            if k["verdict_s"] is None or k["copied_s"] is None or k["back_s"] is None:
                failures.append("kill %d: no verdict, copy or rejoin: %s" % (k["n"], k))
        if run_growth is not None and run_growth > 16 * MIB:
            failures.append("the run's RSS grew by %d bytes" % run_growth)
        if any(g is not None and g > 16 * MIB for g in growth):
            failures.append("a daemon's RSS grew by more than 16 MiB: %s" % growth)
        if leak and not leak["ok"]:
            failures.append("extents: %s" % leak)
        if any(a != 0 for a in after):
            failures.append("daemons still hold bytes after the run ended: %s" % after)
        print(json.dumps({"soak": "daemons-replicas2", "minutes": round((time.time() - t0) / 60, 1),
                          "steps": last + 1, "steps_compared": sum(1 for s in got if s in want),
                          "wrong_losses": len(bad), "kills": len(kills),
                          "verdict_s_max": max([k["verdict_s"] or 0 for k in kills] or [0]),
                          "copied_s_max": max([k["copied_s"] or 0 for k in kills] or [0]),
                          "rejoin_s_max": max([k["back_s"] or 0 for k in kills] or [0]),
                          "run_rss_first_last": rss_run, "daemon_rss_growth": growth, "extents": leak,
                          "daemon_used_after": after, "rehome_warnings": count(err, "copied anew"),
                          "failures": failures}))
    return 1 if failures else 0


def kill_restart(d, err, n):
    """SIGKILL d, time the run's verdict and copy, restart d after 20 s, time its rejoin."""
    gone, back = count(err, "is gone"), count(err, "is back")
    copied = count(err, "copied anew") + count(err, "held nothing of this run")
    d.kill()
    verdict = wait_count(err, "is gone", gone + 1, 60)
    # what it held copied anew, or nothing to copy: the verdict said so
    copied_s = wait_count2(err, ("copied anew", "held nothing of this run"), copied + 1, 120)
    time.sleep(20)
    d.start()
    back_s = wait_count(err, "is back", back + 1, 120)
    return {"n": n, "daemon": d.where, "verdict_s": verdict, "copied_s": copied_s, "back_s": back_s}


if __name__ == "__main__":
    sys.exit(main())

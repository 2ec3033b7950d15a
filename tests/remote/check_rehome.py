#!/usr/bin/env python3
"""A verdict for every lost daemon (issue 23, item 4), on loopback daemons.

usage: check_rehome.py HPDLF_EXEC HPDLF_STORE MODELS_DIR

- --replicas 2, three daemons: one killed, the chunks it held are copied
  anew from their other copy (one warning says so); the killed daemon is
  restarted on its port and rejoins; then a second and a third daemon are
  killed in turn.  Without the copies made after the first loss the second
  kill would lose chunks; the run must end with exit 0 and losses bitwise
  equal to a local run.
- one daemon, no replicas, inference for many runs: the daemon killed, the
  weights it held are read again from the model, the activations dropped;
  the outputs are bitwise those of a local run.
- one daemon, no replicas, training: the daemon killed, the run stops with
  exit 1 naming the daemon and the values lost (weights, optimizer state).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

exe, store, models = sys.argv[1], sys.argv[2], sys.argv[3]
fails = 0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_daemon(tmp, token, port=None):
    port = port or free_port()
    pf = os.path.join(tmp, "port.%d.%f" % (port, time.time()))
    d = subprocess.Popen([store, "--listen", "127.0.0.1:%d" % port, "--dram", "256M", "--token-file", token,
                          "--port-file", pf, "--log-level", "warn"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        if os.path.exists(pf) and open(pf).read().strip():
            return d, "127.0.0.1:%d" % port
        if d.poll() is not None:
            raise RuntimeError("daemon on port %d exited" % port)
        time.sleep(0.05)
    raise RuntimeError("daemon did not start")


def check(cond, what, detail=""):
    global fails
    print("%s %s%s" % ("ok  " if cond else "FAIL", what, (": " + detail) if detail and not cond else ""))
    if not cond:
        fails += 1


def text(path):
    return open(path, errors="replace").read() if os.path.exists(path) else ""


def wait_for(path, needle, count, proc, limit=120):
    """Until `needle` appears `count` times in file `path` (the run's stderr)."""
    end = time.time() + limit
    while time.time() < end:
        if text(path).count(needle) >= count:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def log_lines(path):
    return len(open(path).readlines()) if os.path.exists(path) else 0


def kill(d):
    d[0].send_signal(signal.SIGKILL)
    d[0].wait()


def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if l.strip()]


def replicas_case(tmp, token, train):
    p = os.path.join
    daemons = [start_daemon(tmp, token) for _ in range(3)]
    try:
        r0 = subprocess.run([exe] + train + ["--log-json", p(tmp, "ref.jsonl")], capture_output=True, text=True)
        err = p(tmp, "rep.err")
        args = train + ["--store", ",".join(e for _, e in daemons), "--token-file", token, "--replicas", "2",
                        "--log-json", p(tmp, "rep.jsonl")]
        with open(err, "w") as ef:
            proc = subprocess.Popen([exe] + args, stdout=subprocess.DEVNULL, stderr=ef)
        for _ in range(600):
            if log_lines(p(tmp, "rep.jsonl")) >= 3 or proc.poll() is not None:
                break
            time.sleep(0.1)
        kill(daemons[0])
        # the store's verdict: what the daemon held copied anew (maybe 0
        # chunks: a kill in a step may take only activations freed by then)
        check(wait_for(err, "copied anew", 1, proc), "--replicas 2: the chunks of a killed daemon are copied anew",
              text(err)[-400:])
        port = int(daemons[0][1].rsplit(":", 1)[1])
        daemons[0] = start_daemon(tmp, token, port)
        check(wait_for(err, "is back", 1, proc), "a daemon restarted on its port rejoins", text(err)[-400:])
        steps = log_lines(p(tmp, "rep.jsonl"))
        for _ in range(600):  # it takes spills again before the next loss
            if log_lines(p(tmp, "rep.jsonl")) >= steps + 3 or proc.poll() is not None:
                break
            time.sleep(0.1)
        kill(daemons[1])
        check(wait_for(err, "copied anew", 2, proc), "a second daemon killed: copied anew again", text(err)[-400:])
        kill(daemons[2])
        proc.wait(timeout=600)
        e = text(err)
        check(proc.poll() == 0 and r0.returncode == 0, "three kills, one restart: training ends with exit 0",
              "exit %s: %s" % (proc.returncode, e[-600:]))
        if proc.returncode == 0 and r0.returncode == 0:
            a, b = losses(p(tmp, "ref.jsonl")), losses(p(tmp, "rep.jsonl"))
            check(a == b, "losses bitwise equal to the local run (%d steps)" % len(a))
        check("are lost" not in e, "no value reported lost", e[-600:])
    finally:
        for d, _ in daemons:
            if d.poll() is None:
                d.kill()
                d.wait()


def refill_case(tmp, token, m):
    p = os.path.join
    model, x = p(m, "model.onnx"), p(m, "infer_x.npy")
    base = [model, "--input", "input=" + x, "--budget", "2M", "--quiet"]
    r0 = subprocess.run([exe] + base + ["--output", "logits=" + p(tmp, "local.npy")], capture_output=True, text=True)
    d = start_daemon(tmp, token)
    err = p(tmp, "inf.err")
    try:
        with open(err, "w") as ef:
            proc = subprocess.Popen([exe] + base + ["--output", "logits=" + p(tmp, "remote.npy"), "--store", d[1],
                                                    "--token-file", token, "--duration", "6",
                                                    "--log-json", p(tmp, "inf.jsonl")],
                                    stdout=subprocess.DEVNULL, stderr=ef)
        for _ in range(600):
            if log_lines(p(tmp, "inf.jsonl")) >= 2 or proc.poll() is not None:
                break
            time.sleep(0.1)
        kill(d)
        proc.wait(timeout=600)
        e = text(err)
        check(proc.returncode == 0 and r0.returncode == 0, "no replicas, inference: a killed daemon costs nothing "
              "(weights read again from the model, activations dropped)", "exit %s: %s" % (proc.returncode, e[-600:]))
        check("read again from their source" in e, "the warning counts what was read again", e[-600:])
        if proc.returncode == 0 and r0.returncode == 0:
            check(open(p(tmp, "local.npy"), "rb").read() == open(p(tmp, "remote.npy"), "rb").read(),
                  "outputs bitwise equal to the local run")
    finally:
        if d[0].poll() is None:
            d[0].kill()
            d[0].wait()


def lost_case(tmp, token, train):
    p = os.path.join
    d = start_daemon(tmp, token)
    err = p(tmp, "lost.err")
    args = train[:train.index("--steps") + 1] + ["100000"] + train[train.index("--steps") + 2:]
    try:
        with open(err, "w") as ef:
            proc = subprocess.Popen([exe] + args + ["--store", d[1], "--token-file", token,
                                                    "--log-json", p(tmp, "lost.jsonl"), "--checkpoint",
                                                    p(tmp, "ck"), "--checkpoint-every", "2"],
                                    stdout=subprocess.DEVNULL, stderr=ef)
        for _ in range(600):
            if log_lines(p(tmp, "lost.jsonl")) >= 3 or proc.poll() is not None:
                break
            time.sleep(0.1)
        kill(d)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        e = text(err)
        check(proc.returncode == 1 and d[1] in e and "values '" in e and "are lost" in e and
              "resume from the checkpoint in " + p(tmp, "ck") + " (step " in e,
              "no replicas, training: a killed daemon stops the run naming it, the values lost and the checkpoint",
              "exit %s: %s" % (proc.returncode, e[-600:]))
    finally:
        if d[0].poll() is None:
            d[0].kill()
            d[0].wait()


def main():
    m = os.path.join(models, "unet3d_tiny")
    # mlp: its weights and Adam's moments (1 MiB) do not fit the budget, so
    # they live on the daemons between steps too, not only activations
    t = os.path.join(models, "mlp")
    train = [os.path.join(t, "model.onnx"), "--train", "--data", os.path.join(t, "x.npy"), "--labels",
             os.path.join(t, "y.npy"), "--loss", "cross-entropy", "--optimizer", "adam", "--lr", "0.001", "--batch",
             "16", "--steps", "800", "--no-shuffle", "--quiet", "--budget", "256K"]
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        with open(token, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(token, 0o600)
        replicas_case(tmp, token, train)
        refill_case(tmp, token, m)
        lost_case(tmp, token, train)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

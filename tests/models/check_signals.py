#!/usr/bin/env python3
"""Honest crashes and signals (issue 23, item 3; issue 20, item 1).

usage: check_signals.py HPDLF_EXEC MODEL_DIR [MAKE_COMMITTED_STORE]

- A crash is a crash: SIGSEGV, SIGBUS, SIGILL and SIGABRT sent to a running
  hpdlf-exec end it by that signal (no handler of libfabric's PSM libraries
  catching it, exiting 1 and writing *.btr files into the working folder).
- SIGTERM and SIGINT stop inference after the running iteration: status
  143 / 130, one line, the statistics page of an out-of-core run removed.
- SIGTERM during training with --checkpoint (Slurm's scancel, time limit)
  writes a checkpoint and exits 143; --resume continues from it.
- SIGUSR1 stops training like SIGTERM (138); a SIGTERM that arrives while
  a checkpoint is being written (HPDLF_TEST_TERM_IN_CHECKPOINT) lets it
  complete and stops with 143; both resume with the uninterrupted losses.
- Disk hygiene (issue 20 item 8): a --tier file that existed is truncated
  to 0 bytes at exit and one line says so, also after SIGTERM (training
  and inference); one the run created is removed; a usage error leaves a
  given file as it was; a SIGTERM while the step is still being planned
  (HPDLF_TEST_TERM_IN_PLAN) ends the run at once with 143, tidying the
  --tier files the same way; a file holding a program's committed named tensors
  (a persistent store, made here through the public API) is refused with
  one line, status 2, its bytes untouched.

MODEL_DIR is a reference model folder (model.onnx, x.npy, y.npy).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def started(p, log=None, timeout=60):
    """Wait until p runs its main loop: a first log line, or a second passed."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout and p.poll() is None:
        if log is None and time.monotonic() - t0 > 1.0:
            return True
        if log is not None and os.path.exists(log) and os.path.getsize(log) > 0:
            return True
        time.sleep(0.05)
    return p.poll() is None


def crash_signals(exe, model, tmp):
    for sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGABRT, signal.SIGTERM, signal.SIGINT):
        cwd = tempfile.mkdtemp(dir=tmp)
        pages = tempfile.mkdtemp(dir=tmp)
        stop = sig in (signal.SIGTERM, signal.SIGINT)
        # no core files from the deliberate crashes; out of core, so a stats page exists
        p = subprocess.Popen([exe, model, "--iterations", "2000000", "--budget", "300K"], cwd=cwd,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, HPDLF_STATS_DIR=pages),
                             preexec_fn=lambda: __import__("resource").setrlimit(
                                 __import__("resource").RLIMIT_CORE, (0, 0)))
        if not check(started(p), f"{sig.name}: inference running"):
            p.kill()
            continue
        p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, f"{sig.name}: still running 20 s after the signal")
            continue
        if stop:
            check(p.returncode == 128 + sig and ("terminated" if sig == signal.SIGTERM else "interrupted") in err,
                  f"{sig.name}: stops after the iteration, exit {128 + sig} (got {p.returncode}: {err.strip()!r})")
            check(not os.listdir(pages), f"{sig.name}: the statistics page is gone ({os.listdir(pages)})")
        else:
            check(p.returncode == -sig, f"{sig.name}: ended by the signal (returncode {p.returncode}, want {-sig})")
        check("Backtrace" not in err, f"{sig.name}: no foreign backtrace on stderr ({err.strip()[:200]!r})")
        check(not os.listdir(cwd), f"{sig.name}: nothing written into the working folder ({os.listdir(cwd)})")


def sigterm_training(exe, folder, tmp):
    ck, log = os.path.join(tmp, "ck"), os.path.join(tmp, "log.jsonl")
    args = [exe, os.path.join(folder, "model.onnx"), "--train", "--data", os.path.join(folder, "x.npy"),
            "--labels", os.path.join(folder, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd",
            "--lr", "0.01", "--batch", "8", "--checkpoint", ck, "--checkpoint-every", "1000000"]
    p = subprocess.Popen(args + ["--steps", "100000000", "--log-json", log], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    if not check(started(p, log), "training running"):
        p.kill()
        return
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        check(False, "SIGTERM: training still running 30 s after the signal")
        return
    check(p.returncode == 143, f"SIGTERM: training exits 143 (got {p.returncode}: {err.strip()[-200:]!r})")
    check("terminated" in err and "--resume" in err, f"SIGTERM: says so and how to continue ({err.strip()[-200:]!r})")
    check(os.path.exists(os.path.join(ck, "checkpoint.hpck")), "SIGTERM: a checkpoint was written")
    with open(log) as f:
        done = sum(1 for _ in f)
    log2, ref = os.path.join(tmp, "resumed.jsonl"), os.path.join(tmp, "ref.jsonl")
    r = subprocess.run(args + ["--steps", str(done + 2), "--resume", "--log-json", log2], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0, f"SIGTERM: --resume continues from it (exit {r.returncode}: {r.stderr.strip()[-200:]!r})")
    # the resumed steps' losses are bitwise those of a run never interrupted
    plain = [a for a in args if a not in ("--checkpoint", ck, "--checkpoint-every", "1000000")]
    q = subprocess.run(plain + ["--steps", str(done + 2), "--log-json", ref], capture_output=True, text=True,
                       timeout=300)
    if check(q.returncode == 0 and os.path.exists(log2), f"SIGTERM: an uninterrupted run for reference ({q.returncode})"):
        with open(ref) as f:
            want = {j["step"]: j["loss"] for j in map(json.loads, f)}
        with open(log2) as f:
            got = {j["step"]: j["loss"] for j in map(json.loads, f)}
        check(got and all(want.get(k) == v for k, v in got.items()),
              f"SIGTERM: resumed losses bitwise the uninterrupted run's ({got} vs {[want.get(k) for k in got]})")


def stop_in_checkpoint_and_usr1(exe, folder, tmp):
    """SIGUSR1 (what batch systems send ahead of a time limit) stops training
    like SIGTERM, with 138; a SIGTERM arriving while a checkpoint is being
    written lets it complete and stops with 143; both resume bitwise."""
    base = [exe, os.path.join(folder, "model.onnx"), "--train", "--data", os.path.join(folder, "x.npy"),
            "--labels", os.path.join(folder, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd",
            "--lr", "0.01", "--batch", "8"]
    for tag, sig, env in (("usr1", signal.SIGUSR1, {}), ("mid-ckpt", signal.SIGTERM,
                                                        {"HPDLF_TEST_TERM_IN_CHECKPOINT": "2"})):
        ck, log = os.path.join(tmp, tag + "-ck"), os.path.join(tmp, tag + ".jsonl")
        args = base + ["--checkpoint", ck, "--checkpoint-every", "3" if env else "1000000"]
        p = subprocess.Popen(args + ["--steps", "100000000", "--log-json", log], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, **env))
        if not env:
            if not check(started(p, log), f"{tag}: training running"):
                p.kill()
                continue
            p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, f"{tag}: training still running 60 s after the signal")
            continue
        check(p.returncode == 128 + sig and "--resume" in err,
              f"{tag}: exits {128 + sig} saying how to resume (got {p.returncode}: {err.strip()[-200:]!r})")
        with open(log) as f:
            done = sum(1 for _ in f)
        if env:  # the 2nd checkpoint (after step 6) was written when the signal came
            check(done in (6, 7), f"{tag}: stopped right after the checkpoint it was writing ({done} steps)")
        log2, ref = os.path.join(tmp, tag + "-resumed.jsonl"), os.path.join(tmp, tag + "-ref.jsonl")
        r = subprocess.run(args + ["--steps", str(done + 2), "--resume", "--log-json", log2], capture_output=True,
                           text=True, timeout=120)
        q = subprocess.run(base + ["--steps", str(done + 2), "--log-json", ref], capture_output=True, text=True,
                           timeout=300)
        if not check(r.returncode == 0 and q.returncode == 0, f"{tag}: --resume and a reference run "
                     f"({r.returncode}, {q.returncode}: {r.stderr.strip()[-200:]!r})"):
            continue
        with open(ref) as f:
            want = {j["step"]: j["loss"] for j in map(json.loads, f)}
        with open(log2) as f:
            got = {j["step"]: j["loss"] for j in map(json.loads, f)}
        check(sorted(got) == [done, done + 1] and all(want.get(k) == v for k, v in got.items()),
              f"{tag}: resumed at step {done}, losses bitwise the uninterrupted run's ({got})")


def tier_hygiene(exe, folder, tmp):
    model = os.path.join(folder, "model.onnx")
    train = [exe, model, "--train", "--data", os.path.join(folder, "x.npy"), "--labels",
             os.path.join(folder, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.01",
             "--batch", "8", "--budget", "300K"]
    old = os.path.join(tmp, "old.spill")
    for what, args in (("training", train + ["--steps", "100000000"]),
                       ("inference", [exe, model, "--budget", "300K", "--iterations", "2000000"])):
        with open(old, "wb") as f:
            f.write(b"stale spill data" * 4096)
        log = os.path.join(tmp, "hyg.jsonl")
        if os.path.exists(log):
            os.unlink(log)
        p = subprocess.Popen(args + ["--tier", "nvme=%s:64M" % old, "--log-json", log], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        if not check(started(p, log), f"{what} on an existing --tier file running"):
            p.kill()
            continue
        grown = os.path.getsize(old)
        p.send_signal(signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, f"{what}: still running 30 s after SIGTERM")
            continue
        check(p.returncode == 143, f"{what}: SIGTERM exits 143 (got {p.returncode}: {err.strip()[-200:]!r})")
        check(grown >= 64 << 20, f"{what}: the tier file was in use at 64 MiB ({grown} bytes)")
        check(os.path.exists(old) and os.path.getsize(old) == 0,
              f"{what}: after SIGTERM the existing --tier file is truncated to 0 bytes "
              f"({os.path.getsize(old) if os.path.exists(old) else 'gone'})")
        check(("--tier %s: truncated to 0 bytes" % old) in err, f"{what}: one line says so ({err.strip()[-300:]!r})")
    new = os.path.join(tmp, "new.spill")
    log = os.path.join(tmp, "hyg2.jsonl")
    p = subprocess.Popen(train + ["--steps", "100000000", "--tier", "nvme=%s:64M" % new, "--log-json", log],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check(started(p, log), "training on a new --tier file running"):
        existed = os.path.exists(new)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        check(existed and p.returncode == 143 and not os.path.exists(new),
              f"SIGTERM: the --tier file the run created is removed (existed {existed}, status {p.returncode}, "
              f"left {os.path.exists(new)})")
    else:
        p.kill()
    # a signal before the first step (planning a large net for a small
    # budget takes minutes; --plan) ends the run at once, tidied
    env = dict(os.environ, HPDLF_TEST_TERM_IN_PLAN="1")
    for what, extra in (("training", []), ("--plan", ["--plan"])):
        with open(old, "wb") as f:
            f.write(b"stale spill data" * 4096)
        if os.path.exists(new):
            os.unlink(new)
        for path, made in ((old, False), (new, True)):
            r = subprocess.run(train + ["--steps", "2", "--tier", "nvme=%s:64M" % path] + extra, capture_output=True,
                               text=True, timeout=60, env=env)
            lines = r.stderr.strip().splitlines()
            gone = not os.path.exists(path)
            # --plan never opens the tiers: an existing file keeps its bytes
            kept = 0 if not extra else 16 * 4096
            check(r.returncode == 143 and "terminated before training started" in r.stderr and
                  (gone if made else (not gone and os.path.getsize(path) == kept and len(lines) == 2 - bool(extra) and
                                      (extra or ("--tier %s: truncated to 0 bytes" % path) in r.stderr))),
                  f"{what}: SIGTERM while planning exits 143 at once, the {'new' if made else 'existing'} --tier "
                  f"file {'removed' if made else 'at %d bytes, one line each' % kept} (status {r.returncode}, "
                  f"{'gone' if gone else os.path.getsize(path)}: {r.stderr.strip()[-300:]!r})")
    with open(old, "wb") as f:
        f.write(b"keep me" * 100)
    r = subprocess.run(train + ["--steps", "2", "--tier", "nvme=%s:64M" % old, "--momentum", "lots"],
                       capture_output=True, text=True, timeout=60)
    with open(old, "rb") as f:
        kept = f.read()
    check(r.returncode == 2 and kept == b"keep me" * 100,
          f"a usage error leaves a given --tier file as it was (status {r.returncode}, {len(kept)} bytes)")
    if len(sys.argv) > 3:  # a tier file holding a program's committed named tensors is refused, untouched
        maker = os.path.abspath(sys.argv[3])
        for n in (2, 0):
            store = os.path.join(tmp, "saved%d.hpst" % n)
            m = subprocess.run([maker, store, str(n)], capture_output=True, text=True, timeout=60)
            if not check(m.returncode == 0, f"a committed store with {n} named tensors made ({m.stderr.strip()})"):
                continue
            with open(store, "rb") as f:
                before = f.read()
            r = subprocess.run(train + ["--steps", "2", "--tier", "nvme=%s:64M" % store], capture_output=True,
                               text=True, timeout=120)
            with open(store, "rb") as f:
                after = f.read()
            if n:
                check(r.returncode == 2 and "holds a persistent store with 2 named tensors" in r.stderr and
                      len(r.stderr.strip().splitlines()) == 1 and after == before,
                      f"a --tier file holding 2 committed named tensors: one line, status 2, not touched "
                      f"(status {r.returncode}, unchanged {after == before}: {r.stderr.strip()!r})")
            else:  # committed, but nothing named: scratch like any other
                check(r.returncode == 0 and os.path.getsize(store) == 0,
                      f"a --tier file of a store holding no named tensor is used and truncated (status "
                      f"{r.returncode}, {os.path.getsize(store)} bytes: {r.stderr.strip()[-200:]!r})")


def main():
    exe, folder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        crash_signals(exe, os.path.join(folder, "model.onnx"), tmp)
        sigterm_training(exe, folder, tmp)
        stop_in_checkpoint_and_usr1(exe, folder, tmp)
        tier_hygiene(exe, folder, tmp)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

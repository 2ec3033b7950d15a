#!/usr/bin/env python3
"""No silent success in training (issue 23, item 2).

usage: check_guards.py HPDLF_EXEC MODEL_DIR

- A non-finite loss stops training (exit 1, one line naming the step), is
  written as null in --log-json (which stays JSON), and the checkpoint of
  the last good step stays current and resumes; --no-stop-on-nan trains on
  with one warning.
- --resume without a checkpoint is an error (exit 2); --resume-if-present
  starts from step 0.
- Every byte of a checkpoint's header page and trailer is verified: a
  flipped version or reserved byte is refused (exit 2) and never resumed.

MODEL_DIR is a reference model folder (model.onnx, x.npy, y.npy).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def run(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stderr


def log_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def strict_json(path):
    """True if every line is JSON as RFC 8259 has it (no NaN or Infinity)."""
    def refuse(token):
        raise ValueError(token)
    try:
        with open(path) as f:
            for line in f:
                json.loads(line, parse_constant=refuse)
        return True
    except ValueError:
        return False


def main():
    exe, folder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    base = [exe, os.path.join(folder, "model.onnx"), "--train", "--data", os.path.join(folder, "x.npy"),
            "--labels", os.path.join(folder, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd",
            "--batch", "8", "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        ck, log = os.path.join(tmp, "ck"), os.path.join(tmp, "nan.jsonl")
        # lr 1e30 diverges at step 1; step 0's state is the last good one
        rc, err = run(base + ["--lr", "1e30", "--steps", "10", "--log-json", log, "--checkpoint", ck,
                              "--checkpoint-every", "1"])
        lines = [l for l in err.splitlines() if l.strip()]
        check(rc == 1 and len(lines) == 1 and "step 1" in lines[0] and ("NaN" in err or "infinity" in err),
              f"a diverging run stops at the first non-finite loss, exit 1 (exit {rc}: {err.strip()!r})")
        check(strict_json(log), "--log-json stays JSON (null, not NaN)")
        steps = log_lines(log)
        check([s["step"] for s in steps] == [0, 1] and steps[1]["loss"] is None,
              f"the log ends with the bad step, loss null ({[(s['step'], s['loss']) for s in steps]})")
        rc, err = run(base + ["--lr", "0.01", "--steps", "3", "--checkpoint", ck, "--resume", "--log-json",
                              os.path.join(tmp, "res.jsonl")])
        res = log_lines(os.path.join(tmp, "res.jsonl"))
        # the state after step 0 is what diverges at step 1: resumed, it
        # diverges there again, bit for bit the same run
        check(res and res[0]["step"] == 1 and res[0]["loss"] is None and rc == 1,
              f"the checkpoint after the last finite loss is current: the resumed run starts at step 1 "
              f"(exit {rc}, log {res})")
        log2 = os.path.join(tmp, "nan2.jsonl")
        rc, err = run(base + ["--lr", "1e30", "--steps", "5", "--log-json", log2, "--no-stop-on-nan"])
        check(rc == 0 and err.count("warning") == 1 and strict_json(log2) and len(log_lines(log2)) == 5,
              f"--no-stop-on-nan trains on with one warning (exit {rc}: {err.strip()[-300:]!r})")

        empty = os.path.join(tmp, "empty")
        rc, err = run(base + ["--lr", "0.01", "--steps", "2", "--checkpoint", empty, "--resume"])
        check(rc == 2 and "no checkpoint" in err, f"--resume without a checkpoint: exit 2 ({rc}: {err.strip()!r})")
        rc, err = run(base + ["--lr", "0.01", "--steps", "2", "--checkpoint", empty, "--resume-if-present"])
        check(rc == 0 and os.path.exists(os.path.join(empty, "checkpoint.hpck")),
              f"--resume-if-present starts from step 0 (exit {rc}: {err.strip()!r})")

        good = os.path.join(empty, "checkpoint.hpck")
        size = os.path.getsize(good)
        for what, at in (("version byte", 8), ("reserved header byte", 100), ("trailer version", size - 4),
                         ("reserved trailer byte", size - 2)):
            bad = os.path.join(tmp, "bad")
            shutil.rmtree(bad, ignore_errors=True)
            os.makedirs(bad)
            shutil.copy(good, os.path.join(bad, "checkpoint.hpck"))
            with open(os.path.join(bad, "checkpoint.hpck"), "r+b") as f:
                f.seek(at)
                b = f.read(1)
                f.seek(at)
                f.write(bytes([b[0] ^ 0x01]))
            rc, err = run(base + ["--lr", "0.01", "--steps", "3", "--checkpoint", bad, "--resume"])
            check(rc == 2 and "checkpoint" in err and len(err.strip().splitlines()) == 1,
                  f"a flipped {what} (byte {at}) is refused: exit {rc}: {err.strip()!r}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

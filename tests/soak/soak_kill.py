#!/usr/bin/env python3
"""Soak: SIGKILL checkpointed training at random moments, many times
(issue 23, item 7).  Every run resumes from the last committed checkpoint
(--resume-if-present); every loss any run logs must equal, bit for bit, the
loss of an uninterrupted run at the same step, and no resume may fail (a
torn checkpoint would).

usage: soak_kill.py HPDLF_EXEC MODEL_DIR [KILLS] [SEED]
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time


def losses(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue  # a line cut by the kill
                out.setdefault(d["step"], []).append(d["loss"])
    return out


def main():
    exe, folder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    kills = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    rnd = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    steps = 100000
    base = [exe, os.path.join(folder, "model.onnx"), "--train", "--data", os.path.join(folder, "x.npy"),
            "--labels", os.path.join(folder, "y.npy"), "--loss", "cross-entropy", "--optimizer", "adam",
            "--lr", "0.001", "--batch", "16", "--shuffle", "--seed", "7", "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        ck, log = os.path.join(tmp, "ck"), os.path.join(tmp, "part.jsonl")
        done, starts, failures, t0 = 0, 0, [], time.time()
        while done < kills:
            p = subprocess.Popen(base + ["--steps", str(steps), "--checkpoint", ck, "--checkpoint-every", "7",
                                         "--resume-if-present", "--log-json", log],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            starts += 1
            time.sleep(rnd.uniform(0.05, 1.2))
            if p.poll() is not None:
                failures.append("run %d ended by itself: exit %d %s" % (starts, p.returncode, p.stderr.read()[-300:]))
                break
            p.send_signal(signal.SIGKILL)
            p.wait()
            p.stderr.close()
            done += 1
        got = losses(log)
        last = max(got) if got else 0
        ref_log = os.path.join(tmp, "ref.jsonl")
        r = subprocess.run(base + ["--steps", str(last + 1), "--log-json", ref_log], capture_output=True, text=True)
        ref = losses(ref_log)
        bad = [(s, l, ref.get(s)) for s, ls in got.items() for l in ls if ref.get(s) != [l]]
        if r.returncode != 0:
            failures.append("reference run failed: %s" % r.stderr[-300:])
        if bad:
            failures.append("%d logged losses differ from the uninterrupted run, first %s" % (len(bad), bad[:3]))
        resumed = sum(1 for s, ls in got.items() if len(ls) > 1)
        print(json.dumps({"soak": "kill-resume", "kills": done, "runs": starts, "steps_reached": last,
                          "steps_logged_twice": resumed, "wrong_losses": len(bad), "seconds": round(time.time() - t0, 1),
                          "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Small models under tight budgets, where the store keeps tensors in runs
of its frame pool and compacts them by memcpy (store/compact.c): many
steps and iterations must go through without one crc32c mismatch and
with bitwise the in-core results.  A chunk copied back into its tensor's
range by the compaction's last resort once lost its pages to the next
flush of emptied ranges (the mlp's inference failed after ~500
iterations at 200K); LeNet trains at 25% of its in-core peak, where a
step moves ~40 tensors through runs.  There (below 4 MiB of tensors, one
worker) the compute worker issues its loads and write-backs itself and
reaps them between kernels, many in flight at once (--stats-json
io_threads 0); the I/O requests per step are printed as figures, and so
is the frame pool's work (--stats-json frames: out of core only, the
compactions that made runs, the bytes they copied, the mremaps).

usage: check_runs_churn.py HPDLF_EXEC MODELS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stderr.strip()


def losses(path):
    with open(path) as f:
        return [json.loads(l)["loss"] for l in f if l.strip()]


def main():
    exe, models = sys.argv[1], sys.argv[2]
    mlp = os.path.join(models, "mlp", "model.onnx")
    rc, err = run([exe, mlp, "--iterations", "1500", "--quiet", "--budget", "200K"])
    check(rc == 0, "mlp inference, 1500 iterations at 200K: exit 0 (%s)" % err[-200:])
    d = os.path.join(models, "lenet")
    args = [exe, os.path.join(d, "model.onnx"), "--train", "--data", os.path.join(d, "x.npy"), "--labels",
            os.path.join(d, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.05", "--batch", "64",
            "--steps", "40", "--no-shuffle", "--quiet", "--threads", "2"]
    with tempfile.TemporaryDirectory() as tmp:
        inc, ooc = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "oc.jsonl")
        st = os.path.join(tmp, "st.json")
        r1 = run(args + ["--log-json", inc, "--stats-json", st])
        if not check(r1[0] == 0, "lenet in core: exit 0 (%s)" % r1[1][-200:]):
            return 1
        with open(st) as f:
            s1 = json.load(f)
        budget = s1["tensor_peak_bytes"] // 4
        check("frames" not in s1, "lenet in core: no frame pool in --stats-json")
        st2 = os.path.join(tmp, "st2.json")
        r2 = run(args + ["--budget", str(budget), "--log-json", ooc, "--stats-json", st2])
        if check(r2[0] == 0, "lenet at 25%% (%d B), 40 steps: exit 0 (%s)" % (budget, r2[1][-200:])):
            check(losses(ooc) == losses(inc), "lenet at 25%: bitwise the in-core losses")
            with open(st2) as f:
                s2 = json.load(f)
            rq = s2.get("io_requests", {})
            check(s2.get("io_threads") == 0 and rq.get("reads", 0) > 0 and rq.get("writes", 0) > 0,
                  "lenet at 25%%: the compute worker issued the I/O (io_threads %s), %.1f reads and %.1f writes "
                  "a step" % (s2.get("io_threads"), rq.get("reads", 0) / 40, rq.get("writes", 0) / 40))
            fr = s2.get("frames", {})
            keys = ("mremaps", "compactions", "slides", "compact_bytes")
            check(all(isinstance(fr.get(k), int) and fr[k] >= 0 for k in keys) and fr["slides"] <= fr["compactions"]
                  and fr["compactions"] > 0 and fr["compact_bytes"] > 0 and fr["compact_bytes"] % 4096 == 0,
                  "lenet at 25%%: --stats-json frames: %.1f compactions (%.1f slides) copying %.0f KiB, %.1f mremaps "
                  "a step" % (fr.get("compactions", 0) / 40, fr.get("slides", 0) / 40,
                              fr.get("compact_bytes", 0) / 40 / 1024, fr.get("mremaps", 0) / 40))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

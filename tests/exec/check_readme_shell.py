#!/usr/bin/env python3
"""The README's shell commands work as written (issue 20, item 9).

usage: check_readme_shell.py README.md BUILD_ROOT SOURCE_ROOT

- Every command of the block after the `readme-examples` marker runs,
  word for word, in a fresh directory that holds `build` (the build) and
  `tests` (the repository's) as the top of a built clone does, and exits
  0; the files the examples name are there afterwards (outputs, trace,
  log, checkpoint, export, plot, CSV) and the spill file the run created
  is gone.
- The Slurm batch script runs with a stand-in `srun` that starts each step
  on this node, with SLURM_* set for a one-node job, and refuses a second
  step without --overlap while another one runs (Slurm >= 20.11 would wait
  for it forever).  Only the model and the data set are the test's own
  (the script's `model.onnx` and `$PWD/train.npz`).  It must exit 0,
  train (log lines, a checkpoint) beside a daemon reached through the
  port files, shut the daemon down (the daemon's step ends, the script's
  `wait` returns) and remove its port files.  A daemon that cannot start
  ends the script with status 1 instead of a wait forever.
"""
import glob
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile

import numpy as np

README, BUILD, SRC = (os.path.abspath(a) for a in sys.argv[1:4])
FAILS = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail), flush=True)
    if not ok:
        FAILS.append(what)
    return ok


def commands(block):
    """Shell commands of a block: comments dropped, continuations joined."""
    out, cur = [], ""
    for line in block.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append(cur.strip())
            cur = ""
    return out


def clean_env(tmp):
    e = dict(os.environ, TMPDIR=os.path.join(tmp, "scratch"), HOME=os.path.join(tmp, "home"))
    for k in list(e):
        if k.startswith(("SLURM", "HPDLF_", "OMPI_", "PMIX_", "PMI_")):
            del e[k]
    return e


def examples(text, tmp):
    m = re.search(r"<!-- readme-examples[^>]*-->\s*```sh\n(.*?)```", text, re.S)
    if not check(m is not None, "README holds the marked examples"):
        return
    cmds = commands(m.group(1))
    check(len(cmds) >= 8, "the examples block has its commands", str(cmds))
    top = os.path.join(tmp, "clone")
    os.makedirs(top)
    os.symlink(BUILD, os.path.join(top, "build"))
    os.symlink(os.path.join(SRC, "tests"), os.path.join(top, "tests"))
    env = clean_env(tmp)
    os.makedirs(env["TMPDIR"])
    os.makedirs(env["HOME"])
    for c in cmds:
        r = subprocess.run(["sh", "-c", c], cwd=top, env=env, capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, "runs as written: " + c[:90], "exit %d: %s" % (r.returncode, r.stderr[-400:]))
    for f in ("out/logits.npy", "y.npy", "run.json", "log.jsonl", "ckpt/checkpoint.hpck", "trained.onnx", "log.svg",
              "log.csv"):
        check(os.path.exists(os.path.join(top, f)), "the examples wrote " + f)
    if os.path.exists(os.path.join(top, "log.jsonl")):
        with open(os.path.join(top, "log.jsonl")) as fh:
            check(sum(1 for _ in fh) == 40, "log.jsonl holds the 40 steps")
    check(not os.listdir(env["TMPDIR"]), "the spill file the example created is gone", str(os.listdir(env["TMPDIR"])))


FAKE_SRUN = r'''#!/bin/sh
# srun stand-in for one node: runs the step here.  Slurm >= 20.11 gives a
# step its CPUs for itself: a second step without --overlap would wait for
# the first to end; here it fails at once instead of hanging.
overlap=0
while [ $# -gt 0 ]; do
    case "$1" in
    --overlap) overlap=1; shift ;;
    --*=*) shift ;;
    -N|-n|--ntasks|--ntasks-per-node|--nodes) shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
done
running="$FAKE_SRUN_DIR/running"
if [ -s "$running" ] && [ $overlap = 0 ]; then
    echo "srun: a step without --overlap waits for step(s) $(cat "$running") to end (forever here)" >&2
    exit 99
fi
step=$(ls "$FAKE_SRUN_DIR" | grep -c '^step')
touch "$FAKE_SRUN_DIR/step$step"
echo "$step" >> "$running"
SLURM_STEP_ID=$step SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 "$@"
rc=$?
grep -v "^$step\$" "$running" > "$running.new"; mv "$running.new" "$running"
exit $rc
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def slurm_env(tmp, job):
    e = clean_env(tmp)
    bin_dir = os.path.join(tmp, "bin")
    e.update(PATH=bin_dir + os.pathsep + os.path.join(BUILD, "tools") + os.pathsep + e["PATH"],
             FAKE_SRUN_DIR=os.path.join(tmp, "srun-" + job), SLURM_JOB_ID=job, SLURM_JOB_NUM_NODES="1",
             SLURM_NNODES="1", SLURM_JOB_NODELIST="localhost", SLURMD_NODENAME="127.0.0.1",
             HPDLF_STORE_PORT=str(free_port()))
    os.makedirs(e["FAKE_SRUN_DIR"])
    return e


def slurm(text, tmp):
    m = re.search(r"```sh\n(#!/bin/sh\n#SBATCH.*?)```", text, re.S)
    if not check(m is not None, "README holds the Slurm batch script"):
        return
    script = m.group(1)
    check(script.count("srun ") == script.count("srun --overlap"), "every srun of the script has --overlap")
    check("sleep 2" not in script and "--port-file" in script and "shutdown" in script,
          "the script waits on --port-file, not sleep, and shuts the daemons down")
    job = os.path.join(tmp, "job")
    home = os.path.join(tmp, "home")
    bin_dir = os.path.join(tmp, "bin")
    for d in (job, home, bin_dir, os.path.join(tmp, "scratch")):
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(bin_dir, "srun"), "w") as f:
        f.write(FAKE_SRUN)
    os.chmod(os.path.join(bin_dir, "srun"), 0o755)
    tok = os.path.join(home, ".hpdlf-token")
    with open(tok, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(tok, 0o600)
    mlp = os.path.join(SRC, "tests", "models", "mlp")
    np.savez(os.path.join(job, "train.npz"), x=np.load(os.path.join(mlp, "x.npy")),
             y=np.load(os.path.join(mlp, "y.npy")))
    # the test's own model; everything else as written
    body = script.replace("hpdlf-exec model.onnx", "hpdlf-exec " + os.path.join(mlp, "model.onnx"))
    path = os.path.join(job, "job.sh")
    with open(path, "w") as f:
        f.write(body)
    os.chmod(path, 0o755)
    env = slurm_env(tmp, "4242")
    r = subprocess.run(["sh", path], cwd=job, env=env, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "the batch script exits 0", "exit %d: %s" % (r.returncode, r.stderr[-800:]))
    log = os.path.join(job, "log.jsonl")
    n = sum(1 for _ in open(log)) if os.path.exists(log) else 0
    check(n == 21, "it trained 3 epochs of 7 steps (log.jsonl)", "%d lines" % n)
    check(os.path.exists(os.path.join(job, "ckpt", "checkpoint.hpck")), "it left a checkpoint to resume from")
    check(not glob.glob(os.path.join(job, "hpdlf-ports.*")), "it removed its port files", str(os.listdir(job)))
    # run again (a requeue): --resume-if-present finds the finished run's checkpoint
    env = slurm_env(tmp, "4243")
    r = subprocess.run(["sh", path], cwd=job, env=env, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0 and "resuming at step 21" in r.stderr, "requeued, it resumes from the checkpoint",
          "exit %d: %s" % (r.returncode, r.stderr[-400:]))
    # the stand-in srun is strict: without --overlap the training step is refused
    strict = os.path.join(job, "no-overlap.sh")
    with open(strict, "w") as f:
        f.write(body.replace("srun --overlap --ntasks-per-node=1 hpdlf-exec", "srun --ntasks-per-node=1 hpdlf-exec"))
    env = slurm_env(tmp, "4244")
    r = subprocess.run(["sh", strict], cwd=job, env=env, capture_output=True, text=True, timeout=600)
    check(r.returncode == 99 and "--overlap" in r.stderr, "control: without --overlap the stand-in srun refuses the "
          "training step", "exit %d: %s" % (r.returncode, r.stderr[-300:]))
    # a daemon that cannot start: the script ends instead of waiting forever
    env = slurm_env(tmp, "4245")
    bad = os.path.join(tmp, "bad-token")
    with open(bad, "wb") as f:
        f.write(b"short")
    os.chmod(bad, 0o600)
    with open(os.path.join(job, "bad.sh"), "w") as f:
        f.write(body.replace("export HPDLF_TOKEN_FILE=$HOME/.hpdlf-token", "export HPDLF_TOKEN_FILE=" + bad))
    r = subprocess.run(["sh", os.path.join(job, "bad.sh")], cwd=job, env=env, capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 1 and "did not start" in r.stderr, "a daemon that cannot start ends the script (status 1)",
          "exit %d: %s" % (r.returncode, r.stderr[-300:]))


def main():
    with open(README) as f:
        text = f.read()
    with tempfile.TemporaryDirectory(prefix="hpdlf-readme-") as tmp:
        examples(text, tmp)
    with tempfile.TemporaryDirectory(prefix="hpdlf-slurm-") as tmp:
        slurm(text, tmp)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()

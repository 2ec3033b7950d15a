#!/usr/bin/env python3
"""hpdlf-exec --tune under mpirun: every rank runs one job at a time, rank
0 hands them out and writes the log.  2 ranks write the log --parallel 2
writes on one node (the same search, whatever the timing); SIGKILL of
mpirun mid-search and a re-run end with that log too; --parallel under a
launcher is status 2.  Skipped (77) without MPI or mpirun.
Usage: check_tune_mpi.py HPDLF_EXEC"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunelib as T  # noqa: E402
from check_tune import Env, spec, children_of, wait_gone  # noqa: E402

MPIRUN = shutil.which("mpirun")
LAUNCH = [MPIRUN, "--oversubscribe", "-np", "2"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def mpi_args(e, log, sp):
    # mpirun takes a separate "--tune FILE" for itself: the = form passes it on
    return [e.model, "--train", "--data", os.path.join(e.d, "train.npz"), "--val-data",
            os.path.join(e.d, "val.npz"), "--batch", "16", "--tune=" + sp, "--tune-log", log, "--threads", "2"]


def main():
    if os.environ.get("HPDLF_TEST_HAVE_MPI") == "0" or not MPIRUN:
        print("skip: no MPI")
        return 77
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        e = Env(exe, d)
        sp = spec(os.path.join(d, "s.json"), {"lr": {"log_uniform": [0.005, 0.2]},
                                              "momentum": {"uniform": [0, 0.9]}}, 5, 40, seed=3)
        local = os.path.join(d, "local.jsonl")
        rc, _, err = T.run(exe, e.args(local, sp, 2))
        T.check(rc == 0, f"--parallel 2 on one node (rc {rc}) {err.strip()[-200:]}")
        ranks = os.path.join(d, "ranks.jsonl")
        p = subprocess.run(LAUNCH + [exe] + mpi_args(e, ranks, sp), capture_output=True, text=True, timeout=600)
        T.check(p.returncode == 0, f"2 ranks: complete (rc {p.returncode}) {p.stderr.strip()[-300:]}")
        T.check(os.path.exists(ranks) and open(ranks).read() == open(local).read(),
                "2 ranks write the log of --parallel 2, line for line")
        T.check(p.stdout.count("--steps") == 1, f"rank 0 alone prints the best flags: {p.stdout.strip()}")

        cut = os.path.join(d, "cut.jsonl")
        q = subprocess.Popen(LAUNCH + [exe] + mpi_args(e, cut, sp), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        while q.poll() is None and (not os.path.exists(cut) or len(open(cut).read().splitlines()) < 4):
            time.sleep(0.005)
        tree = children_of(q.pid)
        for c in list(tree):
            tree += children_of(c)
        os.killpg(q.pid, signal.SIGKILL)
        q.wait()
        wait_gone(tree)
        n = len(open(cut).read().splitlines()) if os.path.exists(cut) else 0
        p = subprocess.run(LAUNCH + [exe] + mpi_args(e, cut, sp), capture_output=True, text=True, timeout=600)
        T.check(p.returncode == 0 and open(cut).read() == open(local).read(),
                f"killed after {n} lines and re-run: the same log (rc {p.returncode}) {p.stderr.strip()[-200:]}")

        # validation over 2 data-parallel ranks: each evaluates its half, rank 0 logs the whole
        vlog, vout = os.path.join(d, "dp.jsonl"), os.path.join(d, "dp.onnx")
        p = subprocess.run(LAUNCH + [exe, e.model, "--train", "--data", os.path.join(d, "train.npz"), "--val-data",
                                     os.path.join(d, "val.npz"), "--batch", "16", "--steps", "6", "--eval-every", "3",
                                     "--log-json", vlog, "--export-onnx", vout, "--threads", "1"],
                           capture_output=True, text=True, timeout=300)
        T.check(p.returncode == 0, f"2 data-parallel ranks train with --val-data (rc {p.returncode}) "
                f"{p.stderr.strip()[-200:]}")
        if p.returncode == 0:
            import json
            lines = [json.loads(l) for l in open(vlog)]
            ref, acc = T.torch_eval(vout, e.vx, e.vy)
            got = [l for l in lines if "val_loss" in l]
            T.check([l["step"] for l in got] == [2, 5], f"validated at steps 3 and 6 ({[l['step'] for l in got]})")
            T.check(got and abs(got[-1]["val_loss"] - ref) <= 1e-5 * max(1, ref) and
                    abs(got[-1]["val_accuracy"] - acc) < 1e-9,
                    f"2 ranks: val_loss {got[-1]['val_loss'] if got else None} and accuracy are PyTorch's over all "
                    f"rows ({ref}, {acc})")
        p = subprocess.run(LAUNCH + [exe] + mpi_args(e, os.path.join(d, "x.jsonl"), sp) + ["--parallel", "2"],
                           capture_output=True, text=True, timeout=300)
        T.check(p.returncode == 2 and p.stderr.count("--parallel") >= 1, f"--parallel under mpirun: status 2 "
                f"({p.returncode}) {p.stderr.strip()[-200:]}")
    if T.FAILS:
        print(f"{len(T.FAILS)} failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Helpers shared by the training test scripts (check_train.py,
check_wsplit.py): a pass/fail tally and running hpdlf-exec."""
import os
import subprocess

FAILS = []
PASSED = [0]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)
    else:
        PASSED[0] += 1
    return ok


def run(exe, args, env=None):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout, p.stderr

#!/usr/bin/env python3
"""--resume with another --batch (issue 20, item 7): the checkpoint records
the batch it was written with; resuming with a different one still trains
(parameters and optimizer state do not depend on it) and says so once on
stderr; resuming with the same batch says nothing; the data set size is
checked the same way.

usage: check_resume_batch.py HPDLF_EXEC MODEL_DIR
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1


def main():
    exe, folder = sys.argv[1], sys.argv[2]
    model = os.path.join(folder, "model.onnx")
    with tempfile.TemporaryDirectory() as tmp:
        ck = os.path.join(tmp, "ck")

        def train(batch, steps, *extra, data="x.npy", labels="y.npy"):
            d = data if os.path.isabs(data) else os.path.join(folder, data)
            lb = labels if os.path.isabs(labels) else os.path.join(folder, labels)
            r = subprocess.run([exe, model, "--train", "--data", d, "--labels", lb, "--batch", str(batch),
                                "--steps", str(steps), "--checkpoint", ck, "--quiet", *extra],
                               capture_output=True, text=True, timeout=300)
            return r.returncode, r.stderr

        rc, err = train(4, 2)
        check(rc == 0, f"first run: exit {rc} {err!r}")
        rc, err = train(8, 4, "--resume")
        lines = [ln for ln in err.splitlines() if "--batch" in ln]
        check(rc == 0 and len(lines) == 1 and "written with --batch 4, resumed with --batch 8" in lines[0]
              and "warning" in lines[0], f"another batch: exit {rc}, one warning {lines}")
        rc, err = train(8, 5, "--resume")
        check(rc == 0 and "written with" not in err, f"the same batch: exit {rc}, no warning {err!r}")
        # fewer samples than the checkpoint's data set
        x, y = np.load(os.path.join(folder, "x.npy")), np.load(os.path.join(folder, "y.npy"))
        n = len(x) // 2
        np.save(os.path.join(tmp, "x.npy"), x[:n])
        np.save(os.path.join(tmp, "y.npy"), y[:n])
        rc, err = train(8, 6, "--resume", data=os.path.join(tmp, "x.npy"), labels=os.path.join(tmp, "y.npy"))
        lines = [ln for ln in err.splitlines() if "samples" in ln]
        check(rc == 0 and len(lines) == 1 and f"of {len(x)} samples, resumed with {n}" in lines[0],
              f"a smaller data set: exit {rc}, one warning {lines}")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The progress line (issue 20, item 4) in a pseudo-terminal: at 80, 60
and 200 columns (the pty's size, or $COLUMNS) every redrawn line fits the
width, and keeps, in this order of value, the step, the ETA, the loss and
memory against the budget; inference and training draw the same format.

usage: check_progress.py HPDLF_EXEC MODEL_DIR   (a folder with model.onnx, x.npy, y.npy)
"""
import fcntl
import os
import re
import struct
import subprocess
import sys
import termios

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def in_pty(args, cols, env_cols=None):
    """Runs args with stderr on a pty of `cols` columns; the redrawn lines."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    if env_cols:
        env["COLUMNS"] = str(env_cols)
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    rc = p.wait(timeout=300)
    text = out.decode("utf-8", "replace").replace("\r\n", "\n")
    lines = [seg.replace("\x1b[K", "") for part in text.split("\n") for seg in part.split("\r")]
    return rc, [l for l in lines if re.match(r"(step|iter) \d+/\d+", l)], text


def main():
    exe, folder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    model = os.path.join(folder, "model.onnx")
    train = [exe, model, "--train", "--data", os.path.join(folder, "x.npy"), "--labels",
             os.path.join(folder, "y.npy"), "--batch", "4", "--steps", "12", "--budget", "200K"]
    infer = [exe, model, "--budget", "200K", "--iterations", "12"]
    for what, args in (("training", train), ("inference", infer)):
        unit = "step" if what == "training" else "iter"
        for cols, env_cols in ((80, None), (200, 60), (80, 200)):
            width = env_cols or cols
            rc, lines, raw = in_pty(args, cols, env_cols)
            tag = f"{what} at {width} columns" + (" ($COLUMNS)" if env_cols else " (pty size)")
            if not check(rc == 0 and lines, f"{tag}: exit {rc}, {len(lines)} progress lines {raw[-300:]!r}"):
                continue
            last = lines[-1]
            check(all(len(l) <= width - 1 for l in lines), f"{tag}: every line fits {width - 1} columns "
                  f"(longest {max(len(l) for l in lines)}): {last!r}")
            check(last.startswith(f"{unit} 12/12") and "ETA 0:00" in last, f"{tag}: final step and ETA: {last!r}")
            check(re.search(r"\| mem [\d.]+[BKMGT]/200K", last) is not None, f"{tag}: memory against the budget")
            if what == "training":
                check(re.search(r"\| loss [\d.e+-]+", last) is not None, f"{tag}: the loss")
            if width >= 200:
                check(all(k in last for k in ("[" + "#" * 30 + "]", "ms/" + unit, "GFLOP/s", "io ")),
                      f"{tag}: the full bar, step time, GFLOP/s and tier traffic")
            if width == 60:
                check("GFLOP/s" not in last, f"{tag}: GFLOP/s dropped first")
            order = [k for k in ("loss", "mem", "ms/", "ETA") if k in last]
            check(order == sorted(order, key=last.index), f"{tag}: fields in one order {order}")
    rc, lines, raw = in_pty([exe, model, "--iterations", "12", "--quiet"], 80)
    check(rc == 0 and not lines, f"--quiet draws no progress line ({len(lines)})")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

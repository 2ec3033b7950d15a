#!/usr/bin/env python3
"""No silent acceptance in training (issue 20, item 7): every missing
required option named in one message (exit 2); options the optimizer
never reads or that contradict the run are accepted with one warning line
each, said once (--momentum/--nesterov with Adam, --betas/--eps with SGD,
a --batch above the data set, --checkpoint-every not below the steps, --shuffle and
--no-shuffle together, inference's --profile shown nowhere); a clean
command line gets no warning.

usage: check_options.py HPDLF_EXEC MODEL_DIR   (model.onnx, x.npy, y.npy)
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


def run(args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stderr


def main():
    exe, folder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    model, x, y = (os.path.join(folder, n) for n in ("model.onnx", "x.npy", "y.npy"))
    nsamples = np.load(x, mmap_mode="r").shape[0]

    rc, err = run([exe, model, "--train"])
    lines = err.strip().splitlines()
    check(rc == 2 and "--data" in lines[0] and "--batch" in lines[0] and "--steps N or --epochs N" in lines[0],
          f"all missing options in one line: exit {rc} {err!r}")
    rc, err = run([exe, model, "--train", "--data", x, "--labels", y])
    check(rc == 2 and "--batch N and --steps N or --epochs N" in err and "--data FILE" not in err,
          f"the two missing ones: exit {rc} {err!r}")

    rc, err = run([exe, model, "--train", "--data", x])
    lines = err.strip().splitlines()
    check(rc == 2 and "--labels FILE.npy" in lines[0] and "--batch N" in lines[0] and "--steps N" in lines[0],
          f"a .npy --data without --labels: the labels named with the rest, one line: exit {rc} {err!r}")

    base = [exe, model, "--train", "--data", x, "--labels", y, "--steps", "3", "--quiet"]
    rc, err = run(base + ["--batch", "4"])
    check(rc == 0 and "warning" not in err, f"a clean command line has no warning: exit {rc} {err!r}")
    cases = [
        (["--batch", "4", "--optimizer", "adam", "--momentum", "0.9"], ["--momentum is ignored by --optimizer adam"]),
        (["--batch", "4", "--optimizer", "adamw", "--nesterov", "--momentum", "0.9"],
         ["--momentum is ignored", "--nesterov is ignored"]),
        (["--batch", "4", "--betas", "0.8,0.99", "--eps", "1e-6"], ["--betas and --eps are ignored by --optimizer sgd"]),
        (["--batch", "4", "--optimizer", "adam", "--betas", "0.8,0.99", "--eps", "1e-6"], []),
        (["--batch", str(nsamples + 5)], [f"--batch {nsamples + 5} is larger than the {nsamples} samples"]),
        (["--batch", "4", "--shuffle", "--no-shuffle"], ["the last, --no-shuffle, holds"]),
        (["--batch", "4", "--no-shuffle", "--shuffle"], ["the last, --shuffle, holds"]),
    ]
    for extra, want in cases:
        rc, err = run(base + extra)
        warns = [ln for ln in err.splitlines() if ln.startswith("hpdlf-exec: warning: ")]
        check(rc == 0 and len(warns) == len(want) and all(any(w in ln for ln in warns) for w in want),
              f"{' '.join(extra)}: exit {rc}, one warning each {warns}")
    for bad, want in ((["--betas", "0.9,1"], "--betas wants two numbers in [0, 1)"),
                      (["--betas", "0.9"], "--betas wants two numbers in [0, 1)"),
                      (["--betas", "0.9,"], "--betas wants two numbers in [0, 1)"),
                      (["--betas", "0.9,0.99,0.5"], "--betas wants two numbers in [0, 1)"),
                      (["--eps", "0"], "--eps wants a positive number"),
                      (["--lr-schedule", "exp"], "--lr-schedule wants constant, linear, cosine or step:N[,G]"),
                      (["--lr-schedule", "step:0"], "--lr-schedule wants constant, linear, cosine or step:N[,G]"),
                      (["--lr-schedule", "step:3,"], "--lr-schedule wants constant, linear, cosine or step:N[,G]"),
                      (["--lr-schedule", "step:3,-1"], "--lr-schedule wants constant, linear, cosine or step:N[,G]"),
                      (["--warmup-steps", "-2"], "--warmup-steps wants an integer >= 0"),
                      (["--lr-schedule", "step:3", "--warmup-steps", "2"], "--warmup-steps does not go with")):
        rc, err = run(base + ["--batch", "4", "--optimizer", "adam"] + bad)
        check(rc == 2 and want in err, f"{' '.join(bad)} is refused: exit {rc} {err!r}")
    rc, err = run(base + ["--batch", "4", "--nesterov"])
    check(rc == 2 and "Nesterov" in err, f"--nesterov without --momentum is refused: exit {rc} {err!r}")
    # in core (no --budget) tiers, daemons' copies and splitting are never used
    for extra, want in ((["--tier", "nvme=/nonexistent-dir/spill"], "--tier is not used without --budget"),
                        (["--no-split"], "--no-split does nothing without --budget"),
                        (["--replicas", "2"], "--replicas is for daemons' copies")):
        rc, err = run([exe, model, "--quiet"] + extra)
        warns = [ln for ln in err.splitlines() if ln.startswith("hpdlf-exec: warning: ")]
        check(rc == 0 and len(warns) == 1 and want in warns[0], f"{' '.join(extra)} in core: one warning {warns}")
    rc, err = run([exe, model, "--quiet", "--budget", "300K", "--no-split"])
    check(rc == 0 and "warning" not in err, f"--no-split with --budget: no warning {err!r}")
    # inference: --profile that nothing would show
    rc, err = run([exe, model, "--iterations", "2", "--profile", "--quiet"])
    check(rc == 0 and err.count("warning: --profile with --quiet and no --stats-json") == 1,
          f"--profile --quiet without --stats-json warns once: exit {rc} {err!r}")
    with tempfile.TemporaryDirectory() as tmp:
        rc, err = run([exe, model, "--iterations", "2", "--profile", "--quiet", "--stats-json",
                       os.path.join(tmp, "s.json")])
        check(rc == 0 and "warning" not in err, f"--profile --quiet --stats-json: no warning: {err!r}")
        rc, err = run(base + ["--batch", "4", "--checkpoint", os.path.join(tmp, "ck"), "--checkpoint-every", "10"])
    check(rc == 0 and "--checkpoint-every 10 is not below the 3 steps" in err, f"--checkpoint-every > steps: {err!r}")
    # --info: names, types and shapes as the ONNX file declares them (read here with onnx)
    import onnx
    g = onnx.load(model).graph
    inits = {i.name for i in g.initializer}
    r = subprocess.run([exe, model, "--info"], capture_output=True, text=True, timeout=60)
    lines = r.stdout.splitlines()
    for vi in [i for i in g.input if i.name not in inits]:
        dims = ",".join(d.dim_param if d.dim_param else str(d.dim_value) for d in vi.type.tensor_type.shape.dim)
        check(r.returncode == 0 and any(ln.split()[:2] == [vi.name, "float32"] and ln.endswith(f"[{dims}]")
                                        for ln in lines), f"--info names input {vi.name} [{dims}]: {lines}")
    for vo in g.output:
        check(any(ln.split()[:1] == [vo.name] for ln in lines), f"--info names output {vo.name}")
    nweights = sum(int(np.prod(i.dims)) for i in g.initializer)
    check(any(ln.strip().startswith(f"parameters: {nweights} ") for ln in lines),
          f"--info counts {nweights} parameters: {lines}")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""An LSTM and a GRU exported from PyTorch train to PyTorch's losses.

usage: check_rnn_train.py HPDLF_EXEC

Builds small sequence-regression models with Debian's python3-torch at
test time (x[N, S, I] -> LSTM or GRU, batch_first -> the last step's
output -> Linear -> [N, 2]; a bidirectional two-layer variant of each, and
a GRU with linear_before_reset as PyTorch exports it), exports them with
torch.onnx.export (opsets 9 and 14) into a temporary directory, and trains
them with hpdlf-exec --train --loss mse for 10 steps of SGD with momentum
and 10 of Adam on the whole data set.  The same trainings run in PyTorch
in float64 from the same weights; every hpdlf loss must be within 1e-6
relative of the float64 loss (PyTorch's float32 run is printed beside it
for scale).  The recurrent operators' gradients (RNNGrad) are what this
exercises beyond the existing training tests.  Exit 1 on any mismatch,
77 (skip) when PyTorch is missing.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

try:
    import torch
except ImportError:
    print("PyTorch is not installed: skipped")
    sys.exit(77)

N, S, I, H = 8, 5, 4, 6
STEPS = 10
TOL = 1e-6


class Net(torch.nn.Module):
    def __init__(self, kind, layers, bidir):
        super().__init__()
        cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
        self.rnn = cls(I, H, num_layers=layers, bidirectional=bidir, batch_first=True)
        self.fc = torch.nn.Linear(H * (2 if bidir else 1), 2)

    def forward(self, x):
        y = self.rnn(x)[0]
        return self.fc(y[:, -1, :])


def torch_losses(model, x, y, opt, dtype):
    m = copy.deepcopy(model).to(dtype)
    xs, ys = torch.from_numpy(x).to(dtype), torch.from_numpy(y).to(dtype)
    o = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) if opt == "sgd"
         else torch.optim.Adam(m.parameters(), lr=0.01))
    out = []
    for _ in range(STEPS):
        o.zero_grad()
        loss = torch.nn.functional.mse_loss(m(xs), ys)
        loss.backward()
        o.step()
        out.append(float(loss))
    return out


def hpdlf_losses(exe, tmp, path, opt):
    log = os.path.join(tmp, "log.json")
    args = [exe, path, "--train", "--data", os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "y.npy"),
            "--loss", "mse", "--optimizer", opt, "--lr", "0.1" if opt == "sgd" else "0.01",
            "--batch", str(N), "--steps", str(STEPS), "--no-shuffle", "--quiet", "--threads", "1",
            "--log-json", log]
    if opt == "sgd":
        args += ["--momentum", "0.9"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return None, "exit %d: %s" % (p.returncode, p.stderr.strip()[-300:])
    with open(log) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()], None


def run_one(exe, tmp, kind, layers, bidir, opset):
    torch.manual_seed(11 * layers + 3 * bidir + opset + len(kind))
    model = Net(kind, layers, bidir).eval()
    x = np.random.RandomState(opset + layers).randn(N, S, I).astype(np.float32)
    y = np.random.RandomState(7 + opset).randn(N, 2).astype(np.float32)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "y.npy"), y)
    path = os.path.join(tmp, "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.from_numpy(x), path, opset_version=opset, input_names=["x"],
                          output_names=["out"], dynamic_axes={"x": {0: "n"}, "out": {0: "n"}})
    bad = []
    for opt in ("sgd", "adam"):
        ref64 = torch_losses(model, x, y, opt, torch.float64)
        ref32 = torch_losses(model, x, y, opt, torch.float32)
        got, why = hpdlf_losses(exe, tmp, path, opt)
        name = "%s %d layer%s%s opset %d %s" % (kind, layers, "s" if layers > 1 else "",
                                                " bidirectional" if bidir else "", opset, opt)
        if why is None and len(got) != STEPS:
            why = "%d losses, expected %d" % (len(got), STEPS)
        if why is None:
            rel = max(abs(a - b) / abs(b) for a, b in zip(got, ref64))
            rel32 = max(abs(a - b) / abs(b) for a, b in zip(ref32, ref64))
            if not rel <= TOL:
                why = "max rel err vs float64 %.2e > %.0e (losses %s vs %s)" % (rel, TOL, got, ref64)
            else:
                name += ": max rel err vs PyTorch float64 %.2e (PyTorch float32 %.2e); loss %.4f -> %.4f" % (
                    rel, rel32, ref64[0], ref64[-1])
        print("%s %s%s" % ("FAIL" if why else "ok  ", name, ": " + why if why else ""))
        bad += [why] if why else []
    return len(bad)


def main():
    exe = sys.argv[1]
    torch.set_num_threads(1)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for opset in (9, 14):
            for kind in ("lstm", "gru"):
                for layers, bidir in ((1, False), (2, True)):
                    bad += run_one(exe, tmp, kind, layers, bidir, opset)
    print("rnn-train: %d failed" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

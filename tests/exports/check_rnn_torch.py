#!/usr/bin/env python3
"""LSTM, GRU and RNN exported from PyTorch against PyTorch's outputs.

usage: check_rnn_torch.py HPDLF_EXEC

Builds small recurrent models with Debian's python3-torch at test time
(uni- and bidirectional, two layers, batch_first, initial states as graph
inputs, tanh and relu RNNs), exports them with torch.onnx.export at
opsets 9 and 14 into a temporary directory, runs hpdlf-exec on them and
compares every output (sequence output and final states) with PyTorch's
within 1e-4 * max(1, max|ref|).  One line per model; exit 1 on any
mismatch, 77 (skip) when PyTorch is missing.
"""
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


class Wrap(torch.nn.Module):
    """rnn(x, h0[, c0]) -> (y, h_n[, c_n]) as plain tensors."""

    def __init__(self, rnn, lstm):
        super().__init__()
        self.rnn, self.lstm = rnn, lstm

    def forward(self, x, h0, c0=None):
        if self.lstm:
            y, (h, c) = self.rnn(x, (h0, c0))
            return y, h, c
        y, h = self.rnn(x, h0)
        return y, h


def models():
    kw = dict(input_size=5, hidden_size=7)
    yield "lstm", torch.nn.LSTM(**kw), True
    yield "lstm_bidir_2layers", torch.nn.LSTM(num_layers=2, bidirectional=True, **kw), True
    yield "lstm_batch_first", torch.nn.LSTM(batch_first=True, **kw), True
    yield "gru", torch.nn.GRU(**kw), False
    yield "gru_bidir_2layers", torch.nn.GRU(num_layers=2, bidirectional=True, **kw), False
    yield "rnn_tanh_bidir", torch.nn.RNN(bidirectional=True, **kw), False
    yield "rnn_relu_2layers", torch.nn.RNN(num_layers=2, nonlinearity="relu", **kw), False


def run_one(exe, tmp, name, rnn, lstm, opset):
    torch.manual_seed(len(name) * 7 + opset)
    model = Wrap(rnn, lstm).eval()
    seq, batch = 6, 3
    layers = rnn.num_layers * (2 if rnn.bidirectional else 1)
    x = torch.randn((batch, seq, 5) if rnn.batch_first else (seq, batch, 5))
    h0 = torch.randn(layers, batch, 7)
    args = (x, h0, torch.randn(layers, batch, 7)) if lstm else (x, h0)
    in_names = ["x", "h0", "c0"][:len(args)]
    out_names = ["y", "h", "c"][:len(args)]
    path = os.path.join(tmp, "%s_op%d.onnx" % (name, opset))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, path, opset_version=opset, input_names=in_names, output_names=out_names)
    with torch.no_grad():
        refs = [t.numpy() for t in model(*args)]
    cmd = [exe, path, "--quiet"]
    for n, t in zip(in_names, args):
        f = os.path.join(tmp, "%s_%s.npy" % (name, n))
        np.save(f, t.numpy())
        cmd += ["--input", "%s=%s" % (n, f)]
    for n in out_names:
        cmd += ["--output", "%s=%s" % (n, os.path.join(tmp, "%s_out_%s.npy" % (name, n)))]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return "exit %d: %s" % (p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "")
    for n, ref in zip(out_names, refs):
        y = np.load(os.path.join(tmp, "%s_out_%s.npy" % (name, n)))
        tol = 1e-4 * max(1.0, float(np.max(np.abs(ref))))
        if y.shape != ref.shape:
            return "%s: shape %s, expected %s" % (n, y.shape, ref.shape)
        err = float(np.max(np.abs(y.astype(np.float64) - ref)))
        if not err <= tol:
            return "%s: max |hpdlf - torch| = %.3g > %.3g" % (n, err, tol)
    return None


def main():
    exe = sys.argv[1]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for opset in (9, 14):
            for name, rnn, lstm in models():
                why = run_one(exe, tmp, name, rnn, lstm, opset)
                print("%s %s opset %d%s" % ("FAIL" if why else "ok  ", name, opset, ": " + why if why else ""))
                bad += why is not None
    print("rnn-torch: %d failed" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

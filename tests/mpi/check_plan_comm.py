#!/usr/bin/env python3
"""--plan --ranks N: the data-parallel step predicted without launching it
(issue 13, item 6).  Needs no MPI.

usage: check_plan_comm.py HPDLF_EXEC TESTS_DIR

- The gradient bytes are the model's parameters (counted here from the
  ONNX file with the onnx package), and with one bucket the reduction time
  is the alpha-beta ring formula 2(N-1)/N * bytes / bw + 2(N-1) * latency
  computed here; one bucket hides nothing (it starts after the last
  gradient), so all of it is exposed and the step grows by exactly it.
- The scaling efficiency is the step without communication over the step
  with it, and falls as ranks are added at a fixed per-rank batch.
- Without --bucket the planner's bucket is a power of two in 64K..256M.
- Bad --ranks / --link-bandwidth / --link-latency values and misuse exit 2.
"""
import os
import re
import subprocess
import sys

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx

EXE, TESTS = sys.argv[1], sys.argv[2]
M = os.path.join(TESTS, 'models', 'mlp')
fails = 0


def check(ok, what):
    global fails
    print(('ok   ' if ok else 'FAIL ') + what, flush=True)
    fails += 0 if ok else 1
    return ok


def run(*extra, batch=60):
    cmd = [EXE, os.path.join(M, 'model.onnx'), '--train', '--data', os.path.join(M, 'x.npy'),
           '--labels', os.path.join(M, 'y.npy'), '--batch', str(batch), '--steps', '1'] + list(extra)
    env = {k: v for k, v in os.environ.items() if not k.startswith(('OMPI_', 'PMIX_', 'PMI_', 'SLURM_'))}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    return p.returncode, p.stdout, p.stderr


def num(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else float('nan')


def param_bytes():
    m = onnx.load(os.path.join(M, 'model.onnx'))
    return sum(int(np.prod(i.dims)) * 4 for i in m.graph.initializer if i.data_type == onnx.TensorProto.FLOAT)


def one_bucket():
    n, bw, lat = 4, 1e6, 10e-6
    rc, out, err = run('--plan', '--ranks', str(n), '--link-bandwidth', '1M', '--link-latency', '10us',
                       '--bucket', '1G')
    if not check(rc == 0, '--plan --ranks 4 runs (%s)' % err.strip()[-200:]):
        return
    b = param_bytes()
    want = (2 * (n - 1) / n * b / bw + 2 * (n - 1) * lat) * 1e3
    comm = num(r'communication\s+([0-9.]+) ms', out)
    check(abs(comm - want) <= 0.01 + 1e-4 * want, 'one bucket of %d bytes: %.2f ms = alpha-beta %.3f ms' % (b, comm, want))
    check(re.search(r'in 1 bucket ', out) is not None, 'one bucket')
    sent = 2 * (n - 1) / n * b / 1024
    check(abs(num(r'each rank sends ([0-9.]+) KiB', out) - sent) <= 0.06, 'each rank sends 2(N-1)/N of the bytes')
    base = num(r'predicted step time\s+([0-9.]+) ms \(', out)
    step = num(r'predicted step time\s+([0-9.]+) ms with', out)
    exposed = num(r'\(([0-9.]+) ms exposed\)', out)
    check(abs(exposed - comm) <= 0.02 and num(r'([0-9]+)% hidden', out) == 0,
          'one bucket: nothing hidden (exposed %.2f of %.2f ms)' % (exposed, comm))
    check(abs(step - (base + exposed)) <= 0.02, 'step %.2f = %.2f + exposed %.2f ms' % (step, base, exposed))
    eff = num(r'scaling efficiency ([0-9.]+)%', out)
    check(abs(eff - 100 * base / step) <= 0.06, 'efficiency %.1f%% = step without / with communication' % eff)


def scaling():
    effs = []
    for n in (2, 4, 8, 16):
        rc, out, err = run('--plan', '--ranks', str(n), '--link-bandwidth', '100M', batch=10 * n)
        effs.append(num(r'scaling efficiency ([0-9.]+)%', out) if rc == 0 else float('nan'))
        if n == 16:
            m = re.search(r'buckets? of ([0-9.]+) (KiB|MiB) \(chosen by the planner\)', out)
            size = float(m.group(1)) * (1024 if m and m.group(2) == 'KiB' else 1 << 20) if m else 0
            check(m is not None and size >= 64 << 10 and size <= 256 << 20 and
                  (int(size) & (int(size) - 1)) == 0, 'planner chose a power-of-two bucket (%s)' %
                  (m.group(0) if m else out[-300:]))
    check(all(a >= b for a, b in zip(effs, effs[1:])) and effs[0] < 100.01 and effs[-1] < effs[0],
          'efficiency falls as ranks are added at 10 rows each: %s' % effs)


def refusals():
    bad = [(['--plan', '--ranks', '0', '--link-bandwidth', '1G'], '--ranks'),
           (['--plan', '--ranks', 'x', '--link-bandwidth', '1G'], '--ranks'),
           (['--ranks', '4', '--link-bandwidth', '1G'], 'only plans'),
           (['--plan', '--ranks', '4'], '--link-bandwidth'),
           (['--plan', '--ranks', '4', '--link-bandwidth', '0'], '--link-bandwidth'),
           (['--plan', '--ranks', '4', '--link-bandwidth', '5Q'], '--link-bandwidth'),
           (['--plan', '--ranks', '4', '--link-bandwidth', '1G', '--link-latency', '-1us'], '--link-latency'),
           (['--plan', '--ranks', '4', '--link-bandwidth', '1G', '--link-latency', '3 parsecs'], '--link-latency'),
           (['--plan', '--link-bandwidth', '1G'], '--ranks'),
           (['--plan', '--ranks', '7', '--link-bandwidth', '1G'], 'does not split over 7 ranks')]
    for args, word in bad:
        rc, out, err = run(*args)
        check(rc == 2 and word in err and len(err.strip().splitlines()) <= 2,
              '%s: exit 2 naming %s (got %d: %s)' % (' '.join(args), word, rc, err.strip()[:120]))
    rc, out, err = run('--plan', '--ranks', '1', '--link-bandwidth', '1G')
    check(rc == 0 and 'ranks ' not in out, '--ranks 1: the plain plan, no communication')


def main():
    one_bucket()
    scaling()
    refusals()
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

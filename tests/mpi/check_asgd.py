#!/usr/bin/env python3
"""Asynchronous SGD across MPI ranks (--sync async, issue 21), on one machine.

usage: check_asgd.py HPDLF_EXEC

- --async-deterministic on 3 ranks, 20 steps, against a NumPy model of
  the whole run (each rank's SGD on its rows of every global batch, the
  seeded peer schedule, the blend): every rank's loss at every step within
  1e-6 relative, the logged schedule equal to the Python one, staleness 0;
  two variants (--blend 0.5 every 2 steps; the default mean with --parzen
  and 2 peers every 3 steps).  Two deterministic runs give the same bits.
- A free-running run with rank 1 slowed (--debug-delay-ms 1:MS): every
  rank's loss falls by a clear margin, and the fast ranks do not wait:
  they finish their steps in well under the slow rank's time, with their
  own median step far below its.
- A rank killed (SIGKILL) mid-run: the others finish all their steps with
  exit status 0, and their logs name the lost rank.
- Bad values of the new flags: exit 2 with one line.

The model (a two-layer perceptron) and its data are generated here with
python3-onnx and NumPy.  Exit 77 (skip) without MPI or mpirun.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

fails = 0
EXE = sys.argv[1]
from mpi_launch import MPIRUN, LAUNCH, ENV  # noqa: E402 (exits 77 without MPI)
D, H, C, N, LR = 12, 16, 4, 240, 0.2
M64 = (1 << 64) - 1


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def make_model(tmp, spread):
    """The model and data in tmp; spread: how far apart the classes lie (a
    small one keeps the losses near 1, where 1e-6 relative is a few float32
    roundings, rather than near 0)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((H, D)) * 0.4).astype(np.float32)
    b1 = (rng.standard_normal(H) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((C, H)) * 0.4).astype(np.float32)
    b2 = (rng.standard_normal(C) * 0.1).astype(np.float32)
    nodes = [helper.make_node('Gemm', ['x', 'w1', 'b1'], ['h'], transB=1),
             helper.make_node('Relu', ['h'], ['r']),
             helper.make_node('Gemm', ['r', 'w2', 'b2'], ['logits'], transB=1)]
    g = helper.make_graph(nodes, 'mlp', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', D])],
                          [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['N', C])],
                          [numpy_helper.from_array(a, n) for a, n in ((w1, 'w1'), (b1, 'b1'), (w2, 'w2'), (b2, 'b2'))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])
    path = os.path.join(tmp, 'model.onnx')
    onnx.save(m, path)
    centers = rng.standard_normal((C, D)) * spread
    y = rng.integers(0, C, N)
    x = (centers[y] + rng.standard_normal((N, D))).astype(np.float32)
    np.save(os.path.join(tmp, 'x.npy'), x)
    np.save(os.path.join(tmp, 'y.npy'), y.astype(np.int64))
    return path, x, y, [w1, b1, w2, b2]


def run(args, timeout=300):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=ENV)
    return p.returncode, p.stderr


def train_args(tmp, batch, steps, extra=()):
    return [EXE, os.path.join(tmp, 'model.onnx'), '--train', '--data', os.path.join(tmp, 'x.npy'),
            '--labels', os.path.join(tmp, 'y.npy'), '--batch', str(batch), '--steps', str(steps),
            '--optimizer', 'sgd', '--lr', str(LR), '--seed', '11', '--quiet', '--threads', '1',
            '--sync', 'async'] + list(extra)


def rank_logs(log, n):
    out = []
    for r in range(n):
        path = log if r == 0 else '%s.rank%d' % (log, r)
        out.append([json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else [])
    return out


# ---- the NumPy model of a deterministic run --------------------------------

def splitmix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


def pick(cand, want, seed, rank, e):
    x = ((seed * 0xD1B54A32D192ED03) & M64) ^ (rank << 40) ^ e
    cand = list(cand)
    for i in range(min(want, len(cand))):
        x, z = splitmix(x)
        j = i + z % (len(cand) - i)
        cand[i], cand[j] = cand[j], cand[i]
    return cand[:min(want, len(cand))]


def sgd_step(p, xb, yb):
    """Mean softmax cross-entropy over the rows, its gradients, SGD in float32."""
    w1, b1, w2, b2 = p
    h = xb @ w1.T + b1
    r = np.maximum(h, 0)
    z = r @ w2.T + b2
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    sm = e / e.sum(1, keepdims=True)
    loss = float(-np.log(sm[np.arange(len(yb)), yb]).mean())
    dz = sm.copy()
    dz[np.arange(len(yb)), yb] -= 1
    dz /= len(yb)
    gw2, gb2 = dz.T @ r, dz.sum(0)
    dr = (dz @ w2) * (h > 0)
    gw1, gb1 = dr.T @ xb, dr.sum(0)
    return loss, [(a - np.float32(LR) * g.astype(np.float32)).astype(np.float32)
                  for a, g in zip(p, (gw1, gb1, gw2, gb2))]


def model_run(x, y, init, nranks, batch, steps, every, blend, parzen, peers, seed):
    lb = batch // nranks
    ps = [[a.astype(np.float64) for a in init] for _ in range(nranks)]
    losses = [[] for _ in range(nranks)]
    sched = {}
    flat = lambda p: np.concatenate([a.ravel() for a in p])
    for s in range(steps):
        before = [flat(p) for p in ps]
        for r in range(nranks):
            rows = [(s * batch + r * lb + k) % len(x) for k in range(lb)]
            loss, ps[r] = sgd_step([a.astype(np.float32) for a in ps[r]], x[rows].astype(np.float32), y[rows])
            losses[r].append(loss)
        if (s + 1) % every:
            continue
        e = (s + 1) // every
        inbox = [[] for _ in range(nranks)]
        states = [flat(p).astype(np.float64) for p in ps]
        for r in range(nranks):
            to = pick([q for q in range(nranks) if q != r], peers, seed, r, e)
            sched[(r, s)] = to
            for q in to:
                inbox[q].append(r)
        for r in range(nranks):
            w, w0 = states[r], before[r].astype(np.float64)
            used = [states[q] for q in sorted(inbox[r]) if not parzen or
                    ((w - states[q]) ** 2).sum() < ((w0 - states[q]) ** 2).sum()]
            if not used:
                continue
            b = len(used) / (len(used) + 1) if blend < 0 else blend
            nw = ((1 - b) * w + b * (sum(used) / len(used))).astype(np.float32)
            out, at = [], 0
            for a in ps[r]:
                out.append(nw[at:at + a.size].reshape(a.shape))
                at += a.size
            ps[r] = out
    return losses, sched


def deterministic(tmp, x, y, init, every, blend, parzen, peers):
    what = 'deterministic, every %d, blend %s%s, %d peer(s)' % (every, blend, ', parzen' if parzen else '', peers)
    extra = ['--async-deterministic', '--exchange-every', str(every), '--exchange-peers', str(peers)]
    extra += ['--blend', str(blend)] if blend >= 0 else []
    extra += ['--parzen'] if parzen else []
    runs = []
    for k in range(2):
        log = os.path.join(tmp, 'det%d.json' % k)
        rc, err = run(LAUNCH + ['-np', '3'] + train_args(tmp, 30, 20, extra + ['--log-json', log]))
        if not check(rc == 0, '%s: 3 ranks train (run %d)' % (what, k)):
            print(err[-2000:])
            return
        runs.append(rank_logs(log, 3))
    got = runs[0]
    want, sched = model_run(x, y, init, 3, 30, 20, every, blend, parzen, peers, 11)
    worst = max(abs(l['loss'] - w) / abs(w) for r in range(3) for l, w in zip(got[r], want[r]))
    check(all(len(got[r]) == 20 for r in range(3)) and worst <= 1e-6,
          '%s: every rank\'s 20 losses = NumPy within 1e-6 (max rel %.2g)' % (what, worst))
    # the test can fail: without the exchanges the losses are far off
    alone, _ = model_run(x, y, init, 3, 30, 20, 1000, blend, parzen, peers, 11)
    apart = max(abs(l['loss'] - w) / abs(w) for r in range(3) for l, w in zip(got[r], alone[r]))
    check(apart > 1e-3, '%s: the exchanges matter (%.2g from training without them)' % (what, apart))
    used = [m['used'] for r in range(3) for l in got[r] if 'asgd' in l for m in l['asgd']['received']]
    if parzen:
        check(0 < sum(used) < len(used), '%s: the Parzen window took %d of %d received states' %
              (what, sum(used), len(used)))
    logged = {(r, l['step']): l['asgd']['sent_to'] for r in range(3) for l in got[r] if 'asgd' in l}
    check(logged == sched, '%s: the peer schedule is the seeded one (%d exchanges)' % (what, len(sched)))
    stale = [m['staleness'] for r in range(3) for l in got[r] if 'asgd' in l for m in l['asgd']['received']]
    check(stale and set(stale) == {0}, '%s: %d states received, all of staleness 0' % (what, len(stale)))
    same = [[l['loss'] for l in runs[0][r]] for r in range(3)] == [[l['loss'] for l in runs[1][r]] for r in range(3)]
    check(same, '%s: two runs give the same losses bit for bit' % what)


# ---- free-running runs -------------------------------------------------------

def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else 0.0


def slowed(tmp):
    log = os.path.join(tmp, 'slow.json')
    delay = 40
    t0 = time.time()
    rc, err = run(LAUNCH + ['-np', '3'] + train_args(tmp, 30, 60, ['--exchange-every', '2', '--log-json', log,
                                                                   '--debug-delay-ms', '1:%d' % delay]))
    if not check(rc == 0, 'free-running, rank 1 slowed by %d ms a step: 3 ranks train' % delay):
        print(err[-2000:])
        return
    logs = rank_logs(log, 3)
    for r in range(3):
        first, last = np.mean([l['loss'] for l in logs[r][:5]]), np.mean([l['loss'] for l in logs[r][-5:]])
        check(len(logs[r]) == 60 and last < 0.6 * first,
              'rank %d: loss falls from %.3f to %.3f (last 5 steps, < 60%%)' % (r, first, last))
    slow_total = sum(l['ms'] for l in logs[1])
    for r in (0, 2):
        total = sum(l['ms'] for l in logs[r])
        check(total < 0.5 * slow_total and median([l['ms'] for l in logs[r]]) < delay / 2,
              'rank %d does not wait for rank 1: its 60 steps took %.0f ms (rank 1: %.0f ms), median step %.1f ms'
              % (r, total, slow_total, median([l['ms'] for l in logs[r]])))
    got = [m for r in range(3) for l in logs[r] if 'asgd' in l for m in l['asgd']['received']]
    check(got and any(m['staleness'] != 0 for m in got),
          'free-running: %d states received, staleness from %d to %d sender steps' %
          (len(got), min(m['staleness'] for m in got) if got else 0, max(m['staleness'] for m in got) if got else 0))


def killed(tmp):
    log, pids = os.path.join(tmp, 'kill.json'), os.path.join(tmp, 'pid')
    args = train_args(tmp, 30, 300, ['--exchange-every', '2', '--log-json', log, '--debug-delay-ms', '10'])
    wrap = ['sh', '-c', 'echo $$ > %s.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' % pids] + args
    # Open MPI's mpirun ends the whole job when a rank dies unless told
    # to recover (docs/hpdlf-exec.md --sync async)
    p = subprocess.Popen(LAUNCH + ['--enable-recovery', '-np', '3'] + wrap, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(log + '.rank2') and
                                          sum(1 for _ in open(log + '.rank2')) >= 20):
        time.sleep(0.1)
    try:
        os.kill(int(open(pids + '.1').read()), signal.SIGKILL)
    except (OSError, ValueError) as e:
        check(False, 'kill rank 1: %s' % e)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
    logs = rank_logs(log, 3)
    ok = True
    for r in (0, 2):
        lost = [l['step'] for l in logs[r] if 'asgd' in l and 1 in l['asgd']['lost']]
        ok &= check(len(logs[r]) == 300 and bool(lost),
                    'rank 1 killed: rank %d finishes its 300 steps and its log names rank 1 lost from step %s' %
                    (r, lost[0] if lost else '?'))
    check(ok and p.returncode == 0 and 'rank 1 was lost' in err,
          'the job exits 0 and the ranks say rank 1 was lost (mpirun --enable-recovery)')
    if p.returncode:
        print(err[-2000:])


def refusals(tmp):
    base = train_args(tmp, 30, 4, [])
    cases = [(['--sync', 'later'], '--sync'), (['--exchange-every', '0'], '--exchange-every'),
             (['--blend', '1.5'], '--blend'), (['--blend', 'x'], '--blend'),
             (['--debug-delay-ms', '1:'], '--debug-delay-ms'), (['--debug-delay-ms', 'a:3'], '--debug-delay-ms'),
             (['--debug-delay-ms', '-4'], '--debug-delay-ms'), (['--exchange-peers', '0'], '--exchange-peers')]
    for extra, flag in cases:
        rc, err = run(base + extra)
        lines = [l for l in err.splitlines() if l.strip() and 'see hpdlf-exec --help' not in l]
        check(rc == 2 and len(lines) == 1 and flag in lines[0], '%s: exit 2, one line (%s)' % (' '.join(extra), rc))
    plain = [a for a in base if a not in ('--sync', 'async')]
    rc, err = run(plain + ['--blend', '0.3'])
    check(rc == 2 and '--sync async' in err, '--blend without --sync async: exit 2')
    rc, err = run(LAUNCH + ['-np', '2'] + base + ['--shard', 'optimizer'])
    check(rc == 2 and '--sync async' in err, '--shard with --sync async: exit 2')
    rc, err = run(LAUNCH + ['-np', '2'] + base + ['--debug-delay-ms', '5:10'])
    check(rc == 2 and err.count('--debug-delay-ms') == 1, '--debug-delay-ms naming rank 5 of 2: exit 2, one line')


def main():
    tmp = tempfile.mkdtemp(prefix='hpdlf-test-asgd-')
    try:
        hard = os.path.join(tmp, 'hard')
        os.mkdir(hard)
        _, x, y, init = make_model(hard, 0.3)
        deterministic(hard, x, y, init, 2, 0.5, False, 1)
        deterministic(hard, x, y, init, 3, -1, True, 2)
        make_model(tmp, 1.5)
        slowed(tmp)
        killed(tmp)
        refusals(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

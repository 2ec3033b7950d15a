#!/usr/bin/python3
"""Asynchronous SGD against synchronous data parallelism (issue 21): time
and steps to a target validation loss, one JSON line.

usage: bench_asgd.py HPDLF_EXEC [--steps S] [--target L] [--every K] [--blend W]
                     [--slow F] [--parzen] [--lr LR] [--batch B] [--store-daemon HPDLF_STORE]

The task is made here: digit-like images (ten 7-segment glyphs drawn into
28x28 frames, randomly shifted, stroke-thickened and noised; 3000 to train,
600 to validate) and LeNet-5 as ONNX (Conv 6@5x5, ReLU, MaxPool, Conv
16@5x5, ReLU, MaxPool, Gemm 120, ReLU, Gemm 84, ReLU, Gemm 10), generated
with python3-onnx and NumPy.  Both runs use 3 ranks (mpirun, --threads 1
each), SGD, global batch 96 (32 rows per rank and step), --shuffle, the
same seed, and rank 1 slowed by 2x (--slow F: by F; 1: not at all):
--debug-delay-ms 1:D with D (F - 1 times) the median step time of the ranks in a short undelayed async run (their first
30 steps, while all three run).  The delay is a sleep: the slowed rank
leaves its core to the others meanwhile.

  sync:  --sync sync (the gradients reduced every step: every rank waits
         for the slow one);
  async: --sync async --exchange-every K --blend W (default 4, mean)
         [--parzen], mailboxes in MPI windows;
  async_store (with --store-daemon): the same with the mailboxes in an
         hpdlf-store daemon started here on 127.0.0.1 (--store).
For the async runs, exchange_step_ms and plain_step_ms are rank 0's median
times of its steps with and without an exchange.

During each run rank 0 exports its weights every 10 steps
(HPDLF_TEST_EXPORT_EVERY, the export time left out of the log's time_s);
afterwards each export is evaluated on the validation set with hpdlf-exec
inference and the mean cross-entropy computed in NumPy.  time_to_target_s
and steps_to_target are those of the first export at or below --target
(default 0.5), by rank 0's clock and step count; time_to_target_at_median_step_s
is steps_to_target times rank 0's median step time (other jobs' load
spikes on a shared machine move the clock figure a lot) (under async rank 0 is a
fast rank: its steps are its own, of 32 rows each, as under sync).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

SEGS = {0: 'abcdef', 1: 'bc', 2: 'abged', 3: 'abgcd', 4: 'fgbc', 5: 'afgcd', 6: 'afgedc', 7: 'abc',
        8: 'abcdefg', 9: 'abcdfg'}


def glyph(d, rng):
    """A 28x28 7-segment digit, shifted, thickened at random, noised."""
    img = np.zeros((28, 28), np.float32)
    x0, y0 = rng.integers(4, 14), rng.integers(1, 6)
    w, h = 10, 9
    t = rng.integers(2, 4)
    seg = {'a': (y0, x0, 1, w), 'g': (y0 + h, x0, 1, w), 'd': (y0 + 2 * h, x0, 1, w),
           'f': (y0, x0, h, 1), 'b': (y0, x0 + w - 1, h, 1), 'e': (y0 + h, x0, h + 1, 1),
           'c': (y0 + h, x0 + w - 1, h + 1, 1)}
    for s in SEGS[d]:
        y, x, hh, ww = seg[s]
        img[y:y + hh + (t - 1 if hh == 1 else 0), x:x + ww + (t - 1 if ww == 1 else 0)] = 1
    return img + rng.normal(0, 0.35, img.shape).astype(np.float32)


def make_task(tmp):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    for name, n in (('train', 3000), ('val', 600)):
        y = rng.integers(0, 10, n)
        x = np.stack([glyph(int(d), rng) for d in y])[:, None]
        np.save(os.path.join(tmp, name + '_x.npy'), x.astype(np.float32))
        np.save(os.path.join(tmp, name + '_y.npy'), y.astype(np.int64))

    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    init = [('c1w', he((6, 1, 5, 5), 25)), ('c1b', np.zeros(6, np.float32)),
            ('c2w', he((16, 6, 5, 5), 150)), ('c2b', np.zeros(16, np.float32)),
            ('f1w', he((120, 256), 256)), ('f1b', np.zeros(120, np.float32)),
            ('f2w', he((84, 120), 120)), ('f2b', np.zeros(84, np.float32)),
            ('f3w', he((10, 84), 84)), ('f3b', np.zeros(10, np.float32))]
    nodes = [helper.make_node('Conv', ['x', 'c1w', 'c1b'], ['c1'], kernel_shape=[5, 5]),      # 24x24
             helper.make_node('Relu', ['c1'], ['r1']),
             helper.make_node('MaxPool', ['r1'], ['p1'], kernel_shape=[2, 2], strides=[2, 2]),  # 12x12
             helper.make_node('Conv', ['p1', 'c2w', 'c2b'], ['c2'], kernel_shape=[5, 5]),     # 8x8
             helper.make_node('Relu', ['c2'], ['r2']),
             helper.make_node('MaxPool', ['r2'], ['p2'], kernel_shape=[2, 2], strides=[2, 2]),  # 4x4
             helper.make_node('Flatten', ['p2'], ['fl']),
             helper.make_node('Gemm', ['fl', 'f1w', 'f1b'], ['h1'], transB=1),
             helper.make_node('Relu', ['h1'], ['a1']),
             helper.make_node('Gemm', ['a1', 'f2w', 'f2b'], ['h2'], transB=1),
             helper.make_node('Relu', ['h2'], ['a2']),
             helper.make_node('Gemm', ['a2', 'f3w', 'f3b'], ['logits'], transB=1)]
    g = helper.make_graph(nodes, 'lenet5', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 1, 28, 28])],
                          [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['N', 10])],
                          [numpy_helper.from_array(a, n) for n, a in init])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), os.path.join(tmp, 'model.onnx'))


def train(a, tmp, tag, steps, extra, export=0):
    log = os.path.join(tmp, tag + '.json')
    out = os.path.join(tmp, tag)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1')
    if export:
        env['HPDLF_TEST_EXPORT_EVERY'] = '%d:%s' % (export, out)
    mpirun = shutil.which('mpirun')
    cmd = [mpirun, '--oversubscribe'] + (['--allow-run-as-root'] if os.geteuid() == 0 else [])
    cmd += ['-np', '3', a.exe, os.path.join(tmp, 'model.onnx'), '--train',
            '--data', os.path.join(tmp, 'train_x.npy'), '--labels', os.path.join(tmp, 'train_y.npy'),
            '--batch', str(a.batch), '--steps', str(steps), '--optimizer', 'sgd', '--lr', str(a.lr), '--shuffle',
            '--seed', '5', '--threads', '1', '--quiet', '--log-json', log] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if p.returncode:
        sys.exit('bench_asgd: %s failed (%d): %s' % (tag, p.returncode, p.stderr[-1500:]))
    logs = []
    for r in range(3):
        path = log if r == 0 else '%s.rank%d' % (log, r)
        logs.append([json.loads(l) for l in open(path)] if os.path.exists(path) else [])
    return logs, out, ' '.join(cmd)


def val_loss(a, tmp, onnx_path):
    out = onnx_path + '.out'
    os.makedirs(out, exist_ok=True)
    p = subprocess.run([a.exe, onnx_path, '--input', 'x=' + os.path.join(tmp, 'val_x.npy'), '--output-dir', out,
                        '--threads', '1', '--quiet'], capture_output=True, text=True)
    if p.returncode:
        sys.exit('bench_asgd: inference of %s failed: %s' % (onnx_path, p.stderr[-800:]))
    z = np.load(os.path.join(out, 'logits.npy')).astype(np.float64)
    y = np.load(os.path.join(tmp, 'val_y.npy'))
    z -= z.max(1, keepdims=True)
    lse = np.log(np.exp(z).sum(1))
    return float((lse - z[np.arange(len(y)), y]).mean()), float((z.argmax(1) == y).mean())


def curve(a, tmp, logs, out):
    """(step, time_s, val loss, val accuracy) of every export, by rank 0's log."""
    t = {l['step'] + 1: l['time_s'] for l in logs[0]}
    pts = []
    for f in sorted(os.listdir(out), key=lambda f: int(f[4:-5]) if f.endswith('.onnx') else -1):
        if f.endswith('.onnx'):
            s = int(f[4:-5])
            pts.append((s, t.get(s, float('nan'))) + val_loss(a, tmp, os.path.join(out, f)))
    return pts


def reach(pts, target):
    for s, t, l, acc in pts:
        if l <= target:
            return s, t
    return None, None


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else 0.0


def start_daemon(a, tmp):
    """A local hpdlf-store with a token made here: (process, extra flags)."""
    token = os.path.join(tmp, 'token')
    with open(token, 'wb') as f:
        f.write(os.urandom(32))
    os.chmod(token, 0o600)
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    pf = os.path.join(tmp, 'port')
    d = subprocess.Popen([a.store_daemon, '--listen', '127.0.0.1:%d' % port, '--dram', '256M', '--token-file', token,
                          '--port-file', pf, '--log-level', 'warn'], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    for _ in range(400):
        if os.path.exists(pf) and open(pf).read().strip():
            return d, ['--store', '127.0.0.1:%d' % port, '--token-file', token]
        time.sleep(0.05)
    d.kill()
    sys.exit('bench_asgd: hpdlf-store did not start')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('exe')
    ap.add_argument('--steps', type=int, default=400)
    ap.add_argument('--target', type=float, default=0.5)
    ap.add_argument('--every', type=int, default=4)
    ap.add_argument('--blend', default='mean')
    ap.add_argument('--lr', type=float, default=0.05)
    ap.add_argument('--batch', type=int, default=96)
    ap.add_argument('--slow', type=float, default=2.0)
    ap.add_argument('--parzen', action='store_true')
    ap.add_argument('--store-daemon', help='hpdlf-store: also run async with the mailboxes in a daemon')
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix='hpdlf-bench-asgd-')
    daemon = None
    try:
        make_task(tmp)
        # a rank's step time while all three run: the first half of each
        # rank's steps of an undelayed async run (the fast ones finish first)
        calib, _, _ = train(a, tmp, 'calib', 60, ['--sync', 'async', '--exchange-every', str(a.every)])
        delay = (a.slow - 1) * median([l['ms'] for lg in calib for l in lg[3:30]])
        slow = ['--debug-delay-ms', '1:%.2f' % delay] if delay > 0 else []
        res = {'bench': 'asgd', 'ranks': 3, 'threads_per_rank': 1, 'global_batch': a.batch, 'steps': a.steps,
               'lr': a.lr, 'target_val_loss': a.target, 'slow_rank': 1, 'slow_factor': a.slow,
               'slow_delay_ms': round(delay, 3)}
        modes = [('sync', ['--sync', 'sync']),
                 ('async', ['--sync', 'async', '--exchange-every', str(a.every), '--blend', a.blend] +
                  (['--parzen'] if a.parzen else []))]
        if a.store_daemon:
            daemon, store = start_daemon(a, tmp)
            modes.append(('async_store', modes[1][1] + store))
        for mode, extra in modes:
            logs, out, cmd = train(a, tmp, mode, a.steps, extra + slow, export=10)
            pts = curve(a, tmp, logs, out)
            s, t = reach(pts, a.target)
            stale = [m['staleness'] for r in range(3) for l in logs[r] if 'asgd' in l for m in l['asgd']['received']]
            med0 = median([l['ms'] for l in logs[0]])
            res[mode] = {'steps_to_target': s, 'time_to_target_s': None if t is None else round(t, 3),
                         # the same at rank 0's median step time: robust to
                         # load spikes from other jobs on a shared machine
                         'time_to_target_at_median_step_s': None if s is None else round(s * med0 / 1e3, 3),
                         'final_val_loss': round(pts[-1][2], 4), 'final_val_acc': round(pts[-1][3], 4),
                         'best_val_loss': round(min(p[2] for p in pts), 4),
                         'rank0_total_s': round(logs[0][-1]['time_s'], 3),
                         'rank_median_step_ms': [round(median([l['ms'] for l in lg]), 3) for lg in logs if lg],
                         'curve': [[p[0], round(p[1], 3), round(p[2], 4)] for p in pts],
                         'command': cmd}
            if stale:
                res[mode]['staleness_min_median_max'] = [min(stale), median(stale), max(stale)]
            if mode != 'sync':
                res[mode]['exchange_step_ms'] = round(median([l['ms'] for l in logs[0] if 'asgd' in l]), 3)
                res[mode]['plain_step_ms'] = round(median([l['ms'] for l in logs[0] if 'asgd' not in l]), 3)
                res[mode]['mailbox'] = next((l['asgd'].get('mailbox') for l in logs[0] if 'asgd' in l), None)
        ts, ta = res['sync']['time_to_target_s'], res['async']['time_to_target_s']
        res['async_speedup_time'] = round(ts / ta, 3) if ts and ta else None
        ts, ta = res['sync']['time_to_target_at_median_step_s'], res['async']['time_to_target_at_median_step_s']
        res['async_speedup_time_at_median_step'] = round(ts / ta, 3) if ts and ta else None
        if a.store_daemon:
            ts, ta = res['sync']['time_to_target_at_median_step_s'], res['async_store']['time_to_target_at_median_step_s']
            res['async_store_speedup_time_at_median_step'] = round(ts / ta, 3) if ts and ta else None
        print(json.dumps(res))
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()

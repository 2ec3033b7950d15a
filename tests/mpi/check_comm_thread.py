#!/usr/bin/env python3
"""The communication thread (exec/comm_thread.c, issue 13): bucket
reductions overlapped with backward give bitwise what reducing each
bucket inline gave, and a lost rank still stops the job.

usage: check_comm_thread.py HPDLF_EXEC TESTS_DIR

- 2 ranks: with the thread (the default) and with HPDLF_COMM_THREAD=0
  (every bucket reduced inline on the compute thread, in the graph's
  order: the executor before the thread existed), the losses of every
  step and the exported weights are bit for bit the same: lenet Adam in
  core (several buckets, updates run after backward), the mlp SGD out of
  core (--budget 1M: the task net hands its COMM transitions to the
  thread), lenet SGD+momentum --shard gradients (reduce-scatters and an
  all-gather on the thread), lenet Adam --shard parameters (the gathers
  prefetched a layer ahead) and the transformer at 3 ranks.
- The traces show where the reductions ran: with the thread on its lane
  (tid 200) only; with HPDLF_COMM_THREAD=0 on the compute lane (out of
  core: the task net's threads), so two different paths are compared.
- With the thread, rank 0's trace shows each collective right after a
  'peer-wait' span (the barrier that waits for every rank), and none
  inline.
- A rank SIGKILLed while the others' threads have reductions in flight
  (in core and out of core) ends the job within 10 s, no rank left.

Exit 77 (skip) in a build without MPI or without mpirun.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

fails = 0
EXE, TESTS = sys.argv[1], sys.argv[2]
from mpi_launch import MPIRUN, LAUNCH, ENV, kill_and_wait  # noqa: E402 (exits 77 without MPI)
COMM_OPS = ('AllReduce', 'ReduceScatter', 'AllGather')


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def train_args(model_dir, batch, opt, steps, extra=()):
    m = os.path.join(TESTS, model_dir)
    return [EXE, os.path.join(m, 'model.onnx'), '--train', '--data', os.path.join(m, 'x.npy'),
            '--labels', os.path.join(m, 'y.npy'), '--batch', str(batch), '--steps', str(steps),
            '--optimizer', opt, '--shuffle', '--seed', '7', '--quiet', '--threads', '1'] + list(extra)


def trained(tmp, n, args, thread, tag):
    log, onnx, trace = (os.path.join(tmp, tag + s) for s in ('.json', '.onnx', '.trace.json'))
    env = dict(ENV, HPDLF_COMM_THREAD='1' if thread else '0')
    export = [] if '--shard' in args else ['--export-onnx', onnx]
    p = subprocess.run(LAUNCH + ['-np', str(n), '-x', 'HPDLF_COMM_THREAD'] + args + export +
                       ['--log-json', log, '--trace', trace], capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        print(p.stderr[-2000:])
        return None
    with open(log) as f:
        losses = [json.loads(l)['loss'] for l in f if l.strip()]
    ev = json.load(open(trace))
    ev = ev['traceEvents'] if isinstance(ev, dict) else ev
    lanes = sorted({e.get('tid') for e in ev if e.get('ph') == 'X' and e.get('cat') in COMM_OPS})
    weights = open(onnx, 'rb').read() if export else b''
    return losses, weights, lanes, arrivals(ev)


def arrivals(ev):
    """How many of the thread's collectives are not right after a wait for
    every rank (a 'peer-wait' span ending where the collective starts, on
    the same lane), and how many waits there are."""
    x = sorted((e for e in ev if e.get('ph') == 'X' and e.get('tid') == 200), key=lambda e: e['ts'])
    bare, prev = 0, None
    for e in x:
        if e.get('cat') in COMM_OPS:
            bare += not (prev and prev.get('cat') == 'peer-wait' and abs(prev['ts'] + prev['dur'] - e['ts']) <= 2)
        prev = e
    return bare, sum(e.get('cat') == 'peer-wait' for e in x)


def same_bits(tmp, n, model_dir, batch, opt, steps, extra=()):
    what = '%d ranks, %s %s %s' % (n, model_dir, opt, ' '.join(extra))
    args = train_args(model_dir, batch, opt, steps, extra)
    inline = trained(tmp, n, args, False, 'inline')
    thread = trained(tmp, n, args, True, 'thread')
    if not check(inline is not None and thread is not None, what + ': both runs train'):
        return
    check(len(thread[0]) == steps and thread[0] == inline[0] and thread[1] == inline[1],
          what + ': losses%s with the thread = inline, bitwise' % (' and weights' if thread[1] else ''))
    check(thread[3][0] == 0 and thread[3][1] > 0 and inline[3][1] == 0,
          what + ': with the thread each collective starts when every rank is there (its own span: %d of them '
          'without, %d waits; inline %d)' % (thread[3][0], thread[3][1], inline[3][1]))
    ooc = '--budget' in extra
    check(thread[2] == [200], what + ': with the thread the collectives ran on its lane (lanes %s)' % thread[2])
    # out of core the task net's I/O threads fire COMM transitions, or a
    # compute worker when none is idle
    want = (lambda l: all(t < 200 for t in l)) if ooc else (lambda l: l == [1])
    check(inline[2] and want(inline[2]), what + ': HPDLF_COMM_THREAD=0 ran them on the %s lanes (%s)' %
          ('task net\'s' if ooc else 'compute', inline[2]))


def killed(tmp, extra, what):
    log = os.path.join(tmp, 'kill%s.json' % what.replace(' ', ''))
    args = train_args('models/mlp', 60, 'sgd', 10000000, ['--bucket', '16K', '--log-json', log] + list(extra))
    pids = os.path.join(tmp, 'pid' + what.replace(' ', ''))
    wrap = ['sh', '-c', 'echo $$ > %s.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' % pids] + args
    p = subprocess.Popen(LAUNCH + ['-np', '3'] + wrap, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV,
                         start_new_session=True, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not all(os.path.exists('%s.%d' % (pids, r)) for r in range(3)):
        time.sleep(0.1)
    while time.time() < deadline and (not os.path.exists(log) or len(open(log).readlines()) < 5):
        time.sleep(0.1)  # training: buckets in flight on the threads
    kerr, rc, took, alive = kill_and_wait(p, pids)
    if kerr:
        check(False, 'kill rank 1: %s' % kerr)
    err = p.stderr.read()
    check(rc != 0 and took <= 10 and not alive,
          '%s: rank 1 killed, the job exits non-zero (%d) in %.1f s, no rank left' % (what, rc, took))
    if not check(all('rank %d of 3: rank 1 of 3 was lost' % r in err for r in (0, 2)),
                 '%s: ranks 0 and 2 name the lost rank' % what):
        print(err[-1500:])


def main():
    tmp = tempfile.mkdtemp(prefix='hpdlf-test-commthread-')
    try:
        same_bits(tmp, 2, 'models/lenet', 12, 'adam', 8, ['--bucket', '8K'])
        same_bits(tmp, 2, 'models/mlp', 60, 'sgd', 8, ['--budget', '1M', '--bucket', '16K'])
        same_bits(tmp, 2, 'models/lenet', 12, 'sgd', 6, ['--momentum', '0.9', '--bucket', '8K', '--shard', 'gradients'])
        # --shard parameters: gathers moved a layer ahead (prefetch) on the thread
        same_bits(tmp, 2, 'models/lenet', 12, 'adam', 6, ['--bucket', '8K', '--shard', 'parameters'])
        same_bits(tmp, 3, 'train/ref/transformer', 12, 'adam', 6, ['--bucket', '8K'])
        killed(tmp, [], 'in core')
        killed(tmp, ['--budget', '1M'], 'out of core')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

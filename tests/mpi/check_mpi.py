#!/usr/bin/env python3
"""Data-parallel training across MPI ranks (issue 13), on one machine.

usage: check_mpi.py HPDLF_EXEC TESTS_DIR

- 2 and 3 ranks reproduce the 1-rank losses of the same global batch
  within 1e-5 relative at every one of 20 steps: SGD and Adam on the mlp
  (in core and out of core, several buckets), a conv net (lenet) and a
  transformer (tests/train/ref/transformer).
- Two runs with 2 ranks give the same losses and exported weights bit for
  bit; mpirun -np 1 equals a plain run bit for bit.
- A conv net with BatchNorm: 2 and 3 ranks with --sync-bn reproduce the
  1-rank losses within 1e-5 (SGD, Adam); without --sync-bn they differ.
  Out of core (--budget 1M) 2 ranks with --sync-bn reproduce them too, on
  that net and on one with two BatchNorms in parallel branches (2 workers).
- --batch not divisible by the ranks and ranks given different flags stop
  at start-up (exit 2, one line saying why).
- A rank killed with SIGKILL mid-training ends the others (non-zero exit)
  within 10 s.
- SIGTERM reaching one rank stops every rank after the same step, with
  the checkpoint written (by rank 0), and --resume continues from it.
- A plain run (no launcher) starts no MPI: no child process (a singleton
  MPI_Init would spawn orted) and the same losses as before.

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


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def run(args, timeout=300):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=ENV)
    return p.returncode, p.stderr


def losses(path):
    with open(path) as f:
        return [json.loads(l)['loss'] for l in f if l.strip()]


def train_args(model_dir, batch, opt, extra=()):
    m = os.path.join(TESTS, model_dir)
    # one compute thread per rank: 3 ranks on 2 cores stay usable
    threads = [] if '--threads' in extra else ['--threads', '1']
    return [EXE, os.path.join(m, 'model.onnx'), '--train', '--data', os.path.join(m, 'x.npy'),
            '--labels', os.path.join(m, 'y.npy'), '--batch', str(batch), '--steps', '20',
            '--optimizer', opt, '--shuffle', '--seed', '7', '--quiet'] + threads + list(extra)


def ranks_run(n, args, log):
    cmd = args + ['--log-json', log]
    rc, err = run(cmd if n == 0 else LAUNCH + ['-np', str(n)] + cmd)
    if rc != 0:
        print(err[-2000:])
    return rc


def rel(a, b):
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))


def same_losses(tmp, model_dir, batch, opt, extra=(), ranks=(2, 3)):
    what = '%s %s batch %d %s' % (model_dir, opt, batch, ' '.join(extra))
    ref = os.path.join(tmp, 'ref.json')
    if not check(ranks_run(0, train_args(model_dir, batch, opt, extra), ref) == 0, what + ': 1 rank trains'):
        return
    a = losses(ref)
    for n in ranks:
        log = os.path.join(tmp, 'r%d.json' % n)
        if not check(ranks_run(n, train_args(model_dir, batch, opt, extra), log) == 0, '%s: %d ranks train' % (what, n)):
            continue
        b = losses(log)
        check(len(b) == 20 and rel(a, b) <= 1e-5, '%s: %d ranks = 1 rank within 1e-5 (max rel %.2g)' %
              (what, n, rel(a, b) if len(a) == len(b) else float('nan')))


def bitwise(tmp):
    runs = []
    for k in range(2):
        log, onnx = os.path.join(tmp, 'bw%d.json' % k), os.path.join(tmp, 'bw%d.onnx' % k)
        rc = ranks_run(2, train_args('models/mlp', 60, 'adam', ['--bucket', '16K', '--export-onnx', onnx]), log)
        check(rc == 0, '2 ranks, run %d' % k)
        runs.append((losses(log) if rc == 0 else None, open(onnx, 'rb').read() if rc == 0 else None))
    check(runs[0] == runs[1] and runs[0][0] is not None, 'two runs with 2 ranks: losses and weights bitwise equal')
    plain, one = os.path.join(tmp, 'plain.json'), os.path.join(tmp, 'np1.json')
    ok = ranks_run(0, train_args('models/mlp', 60, 'adam'), plain) == 0
    ok = ok and ranks_run(1, train_args('models/mlp', 60, 'adam'), one) == 0
    check(ok and losses(plain) == losses(one), 'mpirun -np 1 = a plain run, bitwise')


def refusals():
    rc, err = run(LAUNCH + ['-np', '2'] + train_args('models/mlp', 61, 'sgd'))
    check(rc == 2 and 'does not split over 2 ranks' in err, '--batch 61 over 2 ranks: exit 2 with the reason')
    one = train_args('models/mlp', 60, 'sgd', ['--lr', '0.1'])
    other = train_args('models/mlp', 60, 'sgd', ['--lr', '0.2'])
    rc, err = run(LAUNCH + ['-np', '1'] + one + [':', '-np', '1'] + other)
    check(rc == 2 and 'different training flags' in err, 'ranks with different --lr: exit 2, one line')


def sync_bn(tmp):
    """A conv net with BatchNorm: 2 and 3 ranks with --sync-bn equal 1 rank
    within 1e-5, in core and out of core (--budget); without it the
    per-rank statistics give other losses."""
    d = os.path.join(tmp, 'bnnet')
    py = os.environ.get('HPDLF_PYTHON') or sys.executable
    subprocess.run([py, os.path.join(TESTS, 'mpi', 'make_bnnet.py'), d, os.path.join(TESTS, 'models', 'lenet')],
                   check=True)
    for opt in ('sgd', 'adam'):
        same_losses(tmp, d, 12, opt, ['--sync-bn', '--lr', '0.05'], ranks=(2, 3) if opt == 'sgd' else (2,))
    # out of core (the task net), with two BatchNorms in parallel branches
    # that two workers may take either way round: chained in plan order
    b = os.path.join(tmp, 'bnnet2')
    subprocess.run([py, os.path.join(TESTS, 'mpi', 'make_bnnet.py'), b, os.path.join(TESTS, 'models', 'lenet'),
                    '--branches'], check=True)
    same_losses(tmp, d, 12, 'sgd', ['--sync-bn', '--lr', '0.05', '--budget', '1M'], ranks=(2,))
    same_losses(tmp, b, 12, 'adam', ['--sync-bn', '--lr', '0.05', '--budget', '1M', '--threads', '2'], ranks=(2,))
    ref, per = os.path.join(tmp, 'bn1.json'), os.path.join(tmp, 'bn2.json')
    ok = ranks_run(0, train_args(d, 12, 'sgd', ['--lr', '0.05']), ref) == 0
    ok = ok and ranks_run(2, train_args(d, 12, 'sgd', ['--lr', '0.05']), per) == 0
    check(ok and rel(losses(ref), losses(per)) > 1e-4,
          'without --sync-bn 2 ranks use their own statistics (max rel %.2g from 1 rank)' %
          (rel(losses(ref), losses(per)) if ok else float('nan')))


def killed_rank(tmp):
    args = train_args('models/mlp', 60, 'sgd')
    args[args.index('--steps') + 1] = '10000000'
    pids = os.path.join(tmp, 'pid')
    wrap = ['sh', '-c', 'echo $$ > %s.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' % pids] + args
    p = subprocess.Popen(LAUNCH + ['-np', '3'] + wrap, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=ENV, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and not all(os.path.exists('%s.%d' % (pids, r)) for r in range(3)):
        time.sleep(0.1)
    time.sleep(1.5)  # training, collectives in flight
    kerr, rc, took, alive = kill_and_wait(p, pids)
    if kerr:
        check(False, 'kill rank 1: %s' % kerr)
    check(rc != 0 and took <= 10 and not alive,
          'rank 1 killed: the job exits non-zero (%d) in %.1f s, no rank left' % (rc, took))


def terminated_rank(tmp):
    ck, log = os.path.join(tmp, 'ck'), os.path.join(tmp, 'term.json')
    # rank 1 sleeps 1 s after each step's loss allreduce, so the signal lands
    # there: a rank that then stopped on its own flag, before the ranks agreed
    # on it, left the other one in the next step and the job hung
    args = train_args('models/mlp', 60, 'sgd', ['--checkpoint', ck, '--log-json', log,
                                                 '--debug-delay-ms', '1:1000'])
    args[args.index('--steps') + 1] = '10000000'
    pids = os.path.join(tmp, 'tpid')
    wrap = ['sh', '-c', 'echo $$ > %s.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' % pids] + args
    p = subprocess.Popen(LAUNCH + ['-np', '2'] + wrap, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=ENV, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(log) and os.path.getsize(log) > 0):
        time.sleep(0.1)
    time.sleep(0.3)
    os.kill(int(open(pids + '.1').read()), signal.SIGTERM)
    t0 = time.time()
    # every rank writes its checkpoint part before it stops: under load (the
    # suite under stress-ng, issue 23) that took more than the 10 s this
    # waited before; a hang still ends here, after 180 s
    try:
        rc = p.wait(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
    err = p.stderr.read().decode(errors='replace')
    steps = len(losses(log)) if os.path.exists(log) else 0
    check(rc != 0 and steps > 0 and os.path.exists(os.path.join(ck, 'checkpoint.hpck')),
          'SIGTERM to rank 1: every rank stops (%d, in %.1f s) after step %d, checkpoint written'
          % (rc, time.time() - t0, steps - 1))
    # rank 0, which was not signalled, stops on the same signal: the job
    # exits 143 and rank 0 (which alone speaks) says terminated, not interrupted
    check(rc == 143 and 'hpdlf-exec: terminated: training stopped' in err,
          'the job exits 143 and rank 0 says "terminated" (%d: %s)' % (rc, err.strip()[-200:]))
    args = train_args('models/mlp', 60, 'sgd', ['--checkpoint', ck, '--resume'])
    args[args.index('--steps') + 1] = str(steps + 2)
    rc = ranks_run(2, args, os.path.join(tmp, 'resumed.json'))
    got = [json.loads(l)['step'] for l in open(os.path.join(tmp, 'resumed.json'))] if rc == 0 else []
    check(got == [steps, steps + 1], '2 ranks resume from it at step %d' % steps)


def children(pid):
    kids = []
    for d in os.listdir('/proc'):
        if d.isdigit():
            try:
                if int(open('/proc/%s/stat' % d).read().rsplit(') ', 1)[1].split()[1]) == pid:
                    kids.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def plain_no_mpi(tmp):
    args = train_args('models/mlp', 60, 'sgd')
    args[args.index('--steps') + 1] = '200000'
    env = {k: v for k, v in ENV.items() if not k.startswith(('OMPI_', 'PMIX_', 'PMI_', 'SLURM_'))}
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    time.sleep(1.5)
    kids = children(p.pid)
    p.kill()
    p.wait()
    check(not kids, 'a plain run starts no MPI (no orted or other child process)')


def main():
    tmp = tempfile.mkdtemp(prefix='hpdlf-test-mpi-')
    try:
        for opt in ('sgd', 'adam'):
            same_losses(tmp, 'models/mlp', 60, opt, ['--bucket', '16K'])
        # Out of core on 2 ranks, with one compute thread each: a rank
        # waiting in a collective used to poll and starve the other's I/O
        # (20 steps took minutes when other processes loaded the cores);
        # waits sleep now (exec/comm_wait.c).  The long tests add 3 ranks.
        same_losses(tmp, 'models/mlp', 60, 'sgd', ['--budget', '1M', '--bucket', '16K', '--threads', '1'],
                    ranks=(2, 3) if os.environ.get('HPDLF_MPI_OOC') == '1' else (2,))
        same_losses(tmp, 'models/lenet', 12, 'adam', ['--bucket', '8K'])
        same_losses(tmp, 'models/lenet', 12, 'sgd', ['--momentum', '0.9'], ranks=(2,))
        same_losses(tmp, 'train/ref/transformer', 12, 'adam', ['--bucket', '8K'])
        same_losses(tmp, 'train/ref/transformer', 12, 'sgd', ranks=(2,))
        sync_bn(tmp)
        bitwise(tmp)
        refusals()
        killed_rank(tmp)
        terminated_rank(tmp)
        plain_no_mpi(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

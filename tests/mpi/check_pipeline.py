#!/usr/bin/env python3
"""Pipeline training over MPI ranks (issue 14), on one machine.

usage: check_pipeline.py HPDLF_EXEC TESTS_DIR

- --pipeline 2 and 3 with M micro-batches reproduce the 1-rank losses of
  the same global batch within 1e-5 relative at every one of 20 steps:
  SGD and Adam on an MLP (tests/models/mlp) and a transformer of two
  blocks exported by torch (tests/train/ref/transformer), 1F1B and GPipe;
  P=2 x D=2 (4 ranks, two pipelines) too, and out of core (--budget).
- BatchNorm with M = 1 gives the 1-rank losses and with M = 2 others
  (micro-batch statistics); a P=2 checkpoint with its running statistics
  resumes at P=1.  Dropout's masks of a micro-batch's forward and of its
  recomputation agree (with the Dropout nodes on stage 0 and M = 1, the
  1-rank losses).
- --pipeline-cuts is honoured: each rank's stage (HPDLF_LOG_LEVEL=info)
  ends at the named node, and the losses are still the 1-rank ones.
- A checkpoint written at P=2 resumes at P=1 (and one written by 1 rank
  at P=3) with the following losses within 1e-5 of the uninterrupted run.
- A stage killed with SIGKILL stops the others within 10 s, naming it.
- Bad values stop at start-up with exit 2 and one line saying why: P not
  dividing the ranks, --micro-batches 0, a batch that does not split into
  M x D micro-batches, the wrong number of cuts, an unknown cut (with the
  nearest node's name), --micro-batches without --pipeline.

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
MLP, TRANSFORMER = 'models/mlp', 'train/ref/transformer'


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def run(args, timeout=300, env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env or ENV)
    return p.returncode, p.stderr


def losses(path):
    with open(path) as f:
        return {json.loads(l)['step']: json.loads(l)['loss'] for l in f if l.strip()}


def train_args(model_dir, batch, opt, steps=20, extra=()):
    m = os.path.join(TESTS, model_dir)
    return [EXE, os.path.join(m, 'model.onnx'), '--train', '--data', os.path.join(m, 'x.npy'),
            '--labels', os.path.join(m, 'y.npy'), '--batch', str(batch), '--steps', str(steps),
            '--optimizer', opt, '--shuffle', '--seed', '7', '--quiet', '--threads', '1'] + list(extra)


def launched(n, args):
    return args if n == 0 else LAUNCH + ['-np', str(n)] + args


def train(n, args, log):
    if os.path.exists(log):
        os.unlink(log)
    rc, err = run(launched(n, args + ['--log-json', log]))
    if rc != 0:
        print(err[-2000:])
    return losses(log) if rc == 0 else None


def rel(a, b):
    """Largest relative difference over the steps of b (all in a)."""
    if not a or not b or any(s not in a for s in b):
        return float('inf')
    return max(abs(a[s] - b[s]) / max(abs(a[s]), 1e-12) for s in b)


def reference(tmp, model, batch, opt, extra=()):
    return train(0, train_args(model, batch, opt, extra=extra), os.path.join(tmp, 'ref.json'))


def same_losses(tmp, model, batch, opt, cases, extra=()):
    """cases: (ranks, P, M, schedule) each against the 1-rank run."""
    ref = reference(tmp, model, batch, opt, extra)
    what = '%s %s batch %d %s' % (model, opt, batch, ' '.join(extra))
    if not check(ref is not None and len(ref) == 20, what + ': 1 rank trains'):
        return
    for n, p, m, sched in cases:
        flags = ['--pipeline', str(p), '--micro-batches', str(m), '--schedule', sched]
        got = train(n, train_args(model, batch, opt, extra=list(extra) + flags), os.path.join(tmp, 'p.json'))
        check(got is not None and len(got) == 20 and rel(ref, got) <= 1e-5,
              '%s: %d ranks, P=%d M=%d %s = 1 rank within 1e-5 (max rel %.2g)' %
              (what, n, p, m, sched, rel(ref, got) if got else float('nan')))


def stages(err):
    """{rank: (first node, last node)} from the ranks' info lines."""
    out = {}
    for line in err.splitlines():
        if 'pipeline stage' in line and "nodes" in line:
            rank = int(line.split('rank ')[1].split(':')[0])
            names = line.split("('")[1].split("')")[0].split("'..'")
            out[rank] = (names[0], names[1])
    return out


def cuts(tmp):
    ref = reference(tmp, TRANSFORMER, 12, 'adam')
    log = os.path.join(tmp, 'cuts.json')
    args = train_args(TRANSFORMER, 12, 'adam', extra=['--pipeline', '3', '--micro-batches', '2', '--log-json', log,
                                                       '--pipeline-cuts', '/blocks.0/n1/Sub,/blocks.1/MatMul'])
    rc, err = run(launched(3, args), env=dict(ENV, HPDLF_LOG_LEVEL='info'))
    st = stages(err)
    check(rc == 0 and st.get(0, ('', ''))[1] == '/blocks.0/n1/Sub' and st.get(1, ('', ''))[1] == '/blocks.1/MatMul'
          and st.get(2, ('', ''))[1] == '/head/Gemm',
          '--pipeline-cuts: stages end at the named nodes (%s)' % st)
    got = losses(log) if rc == 0 else None
    check(got is not None and rel(ref, got) <= 1e-5, '--pipeline-cuts: losses = 1 rank within 1e-5 (max rel %.2g)' %
          (rel(ref, got) if got else float('nan')))


def checkpoints(tmp):
    full = train(0, train_args(TRANSFORMER, 12, 'adam'), os.path.join(tmp, 'full.json'))
    ck = os.path.join(tmp, 'ck')
    pipe = ['--pipeline', '2', '--micro-batches', '3']
    first = train(2, train_args(TRANSFORMER, 12, 'adam', steps=10, extra=pipe + ['--checkpoint', ck]),
                  os.path.join(tmp, 'a.json'))
    rest = train(0, train_args(TRANSFORMER, 12, 'adam', extra=['--checkpoint', ck, '--resume']),
                 os.path.join(tmp, 'b.json'))
    check(first is not None and rest is not None and sorted(rest) == list(range(10, 20)) and rel(full, rest) <= 1e-5,
          'checkpoint at P=2 resumed at P=1: steps 10..19 within 1e-5 of the uninterrupted run (max rel %.2g)' %
          (rel(full, rest) if rest else float('nan')))
    ck1 = os.path.join(tmp, 'ck1')
    first = train(0, train_args(TRANSFORMER, 12, 'adam', steps=8, extra=['--checkpoint', ck1]),
                  os.path.join(tmp, 'c.json'))
    rest = train(3, train_args(TRANSFORMER, 12, 'adam', extra=['--pipeline', '3', '--checkpoint', ck1, '--resume']),
                 os.path.join(tmp, 'd.json'))
    check(first is not None and rest is not None and sorted(rest) == list(range(8, 20)) and rel(full, rest) <= 1e-5,
          'checkpoint of 1 rank resumed at P=3: steps 8..19 within 1e-5 (max rel %.2g)' %
          (rel(full, rest) if rest else float('nan')))


def make(tmp, script, *args):
    d = os.path.join(tmp, script[5:-3])
    py = os.environ.get('HPDLF_PYTHON') or sys.executable
    subprocess.run([py, os.path.join(TESTS, 'mpi', script), d] + list(args), check=True)
    return d


def batchnorm(tmp):
    """BatchNorm normalizes over a micro-batch: with M = 1 the step is the
    1-rank one; with M = 2 it differs (as GPipe's); checkpoints carry the
    running statistics."""
    d = make(tmp, 'make_bnnet.py', os.path.join(TESTS, 'models', 'lenet'))
    for opt in ('sgd', 'adam'):
        same_losses(tmp, d, 12, opt, [(2, 2, 1, '1f1b')], ['--lr', '0.05'])
    ref = reference(tmp, d, 12, 'adam', ['--lr', '0.05'])
    got = train(2, train_args(d, 12, 'adam', extra=['--lr', '0.05', '--pipeline', '2', '--micro-batches', '2']),
                os.path.join(tmp, 'bn2.json'))
    check(got is not None and len(got) == 20 and 1e-6 < rel(ref, got) < 0.5,
          'BatchNorm, M=2: micro-batch statistics, other losses than 1 rank (max rel %.2g)' %
          (rel(ref, got) if got else float('nan')))
    ck = os.path.join(tmp, 'ckbn')
    first = train(2, train_args(d, 12, 'adam', steps=10, extra=['--lr', '0.05', '--pipeline', '2', '--micro-batches',
                                                                '1', '--checkpoint', ck]), os.path.join(tmp, 'e.json'))
    rest = train(0, train_args(d, 12, 'adam', extra=['--lr', '0.05', '--checkpoint', ck, '--resume']),
                 os.path.join(tmp, 'f.json'))
    check(first is not None and rest is not None and sorted(rest) == list(range(10, 20)) and rel(ref, rest) <= 1e-5,
          'BatchNorm: checkpoint at P=2 (running statistics) resumed at P=1 within 1e-5 (max rel %.2g)' %
          (rel(ref, rest) if rest else float('nan')))


def dropout(tmp):
    """Dropout's masks of a micro-batch's forward and of its recomputation
    agree: with both Dropout nodes on stage 0 (which keeps the model's node
    numbers, the masks' seeds) and M = 1 the losses are the 1-rank ones."""
    d = make(tmp, 'make_dropnet.py')
    ref = reference(tmp, d, 16, 'adam')
    got = train(2, train_args(d, 16, 'adam', extra=['--pipeline', '2', '--micro-batches', '1', '--pipeline-cuts',
                                                    'drop1']), os.path.join(tmp, 'dr.json'))
    check(got is not None and len(got) == 20 and rel(ref, got) <= 1e-5,
          'Dropout on stage 0, M=1: = 1 rank within 1e-5 (max rel %.2g)' % (rel(ref, got) if got else float('nan')))


def killed_stage(tmp):
    log = os.path.join(tmp, 'kill.json')
    args = train_args(MLP, 12, 'sgd', steps=10000000, extra=['--pipeline', '3', '--micro-batches', '3',
                                                             '--log-json', log])
    pids = os.path.join(tmp, 'pid')
    wrap = ['sh', '-c', 'echo $$ > %s.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' % pids] + args
    p = subprocess.Popen(LAUNCH + ['-np', '3'] + wrap, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=ENV, start_new_session=True, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and (not os.path.exists(log) or len(open(log).readlines()) < 5):
        time.sleep(0.1)
    # training: micro-batches in flight
    kerr, rc, took, alive = kill_and_wait(p, pids)
    if kerr:
        check(False, 'kill stage 1: %s' % kerr)
    err = p.stderr.read()
    said = ' | '.join(l for l in err.splitlines() if 'hpdlf-exec' in l)[:400]
    check(rc != 0 and took <= 10 and not alive and 'rank 1 of 3 was lost' in err,
          'stage 1 killed: the job exits non-zero (%d) in %.1f s naming it, no rank left (%s; alive %s)' %
          (rc, took, said, alive))


def refusals(tmp=None):
    def refused(n, extra, words, what):
        rc, err = run(launched(n, train_args(MLP, 12, 'sgd', steps=2, extra=extra)))
        # a flag's own check runs on every rank, before any rank knows its
        # number: the same one line from each (taken from 'hpdlf-exec:' on:
        # mpirun's own banner of dashes can land on the same line first)
        lines = sorted(set(l[l.find('hpdlf-exec:'):] for l in err.splitlines() if 'hpdlf-exec:' in l))
        check(rc == 2 and len(lines) == 1 and all(w in lines[0] for w in words),
              '%s: exit 2 with one line (%d, %s)' % (what, rc, lines[:2]))
    refused(3, ['--pipeline', '2'], ['--pipeline 2 does not divide the 3 ranks'], 'P=2 on 3 ranks')
    refused(2, ['--pipeline', '2', '--micro-batches', '0'], ['--micro-batches', '>= 1'], '--micro-batches 0')
    refused(2, ['--pipeline', '2', '--micro-batches', '5'], ['--batch 12', '5 micro-batches'], 'batch 12, M=5')
    refused(4, ['--pipeline', '2', '--micro-batches', '4'], ['--batch 12', 'give a multiple of 8'], 'batch 12, M=4 D=2')
    refused(3, ['--pipeline', '3', '--pipeline-cuts', '/l2/Gemm'], ['names 1 nodes', 'P - 1 = 2'], 'one cut for P=3')
    refused(2, ['--pipeline', '2', '--pipeline-cuts', '/l2/Gem'], ["no node named '/l2/Gem'", "did you mean '/l2/Gemm'"],
            'an unknown cut')
    refused(0, ['--micro-batches', '2'], ['need --pipeline'], '--micro-batches without --pipeline')
    refused(2, ['--pipeline', '2', '--schedule', 'zigzag'], ['1f1b or gpipe'], '--schedule zigzag')


def main():
    tmp = tempfile.mkdtemp(prefix='hpdlf-test-pipe-')
    only = sys.argv[3:]  # names of the parts to run (debugging); none: all
    try:
        if only:
            for name in only:
                globals()[name](tmp)
            return 1 if fails else 0
        same_losses(tmp, MLP, 12, 'sgd', [(2, 2, 3, '1f1b'), (3, 3, 4, '1f1b')], ['--momentum', '0.9'])
        same_losses(tmp, MLP, 12, 'adam', [(2, 2, 2, 'gpipe'), (3, 3, 3, '1f1b'), (4, 2, 3, '1f1b')])
        same_losses(tmp, TRANSFORMER, 12, 'adam', [(2, 2, 3, '1f1b'), (3, 3, 4, '1f1b'), (3, 3, 2, 'gpipe')])
        same_losses(tmp, TRANSFORMER, 12, 'sgd', [(2, 2, 2, '1f1b')])
        # each stage's three sessions share --budget (pipe_build.c)
        same_losses(tmp, MLP, 12, 'sgd', [(2, 2, 3, '1f1b')], ['--budget', '4M'])
        cuts(tmp)
        batchnorm(tmp)
        dropout(tmp)
        checkpoints(tmp)
        killed_stage(tmp)
        refusals(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

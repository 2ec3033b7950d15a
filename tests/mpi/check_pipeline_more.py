#!/usr/bin/env python3
"""Pipeline training (issue 14): the forward saved for the backward, the
export of a pipeline, Dropout on any stage, and the combinations still
refused.

usage: check_pipeline_more.py HPDLF_EXEC TESTS_DIR

- A stage's backward reads what its forward saved instead of computing
  the forward again: rank 0's --trace of a P=2 MLP (its forward,
  backward and optimizer sessions in one file) holds the gradient
  kernels (GemmGrad) and each forward Gemm exactly once per micro-batch
  (twice if the backward recomputed it), while a 1-rank trace of the
  same step holds both; the losses are the 1-rank ones.
- --export-onnx with --pipeline: rank 0 writes the whole model, each
  stage's trained weights read from its rank.  The initializers equal
  those a 1-rank run of the same global batch exports within 1e-5 of
  their largest magnitude (transformer, SGD, P=3; MLP, SGD with momentum,
  P=2 x D=2; a BatchNorm net, Adam, P=2),
  and every trained one differs from the model's.  BatchNorm's running
  statistics (M=1, so the 1-rank ones) are exported too.
- Dropout on stage 1 (not only stage 0) with M=1 draws the 1-rank masks:
  the losses equal a 1-rank run's within 1e-5.
- In core with M > 1 a stage computes each Gemm's weight gradient once per
  step over all its micro-batches' rows: both stages of a P=2, M=4 net of
  Gemms in both weight layouts (transB 0 and 1, alpha 0.5 and 2) say so
  under 1F1B and GPipe, export the 1-rank weights (SGD with momentum)
  within 1e-5, and their 20 losses equal the 1-rank ones within 1e-5.
- The same for MatMul weight gradients and Gemm with transA 1, and out of
  core: a transformer (P=2, M=4: 4 MatMul weights on stage 0, 4 and the
  head's Gemm on stage 1) and the Gemm net with its second Gemm reading a
  transposed A (transA 1) say how many each stage defers, in core and with
  --budget; their losses equal the 1-rank ones within 1e-5 and the
  exported weights within 1e-5, and the --budget run's losses and
  exported weights equal the in-core run's bit for bit.  The Gemm net's
  stages (micro-batches of 4 rows) multiply by weights packed once per
  step (kernels/gemm_panels.h) in both runs; of the transformer's stages
  (MatMul) only the last, with the head's Gemm.
- --lr-schedule (cosine after a warmup) reaches the stages' optimizer
  sessions: P=2 gives the 1-rank losses within 1e-5, not the constant
  rate's.
- Two LayerNorms whose parameters the exporter merged (n2.weight =
  Identity(n1.weight), make_lnnet.py), cut apart by a P=2 pipeline, train
  apart as PyTorch and one rank do: losses and exported weights equal the
  1-rank run's within 1e-5, n2's export differs from n1's.  (The pipeline
  once received n2's weight from stage 0 as an activation and trained it
  tied to n1's: losses off by 1e-3, its export missing n2.weight.)
- --shard parameters with --pipeline is refused with exit 2 and one line
  naming it (--shard optimizer|gradients and --sync-bn work:
  check_pipeline_shard.py).

Exit 77 (skip) in a build without MPI or without mpirun.
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12

fails = 0
EXE, TESTS = sys.argv[1], sys.argv[2]
from mpi_launch import LAUNCH, ENV  # noqa: E402 (exits 77 without MPI)
MLP, TRANSFORMER = 'models/mlp', 'train/ref/transformer'


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def run(args, timeout=300, env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env or ENV)
    if p.returncode != 0:
        print(p.stderr[-2000:])
    return p.returncode, p.stderr


def train_args(model_dir, batch, opt, steps=20, extra=()):
    m = model_dir if os.path.isabs(model_dir) else os.path.join(TESTS, model_dir)
    return [EXE, os.path.join(m, 'model.onnx'), '--train', '--data', os.path.join(m, 'x.npy'),
            '--labels', os.path.join(m, 'y.npy'), '--batch', str(batch), '--steps', str(steps),
            '--optimizer', opt, '--shuffle', '--seed', '7', '--quiet', '--threads', '1'] + list(extra)


def launched(n, args):
    return args if n == 0 else LAUNCH + ['-np', str(n)] + args


def losses(path):
    with open(path) as f:
        return {json.loads(l)['step']: json.loads(l)['loss'] for l in f if l.strip()}


def rel(a, b):
    if not a or not b or any(s not in a for s in b):
        return float('inf')
    return max(abs(a[s] - b[s]) / max(abs(a[s]), 1e-12) for s in b)


def train(n, args, log):
    if os.path.exists(log):
        os.unlink(log)
    rc, _ = run(launched(n, args + ['--log-json', log]))
    return losses(log) if rc == 0 else None


def initializers(path):
    import onnx
    from onnx import numpy_helper
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def ops_in_trace(path):
    with open(path) as f:
        return {e.get('cat') for e in json.load(f) if e.get('ph') == 'X'}


def forward_runs(path):
    """Spans of each forward Gemm node in a trace (by node name)."""
    with open(path) as f:
        return collections.Counter(e['name'] for e in json.load(f) if e.get('ph') == 'X' and e.get('cat') == 'Gemm')


def saved_forward(tmp):
    j = lambda *n: os.path.join(tmp, *n)
    steps, M = 4, 3
    ref = train(0, train_args(MLP, 12, 'sgd', steps=steps, extra=['--trace', j('one.json')]), j('one.log'))
    got = train(2, train_args(MLP, 12, 'sgd', steps=steps, extra=['--pipeline', '2', '--micro-batches', str(M),
                                                                    '--trace', j('pipe.json')]), j('pipe.log'))
    one = ops_in_trace(j('one.json')) if ref else set()
    r0 = ops_in_trace(j('pipe.json')) if got else set()
    r1 = ops_in_trace(j('pipe.json.1')) if got and os.path.exists(j('pipe.json.1')) else set()
    # rank 0's trace holds its three sessions: each forward Gemm runs once
    # per micro-batch (its forward graph), never again in the backward
    f0 = forward_runs(j('pipe.json')) if got else {}
    check('Gemm' in one and 'GemmGrad' in one and 'GemmGrad' in r0 and 'GemmGrad' in r1 and f0 and
          all(c == steps * M for c in f0.values()),
          "stage 0's backward runs no forward kernel: each of its Gemms %d times in %d steps of %d micro-batches "
          "(rank 0: %s, Gemm runs %s; rank 1 traced: %s; 1 rank: %s)" %
          (steps * M, steps, M, sorted(r0), dict(f0), bool(r1), sorted(one)))
    check(got is not None and rel(ref, got) <= 1e-5, 'the saved forward: losses = 1 rank within 1e-5 (max rel %.2g)' %
          (rel(ref, got) if got else float('nan')))


def same_export(tmp, what, model, batch, opt, n, flags, extra=()):
    j = lambda *n: os.path.join(tmp, *n)
    for f in ('ref.onnx', 'pipe.onnx'):
        if os.path.exists(j(f)):
            os.unlink(j(f))
    rc1, _ = run(train_args(model, batch, opt, extra=list(extra) + ['--export-onnx', j('ref.onnx')]))
    rc2, _ = run(launched(n, train_args(model, batch, opt, extra=list(extra) + flags + ['--export-onnx', j('pipe.onnx')])))
    if not check(rc1 == 0 and rc2 == 0 and os.path.exists(j('pipe.onnx')), '%s: exported (%d, %d)' % (what, rc1, rc2)):
        return None
    a, b = initializers(j('ref.onnx')), initializers(j('pipe.onnx'))
    m = model if os.path.isabs(model) else os.path.join(TESTS, model)
    orig = initializers(os.path.join(m, 'model.onnx'))
    floats = [k for k in a if a[k].dtype == np.float32]
    worst = max((float(np.abs(a[k] - b[k]).max() / max(float(np.abs(a[k]).max()), 1e-12))
                 for k in floats if k in b and a[k].shape == b[k].shape), default=float('inf'))
    trained = [k for k in floats if k in orig and not np.array_equal(orig[k], a[k])]
    check(set(a) == set(b) and worst <= 1e-5 and trained and all(not np.array_equal(orig[k], b[k]) for k in trained),
          '%s: the %d initializers = the 1-rank export within 1e-5 (worst %.2g), %d trained' %
          (what, len(b), worst, len(trained)))
    return b


def exports(tmp):
    same_export(tmp, 'export, transformer SGD P=3 M=2', TRANSFORMER, 12, 'sgd', 3,
                ['--pipeline', '3', '--micro-batches', '2'])
    # Adam's step divides by the gradient's root mean square: a near-zero
    # component's rounding shows in the weights, not the losses; SGD here
    same_export(tmp, 'export, MLP SGD momentum P=2 x D=2', MLP, 12, 'sgd', 4, ['--pipeline', '2', '--micro-batches', '3'],
                ['--momentum', '0.9'])
    d = make(tmp, 'make_bnnet.py', os.path.join(TESTS, 'models', 'lenet'))
    b = same_export(tmp, 'export, BatchNorm net Adam P=2 M=1', d, 12, 'adam', 2, ['--pipeline', '2', '--micro-batches',
                                                                                  '1'], ['--lr', '0.05'])
    if b is not None:
        stats = [k for k in b if 'mean' in k or 'var' in k]
        check(len(stats) >= 2, 'export: the running statistics are among them (%s)' % stats[:4])


def merged_ln(tmp):
    d = make(tmp, 'make_lnnet.py')
    ref = train(0, train_args(d, 8, 'sgd', steps=6, extra=['--lr', '0.1']), os.path.join(tmp, 'lref.json'))
    got = train(2, train_args(d, 8, 'sgd', steps=6, extra=['--lr', '0.1', '--pipeline', '2', '--micro-batches', '1',
                                                           '--pipeline-cuts', 'fc_b']), os.path.join(tmp, 'lp.json'))
    check(got is not None and ref is not None and len(got) == 6 and rel(ref, got) <= 1e-5,
          'merged LayerNorm parameters, P=2: losses = 1 rank within 1e-5 (max rel %.2g)'
          % (rel(ref, got) if got and ref else float('nan')))
    b = same_export(tmp, 'export, merged LayerNorm parameters P=2 M=1', d, 8, 'sgd', 2,
                    ['--pipeline', '2', '--micro-batches', '1', '--pipeline-cuts', 'fc_b'], ['--lr', '0.1'])
    if b is not None:
        check('n2.weight' in b and 'n1.weight' in b and not np.array_equal(b['n1.weight'], b['n2.weight']),
              'export: n2.weight trained apart from n1.weight')


def make(tmp, script, *args):
    d = os.path.join(tmp, script[5:-3])
    py = os.environ.get('HPDLF_PYTHON') or sys.executable
    subprocess.run([py, os.path.join(TESTS, 'mpi', script), d] + list(args), check=True)
    return d


def dropout(tmp):
    """Both Dropout nodes on stage 1 (the cut after fc0): their seeds are
    the model's node numbers, so M = 1 draws the 1-rank masks."""
    d = make(tmp, 'make_dropnet.py')
    ref = train(0, train_args(d, 16, 'adam'), os.path.join(tmp, 'dref.json'))
    got = train(2, train_args(d, 16, 'adam', extra=['--pipeline', '2', '--micro-batches', '1', '--pipeline-cuts', 'fc0']),
                os.path.join(tmp, 'dp.json'))
    check(got is not None and len(got) == 20 and rel(ref, got) <= 1e-5,
          'Dropout on stage 1, M=1: = 1 rank within 1e-5 (max rel %.2g)' % (rel(ref, got) if got else float('nan')))


def once_per_step(tmp):
    """In core with M > 1 each stage computes a Gemm's weight gradient once
    per step over all its micro-batches (both weight layouts, alpha != 1),
    says so, and trains the 1-rank weights."""
    d = make(tmp, 'make_gemmnet.py')
    for sched in ('1f1b', 'gpipe'):
        flags = ['--pipeline', '2', '--micro-batches', '4', '--schedule', sched, '--pipeline-cuts', 'relu1']
        args = [a for a in train_args(d, 16, 'sgd', steps=2, extra=flags) if a != '--quiet']
        rc, err = run(launched(2, args), env=dict(ENV, HPDLF_LOG_LEVEL='info'))
        said = [l for l in err.splitlines() if 'weight gradients computed once per step' in l]
        check(rc == 0 and any('stage 0: 2 weight' in l for l in said) and any('stage 1: 2 weight' in l for l in said),
              '%s: both stages compute their 2 Gemm weight gradients once per step (%s)' % (sched, said))
        same_export(tmp, 'export, Gemm layouts SGD momentum P=2 M=4 %s' % sched, d, 16, 'sgd', 2, flags,
                    ['--momentum', '0.9'])
    ref = train(0, train_args(d, 16, 'sgd'), os.path.join(tmp, 'gref.json'))
    got = train(2, train_args(d, 16, 'sgd', extra=['--pipeline', '2', '--micro-batches', '4']),
                os.path.join(tmp, 'gp.json'))
    check(got is not None and len(got) == 20 and rel(ref, got) <= 1e-5,
          'Gemm layouts, P=2 M=4: losses = 1 rank within 1e-5 (max rel %.2g)' % (rel(ref, got) if got else float('nan')))


def deferred_counts(err):
    said = [l for l in err.splitlines() if 'weight gradients computed once per step' in l]
    return {int(l.split('stage ')[1].split(':')[0]): int(l.split(': ')[-1].split(' ')[0]) for l in said}


def export_pair(a, b):
    """Worst difference relative to the largest magnitude, and whether all
    initializers are bitwise equal."""
    worst = max((float(np.abs(a[k] - b[k]).max() / max(float(np.abs(a[k]).max()), 1e-12))
                 for k in a if a[k].dtype == np.float32 and k in b), default=float('inf'))
    return worst, set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


def deferred_more(tmp):
    """MatMul weight gradients (transformer) and Gemm transA 1 once per
    step, in core and out of core: the 1-rank numbers within 1e-5, and
    out of core bit for bit the in-core pipeline."""
    j = lambda *n: os.path.join(tmp, *n)
    ta = make(tmp, 'make_gemmnet.py', '--trans-a') + '-ta'
    os.rename(ta[:-3], ta)
    cases = (('transformer', TRANSFORMER, [], {0: 4, 1: 5}, ['1']),
             ('Gemm transA 1', ta, ['--pipeline-cuts', 'relu1'], {0: 2, 1: 2}, ['0', '1']))
    for what, model, cuts, want, packs in cases:
        flags = ['--pipeline', '2', '--micro-batches', '4'] + cuts
        ref = train(0, train_args(model, 16, 'sgd', extra=['--export-onnx', j('d1.onnx')]), j('d1.json'))
        got = {}
        for mode, extra in (('in core', []), ('--budget', ['--budget', '4M'])):
            log = j('dp.json')
            if os.path.exists(log):
                os.unlink(log)
            args = [a for a in train_args(model, 16, 'sgd', extra=flags + extra + ['--export-onnx', j('dp.onnx'),
                                                                                     '--log-json', log])
                    if a != '--quiet']
            rc, err = run(launched(2, args), env=dict(ENV, HPDLF_LOG_LEVEL='info'))
            n = deferred_counts(err)
            check(rc == 0 and n == want, '%s, %s: each stage computes its weight gradients once per step (%s, '
                  'want %s)' % (what, mode, n, want))
            packed = sorted(l.split('stage ')[1][:1] for l in err.splitlines() if 'packed once per step' in l)
            check(rc == 0 and packed == packs, '%s, %s: stages packing their weights once '
                  'per step: %s' % (what, mode, packed))
            got[mode] = (losses(log) if rc == 0 else None, initializers(j('dp.onnx')) if rc == 0 else None)
        l, w = got['in core']
        check(l is not None and len(l) == 20 and rel(ref, l) <= 1e-5,
              '%s: losses = 1 rank within 1e-5 (max rel %.2g)' % (what, rel(ref, l) if l else float('nan')))
        worst, _ = export_pair(initializers(j('d1.onnx')), w) if w else (float('inf'), False)
        check(worst <= 1e-5, '%s: exported weights = 1 rank within 1e-5 (worst %.2g)' % (what, worst))
        lb, wb = got['--budget']
        _, same = export_pair(w, wb) if w and wb else (0, False)
        check(l is not None and lb == l and same, '%s: --budget = in core bit for bit (losses %s, weights %s)' %
              (what, lb == l, same))


def refusals(tmp):
    for extra, word in ((['--shard', 'parameters'], '--shard parameters'),):
        p = subprocess.run(launched(2, train_args(MLP, 12, 'sgd', steps=2, extra=['--pipeline', '2'] + extra)),
                           capture_output=True, text=True, timeout=300, env=ENV)
        lines = sorted(set(l[l.find('hpdlf-exec:'):] for l in p.stderr.splitlines() if 'hpdlf-exec:' in l))
        check(p.returncode == 2 and len(lines) == 1 and word in lines[0],
              '--pipeline with %s: exit 2 with one line (%d, %s)' % (word, p.returncode, lines[:2]))


def lr_schedule(tmp):
    """--lr-schedule reaches a pipeline's optimizer sessions: P=2 with a
    cosine schedule after a warmup gives the 1-rank run's losses (within
    1e-5), and they differ from the constant rate's."""
    j = lambda *n: os.path.join(tmp, *n)
    sched = ['--lr', '0.01', '--lr-schedule', 'cosine', '--warmup-steps', '2']
    one = train(0, train_args(MLP, 12, 'adam', steps=6, extra=sched), j('lr1.log'))
    pipe = train(2, train_args(MLP, 12, 'adam', steps=6, extra=sched + ['--pipeline', '2']), j('lr2.log'))
    flat = train(2, train_args(MLP, 12, 'adam', steps=6, extra=['--lr', '0.01', '--pipeline', '2']), j('lr3.log'))
    check(one is not None and pipe is not None and rel(one, pipe) <= 1e-5,
          'P=2 with --lr-schedule cosine --warmup-steps 2: the 1-rank losses (rel %.2g)' % rel(one, pipe))
    check(flat is not None and pipe is not None and rel(flat, pipe) > 1e-4,
          'and not the constant rate\'s (rel %.2g)' % rel(flat or {}, pipe or {}))


def main():
    tmp = tempfile.mkdtemp(prefix='hpdlf-test-pipe2-')
    only = sys.argv[3:]
    try:
        for name in only or ('saved_forward', 'exports', 'merged_ln', 'dropout', 'once_per_step', 'deferred_more',
                             'refusals', 'lr_schedule'):
            globals()[name](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

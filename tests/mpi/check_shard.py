#!/usr/bin/env python3
"""--shard optimizer|gradients|parameters (ZeRO-1/2/3) across MPI ranks (issue 13), on one machine.

usage: check_shard.py HPDLF_EXEC TESTS_DIR

- With 2 and 3 ranks, --shard optimizer, gradients and parameters give
  the losses of --shard none bit for bit at every step, and (optimizer,
  gradients) the same trained weights (--export-onnx, rank 0, byte for byte): SGD with momentum and
  Adam on the mlp, Adam and SGD with momentum on a conv net (lenet), and a
  model whose 1-element bias leaves two of 3 ranks an empty slice.
- --shard none still matches the 1-rank run within 1e-5 relative.
- --shard parameters with --export-onnx, an unknown mode, and ranks given
  different --shard modes stop at start-up with status 2 (checkpoints
  with --shard: check_ckpt.py).
- Out of core (--budget; a long test, HPDLF_MPI_OOC=1, as in check_mpi.py):
  2 ranks with --shard gradients and parameters equal --shard none in core
  bit for bit.

Exit 77 (skip) in a build without MPI or without mpirun.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

fails = 0
EXE, TESTS = sys.argv[1], sys.argv[2]
from mpi_launch import MPIRUN, LAUNCH, ENV  # noqa: E402 (exits 77 without MPI)
MODES = ('optimizer', 'gradients', 'parameters')


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def run(args, timeout=600):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=ENV)
    return p.returncode, p.stderr


def train_args(m, batch, steps, opt, extra=()):
    threads = [] if '--budget' in extra else ['--threads', '1']
    return [EXE, os.path.join(m, 'model.onnx'), '--train', '--data', os.path.join(m, 'x.npy'),
            '--labels', os.path.join(m, 'y.npy'), '--batch', str(batch), '--steps', str(steps),
            '--optimizer', opt, '--shuffle', '--seed', '7', '--quiet'] + threads + list(extra)


def trained(n, args, tmp, tag):
    """(losses, exported weights) of a run on n ranks (0: no launcher), or None."""
    log, onnx = os.path.join(tmp, tag + '.json'), os.path.join(tmp, tag + '.onnx')
    # --shard parameters leaves no rank the whole weights to export
    export = [] if 'parameters' in args else ['--export-onnx', onnx]
    cmd = args + ['--log-json', log] + export
    rc, err = run(cmd if n == 0 else LAUNCH + ['-np', str(n)] + cmd)
    if rc != 0:
        print(err[-2000:])
        return None
    with open(log) as f:
        losses = [json.loads(l)['loss'] for l in f if l.strip()]
    if not export:
        return losses, None
    with open(onnx, 'rb') as f:
        return losses, f.read()


def rel(a, b):
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))


def same_as_none(tmp, m, batch, steps, opt, extra=(), ranks=(2, 3), modes=MODES, one=True):
    what = '%s %s batch %d %s' % (os.path.basename(m), opt, batch, ' '.join(extra))
    ref = trained(0, train_args(m, batch, steps, opt, extra), tmp, 'one') if one else None
    for n in ranks:
        none = trained(n, train_args(m, batch, steps, opt, list(extra) + ['--shard', 'none']), tmp, 'none')
        if not check(none is not None and len(none[0]) == steps, '%s: %d ranks, --shard none trains' % (what, n)):
            continue
        if ref:
            check(rel(ref[0], none[0]) <= 1e-5, '%s: %d ranks, --shard none = 1 rank within 1e-5 (max rel %.2g)' %
                  (what, n, rel(ref[0], none[0])))
        for mode in modes:
            got = trained(n, train_args(m, batch, steps, opt, list(extra) + ['--shard', mode]), tmp, mode)
            check(got is not None and got[0] == none[0] and got[1] in (none[1], None),
                  '%s: %d ranks, --shard %s = none bitwise (losses%s)%s' %
                  (what, n, mode, ' and weights' if got and got[1] else '',
                   '' if got is None or got[0] == none[0] else
                   ' (max rel %.2g)' % rel(none[0], got[0])))


def tiny_model(tmp):
    """x[N,4] @ W[4,3] + b[1] -> Relu -> @ W2[3,2]: b's one element leaves
    two of 3 ranks an empty slice."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    init = [numpy_helper.from_array((rng.standard_normal((4, 3)) * 0.5).astype(np.float32), 'W'),
            numpy_helper.from_array(np.array([0.1], np.float32), 'b'),
            numpy_helper.from_array((rng.standard_normal((3, 2)) * 0.5).astype(np.float32), 'W2')]
    nodes = [helper.make_node('MatMul', ['x', 'W'], ['h']), helper.make_node('Add', ['h', 'b'], ['h2']),
             helper.make_node('Relu', ['h2'], ['h3']), helper.make_node('MatMul', ['h3', 'W2'], ['y'])]
    g = helper.make_graph(nodes, 'tiny', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 4])],
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N', 2])], init)
    d = os.path.join(tmp, 'tiny')
    os.makedirs(d)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), os.path.join(d, 'model.onnx'))
    x = rng.standard_normal((48, 4)).astype(np.float32)
    np.save(os.path.join(d, 'x.npy'), x)
    np.save(os.path.join(d, 'y.npy'), (x[:, 0] > 0).astype(np.int64))
    return d


def refusals(tmp):
    mlp = os.path.join(TESTS, 'models', 'mlp')
    base = train_args(mlp, 60, 4, 'sgd')
    for args, needle, what in (
            (['--shard', 'parameters', '--export-onnx', os.path.join(tmp, 'x.onnx')], 'no rank holds the whole',
             '--shard parameters --export-onnx'),
            (['--shard', 'bogus'], "expected none, optimizer, gradients or parameters, got 'bogus'", '--shard bogus')):
        rc, err = run(base + args)  # one process: mpirun would add its own lines
        lines = err.strip().splitlines()  # the reason, then at most a pointer to --help
        check(rc == 2 and lines and needle in lines[0] and len(lines) <= 2 and all('--help' in l for l in lines[1:]),
              '%s: exit 2, one line (%d: %s)' % (what, rc, err.strip()[-200:]))
    rc, err = run(LAUNCH + ['-np', '1'] + base + ['--shard', 'optimizer', ':', '-np', '1'] + base +
                  ['--shard', 'gradients'])
    check(rc == 2 and 'different training flags' in err, 'ranks with different --shard: exit 2 (%d)' % rc)
    rc, err = run([EXE, os.path.join(mlp, 'model.onnx'), '--shard', 'optimizer'])
    check(rc == 2 and '--shard' in err, '--shard without --train: exit 2')


def main():
    tmp = tempfile.mkdtemp(prefix='hpdlf-test-shard-')
    models = os.path.join(TESTS, 'models')
    try:
        same_as_none(tmp, os.path.join(models, 'mlp'), 60, 20, 'sgd', ['--momentum', '0.9', '--bucket', '16K'])
        same_as_none(tmp, os.path.join(models, 'mlp'), 60, 20, 'adam', ['--bucket', '16K'])
        same_as_none(tmp, os.path.join(models, 'lenet'), 12, 8, 'adam', ['--bucket', '8K'])
        same_as_none(tmp, os.path.join(models, 'lenet'), 12, 8, 'sgd', ['--momentum', '0.9'], ranks=(2,),
                     modes=('gradients',), one=False)
        same_as_none(tmp, tiny_model(tmp), 12, 10, 'sgd', ['--momentum', '0.9'], ranks=(3,))
        one = trained(0, train_args(os.path.join(models, 'mlp'), 60, 5, 'adam'), tmp, 'plain')
        alone = trained(0, train_args(os.path.join(models, 'mlp'), 60, 5, 'adam', ['--shard', 'gradients']), tmp,
                        'alone')
        check(one is not None and one == alone, 'one process: --shard gradients is a plain run, bitwise')
        refusals(tmp)
        if os.environ.get('HPDLF_MPI_OOC') == '1':
            mlp = os.path.join(models, 'mlp')
            none = trained(2, train_args(mlp, 60, 20, 'sgd', ['--momentum', '0.9', '--bucket', '16K']), tmp, 'icn')
            ooc = trained(2, train_args(mlp, 60, 20, 'sgd', ['--momentum', '0.9', '--bucket', '16K', '--budget',
                                                              '1M', '--shard', 'gradients']), tmp, 'oocg')
            check(none is not None and ooc is not None and none[0] == ooc[0],
                  'out of core, 2 ranks: --shard gradients = none in core, bitwise')
            ooc3 = trained(2, train_args(mlp, 60, 20, 'sgd', ['--momentum', '0.9', '--bucket', '16K', '--budget',
                                                               '1M', '--shard', 'parameters']), tmp, 'oocp')
            check(none is not None and ooc3 is not None and none[0] == ooc3[0],
                  'out of core, 2 ranks: --shard parameters = none in core, bitwise')
        else:
            print('skip --shard out of core on 2 ranks (a long test: -Dlong_tests=true)')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

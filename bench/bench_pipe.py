#!/usr/bin/python3
"""Pipeline parallelism (issue 14): efficiency against the bubble bound and
the planner's stage times against measured ones.  Ends with one JSON line.

usage: build/bench/bench_pipe.py [HPDLF_EXEC] [--batch B] [--steps N] [--rounds R] [--keep DIR] [--one-session]

The model, generated here: 8 identical blocks Gemm(1024x1024)/Relu (16
nodes), cross-entropy over 1024 classes, SGD, --threads 1 per rank, P = 2
stages (this machine has 2 cores).  Global batch B, 1024 by default: at
M = 4P = 8 a micro-batch of 128 rows, where a 1024-wide product still runs
at the speed of the whole batch's.  --batch 128 is the configuration of
earlier sessions: micro-batches of 16 rows, where every product streams
its 4 MiB weight for 16 rows of work (memory-bound on any CPU).

planner: `--plan --pipeline 2 --micro-batches M` for M = P, 2P, 4P: the
  stages chosen, each stage's predicted ms per micro-batch (forward,
  backward, optimizer), the predicted efficiency against the bound
  1 - (P-1)/(M+P-1).
stage times measured without the runtime: one rank trains at the
  micro-batch size with --trace; each kernel span is charged to the stage
  of the model node it derives from (its name: "gemm3", "gemm3/GemmGrad#40",
  "w3/SGDUpdate#52", "r2/GradSum#45"; the loss to the last stage), summed
  per step (median over the steps after the first two).
runtime: whether `mpirun -np 2 hpdlf-exec ... --pipeline 2` trains (a build
  without the pipeline runtime refuses it: the figures below are then the
  planner's alone).  With it, R rounds (3 by default), each running in
  turn the 1-rank step at the global batch and the pipeline at M = P, 2P,
  4P (so that a change of the machine's load hits all alike): the step
  time of a run is the median of --log-json's "ms" after the first two
  steps, each figure the median over the rounds; efficiency = t1 / (P *
  tP) for each M beside the bound (target: within 5% of it at M = 4P).
  From the last round's --trace of each rank (TRACE, TRACE.1: a stage's
  forward, backward, deferred weight-gradient and optimizer kernels, and
  its waits for messages on a lane of their own), per stage and step: the
  kernel ms measured against the planner's M x (fwd + bwd) + opt, and the
  ms spent waiting; also each kernel at its fastest span in the trace
  times its runs per step (_fastest_spans: what the step's kernels take
  without the preemption of a loaded machine).
Every process (each rank, the 1-rank run) starts in a session of its own
  (setsid -w) where the kernel schedules by autogroup: else the two ranks
  of one mpirun share one process's CPU on a busy machine ("own_sessions"
  in the JSON; --one-session: all in the bench's).
"""
import collections
import glob
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np
np.float = float; np.int = int; np.bool = bool; np.object = object  # NumPy 1.24 vs onnx 1.12
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_EXE = '@HPDLF_EXEC_PATH@'
P, BLOCKS, WIDTH, BATCH = 2, 8, 1024, 1024
ENV = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1')
for k in list(ENV):
    if k.startswith(('OMPI_', 'PMIX_', 'PMI_', 'SLURM_')):
        del ENV[k]


def args():
    global BATCH
    a = {'exe': DEFAULT_EXE, 'steps': 10, 'keep': None, 'rounds': 3}
    rest = sys.argv[1:]
    while rest:
        x = rest.pop(0)
        if x == '--steps':
            a['steps'] = int(rest.pop(0))
        elif x == '--batch':
            BATCH = int(rest.pop(0))
        elif x == '--rounds':
            a['rounds'] = int(rest.pop(0))
        elif x == '--one-session':
            pass
        elif x == '--keep':
            a['keep'] = rest.pop(0)
        else:
            a['exe'] = x
    if a['exe'].startswith('@'):
        sys.exit('usage: bench_pipe.py HPDLF_EXEC (run build/bench/bench_pipe.py to have it filled in)')
    return a


def make_model(d):
    rng = np.random.default_rng(5)
    nodes, inits, src = [], [], 'x'
    for i in range(BLOCKS):
        inits += [numpy_helper.from_array(rng.uniform(-0.03, 0.03, (WIDTH, WIDTH)).astype(np.float32), 'w%d' % i),
                  numpy_helper.from_array(np.zeros(WIDTH, np.float32), 'b%d' % i)]
        nodes += [helper.make_node('Gemm', [src, 'w%d' % i, 'b%d' % i], ['h%d' % i], name='gemm%d' % i),
                  helper.make_node('Relu', ['h%d' % i], ['r%d' % i], name='relu%d' % i)]
        src = 'r%d' % i
    g = helper.make_graph(nodes, 'balanced', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', WIDTH])],
                          [helper.make_tensor_value_info(src, TensorProto.FLOAT, ['N', WIDTH])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])
    onnx.save(m, os.path.join(d, 'model.onnx'))
    np.save(os.path.join(d, 'x.npy'), rng.standard_normal((BATCH * 2, WIDTH)).astype(np.float32))
    np.save(os.path.join(d, 'y.npy'), rng.integers(0, WIDTH, BATCH * 2).astype(np.int64))
    owner, names = {}, [nd.name for nd in m.graph.node]
    for k, n in enumerate(m.graph.node):  # node, its outputs and its parameters -> node index
        owner[n.name] = k
        for v in list(n.output) + [i for i in n.input if i.startswith(('w', 'b'))]:
            owner.setdefault(v, k)
    return owner, names


def train_cmd(a, d, batch, steps, extra):
    return SESSION + [a['exe'], os.path.join(d, 'model.onnx'), '--train', '--data', os.path.join(d, 'x.npy'), '--labels',
            os.path.join(d, 'y.npy'), '--batch', str(batch), '--steps', str(steps), '--threads', '1',
            '--optimizer', 'sgd', '--quiet'] + extra


def children_cpu_s():
    """CPU seconds (user + system) of every child process waited for so far
    (mpirun waits for its ranks, so theirs count)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def step_ms(log):
    ms = [json.loads(l)['ms'] for l in open(log) if l.strip()]
    return statistics.median(ms[2:] if len(ms) > 3 else ms)


def plan(a, d, M):
    p = subprocess.run(train_cmd(a, d, BATCH, 1, ['--plan', '--pipeline', str(P), '--micro-batches', str(M)]),
                       capture_output=True, text=True, env=ENV, timeout=600)
    if p.returncode != 0:
        sys.exit('--plan --pipeline failed: ' + p.stderr.strip())
    rows = []
    for line in p.stdout.splitlines():
        m = re.match(r'^\s*(\d+)\s+(\d+)-(\d+)\s+\d+\s+\S+ \S+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s', line)
        if m:
            rows.append({'stage': int(m.group(1)), 'first': int(m.group(2)), 'last': int(m.group(3)),
                         'fwd_ms': float(m.group(4)), 'bwd_ms': float(m.group(5)), 'opt_ms': float(m.group(6)),
                         'ms': float(m.group(7))})
    eff = re.search(r'pipeline efficiency ([\d.]+)% \(bound ([\d.]+)%\)', p.stdout)
    return rows, float(eff.group(1)) / 100, float(eff.group(2)) / 100, p.stdout


def stage_of(name, owner, n):
    """The model node a training-graph kernel derives from (its name's
    first part), as the planner charges it."""
    head = re.split(r'[/#]', name)[0]
    return owner.get(head, n - 1)


def kernel_spans(path):
    """A trace's kernel spans (compute lanes, not the net's stalls), in time order."""
    ev = [e for e in json.load(open(path)) if e.get('ph') == 'X' and e.get('tid', 0) < 100 and e.get('cat') != 'stall']
    return sorted(ev, key=lambda e: e['ts'])


def trace_step_ms(path, names, bounds, M, skip):
    """A pipelined rank's trace: the stage it runs (the one whose first node's
    forward kernel it has), and per step (from one micro-batch 0's first
    forward kernel to the next) the median over the steps after the first
    `skip` of its kernel ms (forward, backward, deferred weight gradients,
    optimizer) and of the ms it waited for messages; None if no stage."""
    every = json.load(open(path))
    ev, waits = kernel_spans(path), [e for e in every if e.get('ph') == 'X' and e.get('cat') == 'wait']
    for s in range(len(bounds) - 1):
        starts = [e['ts'] for e in ev if e['name'] == names[bounds[s]]][::M]
        if len(starts) > skip + 1:
            break
    else:
        return None
    edges = starts + [float('inf')]
    kern, wait = [0.0] * len(starts), [0.0] * len(starts)
    for lst, acc in ((ev, kern), (waits, wait)):
        k = 0
        for e in sorted(lst, key=lambda e: e['ts']):
            while k + 1 < len(edges) and e['ts'] >= edges[k + 1]:
                k += 1
            if e['ts'] >= edges[0]:
                acc[k] += e['dur'] / 1e3
    kern, wait = kern[skip:-1] or kern, wait[skip:-1] or wait  # the last segment: no next step to close it
    # each kernel at the fastest it ran in this trace, times how often a
    # step runs it: the kernel time of a step without the preemption a
    # loaded machine stretches the spans with
    fastest, count = {}, collections.Counter()
    for e in ev:
        if e['ts'] >= edges[0]:
            fastest[e['name']] = min(fastest.get(e['name'], float('inf')), e['dur'] / 1e3)
            count[e['name']] += 1
    floor = sum(fastest[n] * c for n, c in count.items()) / len(starts)
    return s, statistics.median(kern), statistics.median(wait), floor


def trace_stage_ms(path, owner, names, bounds, skip):
    """Kernel ms per micro-batch of each stage found in a trace: the spans
    of the stage's kernels cut into segments at each forward kernel of its
    first node (one per micro-batch), the mean over the segments after the
    first `skip` (warm-up): (mean, fastest: other jobs on the cores only
    ever slow a kernel down); None for a stage the trace does not run."""
    ev = kernel_spans(path)
    n, res = len(names), []
    for s in range(len(bounds) - 1):
        segs = []
        for e in ev:
            k = stage_of(e['name'], owner, n)
            if e['name'] == names[bounds[s]]:
                segs.append(0.0)
            if segs and bounds[s] <= k < bounds[s + 1]:
                segs[-1] += e['dur'] / 1e3
        segs = segs[skip:] if len(segs) > skip + 1 else segs
        res.append((statistics.mean(segs), min(segs)) if segs else None)
    return res


def launcher():
    mpirun = shutil.which('mpirun')
    if not mpirun:
        return None
    return [mpirun, '--oversubscribe', '-np', str(P)] + (['--allow-run-as-root'] if os.geteuid() == 0 else [])


def own_session():
    """setsid -w before each process: with the kernel's autogroup scheduling
    (/proc/sys/kernel/sched_autogroup_enabled) every session shares one
    group's CPU, so on a busy machine two ranks of one mpirun got together
    the share one lone process gets.  In their own sessions each rank, and
    the 1-rank run, competes as one process (on an idle machine nothing
    changes)."""
    setsid = shutil.which('setsid')
    try:
        on = open('/proc/sys/kernel/sched_autogroup_enabled').read().strip() == '1'
    except OSError:
        on = False
    return [setsid, '-w'] if setsid and on and '--one-session' not in sys.argv else []


SESSION = []


def runtime_available(a, d):
    mpi = launcher()
    if not mpi:
        return False, 'mpirun not found'
    try:
        p = subprocess.run(mpi + train_cmd(a, d, BATCH, 1, ['--pipeline', str(P), '--micro-batches', str(P)]),
                           capture_output=True, text=True, env=ENV, timeout=600)
    except subprocess.TimeoutExpired:
        return False, 'one pipelined step did not finish in 600 s'
    said = [l for l in p.stderr.splitlines() if l.startswith('hpdlf-exec:')] or p.stderr.strip().splitlines() or ['']
    return p.returncode == 0, re.sub(r'^(hpdlf-exec: )+', '', said[0]) if p.returncode else 'trains'  # ranks interleave


def pipelined(a, d, tmp, M, names, bounds, trace=True):
    log, tr = os.path.join(tmp, 'pipe%d.json' % M), os.path.join(tmp, 'trace%d.json' % M)
    extra = ['--pipeline', str(P), '--micro-batches', str(M), '--log-json', log] + (['--trace', tr] if trace else [])
    c0 = children_cpu_s()
    try:
        p = subprocess.run(launcher() + train_cmd(a, d, BATCH, a['steps'], extra), capture_output=True, text=True,
                           env=ENV, timeout=1800)
    except subprocess.TimeoutExpired:
        return (None, None), None, 'did not finish in 1800 s'
    if p.returncode != 0:
        return (None, None), None, p.stderr.strip()[-300:]
    cpu = (children_cpu_s() - c0) / a['steps'] * 1e3
    stages = {}
    for f in sorted(glob.glob(tr + '*')) if trace else []:
        try:
            r = trace_step_ms(f, names, bounds, M, 2)
        except (ValueError, KeyError, json.JSONDecodeError):
            r = None
        if r:
            stages[r[0]] = r[1:]
    return (step_ms(log), cpu), stages, ''


def one_rank(a, tmp):
    log1 = os.path.join(tmp, 'full.json')
    c0 = children_cpu_s()
    p = subprocess.run(train_cmd(a, tmp, BATCH, a['steps'], ['--log-json', log1]), capture_output=True, text=True,
                       env=ENV, timeout=1800)
    return (step_ms(log1), (children_cpu_s() - c0) / a['steps'] * 1e3) if p.returncode == 0 else (None, None)


def rounds(a, tmp, out, names, bounds, plans):
    """R rounds of the 1-rank run and the pipeline at each M, in turn; the
    last round traces the pipeline (a trace's writes cost a little)."""
    t1s, tps, loads, c1s, cps = [], {r['M']: [] for r in out['rows']}, [], [], {r['M']: [] for r in out['rows']}
    for k in range(a['rounds']):
        loads.append(os.getloadavg()[0])
        t1, c1 = one_rank(a, tmp)
        t1s.append(t1)
        c1s.append(c1)
        for row in out['rows']:
            (tp, cp), stages, err = pipelined(a, tmp, tmp, row['M'], names, bounds, trace=k == a['rounds'] - 1)
            tps[row['M']].append(tp)
            cps[row['M']].append(cp)
            if err:
                row['error'] = err
            if stages:
                row['stages_per_step'] = [{'stage': s, 'predicted_ms': round(row['M'] * (pl['fwd_ms'] + pl['bwd_ms'])
                                                                           + pl['opt_ms'], 2),
                                           'measured_kernel_ms': round(stages[s][0], 2),
                                           'measured_kernel_ms_fastest_spans': round(stages[s][2], 2),
                                           'waits_ms': round(stages[s][1], 2)}
                                          for s, pl in enumerate(plans[row['M']]) if s in stages]
    med = lambda xs: statistics.median(xs) if xs and None not in xs else None
    t1 = med(t1s)
    out['one_rank_step_ms'] = t1
    out['one_rank_step_ms_rounds'] = [round(x, 2) if x else None for x in t1s]
    out['one_rank_cpu_ms_per_step'] = round(med(c1s), 1) if med(c1s) else None
    out['load_average_rounds'] = [round(x, 2) for x in loads]
    for row in out['rows']:
        tp = med(tps[row['M']])
        row['pipelined_step_ms'] = tp
        row['pipelined_step_ms_rounds'] = [round(x, 2) if x else None for x in tps[row['M']]]
        # both ranks' CPU (start-up included) over the 1-rank run's: the
        # extra work the pipeline does, whatever the load
        row['cpu_ms_per_step_all_ranks'] = round(med(cps[row['M']]), 1) if med(cps[row['M']]) else None
        row['efficiency'] = round(t1 / (P * tp), 4) if tp and t1 else None
        row['efficiency_rounds'] = [round(x / (P * y), 4) if x and y else None for x, y in zip(t1s, tps[row['M']])]
        row['within_5pct_of_bound'] = row['efficiency'] is not None and row['efficiency'] >= 0.95 * row['bound']


def main():
    global SESSION
    a = args()
    SESSION = own_session()
    tmp = a['keep'] or tempfile.mkdtemp(prefix='bench-pipe-')
    os.makedirs(tmp, exist_ok=True)
    owner, names = make_model(tmp)
    n = len(names)
    out = {'bench': 'pipe', 'P': P, 'model': '%d x Gemm(%d)/Relu' % (BLOCKS, WIDTH), 'batch': BATCH, 'threads': 1,
           'steps': a['steps'], 'rounds': a['rounds'], 'own_sessions': bool(SESSION), 'rows': []}
    plans = {}
    for M in (P, 2 * P, 4 * P):
        rows, eff, bound, text = plan(a, tmp, M)
        print(text, flush=True)
        plans[M] = rows
        out['rows'].append({'M': M, 'bound': round(bound, 4), 'predicted_efficiency': round(eff, 4)})
    bounds = [r['first'] for r in plans[4 * P]] + [n]
    out['bounds'] = bounds

    # stage times at the micro-batch size of M = 4P, measured on one rank
    mb = BATCH // (4 * P)
    log, trace = os.path.join(tmp, 'one.json'), os.path.join(tmp, 'one_trace.json')
    p = subprocess.run(train_cmd(a, tmp, mb, a['steps'], ['--log-json', log, '--trace', trace]),
                       capture_output=True, text=True, env=ENV, timeout=1800)
    if p.returncode != 0:
        sys.exit('1-rank run failed: ' + p.stderr.strip())
    one = trace_stage_ms(trace, owner, names, bounds, 2)
    out['stages'] = [{'stage': s, 'nodes': [bounds[s], bounds[s + 1] - 1], 'micro_batch': mb,
                      'predicted_ms': plans[4 * P][s]['ms'], 'measured_ms_1rank_trace': round(one[s][0], 3),
                      'fastest_ms_1rank_trace': round(one[s][1], 3),
                      'predicted_over_measured': round(plans[4 * P][s]['ms'] / one[s][0], 3),
                      'predicted_over_fastest': round(plans[4 * P][s]['ms'] / one[s][1], 3)} for s in range(P)]

    ok, msg = runtime_available(a, tmp)
    out['runtime'] = ok
    out['runtime_note'] = msg
    if ok:
        rounds(a, tmp, out, names, bounds, plans)
    out['load_average'] = round(os.getloadavg()[0], 2)  # measured times stretch with other jobs on the cores
    if not a['keep']:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))


main()

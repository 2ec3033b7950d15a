#!/usr/bin/env python3
"""hpdlf-store-inspect over the ranks of a data-parallel job (issue 13).

usage: check_inspect_ranks.py HPDLF_EXEC HPDLF_STORE_INSPECT TESTS_DIR

A 2-rank out-of-core training run (mpirun, --budget 1M, a private
$HPDLF_STATS_DIR) is inspected while it trains:
- each rank publishes its page, naming the launcher's job id (the one in
  that rank's own environment, read here from /proc/PID/environ) and its
  rank (0 and 1) of 2;
- --json lists both ranks side by side and a "job_sum" target whose
  budget, resident bytes, tensors and every tier counter (latency histogram
  included) equal the sum of the two ranks' figures in the same document;
- the table shows "rank 0 of 2", "rank 1 of 2" and "SUM of 2 ranks",
  --compact a row per rank and a "sum" row; Prometheus labels each rank's
  series with job and rank and has no sum series (no double counting);
- a plain run (no launcher) has no job: its page carries no rank.

Exit 77 (skip) in a build without MPI or without mpirun.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

fails = 0
EXE, INSPECT, TESTS = sys.argv[1], sys.argv[2], sys.argv[3]
from mpi_launch import MPIRUN, LAUNCH  # noqa: E402 (exits 77 without MPI)
JOB_VARS = ('SLURM_JOB_ID', 'PMIX_NAMESPACE', 'OMPI_MCA_ess_base_jobid', 'OMPI_MCA_orte_ess_jobid')
COUNTERS = ('capacity', 'used', 'chunks', 'reads', 'writes', 'bytes_read', 'bytes_written', 'hits', 'misses',
            'evictions', 'promotions', 'demotions', 'prefetches', 'prefetch_hits', 'prefetch_late', 'errors',
            'crc_errors')


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def train_cmd(steps):
    m = os.path.join(TESTS, 'models', 'mlp')
    return [EXE, os.path.join(m, 'model.onnx'), '--train', '--data', os.path.join(m, 'x.npy'),
            '--labels', os.path.join(m, 'y.npy'), '--batch', '60', '--steps', str(steps), '--optimizer', 'sgd',
            '--budget', '1M', '--threads', '1', '--quiet']


def inspect(env, *args):
    p = subprocess.run([INSPECT] + list(args), capture_output=True, text=True, timeout=60, env=env)
    return p.returncode, p.stdout, p.stderr


def launcher_job(pid):
    """The job id in the environment of process pid, as the page should
    record it (Slurm's JOB.STEP first, then PMIx, then Open MPI's)."""
    env = dict(kv.split('=', 1) for kv in open('/proc/%d/environ' % pid).read().split('\0') if '=' in kv)
    if env.get('SLURM_JOB_ID'):
        step = env.get('SLURM_STEP_ID')
        return env['SLURM_JOB_ID'] + ('.' + step if step else '')
    for v in JOB_VARS[1:]:
        if env.get(v):
            return env[v][-23:]
    return None


def wait_ranks(env, deadline):
    """A --json document in which both ranks and their sum are live."""
    doc = None
    while time.time() < deadline:
        rc, out, _ = inspect(env, '--json')
        if rc == 0:
            doc = json.loads(out)
            ranks = [t for t in doc['targets'] if t['kind'] == 'pid' and t.get('rank') is not None]
            sums = [t for t in doc['targets'] if t['kind'] == 'job_sum']
            # both ranks have paged below DRAM: training is under way
            if len(ranks) == 2 and sums and all(len(t['tiers']) > 1 and t['tiers'][1]['writes'] for t in ranks):
                return doc
        time.sleep(0.3)
    return doc


def check_sum(doc):
    ranks = [t for t in doc['targets'] if t['kind'] == 'pid']
    sums = [t for t in doc['targets'] if t['kind'] == 'job_sum']
    if not check(len(ranks) == 2 and len(sums) == 1, '--json: 2 ranks and one job sum (%d, %d)'
                 % (len(ranks), len(sums))):
        return
    s = sums[0]
    check([t['rank'] for t in ranks] == [0, 1] and all(t['nranks'] == 2 for t in ranks),
          'ranks 0 and 1 of 2, side by side in rank order')
    idx = [doc['targets'].index(t) for t in ranks + [s]]
    check(idx == sorted(idx) and idx[2] == idx[1] + 1, 'the sum follows the ranks of its job')
    check(s['job'] == ranks[0]['job'] == ranks[1]['job'] and s['ranks_summed'] == 2 and s['nranks'] == 2,
          'the sum names the job (%s) and its 2 ranks' % s['job'])
    bad = [k for k in ('budget', 'resident', 'pinned', 'staging', 'tensors') if s[k] != ranks[0][k] + ranks[1][k]]
    nt = len(s['tiers'])
    check(nt == max(len(t['tiers']) for t in ranks) and nt >= 2, 'sum: %d tiers (DRAM and below)' % nt)
    for k in range(nt):
        per = [t['tiers'][k] for t in ranks if k < len(t['tiers'])]
        bad += ['tier%d.%s' % (k, c) for c in COUNTERS if s['tiers'][k][c] != sum(p[c] for p in per)]
        hist = [sum(h) for h in zip(*[p['latency_log2us_histogram'] for p in per])]
        bad += ['tier%d.hist' % k] if s['tiers'][k]['latency_log2us_histogram'] != hist else []
        hits, misses = s['tiers'][k]['hits'], s['tiers'][k]['misses']
        want = hits / (hits + misses) if hits + misses else None
        got = s['tiers'][k]['hit_ratio']
        bad += ['tier%d.hit_ratio' % k] if (want is None) != (got is None) or (want and abs(got - want) > 1e-12) else []
    check(not bad, 'sum = rank 0 + rank 1 for budget, resident, tensors and every tier counter%s'
          % (': ' + ', '.join(bad) if bad else ''))
    check(s['budget'] == 2 * (1 << 20), 'sum of the budgets: 2 x 1M (%d)' % s['budget'])
    check(s['tiers'][1]['bytes_written'] > 0, 'out of core: the ranks wrote below DRAM (%d bytes)'
          % s['tiers'][1]['bytes_written'])
    return ranks


def check_views(env, job):
    rc, out, err = inspect(env)
    check(rc == 0 and 'job %s rank 0 of 2' % job in out and 'job %s rank 1 of 2' % job in out and
          'job %s: SUM of 2 ranks' % job in out, 'table: both ranks and the sum line%s' % ('' if rc == 0 else err))
    rc, out, err = inspect(dict(env, COLUMNS='120'), '--compact')
    rows = out.splitlines()
    check(rc == 0 and sum(' r0 ' in r for r in rows) == 1 and sum(' r1 ' in r for r in rows) == 1 and
          sum(r.startswith('sum %s' % job[:12]) for r in rows) == 1, '--compact: a row per rank and a sum row')
    rc, out, err = inspect(env, '--prometheus')
    up = [l for l in out.splitlines() if l.startswith('hpdlf_store_up{')]
    check(rc == 0 and len(up) == 2 and all('job="%s"' % job in l for l in up) and
          sorted('rank="0"' in l for l in up) == [False, True] and not any('target=' in l for l in up),
          'Prometheus: job and rank labels instead of the PID (no target label), no sum series')


def plain_run(tmp, env):
    """No launcher: no job and no rank in the page."""
    p = subprocess.Popen(train_cmd(10000000), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    doc, deadline = None, time.time() + 60
    while time.time() < deadline:
        rc, out, _ = inspect(env, '--json', str(p.pid))
        if rc == 0:
            doc = json.loads(out)
            break
        time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    t = doc['targets'][0] if doc else {}
    check(doc is not None and 'job' not in t and 'rank' not in t,
          'a plain run: the page names no job and no rank (%s)' % {k: t.get(k) for k in ('job', 'rank')})


def main():
    with tempfile.TemporaryDirectory() as tmp:
        stats = os.path.join(tmp, 'stats')
        os.mkdir(stats, 0o700)
        env = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1', HPDLF_STATS_DIR=stats)
        for v in JOB_VARS:  # the test itself may run under Slurm
            env.pop(v, None)
        pids = os.path.join(tmp, 'pid')
        wrap = ['sh', '-c', 'echo $$ > %s.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' % pids] + train_cmd(10000000)
        p = subprocess.Popen(LAUNCH + ['-np', '2'] + wrap, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=env, start_new_session=True)
        try:
            doc = wait_ranks(env, time.time() + 120)
            if check(doc is not None, 'the inspector reads the pages of the running job'):
                ranks = check_sum(doc)
                if ranks:
                    want = [launcher_job(int(open('%s.%d' % (pids, r)).read())) for r in (0, 1)]
                    check(want[0] and want == [t['job'] for t in ranks],
                          'each page names the job id of its rank\'s launcher (%s)' % want)
                    check([t['pid'] for t in ranks] ==
                          [int(open('%s.%d' % (pids, r)).read()) for r in (0, 1)], 'rank r is the process of rank r')
                    check_views(env, ranks[0]['job'])
        finally:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        plain_run(tmp, env)
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

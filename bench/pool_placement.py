#!/usr/bin/python3
"""Where the thread pool's threads run, process by process (issue 16).

usage: pool_placement.py HPDLF_EXEC MODEL.onnx [--runs N] [--iterations N] [--threads N] [--pin]

Runs `HPDLF_EXEC MODEL --threads T --iterations I` N times (default 12,
60, 2) one after the other and, while each runs, samples every thread of
the process from /proc/PID/task/*/stat about every 2 ms: its state and
the CPU it last ran on.  Per process it prints the median and minimum
inference time hpdlf-exec reports and:
  both_R    samples with at least two threads runnable (state R)
  same_cpu  of those, the share with two of them on one CPU (one of them
            then waits for the other: the pool runs at one thread's speed)
  cpus      per thread, the share of its samples on each CPU
  cpu_s     per thread, its CPU seconds (utime + stime) at the last sample
With --pin, each run alternates with one whose threads are pinned as soon
as they exist (os.sched_setaffinity): the main thread to the first CPU
the process may use, every other thread to the others in turn; hpdlf-exec
then runs 3 unmeasured iterations first (--warmup 3) in both.  This tests,
without changing hpdlf, whether keeping the pool's threads on separate
CPUs removes the slow processes (this machine's guest kernel packs tasks
onto fewer vCPUs: it boots with sched_vcpu_pack=15).
A process is "slow" when its median is more than 1.3 times the lowest
median of the runs.  Why: the 2-D U-Net's time is bimodal by process on a
quiet machine (19-24 ms or 30-36 ms, the slow mode about one thread's
speed) and one thread is not; this shows whether the slow processes are
the ones whose worker shares the caller's CPU.  Linux only (procfs).
Ends with one JSON line."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time


def sample(pid, acc):
    """One sample of every thread of pid into acc (tid -> record)."""
    running = []
    for path in glob.glob('/proc/%d/task/*/stat' % pid):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        rest = text[text.rindex(')') + 2:].split()
        tid, state, cpu = path.split('/')[4], rest[0], int(rest[36])
        rec = acc.setdefault(tid, {'cpus': {}, 'cpu_ticks': 0})
        rec['cpus'][cpu] = rec['cpus'].get(cpu, 0) + 1
        rec['cpu_ticks'] = int(rest[11]) + int(rest[12])
        if state == 'R':
            running.append(cpu)
    return running


def pin(pid, cpus, done):
    """Pin pid's threads not pinned yet (main thread to cpus[0], the others
    to the rest in turn)."""
    for path in glob.glob('/proc/%d/task/*' % pid):
        tid = int(path.split('/')[-1])
        if tid in done:
            continue
        cpu = cpus[0] if tid == pid or len(cpus) == 1 else cpus[1 + len(done) % (len(cpus) - 1)]
        try:
            os.sched_setaffinity(tid, {cpu})
            done[tid] = cpu
        except OSError:
            pass


def one_run(args, pinned):
    cmd = [args.exe, args.model, '--threads', str(args.threads), '--iterations', str(args.iterations)]
    if args.pin:
        cmd += ['--warmup', '3']
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    threads, both, same, done = {}, 0, 0, {}
    cpus = sorted(os.sched_getaffinity(0))
    while p.poll() is None:
        if pinned:
            pin(p.pid, cpus, done)
        run = sample(p.pid, threads)
        if len(run) >= 2:
            both += 1
            same += len(set(run)) < len(run)
        time.sleep(0.002)
    err = p.stderr.read()
    m = re.search(r'median ([0-9.]+) ms, min ([0-9.]+) ms', err)
    if p.returncode != 0 or not m:
        sys.exit('pool_placement: %s failed: %s' % (' '.join(cmd), err.strip()[-300:]))
    hz = 100.0
    per = []
    for tid, rec in sorted(threads.items(), key=lambda kv: -kv[1]['cpu_ticks']):
        n = sum(rec['cpus'].values())
        per.append({'cpu_s': rec['cpu_ticks'] / hz,
                    'cpus': {str(c): round(k / n, 2) for c, k in sorted(rec['cpus'].items())}})
    return {'pinned': pinned, 'median_ms': float(m.group(1)), 'min_ms': float(m.group(2)), 'both_R': both,
            'same_cpu': round(same / both, 3) if both else None, 'threads': per}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('exe')
    ap.add_argument('model')
    ap.add_argument('--runs', type=int, default=12)
    ap.add_argument('--iterations', type=int, default=60)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--pin', action='store_true', help='alternate with runs whose threads are pinned')
    args = ap.parse_args()
    if args.runs < 1 or args.iterations < 1 or args.threads < 1:
        ap.error('--runs, --iterations and --threads take positive integers')
    runs = []
    for _ in range(args.runs):
        runs.append(one_run(args, False))
        if args.pin:
            runs.append(one_run(args, True))
    low = min(r['median_ms'] for r in runs)
    for i, r in enumerate(runs):
        r['slow'] = r['median_ms'] > 1.3 * low
        print('run %2d %-6s %-4s median %7.2f ms  min %7.2f ms  both_R %5d  same_cpu %s  threads %s' %
              (i, 'pinned' if r['pinned'] else 'free', 'SLOW' if r['slow'] else 'fast', r['median_ms'], r['min_ms'], r['both_R'], r['same_cpu'],
               ' '.join('%.2fs%s' % (t['cpu_s'], t['cpus']) for t in r['threads'])))
    print(json.dumps({'bench': 'pool_placement', 'runs': runs}))


if __name__ == '__main__':
    main()

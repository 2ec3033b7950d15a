#!/usr/bin/env python3
"""Asynchronous SGD (issue 21), the parts check_asgd.py leaves out: the
mailboxes in an hpdlf-store daemon, checkpoints of async runs, losing rank 0.

usage: check_asgd_store.py HPDLF_EXEC [HPDLF_STORE]

- With a local hpdlf-store daemon (--store, a token made here): the
  deterministic mode on 3 ranks, 20 steps, matches the NumPy model of
  check_asgd.py within 1e-6 and its peer schedule; every exchange logs
  "mailbox": "daemon 127.0.0.1:PORT" (without --store: "mpi-window"); two
  runs give the same bits; the daemon holds nothing once the job ended.
- With the daemon: rank 1 slowed by 40 ms a step, the fast ranks do not
  wait for it and every loss falls; rank 1 SIGKILLed mid-run, ranks 0 and
  2 finish their 300 steps with exit 0 and name rank 1 lost, and the
  daemon holds nothing afterwards.
- A wrong token: the job stops at start-up (exit 1), naming the token.
- Checkpoints (--checkpoint with --sync async): each rank writes its own,
  DIR/rank.R; 10 deterministic steps, then --resume to 20: every rank's
  losses of steps 10..19 equal the uninterrupted run's bit for bit (rank
  0's state given to all would not: the ranks differ).
- Rank 0 SIGKILLed mid-run (MPI mailboxes): ranks 1 and 2 finish their
  300 steps, exit 0, and name rank 0 lost.

Exit 77 (skip) without MPI; the daemon parts are skipped without
hpdlf-store (a build without libfabric).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import check_asgd as ca  # noqa: E402 (exits 77 without MPI)
from mpi_launch import LAUNCH, ENV  # noqa: E402

STORE = sys.argv[2] if len(sys.argv) > 2 and os.path.exists(sys.argv[2]) else None
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def make_token(tmp, name, seed):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(bytes((seed * 37 + i * 11) % 251 for i in range(32)))
    os.chmod(path, 0o600)
    return path


def start_daemon(tmp, token):
    port = free_port()
    pf = os.path.join(tmp, "port.%d" % port)
    d = subprocess.Popen([STORE, "--listen", "127.0.0.1:%d" % port, "--dram", "64M", "--token-file", token,
                          "--port-file", pf, "--log-level", "info"],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "daemon.log"), "w"))
    for _ in range(400):
        if os.path.exists(pf) and open(pf).read().strip():
            return d, "127.0.0.1:%d" % port
        if d.poll() is not None:
            raise RuntimeError("daemon exited: " + open(os.path.join(tmp, "daemon.log")).read())
        time.sleep(0.05)
    raise RuntimeError("daemon did not start")


def daemon_used(addr, token):
    """Bytes the daemon has lent ("capacity C used U dead-daemons D")."""
    p = subprocess.run([STORE, "stat", "--store", addr, "--token-file", token], capture_output=True,
                       text=True, timeout=60)
    w = p.stdout.split()
    return int(w[w.index("used") + 1]) if "used" in w else None


def daemon_empty(addr, token, what):
    used = None
    for _ in range(40):  # leases end when the ranks' connections close
        used = daemon_used(addr, token)
        if used == 0:
            break
        time.sleep(0.1)
    check(used == 0, '%s: the daemon holds nothing after the job (used %s bytes)' % (what, used))


def store_slowed(tmp, addr, token):
    """Rank 1 slowed by 40 ms a step, mailboxes in the daemon: the fast
    ranks do not wait for it, and every rank's loss falls."""
    what, delay = 'daemon mailboxes, rank 1 slowed by 40 ms a step', 40
    log = os.path.join(tmp, 'sslow.json')
    rc, err = ca.run(LAUNCH + ['-np', '3'] + ca.train_args(tmp, 30, 60, [
        '--exchange-every', '2', '--log-json', log, '--debug-delay-ms', '1:%d' % delay, '--store', addr,
        '--token-file', token]))
    if not check(rc == 0, '%s: 3 ranks train' % what):
        print(err[-3000:])
        return
    logs = ca.rank_logs(log, 3)
    slow_total = sum(l['ms'] for l in logs[1])
    for r in range(3):
        first, last = sum(l['loss'] for l in logs[r][:5]) / 5, sum(l['loss'] for l in logs[r][-5:]) / 5
        total = sum(l['ms'] for l in logs[r])
        fast_ok = r == 1 or (total < 0.5 * slow_total and ca.median([l['ms'] for l in logs[r]]) < delay / 2)
        check(len(logs[r]) == 60 and last < 0.6 * first and fast_ok,
              '%s: rank %d loss %.3f -> %.3f, its 60 steps took %.0f ms (rank 1: %.0f ms)' %
              (what, r, first, last, total, slow_total))
    got = [m for r in range(3) for l in logs[r] if 'asgd' in l for m in l['asgd']['received']]
    check(got and mailboxes(logs) == {'daemon ' + addr} and any(m['staleness'] != 0 for m in got),
          '%s: %d states received through the daemon, staleness %d..%d' %
          (what, len(got), min(m['staleness'] for m in got) if got else 0,
           max(m['staleness'] for m in got) if got else 0))


def det_args(tmp, steps, log, extra=()):
    return ca.train_args(tmp, 30, steps, ['--async-deterministic', '--exchange-every', '2', '--exchange-peers', '1',
                                          '--blend', '0.5', '--log-json', log] + list(extra))


def det_run(tmp, steps, log, extra=()):
    rc, err = ca.run(LAUNCH + ['-np', '3'] + det_args(tmp, steps, log, extra))
    return rc, err, ca.rank_logs(log, 3) if rc == 0 else None


def mailboxes(logs):
    return {m for r in logs for l in r if 'asgd' in l for m in [l['asgd'].get('mailbox')]}


def store_deterministic(tmp, x, y, init, addr, token):
    what = 'daemon mailboxes, deterministic (every 2, blend 0.5, 1 peer)'
    runs = []
    for k in range(2):
        rc, err, logs = det_run(tmp, 20, os.path.join(tmp, 'sdet%d.json' % k),
                                ['--store', addr, '--token-file', token])
        if not check(rc == 0, '%s: 3 ranks train (run %d)' % (what, k)):
            print(err[-3000:])
            return
        runs.append(logs)
    got = runs[0]
    check(mailboxes(got) == {'daemon ' + addr}, '%s: every exchange used the daemon (%s)' %
          (what, sorted(map(str, mailboxes(got)))))
    want, sched = ca.model_run(x, y, init, 3, 30, 20, 2, 0.5, False, 1, 11)
    worst = max(abs(l['loss'] - w) / abs(w) for r in range(3) for l, w in zip(got[r], want[r]))
    check(all(len(got[r]) == 20 for r in range(3)) and worst <= 1e-6,
          '%s: every rank\'s 20 losses = NumPy within 1e-6 (max rel %.2g)' % (what, worst))
    alone, _ = ca.model_run(x, y, init, 3, 30, 20, 1000, 0.5, False, 1, 11)
    apart = max(abs(l['loss'] - w) / abs(w) for r in range(3) for l, w in zip(got[r], alone[r]))
    check(apart > 1e-3, '%s: the exchanges matter (%.2g from training without them)' % (what, apart))
    logged = {(r, l['step']): l['asgd']['sent_to'] for r in range(3) for l in got[r] if 'asgd' in l}
    check(logged == sched, '%s: the peer schedule is the seeded one (%d exchanges)' % (what, len(sched)))
    stale = [m['staleness'] for r in range(3) for l in got[r] if 'asgd' in l for m in l['asgd']['received']]
    check(len(stale) == len(sched) and set(stale) == {0},
          '%s: %d states received (one per write), all of staleness 0' % (what, len(stale)))
    same = [[l['loss'] for l in runs[0][r]] for r in range(3)] == [[l['loss'] for l in runs[1][r]] for r in range(3)]
    check(same, '%s: two runs give the same losses bit for bit' % what)
    daemon_empty(addr, token, what)
    rc, err, logs = det_run(tmp, 4, os.path.join(tmp, 'mpiwin.json'))
    check(rc == 0 and mailboxes(logs) == {'mpi-window'}, 'without --store the mailboxes are an MPI window (%s)' %
          (sorted(map(str, mailboxes(logs))) if logs else err[-500:]))


def wrong_token(tmp, addr):
    bad = make_token(tmp, 'bad-token', 99)
    rc, err, _ = det_run(tmp, 4, os.path.join(tmp, 'bad.json'), ['--store', addr, '--token-file', bad])
    check(rc == 1 and 'token' in err.lower(), 'daemon mailboxes, a wrong token: exit 1 naming it (%d)' % rc)


def kill_rank(tmp, victim, extra, what):
    """SIGKILL rank `victim` of a free-running 3-rank job of 300 steps once
    another rank logged 20; the others must finish."""
    others = [r for r in range(3) if r != victim]
    log, pids = os.path.join(tmp, 'kill%d.json' % victim), os.path.join(tmp, 'pid%d' % victim)
    args = ca.train_args(tmp, 30, 300, ['--exchange-every', '2', '--log-json', log, '--debug-delay-ms', '10'] +
                         list(extra))
    wrap = ['sh', '-c', 'echo $$ > %s.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' % pids] + args
    p = subprocess.Popen(LAUNCH + ['--enable-recovery', '-np', '3'] + wrap, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
    watch = '%s.rank%d' % (log, others[-1])
    deadline = time.time() + 90
    while time.time() < deadline and not (os.path.exists(watch) and sum(1 for _ in open(watch)) >= 20):
        time.sleep(0.1)
    try:
        os.kill(int(open('%s.%d' % (pids, victim)).read()), signal.SIGKILL)
    except (OSError, ValueError) as e:
        check(False, '%s: kill rank %d: %s' % (what, victim, e))
    try:
        _, err = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
    logs = ca.rank_logs(log, 3)
    ok = True
    for r in others:
        lost = [l['step'] for l in logs[r] if 'asgd' in l and victim in l['asgd']['lost']]
        ok &= check(len(logs[r]) == 300 and bool(lost),
                    '%s: rank %d finishes its 300 steps (%d logged) and its log names rank %d lost from step %s' %
                    (what, r, len(logs[r]), victim, lost[0] if lost else '?'))
    for r in others:  # the survivors still exchange with each other after the loss
        lost = [l['step'] for l in logs[r] if 'asgd' in l and victim in l['asgd']['lost']]
        peer = [q for q in others if q != r][0]
        after = [m for l in logs[r] if 'asgd' in l and lost and l['step'] > lost[0]
                 for m in l['asgd']['received'] if m['from'] == peer]
        check(len(after) > 0, '%s: rank %d took %d states from rank %d after the loss' % (what, r, len(after), peer))
    check(ok and p.returncode == 0 and 'rank %d was lost' % victim in err,
          '%s: the job exits 0 (%s) and the ranks say rank %d was lost' % (what, p.returncode, victim))
    if not ok or p.returncode:
        print(err[-3000:])
    return logs


def checkpoints(tmp):
    what = 'checkpoints of async runs'
    full = os.path.join(tmp, 'ckfull.json')
    rc, err, straight = det_run(tmp, 20, full)
    if not check(rc == 0, '%s: an uninterrupted deterministic run of 20 steps' % what):
        print(err[-2000:])
        return
    ck = os.path.join(tmp, 'ck')
    rc, err, first = det_run(tmp, 10, os.path.join(tmp, 'ck1.json'), ['--checkpoint', ck])
    if not check(rc == 0, '%s: 10 steps with --checkpoint' % what):
        print(err[-2000:])
        return
    own = all(os.path.exists(os.path.join(ck, 'rank.%d' % r, 'checkpoint.hpck')) for r in range(3))
    check(own, '%s: each rank committed its own checkpoint (%s)' % (what, sorted(os.listdir(ck))))
    rc, err, resumed = det_run(tmp, 20, os.path.join(tmp, 'ck2.json'), ['--checkpoint', ck, '--resume'])
    if not check(rc == 0, '%s: --resume to step 20' % what):
        print(err[-2000:])
        return
    for r in range(3):
        want = [(l['step'], l['loss']) for l in straight[r][10:]]
        got = [(l['step'], l['loss']) for l in resumed[r]]
        check(got == want and len(got) == 10,
              '%s: rank %d resumed at step %s, its 10 losses = the uninterrupted run\'s bit for bit' %
              (what, r, got[0][0] if got else '?'))
    differ = len({straight[r][10]['loss'] for r in range(3)}) == 3
    check(differ, '%s: the ranks\' states differ at step 10 (so one shared state would not pass)' % what)


def main():
    tmp = tempfile.mkdtemp(prefix='hpdlf-test-asgd-store-')
    daemon = None
    try:
        hard = os.path.join(tmp, 'hard')
        os.mkdir(hard)
        _, x, y, init = ca.make_model(hard, 0.3)
        checkpoints(hard)
        ca.make_model(tmp, 1.5)
        kill_rank(tmp, 0, [], 'rank 0 killed (MPI mailboxes)')
        if STORE:
            token = make_token(tmp, 'token', 1)
            daemon, addr = start_daemon(tmp, token)
            store_deterministic(hard, x, y, init, addr, token)
            wrong_token(hard, addr)
            store_slowed(tmp, addr, token)
            kill_rank(tmp, 1, ['--store', addr, '--token-file', token], 'rank 1 killed (daemon mailboxes)')
            daemon_empty(addr, token, 'rank 1 killed (daemon mailboxes)')
        else:
            print('skip: no hpdlf-store (built without the remote tier): daemon mailboxes untested')
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failure(s)' % fails)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())

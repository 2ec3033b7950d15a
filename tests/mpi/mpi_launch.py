"""What every MPI test script starts with: mpirun (or exit 77, the skip
status, in a build without MPI or without a launcher), the launch prefix
(oversubscribed, as root where the tests run as root) and the environment
(one BLAS thread per rank: 3 ranks on 2 cores stay usable)."""
import os
import shutil
import signal
import subprocess
import sys
import time

MPIRUN = shutil.which('mpirun')
if os.environ.get('HPDLF_TEST_HAVE_MPI') != '1' or not MPIRUN:
    print('skip: built without MPI or no mpirun')
    sys.exit(77)
LAUNCH = [MPIRUN, '--oversubscribe'] + (['--allow-run-as-root'] if os.geteuid() == 0 else [])
ENV = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1')


def kill_and_wait(p, pids, victim=1, others=(0, 2)):
    """SIGKILL rank `victim` of the job p (its pid in the file pids.N),
    wait up to 30 s for mpirun to end (then kill its process group).
    Returns the kill's error (or None), mpirun's status, the seconds it
    took, and the pids of the `others` ranks still alive (not zombies)."""
    kerr = None
    try:
        os.kill(int(open('%s.%d' % (pids, victim)).read()), signal.SIGKILL)
    except (OSError, ValueError) as e:
        kerr = e
    t0 = time.time()
    try:
        rc = p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
    took = time.time() - t0
    pid = [int(open('%s.%d' % (pids, r)).read()) for r in others]
    alive = [q for q in pid if os.path.exists('/proc/%d' % q) and
             open('/proc/%d/stat' % q).read().split(') ')[1][0] != 'Z']
    return kerr, rc, took, alive

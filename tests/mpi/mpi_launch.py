"""What every MPI test script starts with: mpirun (or exit 77, the skip
status, in a build without MPI or without a launcher), the launch prefix
(oversubscribed, as root where the tests run as root) and the environment
(one BLAS thread per rank: 3 ranks on 2 cores stay usable)."""
import os
import shutil
import sys

MPIRUN = shutil.which('mpirun')
if os.environ.get('HPDLF_TEST_HAVE_MPI') != '1' or not MPIRUN:
    print('skip: built without MPI or no mpirun')
    sys.exit(77)
LAUNCH = [MPIRUN, '--oversubscribe'] + (['--allow-run-as-root'] if os.geteuid() == 0 else [])
ENV = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1')

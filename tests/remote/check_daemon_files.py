#!/usr/bin/env python3
"""What a stopped hpdlf-store leaves on disk (issue 20 item 8).

usage: check_daemon_files.py HPDLF_STORE

- a --pmem file holding a named tensor is kept at its size, and the log of
  the stop (SIGTERM) says how many named tensors it keeps and their size;
  a daemon started on it again returns the tensor's bytes;
- once that tensor is removed, the stop truncates the file (it existed when
  this daemon started) to 0 bytes and says so; the catalog stays;
- a --pmem file the daemon created and never named anything in is removed
  with its catalog at the stop;
- a named tensor in DRAM (no --pmem): the stop warns that it ends with the
  daemon;
- a daemon that cannot start (its port taken) neither removes nor
  truncates an existing --pmem file.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

STORE = os.path.abspath(sys.argv[1])
FAILS = []
PMEM = 8 << 20


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail), flush=True)
    if not ok:
        FAILS.append(what)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def env():
    e = dict(os.environ)
    for k in ("HPDLF_STORE", "HPDLF_TOKEN_FILE", "SLURM_JOB_NODELIST"):
        e.pop(k, None)
    return e


def start(tmp, token, pmem=None, port=None):
    port = port or free_port()
    pf = os.path.join(tmp, "port.%d" % port)
    args = [STORE, "--listen", "127.0.0.1:%d" % port, "--dram", "16M", "--token-file", token, "--port-file", pf]
    if pmem:
        args += ["--pmem", "%s:%d" % (pmem, PMEM)]
    d = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
    for _ in range(1200):
        if os.path.exists(pf) and open(pf).read().strip():
            return d, "127.0.0.1:%d" % port
        if d.poll() is not None:
            return d, None
        time.sleep(0.05)
    d.kill()
    return d, None


def stop(d):
    d.send_signal(signal.SIGTERM)
    _, err = d.communicate(timeout=60)
    return d.returncode, err


def cmd(ep, token, *args):
    return subprocess.run([STORE] + list(args) + ["--store", ep, "--token-file", token], capture_output=True,
                          text=True, timeout=60, env=env())


def main():
    with tempfile.TemporaryDirectory(prefix="hpdlf-dfiles-") as tmp:
        token = os.path.join(tmp, "token")
        with open(token, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(token, 0o600)
        data = os.path.join(tmp, "t.bin")
        with open(data, "wb") as f:
            f.write(os.urandom(100000))
        pmem = os.path.join(tmp, "pool")

        d, ep = start(tmp, token, pmem)
        check(ep is not None, "a daemon on a new --pmem file starts")
        r = cmd(ep, token, "put", "weights", data)
        check(r.returncode == 0, "put a named tensor", r.stderr)
        rc, err = stop(d)
        check(rc == 0 and "pmem %s keeps 1 named tensor (" % pmem in err,
              "the stop says the pmem file keeps 1 named tensor and its size", "status %s: %s" % (rc, err[-400:]))
        check(os.path.exists(pmem) and os.path.getsize(pmem) == PMEM, "the pmem file is kept at its size",
              str(os.path.getsize(pmem)) if os.path.exists(pmem) else "gone")

        d, ep = start(tmp, token, pmem)
        out = os.path.join(tmp, "back.bin")
        r = cmd(ep, token, "get", "weights", out)
        check(r.returncode == 0 and open(out, "rb").read() == open(data, "rb").read(),
              "a daemon started on it again returns the tensor's bytes", r.stderr)
        r = cmd(ep, token, "rm", "weights")
        check(r.returncode == 0, "rm the named tensor", r.stderr)
        rc, err = stop(d)
        check(rc == 0 and "pmem %s held no named tensor: truncated to 0 bytes" % pmem in err,
              "the stop truncates the existing pmem file that holds nothing named, and says so", err[-400:])
        check(os.path.exists(pmem) and os.path.getsize(pmem) == 0, "the pmem file has 0 bytes",
              str(os.path.getsize(pmem)) if os.path.exists(pmem) else "gone")
        check(os.path.exists(pmem + ".names"), "its catalog stays")

        fresh = os.path.join(tmp, "fresh")
        d, ep = start(tmp, token, fresh)
        check(ep is not None and os.path.getsize(fresh) == PMEM, "a daemon on another new --pmem file starts")
        rc, err = stop(d)
        check(rc == 0 and not os.path.exists(fresh) and not os.path.exists(fresh + ".names")
              and "removed" in err, "a pmem file the daemon created and never named anything in is removed "
              "with its catalog", "status %s, left %s: %s" % (rc, os.listdir(tmp), err[-300:]))

        d, ep = start(tmp, token)
        r = cmd(ep, token, "put", "scratch", data)
        rc, err = stop(d)
        check(r.returncode == 0 and rc == 0 and "1 named tensor in DRAM (" in err and "end with this daemon" in err,
              "a named tensor in DRAM: the stop warns that it ends with the daemon", err[-300:])

        with open(pmem, "wb") as f:
            f.write(b"x" * 4096)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        d, ep = start(tmp, token, pmem, port=s.getsockname()[1])
        if ep is None:
            d.wait(timeout=60)
        else:
            stop(d)
        s.close()
        # (it grew it to --pmem's size before it failed: it is neither removed nor truncated)
        check(ep is None and os.path.exists(pmem) and os.path.getsize(pmem) == PMEM,
              "a daemon that cannot start neither removes nor truncates an existing pmem file",
              "started %s, size %s" % (ep, os.path.getsize(pmem) if os.path.exists(pmem) else "gone"))
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()

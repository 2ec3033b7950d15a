#!/usr/bin/env python3
"""Token files on the command line (issue 22): a daemon, a client command
and hpdlf-exec all refuse a token file open to group or others, a directory,
a FIFO (at once), /dev/zero, 15 and 5000 bytes and one byte repeated, with
exit status 2 and one line naming the file and the fix; a 0600 token of 32
bytes (or a symlink to one) works.  The token itself appears neither in
--dump-config (the path does) nor in the daemon's log.

usage: check_secrets.py HPDLF_STORE HPDLF_EXEC MODEL.onnx
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

STORE, EXE, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
TOKEN_TEXT = b"hunter2-correct-horse-battery-staple"
FAILS = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail), flush=True)
    if not ok:
        FAILS.append(what)


def run(args, env=None):
    e = dict(os.environ)
    e.pop("HPDLF_TOKEN_FILE", None)
    e.pop("HPDLF_STORE", None)
    e.update(env or {})
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=20, env=e)
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        return None, "", "timed out (hung)"


def write(path, data, mode):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def refused(what, path, hint):
    daemon = [STORE, "--listen", "127.0.0.1:0", "--dram", "64M", "--token-file", path]
    for who, args, env in (("daemon", daemon, None),
                           ("stat", [STORE, "stat", "--store", "127.0.0.1:1", "--token-file", path], None),
                           ("ls (HPDLF_TOKEN_FILE)", [STORE, "ls", "--store", "127.0.0.1:1"], {"HPDLF_TOKEN_FILE": path}),
                           ("hpdlf-exec", [EXE, MODEL, "--store", "127.0.0.1:1", "--token-file", path], None)):
        rc, out, err = run(args, env)
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and path in err and hint in err,
              "%s: %s refused, exit 2, one line with the fix" % (what, who), "exit %s: %r" % (rc, err))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)
        rnd = os.urandom(32)
        refused("0644 token", write(p("loose"), rnd, 0o644), "chmod 600")
        refused("0640 token", write(p("group"), rnd, 0o640), "chmod 600")
        os.symlink(write(p("loose-target"), rnd, 0o604), p("loose-link"))
        refused("symlink to a 0604 token", p("loose-link"), "chmod 600")
        os.mkdir(p("dir"))
        refused("directory", p("dir"), "head -c 32 /dev/urandom")
        os.mkfifo(p("fifo"), 0o600)
        refused("FIFO", p("fifo"), "head -c 32 /dev/urandom")
        refused("/dev/zero", "/dev/zero", "head -c 32 /dev/urandom")
        refused("15 bytes", write(p("short"), rnd[:15], 0o600), "head -c 32 /dev/urandom")
        refused("5000 bytes", write(p("long"), os.urandom(5000), 0o600), "head -c 32 /dev/urandom")
        refused("32 zero bytes", write(p("zeros"), bytes(32), 0o600), "head -c 32 /dev/urandom")

        good = write(p("good"), TOKEN_TEXT, 0o600)
        os.symlink(good, p("good-link"))
        rc, out, err = run([STORE, "--listen", "127.0.0.1:0", "--dram", "64M", "--token-file", good, "--dump-config"])
        check(rc == 0 and ("token-file = " + good) in out, "--dump-config shows the token file's path", out)
        check(TOKEN_TEXT.decode() not in out + err and "hunter2" not in out + err,
              "--dump-config does not show the token", out)
        port = free_port()
        pf = p("port")
        log = open(p("daemon.log"), "w+")
        d = subprocess.Popen([STORE, "--listen", "127.0.0.1:%d" % port, "--dram", "64M", "--token-file",
                              p("good-link"), "--port-file", pf, "--log-level", "debug"],
                             stdout=subprocess.DEVNULL, stderr=log)
        try:
            for _ in range(200):
                if os.path.exists(pf) or d.poll() is not None:
                    break
                time.sleep(0.05)
            check(os.path.exists(pf), "a 0600 token (through a symlink) starts the daemon")
            ep = "127.0.0.1:%d" % port
            rc, out, err = run([STORE, "stat", "--store", ep, "--token-file", good])
            check(rc == 0, "a 0600 token: stat exit 0", "exit %s: %r" % (rc, err))
            rc, out, err = run([STORE, "stat", "--store", ep, "--token-file", p("good-link")])
            check(rc == 0, "a symlink to a 0600 token: stat exit 0", "exit %s: %r" % (rc, err))
        finally:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=30)
        log.seek(0)
        text = log.read()
        check("hunter2" not in text and len(text) > 0, "the daemon's log does not show the token", text[-500:])
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

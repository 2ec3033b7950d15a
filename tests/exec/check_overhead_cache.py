#!/usr/bin/env python3
"""The start-up overhead's cache ($XDG_CACHE_HOME/hpdlf/overhead-*, one
file per model, mode and version): files name their key and carry a
checksum, a damaged or foreign one is measured anew, and the directory
keeps at most 256 of them, the least recently used removed first (other
kinds of cache file untouched).  A process started with LD_PRELOAD
(valgrind, sanitizers) neither takes nor writes the kept figure, and
HPDLF_RECALIBRATE=1 replaces it.

usage: check_overhead_cache.py HPDLF_EXEC MODEL"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1


def crc32c(data):
    """Castagnoli CRC, bit by bit (the cache files' checksum)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def with_figure(text, pages):
    """The cache file's text with its figure (pages) replaced, checksum redone."""
    lines = text.split("\n")
    body = "\n".join([lines[0], lines[1], str(pages)]) + "\n"
    return body + "sum %08x\n" % crc32c(body.encode())


def overhead_files(d):
    return sorted(f for f in os.listdir(d) if f.startswith("overhead-") and "." not in f)


def main():
    exe, model = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        d = os.path.join(cache, "hpdlf")
        os.makedirs(d)
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        m = os.path.join(tmp, "m.onnx")
        shutil.copy(model, m)
        now = time.time()
        # 300 stale files of other models, oldest first; one other kind
        for i in range(300):
            p = os.path.join(d, "overhead-%08x" % (0x10000000 + i))
            with open(p, "w") as f:
                f.write("stale\n")
            os.utime(p, (now - 86400 * (400 - i), now - 86400 * (400 - i)))
        other = os.path.join(d, "compute-0badc0de")
        with open(other, "w") as f:
            f.write("not an overhead file\n")
        os.utime(other, (now - 86400 * 1000, now - 86400 * 1000))

        def run():
            return subprocess.run([exe, m, "--iterations", "1", "--quiet", "--budget", "64M"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)

        r = run()
        check(r.returncode == 0, "a run with 300 stale overhead files: exit %d %s" % (r.returncode, r.stderr[-300:]))
        files = overhead_files(d)
        check(192 <= len(files) <= 256, "the directory keeps %d overhead files (at most 256)" % len(files))
        check("overhead-%08x" % 0x10000000 not in files and "overhead-%08x" % (0x10000000 + 299) in files,
              "the oldest stale file went, the newest stale one stayed")
        check(os.path.exists(other), "other kinds of cache file are left alone")
        mine = [f for f in files if int(f[9:], 16) < 0x10000000 or int(f[9:], 16) >= 0x10000000 + 300]
        check(len(mine) == 1, "the run wrote one overhead file of its own: %s" % mine)
        if len(mine) != 1:
            return 1
        p = os.path.join(d, mine[0])
        text = open(p).read()
        check(("model=" + m) in text and "\nsum " in text, "the file names its key (the model) and a checksum")
        before = os.stat(p).st_mtime
        os.utime(p, (before - 3600, before - 3600))
        r = run()
        check(r.returncode == 0 and ("model=" + m) in open(p).read() and os.stat(p).st_mtime > before - 3600,
              "a second run marks the file used (or keeps a larger figure)")
        # a kept figure 200 MiB above this start-up's, as a valgrind run leaves
        text = open(p).read()
        pages = int(text.split("\n")[2])
        big = pages + (200 << 20) // 4096
        with open(p, "w") as f:
            f.write(with_figure(text, big))

        def planned(extra_env):
            r = subprocess.run([exe, m, "--plan", "--budget", "512M"], env=dict(env, **extra_env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
            f = re.search(r"fixed overhead ([0-9.]+) MiB", r.stdout + r.stderr)
            return r.returncode, float(f.group(1)) if f else None, r.stdout + r.stderr

        rc, f_plain, out = planned({})
        check(rc == 0 and f_plain is not None and f_plain >= 200,
              "a plain run takes the kept figure: fixed overhead %s MiB %s" % (f_plain, "" if f_plain else out[-300:]))
        preload = [x for x in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                               "/lib64/libm.so.6") if os.path.exists(x)]
        if preload:
            rc, f_pre, out = planned({"LD_PRELOAD": preload[0]})
            check(rc == 0 and f_pre is not None and f_pre < 200 and open(p).read() == with_figure(text, big),
                  "a run with LD_PRELOAD measures its own (%s MiB) and leaves the file alone" % f_pre)
        rc, f_re, out = planned({"HPDLF_RECALIBRATE": "1"})
        kept = int(open(p).read().split("\n")[2])
        check(rc == 0 and f_re is not None and f_re < 200 and kept < big,
              "HPDLF_RECALIBRATE=1 replaces the kept figure (%s MiB, %d pages kept)" % (f_re, kept))
        rc, f_after, out = planned({})
        check(rc == 0 and f_after is not None and f_after < 200,
              "a plain run after it takes the new figure (%s MiB)" % f_after)
        text = open(p).read()
        with open(p, "w") as f:
            f.write(text.replace("model=", "model=X", 1))  # checksum no longer holds
        r = run()
        t2 = open(p).read()
        check(r.returncode == 0 and ("model=" + m) in t2 and "model=X" not in t2,
              "a damaged file is measured anew and rewritten")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The start-up overhead's cache ($XDG_CACHE_HOME/hpdlf/overhead-*, one
file per model, mode and version): files name their key and carry a
checksum, a damaged or foreign one is measured anew, and the directory
keeps at most 256 of them, the least recently used removed first (other
kinds of cache file untouched).

usage: check_overhead_cache.py HPDLF_EXEC MODEL"""
import os
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

#!/usr/bin/env python3
"""Stats pages that cannot be abused (issue 22, item 2).

What any local user can put under a page's name - a FIFO, a symbolic link
(to a valid page elsewhere), a short file - is skipped with one warning
naming the file, and hpdlf-store-inspect returns at once, with and without
that PID as a target.  The writer (the real store, tests/inspect/real_page.c)
makes its directory 0700 and its pages 0600, never writes through a link
planted under the page's name, and runs on without a page when the
directory is not private.  SIGTERM and SIGINT end a --watch at once with
exit status 143 and 130, also while a daemon read is stalled.

Every inspector run has a timeout: a hang fails a check instead of blocking
the suite.  Pages go to private directories ($HPDLF_STATS_DIR) so that tests
running in parallel never see each other's files; check_inspect.py covers
the default directory."""
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

INSPECT = os.environ["INSPECT"]
WRITER = os.environ["REAL_PAGE"]
QUICK = 5.0  # seconds: "returns at once", with room for a loaded machine
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def env_for(d):
    e = dict(os.environ)
    e["HPDLF_STATS_DIR"] = d
    return e


def run(d, *args, timeout=10):
    """(rc, stdout, stderr, seconds); rc None if it had to be killed."""
    t0 = time.monotonic()
    try:
        r = subprocess.run([INSPECT, *args], capture_output=True, text=True, timeout=timeout, env=env_for(d))
    except subprocess.TimeoutExpired as e:
        check(False, f"inspect {args} in {d} hung ({timeout} s)")
        return None, e.stdout or "", e.stderr or "", time.monotonic() - t0
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def wait_line(p, timeout=15):
    r, _, _ = select.select([p.stdout], [], [], timeout)
    return p.stdout.readline() if r else ""


def start_writer(tmp, d, plant=None):
    """real_page with its pages in d; plant(pid) runs in the child before exec."""
    out = os.path.join(tmp, "written.json")
    pre = (lambda: plant(os.getpid())) if plant else None
    p = subprocess.Popen([WRITER, "0", "0", out], stdout=subprocess.PIPE, text=True, env=env_for(d),
                         preexec_fn=pre)
    if wait_line(p).strip() == "ready":
        return p
    check(False, f"writer with HPDLF_STATS_DIR={d} did not start (exit {p.poll()})")
    stop(p)
    return None


def stop(p):
    p.kill()
    p.wait()


def page(d, pid):
    return os.path.join(d, f"hpdlf-store.{pid}")


def dead_pids(n):
    """PIDs of processes that have exited: names a stranger could squat."""
    pids = []
    while len(pids) < n:
        c = subprocess.Popen(["true"])
        c.wait()
        if c.pid not in pids:
            pids.append(c.pid)
    return pids


def skipped_lines(err):
    return [ln for ln in err.splitlines() if ln.startswith("hpdlf-store-inspect: skipped ")]


def test_private_dir(tmp, d):
    """The writer makes d (absent) 0700 and the page 0600, nothing else."""
    w = start_writer(tmp, d)
    if not w:
        return None
    st = os.lstat(d)
    check(stat.S_ISDIR(st.st_mode) and st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid(),
          f"page directory mode {oct(st.st_mode)}, uid {st.st_uid}: want a 0700 directory of uid {os.geteuid()}")
    st = os.lstat(page(d, w.pid))
    check(stat.S_ISREG(st.st_mode) and st.st_mode & 0o777 == 0o600, f"page mode {oct(st.st_mode)}, want 0600")
    check(os.listdir(d) == [f"hpdlf-store.{w.pid}"], f"directory holds {os.listdir(d)}: a temporary file left?")
    rc, out, err, _ = run(d, "--json", str(w.pid))
    check(rc == 0 and json.loads(out)["targets"][0]["state"] == "live", f"page read live: {rc} {err!r}")
    return w


def plant_hostile(tmp, d, live_pid):
    """{pid: (path, words the warning must hold)} for each hostile name."""
    fifo, link, short, foreign = dead_pids(4)
    elsewhere = os.path.join(tmp, "elsewhere")
    os.mkdir(elsewhere)
    copy = os.path.join(elsewhere, "page-copy")
    shutil.copyfile(page(d, live_pid), copy)  # a valid page: only not following the link refuses it
    os.mkfifo(page(d, fifo), 0o600)
    os.symlink(copy, page(d, link))
    with open(page(d, short), "wb") as f:
        f.write(b"HPDLFST\0\1\0")
    bad = {fifo: ["FIFO"], link: ["symbolic link", "not followed"], short: ["10 bytes", "too short"]}
    if os.geteuid() == 0:  # a file of another user under a page's name
        shutil.copyfile(page(d, live_pid), page(d, foreign))
        os.chown(page(d, foreign), 65534, 65534)
        bad[foreign] = ["owned by uid 65534"]
    return {pid: (page(d, pid), words) for pid, words in bad.items()}, copy


def check_warning(lines, path, words, what):
    mine = [ln for ln in lines if path + ":" in ln]
    check(len(mine) == 1, f"{what}: {len(mine)} warnings naming {path}, want 1: {lines}")
    check(all(any(w in ln for ln in mine) for w in words), f"{what}: warning for {path} lacks {words}: {mine}")


def test_hostile(tmp, d, live):
    bad, copy = plant_hostile(tmp, d, live)
    with open(copy, "rb") as f:
        copy_bytes = f.read()
    for args in (["--json"], []):  # scan mode
        rc, out, err, dt = run(d, *args)
        check(rc == 0 and dt < QUICK, f"scan {args}: exit {rc} after {dt:.1f} s, want 0 at once: {err!r}")
        lines = skipped_lines(err)
        for pid, (path, words) in bad.items():
            check_warning(lines, path, words, f"scan {args}")
        check(len(lines) == len(bad), f"scan {args}: {len(lines)} warnings for {len(bad)} files")
        if args and rc == 0:
            got = [t["target"] for t in json.loads(out)["targets"]]
            check(got == [str(live)], f"scan lists {got}: only the page of {live} is a page")
        elif rc == 0:
            for pid in bad:
                check(f"{pid} (pid {pid})" not in out, f"table shows the hostile name of {pid}")
    for pid, (path, words) in bad.items():  # each as a target
        rc, out, err, dt = run(d, "--json", str(pid))
        check(rc == 1 and dt < QUICK, f"target {pid} ({words[0]}): exit {rc} after {dt:.1f} s, want 1 at once")
        t = json.loads(out)["targets"][0] if rc == 1 else {}
        check(t.get("state") == "error" and path in (t.get("error") or ""), f"target {pid}: {t}")
        check(path in err and all(w in err for w in words), f"target {pid}: stderr {err!r} lacks {path}, {words}")
    rc, out, err, dt = run(d, str(live), *map(str, bad))
    check(rc == 1 and dt < QUICK and f"{live} (pid {live}): live" in out,
          f"the page and the hostile names as targets: exit {rc} after {dt:.1f} s")
    rc, out, err, dt = run(d, "--json", "--watch", "0.2", "--count", "3")
    check(rc == 0 and len(out.strip().split("\n")) == 3, f"--watch --count 3: exit {rc}")
    check(len(skipped_lines(err)) == len(bad), f"--watch warns once per file over 3 frames: {skipped_lines(err)}")
    with open(copy, "rb") as f:
        check(f.read() == copy_bytes, "the link's target changed")
    for path, _ in bad.values():
        os.unlink(path)


def test_planted_link(tmp):
    """A link under the page's final name and under the old temporary name
    ("<page>.new") to a precious file: the writer replaces the first by its
    page and leaves the precious file as it was."""
    d = os.path.join(tmp, "planted")
    os.mkdir(d, 0o700)
    victim = os.path.join(tmp, "precious")
    with open(victim, "wb") as f:
        f.write(b"precious\n")
    os.chmod(victim, 0o600)

    def plant(pid):
        os.symlink(victim, page(d, pid))
        os.symlink(victim, page(d, pid) + ".new")

    w = start_writer(tmp, d, plant)
    if not w:
        return
    try:
        with open(victim, "rb") as f:
            check(f.read() == b"precious\n", "the writer wrote through a planted link")
        st = os.stat(victim)
        check(st.st_size == 9 and st.st_mode & 0o777 == 0o600, "the planted link's target was resized or chmod'ed")
        st = os.lstat(page(d, w.pid))
        check(stat.S_ISREG(st.st_mode) and st.st_size > 9, "the page did not replace the planted link")
        check(os.path.islink(page(d, w.pid) + ".new"), "the old temporary name was touched")
        rc, out, err, _ = run(d, "--json", str(w.pid))
        check(rc == 0 and json.loads(out)["targets"][0]["state"] == "live", f"page behind the planted link: {rc}")
    finally:
        stop(w)


def check_refused(tmp, d, words, what):
    """A directory that is not private: the writer runs on without a page,
    the inspector says why in one line, at once."""
    before = sorted(os.listdir(d)) if os.path.isdir(d) else None
    w = start_writer(tmp, d)
    if w:
        check(not os.path.exists(page(d, w.pid)), f"{what}: a page was published")
        after = sorted(os.listdir(d)) if os.path.isdir(d) else None
        check(after == before, f"{what}: the writer left {after} (before: {before})")
        target = str(w.pid)
    else:
        target = "1"
    for args in ([], [target]):
        rc, out, err, dt = run(d, *args)
        lines = [ln for ln in err.splitlines() if ln]
        check(rc == 1 and dt < QUICK and any(all(x in ln for x in words) for ln in lines),
              f"{what}, inspect {args}: exit {rc} after {dt:.1f} s, stderr {err!r} lacks {words}")
    if w:
        stop(w)


def test_unsafe_dirs(tmp):
    open_dir = os.path.join(tmp, "open")
    os.mkdir(open_dir)
    os.chmod(open_dir, 0o755)
    check_refused(tmp, open_dir, [open_dir, "0755", "chmod 700"], "a 0755 directory")
    priv = os.path.join(tmp, "private")
    os.mkdir(priv, 0o700)
    link = os.path.join(tmp, "link")
    os.symlink(priv, link)
    check_refused(tmp, link, [link, "symbolic link"], "a link to a private directory")
    check(os.listdir(priv) == [], "a page was written through the directory link")
    if os.geteuid() == 0:
        theirs = os.path.join(tmp, "theirs")
        os.mkdir(theirs, 0o700)
        os.chown(theirs, 65534, 65534)
        check_refused(tmp, theirs, [theirs, "owned by uid 65534"], "another user's directory")


def interrupt(args, d, sig, want, first_line=True, settle=0.7):
    p = subprocess.Popen([INSPECT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env_for(d))
    try:
        if first_line:
            check(wait_line(p) != "", f"{args}: no first frame")
        else:
            time.sleep(settle)
        check(p.poll() is None, f"{args}: ended before the signal (exit {p.poll()})")
        t0 = time.monotonic()
        p.send_signal(sig)
        rc = p.wait(timeout=10)
        dt = time.monotonic() - t0
        check(rc == want and dt < 1.5, f"{args}: {signal.Signals(sig).name} -> exit {rc} after {dt:.2f} s, "
              f"want {want} at once")
    except subprocess.TimeoutExpired:
        check(False, f"{args}: still running 10 s after {signal.Signals(sig).name}")
        stop(p)
    finally:
        p.stdout.close()
        p.stderr.close()


def test_signals(tmp, d, live):
    interrupt(["--watch", "30", "--json", str(live)], d, signal.SIGTERM, 143)
    interrupt(["--watch", "30", "--json", str(live)], d, signal.SIGINT, 130)
    interrupt(["--watch", "30"], d, signal.SIGTERM, 143)
    # A daemon that accepts and never answers: the client waits out its 3 s
    # deadline, retrying EINTR, unless the signal ends the program.
    token = os.path.join(tmp, "token")
    with open(token, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(token, 0o600)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        sk.listen(8)
        ep = "127.0.0.1:%d" % sk.getsockname()[1]
        rc, out, err, _ = run(d, "--token-file", token, "127.0.0.1:1")
        if "daemon support" in err:
            print("no daemon support in this build: stalled daemon read not checked")
            return
        interrupt(["--watch", "30", "--token-file", token, ep], d, signal.SIGTERM, 143, first_line=False)


def test_gc(tmp):
    """Pages of killed processes are reclaimed by the next process with a
    store and by --gc; live pages, foreign files and a FIFO are kept."""
    d = os.path.join(tmp, "gc")
    a, b = start_writer(tmp, d), start_writer(tmp, d)
    if not a or not b:
        return
    stop(a)
    stop(b)  # SIGKILL: neither removes its page
    check(os.path.exists(page(d, a.pid)) and os.path.exists(page(d, b.pid)), "killed writers leave their pages")
    live = start_writer(tmp, d)  # a new process with a store reclaims both
    if not live:
        return
    try:
        left = sorted(os.listdir(d))
        check(left == [f"hpdlf-store.{live.pid}"], f"the next writer reclaimed the dead pages: {left}")
        c = start_writer(tmp, d)
        if not c:
            return
        stop(c)
        fifo_pid = dead_pids(1)[0]
        os.mkfifo(page(d, fifo_pid), 0o600)
        with open(os.path.join(d, "notes.txt"), "w") as f:
            f.write("not a page\n")
        rc, out, err, dt = run(d, "--gc")
        check(rc == 0 and out.strip() == "removed 1 stale page" and dt < QUICK,
              f"--gc removes the killed writer's page: exit {rc}, {out.strip()!r} {err.strip()!r} in {dt:.1f} s")
        left = sorted(os.listdir(d))
        want = sorted([f"hpdlf-store.{live.pid}", f"hpdlf-store.{fifo_pid}", "notes.txt"])
        check(left == want, f"--gc keeps the live page, the FIFO and other files: {left}, want {want}")
        rc, out, _, _ = run(d, "--gc")
        check(rc == 0 and out.strip() == "removed 0 stale pages", f"--gc again removes nothing: {out.strip()!r}")
        rc, _, err, _ = run(d, "--gc", str(live.pid))
        check(rc == 2, f"--gc with a target is a usage error (exit {rc})")
    finally:
        stop(live)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_gc(tmp)
        d = os.path.join(tmp, "pages")
        w = test_private_dir(tmp, d)
        if w:
            try:
                test_hostile(tmp, d, w.pid)
                test_signals(tmp, d, w.pid)
            finally:
                stop(w)
        test_planted_link(tmp)
        test_unsafe_dirs(tmp)
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("all stats page safety checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""hpdlf-store-inspect against statistics pages written by a test process
(tests/inspect/fake_page.c): live, then stale after the writer is killed,
then of an unknown layout version; plus usage errors and exit statuses.

Expected figures are computed here from the values the writer recorded,
following the definitions in include/hpdlf/store.h and the docs page, not
from the inspector's code."""
import json
import math
import os
import socket
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

INSPECT = os.environ["INSPECT"]
# REAL_PAGE (a writer through the real store) replaces the fake writer for
# the live and stale checks.
FAKE = os.environ.get("REAL_PAGE") or os.environ["FAKE_PAGE"]
REAL = "REAL_PAGE" in os.environ
# A page directory of this test's own: any process that opens a store
# reclaims the pages of dead processes in its directory, which would take
# the stale page away from test_stale while other tests run.
PAGE_DIR = tempfile.mkdtemp(prefix="hpdlf-inspect-", dir="/dev/shm")
os.environ["HPDLF_STATS_DIR"] = PAGE_DIR
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args, timeout=30):
    r = subprocess.run([INSPECT, *args], capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def start_writer(tmp, seed, rate, version=None):
    out = os.path.join(tmp, f"written{seed}.json")
    args = [FAKE, str(seed), str(rate), out] + ([str(version)] if version else [])
    t_spawn = time.time()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "writer did not start")
    with open(out) as f:
        return p, json.load(f), t_spawn


def proc_start(pid):
    """CLOCK_REALTIME seconds at which pid started, from the kernel's record
    (ticks after boot, /proc/PID/stat field 22) carried over from
    CLOCK_BOOTTIME (btime in /proc/stat has whole seconds only)."""
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age


def kill(p):
    p.send_signal(signal.SIGKILL)
    p.wait()


def page_path(pid):
    return f"{PAGE_DIR}/hpdlf-store.{pid}"


# ---- independent references ----

def percentile(hist, q):
    """Upper edge (us) of the log2 bucket holding quantile q; None: no data."""
    total = sum(hist)
    if total == 0:
        return None
    acc = 0
    for i, c in enumerate(hist):
        acc += c
        if acc >= q * total:
            return float(2 ** (i + 1))
    return float(2 ** 32)


def ratio(a, b):
    return a / b if b else None


def close(a, b, rel=1e-9):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


COUNTERS = ["capacity", "used", "chunks", "reads", "writes", "bytes_read", "bytes_written", "hits",
            "misses", "evictions", "promotions", "demotions", "prefetches", "prefetch_hits",
            "prefetch_late", "errors", "crc_errors"]
STORE = ["budget", "resident", "pinned", "staging", "chunk_size", "tensors"]


def check_target(t, w, state, t_spawn=None, live_rate=False):
    check(t["state"] == state, f"state {t['state']} != {state}")
    check(t["pid"] == w["pid"], "pid")
    check(t["page_version"] == w["version"], "page_version")
    for k in STORE:
        check(t[k] == w[k], f"store field {k}: {t[k]} != {w[k]}")
    check(len(t["tiers"]) == len(w["tiers"]), "tier count")
    for i, (a, b) in enumerate(zip(t["tiers"], w["tiers"])):
        check(a["index"] == i and a["name"] == b["name"], f"tier {i} name")
        for k in COUNTERS:
            if i == 1 and k == "bytes_read":
                check(a[k] >= b[k], "tier 1 bytes_read grows")
            else:
                check(a[k] == b[k], f"tier {i} {k}: {a[k]} != {b[k]}")
        check(a["latency_log2us_histogram"] == b["lat_hist"], f"tier {i} histogram")
        check(close(a["hit_ratio"], ratio(b["hits"], b["hits"] + b["misses"])), f"tier {i} hit ratio")
        check(close(a["prefetch_hit_rate"], ratio(b["prefetch_hits"], b["prefetches"])), f"tier {i} pf rate")
        for key, q in (("latency_us_p50", 0.5), ("latency_us_p99", 0.99), ("latency_us_p999", 0.999)):
            check(close(a[key], percentile(b["lat_hist"], q)), f"tier {i} {key}: {a[key]}")
        if live_rate:
            now = a["read_bytes_per_s_now"]
            if i == 1 and w["rate"] > 0:
                check(now is not None and abs(now - w["rate"]) < 0.35 * w["rate"],
                      f"tier 1 read now {now} vs written rate {w['rate']}")
            else:
                check(now == 0, f"tier {i} read now {now} != 0 (fixed counters)")
            check(a["write_bytes_per_s_now"] == 0, f"tier {i} write now")
            # average since the process started, as the kernel recorded the start (boot time +
            # field 22 of /proc/PID/stat, to a clock tick) and the page its last update: recorded
            # values, not this script's clock, so a loaded machine cannot move them
            up = t["updated_ns"] / 1e9 - proc_start(w["pid"])
            avg = a["write_bytes_per_s_avg"]
            n = b["bytes_written"]
            tick = 1.0 / os.sysconf("SC_CLK_TCK")
            check(avg is not None and (avg == 0 if n == 0 else avg > 0 and abs(n / avg - up) <= tick + 1e-3),
                  f"tier {i} write avg {avg} over {up:.3f} s vs {n} bytes")
        else:
            check(a["read_bytes_per_s_now"] is None, f"tier {i}: stale page has no 'now' rate")


def format_size(n):
    """hp_format_size's documented format: 1024-based, one decimal."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, u = float(n), 0
    while v >= 1024 and u < 4:
        v /= 1024
        u += 1
    return f"{n} B" if u == 0 else f"{v:.1f} {units[u]}"


# ---- Prometheus text format ----

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({NAME})(?:\{{({LABEL}(?:,{LABEL})*)?\}})? (\S+)(?: -?\d+)?$")


def parse_prometheus(text):
    """Validate line by line; return {(name, frozenset(labels)): value}."""
    samples, types, seen_done, current = {}, {}, set(), None
    for n, line in enumerate(text.split("\n"), 1):
        if line == "":
            continue
        m = re.match(rf"^# (HELP|TYPE) ({NAME}) (.+)$", line)
        if m:
            kind, name, rest = m.groups()
            if name != current:
                check(name not in seen_done, f"line {n}: family {name} split in two")
                if current:
                    seen_done.add(current)
                current = name
            if kind == "TYPE":
                check(rest in ("counter", "gauge", "histogram", "summary", "untyped"), f"line {n}: type {rest}")
                check(name not in types, f"line {n}: second TYPE for {name}")
                types[name] = rest
            continue
        check(not line.startswith("#"), f"line {n}: bad comment {line!r}")
        m = SAMPLE.match(line)
        check(m is not None, f"line {n}: not a sample: {line!r}")
        if not m:
            continue
        name, labels, value = m.groups()
        base = re.sub(r"_(bucket|sum|count)$", "", name) if types.get(current) == "histogram" else name
        check(base == current and base in types, f"line {n}: {name} without its # TYPE before it")
        if types.get(name) == "counter":
            check(name.endswith("_total"), f"line {n}: counter {name} without _total")
        try:
            v = float(value)
        except ValueError:
            check(False, f"line {n}: value {value!r}")
            continue
        check(not math.isnan(v), f"line {n}: NaN")
        lab = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels or ""))
        check((name, lab) not in samples, f"line {n}: duplicate sample")
        samples[(name, lab)] = v
    return samples


def prom(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def check_real_parser(text):
    """Prometheus's own parser (Debian's python3-prometheus-client) reads
    every family, histograms with their buckets, sum and count."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        print("note: python3-prometheus-client missing (tools/setup.sh installs it): real parser not run")
        return
    try:
        fams = {f.name: f for f in text_string_to_metric_families(text)}
    except Exception as e:  # any parse error fails the check
        check(False, f"prometheus_client cannot parse the output: {e}")
        return
    h = fams.get("hpdlf_store_tier_latency_seconds")
    check(h is not None and h.type == "histogram", "prometheus_client: latency is a histogram")
    if h:
        names = {s.name for s in h.samples}
        check(names == {"hpdlf_store_tier_latency_seconds_bucket", "hpdlf_store_tier_latency_seconds_sum",
                        "hpdlf_store_tier_latency_seconds_count"}, f"prometheus_client: histogram samples {names}")
    check(all(f.type in ("counter", "gauge", "histogram") for f in fams.values()), "prometheus_client: types")


def test_live(tmp):
    p, w, t_spawn = start_writer(tmp, 7, 200e6)
    pid = str(w["pid"])
    if REAL:  # the store's own writer: a private directory, a private page
        d, f = os.lstat(PAGE_DIR), os.lstat(page_path(pid))
        check(stat.S_ISDIR(d.st_mode) and d.st_mode & 0o777 == 0o700 and d.st_uid == os.geteuid(),
              f"{PAGE_DIR}: mode {oct(d.st_mode)}, uid {d.st_uid}")
        check(stat.S_ISREG(f.st_mode) and f.st_mode & 0o777 == 0o600, f"page mode {oct(f.st_mode)}")
    try:
        time.sleep(0.6)
        rc, out, err = run("--json", pid)
        check(rc == 0, f"--json live: exit {rc}: {err}")
        doc = json.loads(out)
        check(doc["schema"] == "hpdlf-store-inspect" and doc["version"] == 1, "schema and version")
        check(len(doc["targets"]) == 1, "one target")
        check_target(doc["targets"][0], w, "live", t_spawn, live_rate=True)
        check(doc["targets"][0]["error"] is None, "no error when live")

        rc, out, err = run(pid)
        check(rc == 0 and err == "", f"table: exit {rc}, stderr {err!r}")
        check(f"{pid} (pid {pid}): live" in out, "table header says live")
        check(f"budget {format_size(w['budget'])}," in out, "table budget size")
        lines = {ln.split("  ")[1].strip(): ln for ln in out.split("\n") if ln.startswith("  ") and "  " in ln[2:]}
        hr = lines.get("hit ratio", "").split()[2:]
        want = [f"{100 * t['hits'] / (t['hits'] + t['misses']):.1f}%" if t["hits"] + t["misses"] else "-"
                for t in w["tiers"]]
        check(hr == want, f"hit ratio row {hr}, want {want} ('-': no requests)")
        check(lines.get("tier", "").split()[1:] == [t["name"] for t in w["tiers"]], "tier columns")

        rc, out, err = run("--prometheus", pid)
        check(rc == 0, f"--prometheus: exit {rc}")
        s = parse_prometheus(out)
        check(prom(s, "hpdlf_store_up", target=pid) == 1, "up 1")
        check(prom(s, "hpdlf_store_stale", target=pid) == 0, "stale 0")
        check(prom(s, "hpdlf_store_budget_bytes", target=pid) == w["budget"], "budget sample")
        for i, t in enumerate(w["tiers"]):
            lab = dict(target=pid, tier=t["name"], tier_index=str(i))
            check(prom(s, "hpdlf_store_tier_hits_total", **lab) == t["hits"], f"tier {i} hits sample")
            check(prom(s, "hpdlf_store_tier_evictions_total", **lab) == t["evictions"], f"tier {i} evictions")
            h = t["lat_hist"]  # bucket k: [2^k, 2^(k+1)) us, the last one open
            got = [prom(s, "hpdlf_store_tier_latency_seconds_bucket", le=repr((2 << k) / 1e6), **lab)
                   for k in range(len(h) - 1)]
            got.append(prom(s, "hpdlf_store_tier_latency_seconds_bucket", le="+Inf", **lab))
            want = [sum(h[:k + 1]) for k in range(len(h))]
            check(got == want, f"tier {i} latency histogram buckets (seconds, cumulative) {got[:8]} != {want[:8]}")
            check(prom(s, "hpdlf_store_tier_latency_seconds_count", **lab) == sum(h), f"tier {i} histogram count")
            est = sum(c * (1.5 * (1 << k) if k else 1.0) / 1e6 for k, c in enumerate(h))
            got = prom(s, "hpdlf_store_tier_latency_seconds_sum", **lab)
            check(got is not None and abs(got - est) <= 1e-9 * max(est, 1), f"tier {i} histogram sum {got} != {est}")
        check_real_parser(out)

        rc, out, err = run("--tensors", "--json", pid)
        t = json.loads(out)["targets"][0]
        if w["version"] == 1:  # the fake writer's page: an older hpdlf's layout
            check(rc == 0 and t["tensor_residency"] is None and "not available" in t["tensor_residency_note"],
                  "--tensors says the page has no per-tensor data")
            rc, out, err = run("--tensors", pid)
            check("per-tensor residency is not available" in out and "older hpdlf" in out, "--tensors table note")
        else:  # the real store's: its two labelled tensors, every byte placed once
            ts = t["tensor_residency"] or []
            check(rc == 0 and sorted(x["name"] for x in ts) == ["real0", "real1"] and
                  all(x["bytes"] == w["tensor_bytes"] for x in ts), f"--tensors lists the real tensors: {ts}")
            check(all(sum(x["tier_bytes"].values()) + x["file_bytes"] + x["unwritten_bytes"] == x["bytes"]
                      for x in ts), "each tensor's bytes are on exactly one place each")
            dram = sum(x["tier_bytes"]["dram"] for x in ts)
            check(dram <= w["resident"], f"tensors' DRAM bytes {dram} within resident {w['resident']}")

        rc, out, err = run("--watch", "0.2", "--count", "3", "--json", pid)
        docs = [json.loads(ln) for ln in out.strip().split("\n")]
        check(rc == 0 and len(docs) == 3, f"--watch --count 3: exit {rc}, {len(docs)} documents")
        check(all(d["targets"][0]["state"] == "live" for d in docs), "watch documents live")
        grow = [d["targets"][0]["tiers"][1]["bytes_read"] for d in docs]
        check(grow == sorted(grow) and (grow[0] < grow[-1]) == (w["rate"] > 0), f"watch: counter {grow}")

        rc, out, err = run("--json")
        doc = json.loads(out)
        mine = [t for t in doc["targets"] if t["target"] == pid]
        check(rc == 0 and len(mine) == 1 and mine[0]["state"] == "live", "scan mode finds the writer")
    finally:
        kill(p)
    return w


def test_stale(w):
    pid = str(w["pid"])
    check(os.path.exists(page_path(pid)), "killed writer leaves its page")
    rc, out, err = run("--json", pid)
    check(rc == 1, f"stale explicit target: exit {rc}")
    t = json.loads(out)["targets"][0]
    check_target(t, w, "stale")
    check("gone" in (t["error"] or ""), f"stale error says the process is gone: {t['error']}")
    check("stale" in err, f"stale message on stderr: {err!r}")
    rc, out, err = run(pid)
    check(rc == 1 and "STALE" in out and "not live" in out, "table marks the stale page")
    check(" live," not in out, "stale page not shown as live")
    rc, out, err = run("--prometheus", pid)
    s = parse_prometheus(out)
    check(prom(s, "hpdlf_store_up", target=pid) == 0 and prom(s, "hpdlf_store_stale", target=pid) == 1,
          "prometheus up 0, stale 1")
    rc, out, err = run("--json", "--all")
    mine = [t for t in json.loads(out)["targets"] if t["target"] == pid]
    check(rc == 0 and mine and mine[0]["state"] == "stale", "scan mode with --all lists the stale page as stale")
    rc, out, err = run("--json")
    check(not [t for t in json.loads(out)["targets"] if t["target"] == pid], "scan mode hides the stale page")
    rc, out, err = run("--prometheus")
    check(f'target="{pid}"' not in out, "Prometheus scan hides the stale page")


def test_errors(tmp):
    dead = subprocess.Popen(["true"])
    dead.wait()
    rc, out, err = run(str(dead.pid))
    check(rc == 1 and "no statistics page" in err, f"pid without page: exit {rc}, {err!r}")
    rc, out, err = run("--json", str(dead.pid))
    check(rc == 1 and json.loads(out)["targets"][0]["state"] == "missing", "json state missing")
    for bad in ("foo", "12ab", "host:", ":80", "host:99999", "0"):
        rc, out, err = run(bad)
        check(rc == 2 and "bad target" in err, f"target {bad!r}: exit {rc}, {err!r}")
    # A port bound but not listening: refused at once (daemons themselves: check_daemon.py).
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        ep = "127.0.0.1:%d" % sk.getsockname()[1]
        rc, out, err = run(ep)
    check(rc == 1 and ep in err and ("Connection refused" in err or "daemon support" in err),
          f"remote without a daemon: {rc} {err!r}")
    for args in (["--sort", "size"], ["--top", "0"], ["--top", "x"], ["--compact", "--top", "3"]):
        rc, out, err = run(*args)
        check(rc == 2 and err.startswith("hpdlf-store-inspect: --") and ("--top" in err or "--sort" in err or
                                                                        "--tensors" in err), f"{args}: exit {rc}, {err!r}")
    for args in (["--bogus"], ["--json", "--prometheus"], ["--watch", "0"], ["--watch", "x"],
                 ["--count", "2"], ["--plot", "x.svg"], ["--watch"]):
        rc, out, err = run(*args)
        check(rc == 2 and err.strip(), f"{args}: exit {rc}, {err!r}")
    rc, out, err = run("--token-file", os.path.join(tmp, "none"), "127.0.0.1:7411")
    check(rc == 2 and "token-file" in err, f"unreadable token file: {rc} {err!r}")
    rc, out, err = run("--help")
    check(rc == 0 and out.startswith("usage: hpdlf-store-inspect"), "--help")

    p, w, _ = start_writer(tmp, 9, 0, version=99)
    try:
        rc, out, err = run("--json", str(w["pid"]))
        t = json.loads(out)["targets"][0]
        check(rc == 1 and t["state"] == "error" and "version" in t["error"], f"unknown version: {rc} {t}")
    finally:
        kill(p)
        os.unlink(page_path(w["pid"]))


def scrape_server(url, srv, pid, w):
    import urllib.error
    import urllib.request
    for k in range(2):
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            body = r.read().decode()
            ctype = r.headers.get("Content-Type", "")
        check(ctype.startswith("text/plain; version=0.0.4"), f"scrape {k}: content type {ctype!r}")
        s = parse_prometheus(body)
        check(prom(s, "hpdlf_store_up", target=pid) == 1, f"scrape {k}: up 1")
        for i, t in enumerate(w["tiers"]):
            lab = dict(target=pid, tier=t["name"], tier_index=str(i))
            check(prom(s, "hpdlf_store_tier_latency_seconds_count", **lab) == sum(t["lat_hist"]),
                  f"scrape {k}: tier {i} histogram count")
        check_real_parser(body)
    try:
        urllib.request.urlopen(url + "/other", timeout=10)
        check(False, "/other answered 200")
    except urllib.error.HTTPError as e:
        check(e.code == 404, f"/other: HTTP {e.code}")
    srv.send_signal(signal.SIGTERM)
    check(srv.wait(timeout=10) == 143, f"SIGTERM ends the server with 143 ({srv.returncode})")


def test_http(tmp):
    """--listen-metrics serves the --prometheus text over HTTP (scraped here
    twice, parsed by the line checks and Prometheus's own parser);
    --prometheus-file writes it atomically (no temporary left behind)."""
    p, w, _ = start_writer(tmp, 11, 100e6)
    pid = str(w["pid"])
    srv = subprocess.Popen([INSPECT, "--listen-metrics", "127.0.0.1:0", pid], stderr=subprocess.PIPE, text=True)
    try:
        line = srv.stderr.readline()
        m = re.search(r"serving /metrics on port (\d+)", line)
        if "no HTTP server" in line:  # a build without libmicrohttpd refuses it, status 2
            check(srv.wait(timeout=10) == 2, f"--listen-metrics refused without libmicrohttpd: {srv.returncode}")
        elif check(m is not None, f"--listen-metrics says its port: {line!r}"):
            scrape_server(f"http://127.0.0.1:{m.group(1)}", srv, pid, w)
        out = os.path.join(tmp, "metrics.prom")
        rc, _, err = run("--prometheus-file", out, pid)
        with open(out) as f:
            text = f.read()
        check(rc == 0 and prom(parse_prometheus(text), "hpdlf_store_up", target=pid) == 1,
              f"--prometheus-file: exit {rc} {err}")
        check(not [n for n in os.listdir(tmp) if n.startswith("metrics.prom.")], "no temporary left")
        # a reader (node_exporter) never sees a half-written file: while
        # --watch rewrites it 40 times, every read is one whole document
        whole = text.rstrip("\n").splitlines()[-1].split("{")[0]  # the last family written
        wp = subprocess.Popen([INSPECT, "--prometheus-file", out, "--watch", "0.02", "--count", "40", pid],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        reads, torn, inode_changes, last_ino = 0, 0, 0, os.stat(out).st_ino
        while wp.poll() is None:
            with open(out) as f:
                t = f.read()
                ino = os.fstat(f.fileno()).st_ino
            reads += 1
            inode_changes += ino != last_ino
            last_ino = ino
            torn += not (t.endswith("\n") and whole in t.rstrip("\n").splitlines()[-1] and
                         t.startswith("# HELP hpdlf_store_up"))
        wp.wait()
        check(reads > 10 and torn == 0 and inode_changes > 0,
              f"--prometheus-file --watch: {reads} concurrent reads, {torn} torn, replaced by rename "
              f"{inode_changes} times")
        rc, _, err = run("--prometheus-file", os.path.join(tmp, "no", "such", "dir.prom"), pid)
        check(rc == 1 and "dir.prom" in err, f"--prometheus-file in a missing dir: exit {rc} {err!r}")
        rc, _, err = run("--listen-metrics", "127.0.0.1:0", "--watch", "1")
        check(rc == 2, f"--listen-metrics with --watch: exit {rc}")
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
        kill(p)


def watch_in_pty(args, cols):
    """Runs args with stdout on a pty of `cols` columns; the output split
    at each cursor-home-and-clear sequence (the text before the first one
    first)."""
    import fcntl
    import struct
    import termios
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    p.wait(timeout=60)
    return out.decode("utf-8", "replace").replace("\r\n", "\n").split("\x1b[H\x1b[2J")


def test_compact(tmp):
    """--compact: a header and one line per target that fit the width,
    keeping target, state and memory against the budget; --watch on a
    terminal (a pty) draws each frame over the last; --watch on a PID
    that exits keeps its last frame and ends by itself."""
    p, w, _ = start_writer(tmp, 13, 100e6)
    pid = str(w["pid"])
    try:
        for cols in (200, 80, 40):
            r = subprocess.run([INSPECT, "--compact", pid], capture_output=True, text=True, timeout=30,
                               env=dict(os.environ, COLUMNS=str(cols)))
            lines = r.stdout.splitlines()
            check(r.returncode == 0 and len(lines) == 2 and all(len(ln) <= cols - 1 for ln in lines),
                  f"--compact at {cols} columns: exit {r.returncode}, {lines}")
            if len(lines) == 2:
                head, row = lines[0].split(), lines[1].split()
                check({"TARGET", "STATE", "RESIDENT", "%BUD"} <= set(head) and head[0] == "TARGET" and
                      (cols == 40 or "BUDGET" in head), f"--compact at {cols}: columns {head}")
                check(row[:3] == ["pid", pid, "live"], f"--compact at {cols}: row {row}")
                k = head.index("%BUD") + 1  # "pid N" is two words
                want = round(100 * w["resident"] / w["budget"])
                check(row[k] == f"{want}%", f"--compact at {cols}: resident/budget {row[k]}, want {want}%")
                if cols == 200:
                    check(head[-1] == "P99", f"all columns at 200: {head}")
        frames = watch_in_pty([INSPECT, "--compact", "--watch", "0.2", "--count", "3", pid], 80)
        check(len(frames) == 4 and frames[0] == "" and
              all(len(f.rstrip("\n").split("\n")) == 2 and f.split("\n")[1].split()[1] == pid for f in frames[1:]),
              f"--compact --watch on a terminal: 3 frames of 2 lines, each drawn over the last (cursor home, "
              f"clear screen), no scrolling: {frames!r}")
        w2 = subprocess.Popen([INSPECT, "--compact", "--watch", "0.2", pid], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        kill(p)
        out, err = w2.communicate(timeout=30)
        check(w2.returncode == 0 and "last frame above" in err and out.rstrip().splitlines()[-1].split()[1] == pid,
              f"--watch keeps the last frame of a PID that exits: exit {w2.returncode}, {err!r}")
        r = subprocess.run([INSPECT, "--compact", "--json"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 2, f"--compact --json: exit {r.returncode}")
    finally:
        if p.poll() is None:
            kill(p)


def main():
    w = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            w = test_live(tmp)
            test_stale(w)
            test_http(tmp)  # after: a real writer's start removes stale pages
            test_compact(tmp)
            if not REAL:
                test_errors(tmp)
        finally:
            shutil.rmtree(PAGE_DIR, ignore_errors=True)
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("all inspect checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""hpdlf-store --listen-metrics (issue 20, item 6): a daemon serves GET
/metrics itself; Prometheus's own parser (python3-prometheus-client) reads
it; the series are exactly those hpdlf-store-inspect --prometheus gives the
same daemon (names, label sets), with equal values for the figures that do
not move between two reads (capacity, used, named tensors, allocations; the
connection counters do move: each read is a connection); the bytes used
grow by what a put stored; another path is 404; SIGTERM still stops the
daemon with 0; a bad address is a usage error (2).

usage: check_store_metrics.py HPDLF_STORE HPDLF_STORE_INSPECT   (exit 77 without libmicrohttpd or prometheus_client)
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

fails = 0
STABLE = re.compile(r"_(capacity_bytes|used_bytes|named_tensors|extents|allocs_total|frees_total|"
                    r"allocated_bytes_total|freed_bytes_total)$|^hpdlf_store_up$")


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def samples(text):
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as r:
        return r.read().decode(), r.headers.get("Content-Type", "")


def start(store, tmp, token, metrics):
    pf = os.path.join(tmp, "port")
    d = subprocess.Popen([store, "--listen", "127.0.0.1:0", "--dram", str(64 << 20), "--token-file", token,
                          "--port-file", pf, "--log-level", "warn", "--listen-metrics", metrics],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = d.stderr.readline()
    m = re.search(r"serving /metrics on port (\d+)", line)
    for _ in range(400):
        if os.path.exists(pf) and open(pf).read().strip():
            break
        time.sleep(0.05)
    return d, (m.group(1) if m else None), open(pf).read().strip() if os.path.exists(pf) else None, line


def main():
    store, inspect = sys.argv[1], sys.argv[2]
    try:
        import numpy as np
        import prometheus_client.parser  # noqa: F401
    except ImportError:
        print("python3-prometheus-client or numpy is missing")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        with open(token, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(token, 0o600)
        r = subprocess.run([store, "--listen", "127.0.0.1:0", "--dram", "1M", "--token-file", token,
                            "--listen-metrics", "nowhere"], capture_output=True, text=True, timeout=60)
        if "no HTTP server" in r.stderr:
            print("built without libmicrohttpd: --listen-metrics refused as documented")
            return 77 if r.returncode == 2 else 1
        check(r.returncode == 2 and "HOST:PORT" in r.stderr, f"a bad address: exit {r.returncode} {r.stderr!r}")
        d, port, ep, line = start(store, tmp, token, "127.0.0.1:0")
        try:
            if not check(port is not None and ep, f"says its port ({line.strip()!r}), endpoint {ep}"):
                return 1
            text, ctype = scrape(port)
            check(ctype.startswith("text/plain; version=0.0.4"), f"content type {ctype!r}")
            mine = samples(text)
            up = [v for (n, lab), v in mine.items() if n == "hpdlf_store_up"]
            check(up == [1.0] and all(dict(lab).get("target") == ep for (n, lab) in mine),
                  f"up 1, every series labelled target={ep}")
            used0 = [v for (n, lab), v in mine.items() if n == "hpdlf_store_daemon_used_bytes"]
            x = np.arange(100000, dtype=np.float32)
            np.save(os.path.join(tmp, "w.npy"), x)
            p = subprocess.run([store, "put", "w", os.path.join(tmp, "w.npy"), "--store", ep, "--token-file", token],
                               capture_output=True, text=True, timeout=60)
            check(p.returncode == 0, f"put: {p.stderr.strip()}")
            text, _ = scrape(port)
            mine = samples(text)
            env = dict(os.environ, HPDLF_TOKEN_FILE=token)
            r = subprocess.run([inspect, "--prometheus", ep], capture_output=True, text=True, timeout=60, env=env)
            theirs = samples(r.stdout) if r.returncode == 0 else {}
            check(len(mine) > 10 and set(mine) == set(theirs),
                  f"same series as hpdlf-store-inspect --prometheus ({len(mine)} vs {len(theirs)}; "
                  f"only here {sorted(set(mine) - set(theirs))[:3]}, only there {sorted(set(theirs) - set(mine))[:3]})")
            stable = [k for k in mine if STABLE.search(k[0])]
            diff = [k for k in stable if mine[k] != theirs.get(k)]
            check(len(stable) >= 5 and not diff, f"{len(stable)} stable figures equal; differing: {diff[:3]}")
            used1 = [v for (n, lab), v in mine.items() if n == "hpdlf_store_daemon_used_bytes"]
            check(used0 and used1 and used1[0] - used0[0] >= x.nbytes, f"used bytes grew by the put: {used0} -> {used1}")
            named = [v for (n, lab), v in mine.items() if n == "hpdlf_store_daemon_named_tensors"]
            check(named == [1.0], f"one named tensor: {named}")
            try:
                scrape(port, "/other")
                check(False, "/other answered")
            except urllib.error.HTTPError as e:
                check(e.code == 404, "/other is 404")
            d.send_signal(signal.SIGTERM)
            check(d.wait(timeout=60) == 0, f"SIGTERM: exit {d.returncode}")
        finally:
            if d.poll() is None:
                d.kill()
                d.wait()
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

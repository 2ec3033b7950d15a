#!/usr/bin/env python3
"""hpdlf-store-inspect HOST:PORT against a real hpdlf-store daemon on loopback.

usage: check_daemon.py HPDLF_STORE_INSPECT HPDLF_STORE

- tensors put with `hpdlf-store put` show up in the table, the JSON document
  and the Prometheus output: capacity = --dram + --pmem, used = the sum of the
  files' sizes rounded up to 4096 (the daemon's allocation unit), one extent
  and one named tensor per put, the regions adding up to the totals;
  `hpdlf-store rm` takes one away again;
- --watch --json gives one document per frame, with rates from the second;
- a wrong or missing token: exit 1 with the daemon's refusal; a dead
  endpoint: exit 1 at once, naming it; a bad HOST:PORT: exit 2.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

inspect, store = sys.argv[1], sys.argv[2]
fails = 0
DRAM, PMEM = 64 << 20, 16 << 20


def check(cond, what, detail=""):
    global fails
    print("%s %s%s" % ("ok  " if cond else "FAIL", what, (": " + detail) if detail and not cond else ""))
    if not cond:
        fails += 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(tmp, token):
    port = free_port()
    pf = os.path.join(tmp, "port")
    d = subprocess.Popen([store, "--listen", "127.0.0.1:%d" % port, "--dram", str(DRAM), "--pmem",
                          "%s:%d" % (os.path.join(tmp, "pmem"), PMEM), "--token-file", token,
                          "--port-file", pf, "--log-level", "warn"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(200):
        if os.path.exists(pf) and open(pf).read().strip():
            return d, open(pf).read().strip()
        if d.poll() is not None:
            raise RuntimeError("daemon exited: " + d.stderr.read().decode())
        time.sleep(0.05)
    raise RuntimeError("daemon did not start")


def run(*args, env=None, timeout=30):
    e = dict(os.environ)
    e.pop("HPDLF_TOKEN_FILE", None)
    e.update(env or {})
    p = subprocess.run([inspect] + list(args), capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def put(ep, token, name, path):
    p = subprocess.run([store, "put", name, path, "--store", ep, "--token-file", token],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, "put %s" % name, p.stderr)


def daemon_of(out):
    t = json.loads(out)["targets"][0]
    return t, t.get("daemon")


def prom_value(text, family, **labels):
    for line in text.splitlines():
        m = re.match(r'^(\w+)\{([^}]*)\} (\S+)$', line)
        if not m or m.group(1) != family:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def check_figures(ep, token, files):
    """The daemon's figures against what was put (files: name -> size)."""
    want_used = sum((s + 4095) // 4096 * 4096 for s in files.values())
    rc, out, err = run(ep, "--json", "--token-file", token)
    t, d = daemon_of(out)
    check(rc == 0 and t["state"] == "live" and d, "json: live daemon", f"{rc} {err!r}")
    if not d:
        return
    check(d["capacity"] == DRAM + PMEM, "json capacity", str(d["capacity"]))
    check(d["used"] == want_used, "json used = sum of the puts", f"{d['used']} != {want_used}")
    check(d["named"] == len(files) and d["extents"] == len(files), "json named/extents",
          f"{d['named']} {d['extents']} != {len(files)}")
    regs = d["regions"]
    check([r["kind"] for r in regs] == ["dram", "pmem"] and [r["capacity"] for r in regs] == [DRAM, PMEM],
          "json regions dram + pmem", str(regs))
    check(sum(r["used"] for r in regs) == d["used"] and sum(r["named"] for r in regs) == d["named"],
          "json regions add up", str(regs))
    check(d["stat_version"] == 2 and d["uptime_s"] > 0 and d["clients"] >= 1, "json version/uptime/clients")
    check(d["client_bytes_read"] is None and d["client_bytes_written"] is None, "json RMA bytes null")
    check(d["requests_per_s_now"] is not None and d["requests_per_s_now"] > 0,
          "json: one-shot rate from two reads", str(d["requests_per_s_now"]))

    rc, out, err = run(ep, "--prometheus", env={"HPDLF_TOKEN_FILE": token})
    check(rc == 0, "prometheus exit 0 (token from HPDLF_TOKEN_FILE)", err)
    check(prom_value(out, "hpdlf_store_up", target=ep) == 1, "prom up")
    check(prom_value(out, "hpdlf_store_daemon_capacity_bytes", target=ep) == DRAM + PMEM, "prom capacity")
    check(prom_value(out, "hpdlf_store_daemon_used_bytes", target=ep) == want_used, "prom used")
    check(prom_value(out, "hpdlf_store_daemon_named_tensors", target=ep) == len(files), "prom named")
    check(prom_value(out, "hpdlf_store_daemon_region_capacity_bytes", target=ep, region="pmem") == PMEM,
          "prom pmem region")

    rc, out, err = run(ep, "--token-file", token)
    m = re.search(r"used ([\d.]+ \w+), (\d+) extents, (\d+) named tensors", out)
    check(rc == 0 and ep in out and "hpdlf-store daemon" in out and m, "table header", out + err)
    if m:
        check(int(m.group(3)) == len(files) and int(m.group(2)) == len(files), "table named/extents", m.group(0))
    check("not observable" in out, "table says RMA bytes are not observable")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        token, bad = os.path.join(tmp, "token"), os.path.join(tmp, "bad")
        for p in (token, bad):
            with open(p, "wb") as f:
                f.write(os.urandom(32))
            os.chmod(p, 0o600)
        d, ep = start_daemon(tmp, token)
        try:
            files = {}
            for name, n in (("w1", 100000), ("w2", 3000), ("w3", 1 << 18)):
                path = os.path.join(tmp, name + ".npy")
                np.save(path, np.arange(n, dtype=np.float32))
                put(ep, token, name, path)
                files[name] = os.path.getsize(path)
            check_figures(ep, token, files)
            p = subprocess.run([store, "rm", "w2", "--store", ep, "--token-file", token],
                               capture_output=True, text=True, timeout=30)
            check(p.returncode == 0, "rm w2", p.stderr)
            del files["w2"]
            check_figures(ep, token, files)

            rc, out, err = run(ep, "--json", "--watch", "0.3", "--count", "3", "--token-file", token)
            docs = [json.loads(l) for l in out.splitlines() if l.strip()]
            ds = [x["targets"][0].get("daemon") or {} for x in docs]
            check(rc == 0 and len(docs) == 3, "watch: 3 documents", f"{rc} {len(docs)} {err!r}")
            if len(ds) == 3:
                check(ds[0]["uptime_s"] < ds[1]["uptime_s"] < ds[2]["uptime_s"], "watch: uptime grows")
                check(ds[0]["stats"] < ds[1]["stats"] < ds[2]["stats"], "watch: stat requests counted")
                check(ds[2]["requests_per_s_now"] is not None and ds[2]["requests_per_s_now"] > 0,
                      "watch: rate between frames", str(ds[2]))
                check(ds[2]["removes"] == 1 and ds[2]["publishes"] == 3, "watch: removes/publishes counted",
                      str(ds[2]))

            rc, out, err = run(ep, "--token-file", bad)
            check(rc == 1 and "wrong token" in err and ep in err, "wrong token: exit 1, refusal", f"{rc} {err!r}")
            rc, out, err = run(ep, "--json", "--token-file", bad)
            t, _ = daemon_of(out)
            check(rc == 1 and t["state"] == "error" and "wrong token" in t["error"], "wrong token: json error")
            rc, out, err = run(ep)
            check(rc == 1 and "requires a token" in err, "missing token: exit 1", f"{rc} {err!r}")
            rc, out, err = run(ep, "--json", "--token-file", token)
            _, dd = daemon_of(out)
            check(dd and dd["auth_failures"] >= 3, "auth failures counted", str(dd and dd["auth_failures"]))
        finally:
            d.terminate()
            d.wait(10)
        t0 = time.monotonic()
        rc, out, err = run(ep, "--token-file", token)
        dt = time.monotonic() - t0
        check(rc == 1 and ep in err and dt < 5, "dead endpoint: exit 1 quickly, named",
              f"{rc} {dt:.2f}s {err!r}")
        rc, out, err = run("127.0.0.1:0", "--token-file", token)
        check(rc == 2 and "bad target" in err, "bad HOST:PORT: exit 2", f"{rc} {err!r}")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

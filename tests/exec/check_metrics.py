#!/usr/bin/env python3
"""hpdlf-exec --listen-metrics (issue 20, item 6): a training run and an
inference run are scraped over HTTP while they run; Prometheus's own parser
(python3-prometheus-client) reads the text; the step counter grows between
scrapes, the step time is a histogram in seconds whose count is the step
counter and whose buckets never decrease, series carry job/model/rank/mode
labels (no PID), the tiers' byte counters are there out of core; SIGTERM
still ends the run with 143.

usage: check_metrics.py HPDLF_EXEC MODEL_DIR [HPDLF_STORE_INSPECT]   (exit 77 without libmicrohttpd or prometheus_client)
"""
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode(), r.headers.get("Content-Type", "")


def families(text):
    from prometheus_client.parser import text_string_to_metric_families
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams, name, suffix=""):
    f = fams.get(name)
    s = [x for x in (f.samples if f else []) if x.name == name + suffix]
    return s[0].value if s else None


def check_run(tag, args, mode, model):
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        m = re.search(r"serving /metrics on port (\d+)", line)
        if not check(m is not None, f"{tag}: says its port ({line.strip()!r})"):
            return
        port = m.group(1)
        seen = []
        for k in range(2):
            # a scrape after the first step, then one after more steps (a
            # loaded machine can take seconds a step)
            t0 = time.monotonic()
            while True:
                time.sleep(0.5)
                text, ctype = scrape(port)
                n = re.search(r"^hpdlf_exec_steps_total\{[^}]*\} (\S+)$", text, re.M)
                if (n and float(n.group(1)) > (seen[-1] if seen else 0)) or time.monotonic() - t0 > 120:
                    break
            check(ctype.startswith("text/plain; version=0.0.4"), f"{tag}: content type {ctype!r}")
            try:
                fams = families(text)
            except Exception as e:  # any parse error is a failure
                check(False, f"{tag}: prometheus_client cannot parse: {e}")
                return
            steps = value(fams, "hpdlf_exec_steps", "_total")  # the parser drops _total from family names
            h = fams.get("hpdlf_exec_step_duration_seconds")
            if not check(h is not None and h.type == "histogram" and steps is not None,
                         f"{tag}: steps counter and step duration histogram ({sorted(fams)})"):
                return
            buckets = [(s.labels["le"], s.value) for s in h.samples if s.name.endswith("_bucket")]
            count = [s.value for s in h.samples if s.name.endswith("_count")][0]
            total = [s.value for s in h.samples if s.name.endswith("_sum")][0]
            check(buckets[-1][0] == "+Inf" and buckets[-1][1] == count == steps,
                  f"{tag}: histogram count {count} = +Inf bucket = steps {steps}")
            check(all(b[1] >= a[1] for a, b in zip(buckets, buckets[1:])), f"{tag}: cumulative buckets")
            check(all(float(le) > 0 for le, v in buckets[:-1]) and total > 0, f"{tag}: seconds, sum {total:.3f}")
            labels = h.samples[0].labels
            check(labels.get("model") == model and labels.get("mode") == mode and labels.get("rank") == "0" and
                  labels.get("job") and "pid" not in labels and "target" not in labels,
                  f"{tag}: labels {labels}")
            check(value(fams, "hpdlf_exec_budget_bytes") == 200 * 1024, f"{tag}: budget_bytes")
            used = fams.get("hpdlf_exec_tier_read_bytes")
            check(used is not None and any(s.labels.get("tier") == "dram" for s in used.samples),
                  f"{tag}: per-tier byte counters")
            if mode == "train":
                check(value(fams, "hpdlf_exec_loss") is not None, f"{tag}: the loss")
            seen.append(steps)
        check(seen[1] > seen[0] > 0, f"{tag}: steps grow between scrapes {seen}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
            check(False, f"{tag}: /other answered")
        except urllib.error.HTTPError as e:
            check(e.code == 404, f"{tag}: /other is 404")
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=120) == 143, f"{tag}: SIGTERM exit {p.returncode}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def inspect_labels(exe, inspect, model):
    """hpdlf-store-inspect --prometheus names a running job by its Slurm
    job, rank and model besides its PID."""
    import tempfile
    with tempfile.TemporaryDirectory() as pages:
        env = dict(os.environ, HPDLF_STATS_DIR=pages, SLURM_JOB_ID="4242", SLURM_PROCID="3")
        p = subprocess.Popen([exe, model, "--iterations", "1000000", "--quiet", "--budget", "200K"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            page = os.path.join(pages, f"hpdlf-store.{p.pid}")
            t0 = time.monotonic()
            while not os.path.exists(page) and time.monotonic() - t0 < 60 and p.poll() is None:
                time.sleep(0.1)
            r = subprocess.run([inspect, "--prometheus", str(p.pid)], capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, HPDLF_STATS_DIR=pages))
            fams = families(r.stdout) if r.returncode == 0 else {}
            up = [s for s in fams["hpdlf_store_up"].samples] if "hpdlf_store_up" in fams else []
            check(len(up) == 1 and up[0].value == 1 and up[0].labels.get("job") == "4242" and
                  up[0].labels.get("rank") == "3" and up[0].labels.get("model") == "model",
                  f"inspect --prometheus labels a job's page with job, model, rank: {[s.labels for s in up]}")
        finally:
            p.kill()
            p.wait()


def main():
    exe, folder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    try:
        import prometheus_client.parser  # noqa: F401
    except ImportError:
        print("python3-prometheus-client is missing (tools/setup.sh installs it)")
        return 77
    model = os.path.join(folder, "model.onnx")
    r = subprocess.run([exe, model, "--listen-metrics", "127.0.0.1:0", "--iterations", "1"], capture_output=True,
                       text=True, timeout=120)
    if "no HTTP server" in r.stderr:
        print("built without libmicrohttpd: --listen-metrics refused as documented")
        return 77 if r.returncode == 2 else 1
    ooc = ["--budget", "200K"]
    check_run("training", [exe, model, "--train", "--data", os.path.join(folder, "x.npy"), "--labels",
                           os.path.join(folder, "y.npy"), "--batch", "4", "--steps", "1000000", "--quiet",
                           "--listen-metrics", "127.0.0.1:0"] + ooc, "train", "model")
    check_run("inference", [exe, model, "--iterations", "1000000", "--quiet", "--listen-metrics", "127.0.0.1:0"]
              + ooc, "infer", "model")
    if len(sys.argv) > 3:
        inspect_labels(exe, os.path.abspath(sys.argv[3]), model)
    r = subprocess.run([exe, model, "--listen-metrics", "nowhere"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "HOST:PORT" in r.stderr, f"a bad address: exit {r.returncode} {r.stderr!r}")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

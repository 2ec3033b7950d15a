#!/usr/bin/env python3
"""hpdlf-store-inspect --tensors on a real out-of-core hpdlf-exec run
(issue 20, item 5): the stats page's per-tensor section lists the model's
initializers under their names with the sizes python3-onnx reads from the
model (a weight split by the planner as NAME.partK: the parts add up to
it), every byte of a tensor on exactly one place, --sort and --top do what
the docs say, and a store of more tensors than the page's bound (64) lists
exactly the largest ones.

usage: check_tensors.py HPDLF_EXEC HPDLF_STORE_INSPECT MLP_MODEL_DIR   (exit 77 without python3-onnx)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

fails = 0
BOUND = 64


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1
    return ok


def initializers(path):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    return {i.name: numpy_helper.to_array(i).nbytes for i in m.graph.initializer}


def wide_model(path, n):
    """n initializers of distinct sizes, each added to the input: the store
    holds more tensors than the page lists."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np
    inits, nodes, outs = [], [], []
    for i in range(n):
        inits.append(numpy_helper.from_array(np.full((16 * (i + 1),), i, np.float32), f"w{i:03d}"))
        nodes.append(helper.make_node("Add", ["x", f"w{i:03d}"], [f"y{i:03d}"]))
        outs.append(helper.make_tensor_value_info(f"y{i:03d}", TensorProto.FLOAT, [16 * (i + 1)]))
    g = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


class Run:
    def __init__(self, exe, model, pages, budget):
        self.env = dict(os.environ, HPDLF_STATS_DIR=pages)
        self.p = subprocess.Popen([exe, model, "--iterations", "1000000", "--quiet", "--budget", budget],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env=self.env, text=True)
        page = os.path.join(pages, f"hpdlf-store.{self.p.pid}")
        t0 = time.monotonic()
        while not os.path.exists(page) and time.monotonic() - t0 < 120 and self.p.poll() is None:
            time.sleep(0.1)
        time.sleep(1.0)  # a few iterations: weights paged in and out

    def inspect(self, inspect, *args):
        r = subprocess.run([inspect, *args, str(self.p.pid)], capture_output=True, text=True, timeout=60,
                           env=self.env)
        return r.returncode, r.stdout, r.stderr

    def settled(self, inspect, want, timeout=120):
        """The page once every initializer is in the store (a loaded machine
        can take long to place them) and an iteration ran."""
        t0 = time.monotonic()
        while True:
            t, ts = self.tensors(inspect)
            names = {re.sub(r"\.part\d+$", "", x["name"]) for x in ts}
            # the initializers are placed before any activation exists
            placed = all(k in names for k in want) or t.get("tensors", 0) > len(want)
            if (placed and any(x["last_use"] for x in ts)) or time.monotonic() - t0 > timeout:
                return t, ts
            time.sleep(0.5)

    def tensors(self, inspect, *args):
        rc, out, err = self.inspect(inspect, "--json", "--tensors", *args)
        t = json.loads(out)["targets"][0] if rc == 0 else {}
        return t, t.get("tensor_residency") or []

    def stop(self):
        self.p.kill()
        self.p.wait()


def placed_once(ts):
    return all(sum(x["tier_bytes"].values()) + x["file_bytes"] + x["unwritten_bytes"] == x["bytes"] for x in ts)


def check_mlp(exe, inspect, model, pages):
    want = initializers(model)
    r = Run(exe, model, pages, "200K")
    try:
        t, ts = r.settled(inspect, want)
        check(t.get("state") == "live" and t.get("page_version") == 2, f"mlp: a live version-2 page ({t.get('state')})")
        check(len(ts) == min(t.get("tensors", 0), BOUND) and len(ts) > 0,
              f"mlp: {len(ts)} listed of {t.get('tensors')} in the store")
        got = {}
        for x in ts:
            base = re.sub(r"\.part\d+$", "", x["name"])
            if base in want:
                got[base] = got.get(base, 0) + x["bytes"]
        check(got == want, f"mlp: initializers by name and bytes {got} == onnx's {want}")
        check(placed_once(ts), "mlp: every byte of each tensor on exactly one place")
        below = sum(sum(v for k, v in x["tier_bytes"].items() if k != "dram") for x in ts)
        check(below > 0, f"mlp: out of core, {below} bytes of listed tensors below DRAM")
        check(sum(x["tier_bytes"]["dram"] for x in ts) <= 200 * 1024, "mlp: DRAM bytes within the budget")
        b = [x["bytes"] for x in ts]
        check(b == sorted(b, reverse=True), "mlp: default order is by bytes, largest first")
        _, ts3 = r.tensors(inspect, "--top", "3")
        check([x["bytes"] for x in ts3] == b[:3], "mlp: --top 3 is the first three")
        _, tn = r.tensors(inspect, "--sort", "name")
        check([x["name"] for x in tn] == sorted(x["name"] for x in tn), "mlp: --sort name")
        _, tt = r.tensors(inspect, "--sort", "tier")
        tiers = list(tt[0]["tier_bytes"]) + ["file", "unwritten"] if tt else []
        order = [tiers.index(x["tier"]) for x in tt]
        check(order == sorted(order), f"mlp: --sort tier groups DRAM first {[x['tier'] for x in tt]}")
        rc, out, err = r.inspect(inspect, "--tensors", "--top", "2")
        rows = [ln for ln in out[out.find("  name "):].strip().split("\n") if not ln.startswith("  + ")]
        check(rc == 0 and len(rows) == 3 and "idle" in rows[0], f"mlp: table with --top 2: {rows}")
        # the runtime's spare tensors ("(free)": no value) take no row of the
        # table; one line counts them (the JSON lists them all).  Spares
        # change hands every iteration, so no two pages need agree: the
        # JSON must show some, no text page may give one a row, and a text
        # page taken while there are some must sum them up.  The JSON and
        # the text pages are separate samples, so keep sampling (up to 80
        # rounds) until each kind has been seen holding spares once.
        spare_json, rowed, summary = 0, [], []
        for _ in range(80):
            if spare_json == 0:
                _, tj = r.tensors(inspect)
                spare_json = max(spare_json, len([x for x in tj if x["name"] == "(free)"]))
            rc, out, err = r.inspect(inspect, "--tensors")
            lines = out.splitlines()
            rowed += [ln for ln in lines if ln.split()[:1] == ["(free)"]]
            if not summary:
                summary = [ln for ln in lines if ln.startswith("  + ")]
            if rowed or (summary and spare_json > 0):
                break
        check(spare_json > 0, "mlp: the JSON lists the runtime's spare tensors (%d at most)" % spare_json)
        check(not rowed and len(summary) == 1 and int(summary[0].split()[1]) >= 1,
              f"mlp: spare tensors summed up in one line, no row each: {summary} {rowed}")
    finally:
        r.stop()


def check_wide(exe, inspect, tmp, pages):
    n = BOUND + 16
    model = os.path.join(tmp, "wide.onnx")
    wide_model(model, n)
    want = initializers(model)
    r = Run(exe, model, pages, "160K")
    try:
        t, ts = r.settled(inspect, want)
        check(t.get("tensors", 0) > BOUND and len(ts) == BOUND,
              f"wide: the page lists {len(ts)} of {t.get('tensors')} tensors (bound {BOUND})")
        smallest = min((x["bytes"] for x in ts), default=0)
        names = {x["name"] for x in ts}
        missing = [k for k, v in want.items() if v > smallest and k not in names]
        check(not missing, f"wide: every initializer larger than the smallest listed ({smallest} B) is listed {missing}")
        check(all(want[x["name"]] == x["bytes"] for x in ts if x["name"] in want), "wide: sizes match onnx's")
        check(placed_once(ts), "wide: every byte on exactly one place")
    finally:
        r.stop()


def main():
    exe, inspect, folder = (os.path.abspath(a) for a in sys.argv[1:4])
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("python3-onnx is missing")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        pages = os.path.join(tmp, "pages")
        os.mkdir(pages, 0o700)
        check_mlp(exe, inspect, os.path.join(folder, "model.onnx"), pages)
        check_wide(exe, inspect, tmp, pages)
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Out-of-core cost against in core (issue 17's benchmark targets).  Ends
with one JSON line.

usage: build/bench/bench_ooc_targets.py [HPDLF_EXEC] [--rounds N] [--threads N]
           [--dir DIR] [--only ROW,...] [--headline] [--headline-budget SIZE]

Every row runs its model in core and under budgets of a fraction of the
in-core tensor peak (`tensor_peak_bytes` of the in-core run), as separate
hpdlf-exec processes, alternating in-core and budgeted runs for --rounds
rounds (default 2) so that load on a shared machine hits both alike.  A row
reports the median step (or iteration) time after the first of each run,
the ratio to in core, the budget, whether it had to be raised to the
smallest budget the planner accepts, the peak RSS (VmHWM, --stats-json)
and the bytes each tier moved.  From 64 MiB up --budget bounds the whole
process (rss_within_budget: peak RSS <= budget); below it bounds the
tensors and the fixed overhead comes on top (hpdlf-exec(1), MEMORY), and
the row says so ("budget_bounds": "tensors"); tensors then get the budget
but at most what 64 MiB leaves them, so each row also gives the tensor
peak the run held and its share of the in-core one ("tensor_peak_fraction":
a "50%" row of a small model holds about a third).

rows (targets from issue 17: <= 1.1x at 50%, <= 1.2x at 25%; lenet <= 2x):
  unet3d_infer    tools/make_unet3d.py, one 64^3 volume, at 50% and 25%
  unet3d_train    the same network, batch 1 of 48^3 volumes, SGD, 50% and 25%
  resnet18_infer  bench/make_resnet18.py (ResNet-18 layout, 11.2 M
                  parameters), batch 32 of 3x112x112, 50% and 25%
  resnet18_train  the same, batch 16 of 3x64x64, SGD, 50% and 25%
  lenet_train     tests/models/lenet, batch 64, SGD, 25%
  scale           an MLP trained with Adam whose state (weights and both
                  moments, 3 P) is >= 4x a 64 MiB budget (P = 100 MiB):
                  3 steps; step time, bytes per tier per step, and the
                  I/O bound of those bytes at the throughput fio measures on
                  the same disk in the same run for the same mix of reads
                  and writes (randrw, io_uring, O_DIRECT, 1 MiB, queue depth
                  16), io_bound_fraction = bound / step time (target >= 0.9).
                  Under a minute.

  The scale rows also report the most the tiers below DRAM held at once
  (tier_peak_bytes, from --stats-json) beside --plan's predicted tier
  footprint: the state once (3 P) plus what the plan swaps, since the
  state's previous version is freed after its last reader in a step.

--headline adds the scale run at full size (not in the default run: it
needs 4.25 P + 1 GiB of disk in --dir, ~55 GB on a 24 GiB machine, and
minutes): state >= 1.5x this machine's RAM (P = RAM / 2, Adam: 3 P = 1.5 x
RAM), --headline-budget (default 8G), 3 steps.  The disk it needs is the
model file (P), the state once on the spill tier (3 P), two weight
matrices more (0.25 P: a layer's new version may be placed before its old
one's last reader is done; the scale row and train-traffic measure 3.03
to 3.12 P in all) and fio's 1 GiB; refused (exit 2, one line) when --dir's
file system has less free, before anything is written.  (It is not
planned first: --plan's smallest budget splits this model for a 1-byte
budget, minutes and GBs of memory.)

Models and data are generated into --dir (default: a temporary directory,
removed at the end) by /usr/bin/python3 with numpy, onnx and torch.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

SRC = "@HPDLF_SOURCE_DIR@"
PY = "/usr/bin/python3"
SMALLEST_RE = re.compile(r"the smallest budget that works is (\d+)")
PROCESS_FROM = 64 << 20
TARGETS = {0.5: 1.1, 0.25: 1.2}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- models ----

def make_unet3d(d):
    onnx_path = os.path.join(d, "unet3d.onnx")
    x, y = os.path.join(d, "unet3d_x.npy"), os.path.join(d, "unet3d_y.npy")
    if not os.path.exists(y):
        subprocess.run([PY, os.path.join(SRC, "tools/make_unet3d.py"), onnx_path], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([PY, os.path.join(SRC, "tools/make_volumes.py"), x, y, "--n", "4"], check=True,
                       stdout=subprocess.DEVNULL)
    return onnx_path, x, y


def make_resnet18(d, size, rows):
    out = os.path.join(d, "resnet18_%d" % size)
    if not os.path.exists(os.path.join(out, "y.npy")):
        subprocess.run([PY, os.path.join(SRC, "bench/make_resnet18.py"), out, "--size", str(size),
                        "--rows", str(rows)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return os.path.join(out, "model.onnx"), os.path.join(out, "x.npy"), os.path.join(out, "y.npy")


def mlp_params(dims):
    """The parameters of an MLP of layer widths dims, in file order."""
    for i in range(len(dims) - 1):
        for nm, shape in (("w%d" % i, (dims[i], dims[i + 1])), ("b%d" % i, (dims[i + 1],))):
            yield i, nm, shape


def fill_mlp(d, name, dims, seed=5):
    """The weights' file of write_mlp(..., fill=False), written layer by
    layer in slices (a model of many GiB never sits in memory)."""
    rng = np.random.default_rng(seed)
    with open(os.path.join(d, name + ".bin"), "r+b") as f:
        for i, nm, shape in mlp_params(dims):
            b = 1 / np.sqrt(dims[i])
            for r0 in range(0, shape[0], 1024):  # rows in slices: bounded memory
                part = (min(1024, shape[0] - r0),) + shape[1:]
                arr = rng.uniform(-b, b, part) if nm[0] == "w" else np.zeros(part)
                f.write(arr.astype(np.float32).tobytes())


def write_mlp(d, name, nin, width, layers, nout, rows, seed=5, fill=True):
    """A Gemm/Relu MLP with its weights in one external data file, and a
    data set of `rows` rows.  fill=False leaves the weights' file sparse
    (zeros that take no disk: enough to plan) for fill_mlp to write.
    Returns (onnx, x, y, parameter bytes, widths)."""
    import onnx
    from onnx import TensorProto, helper
    path, data = os.path.join(d, name + ".onnx"), name + ".bin"
    dims = [nin] + [width] * layers + [nout]
    inits, nodes, prev, off = [], [], "x", 0
    for i, nm, shape in mlp_params(dims):
        n = int(np.prod(shape)) * 4
        t = TensorProto(name=nm, data_type=TensorProto.FLOAT, dims=list(shape))
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", data), ("offset", str(off)), ("length", str(n))):
            e = t.external_data.add()
            e.key, e.value = k, v
        inits.append(t)
        off += n
        if nm[0] == "w":
            continue
        nodes.append(helper.make_node("Gemm", [prev, "w%d" % i, "b%d" % i], ["h%d" % i]))
        prev = "h%d" % i
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [prev], ["r%d" % i]))
            prev = "r%d" % i
    with open(os.path.join(d, data), "wb") as f:
        f.truncate(off)  # sparse until filled
    if fill:
        fill_mlp(d, name, dims, seed)
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", nin])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", nout])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    x, y = os.path.join(d, name + "_x.npy"), os.path.join(d, name + "_y.npy")
    rng = np.random.default_rng(seed + 1)
    np.save(x, rng.standard_normal((rows, nin), dtype=np.float32))
    np.save(y, rng.integers(0, nout, rows).astype(np.int64))
    return path, x, y, off, dims


# ---- runs ----

class Run:
    def __init__(self, ok, ms=None, stats=None, err="", smallest=None):
        self.ok, self.ms, self.stats, self.err, self.smallest = ok, ms, stats or {}, err, smallest


def run_exec(cfg, args, budget, tag):
    """One hpdlf-exec process; per-step (or per-iteration) times from
    --log-json (all but the first), its --stats-json."""
    logf, statf = os.path.join(cfg.dir, tag + ".jsonl"), os.path.join(cfg.dir, tag + ".stats.json")
    for p in (logf, statf):
        if os.path.exists(p):
            os.unlink(p)
    cmd = [cfg.exe] + args + ["--threads", str(cfg.threads), "--quiet", "--log-json", logf, "--stats-json", statf]
    if budget:
        cmd += ["--budget", str(budget)]
    env = dict(os.environ, TMPDIR=cfg.dir)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        m = SMALLEST_RE.search(p.stderr)
        return Run(False, err=p.stderr.strip().splitlines()[-1:] or ["exit %d" % p.returncode],
                   smallest=int(m.group(1)) if m and p.returncode == 2 else None)
    with open(logf) as f:
        ms = [json.loads(l)["ms"] for l in f if l.strip()]
    with open(statf) as f:
        st = json.load(f)
    return Run(True, ms[1:] if len(ms) > 1 else ms, st)


def tier_bytes(st):
    return {k: {"read": v.get("bytes_read", 0), "written": v.get("bytes_written", 0)}
            for k, v in st.get("tiers", {}).items()}


def budgeted(cfg, args, budget, tag):
    """A budgeted run, raised to the planner's smallest budget if refused."""
    r = run_exec(cfg, args, budget, tag)
    if not r.ok and r.smallest and r.smallest > budget:
        return run_exec(cfg, args, r.smallest, tag), r.smallest, True
    return r, budget, False


def bench_row(cfg, name, args, fractions, target_of):
    row = {"row": name}
    log("%s: in core" % name)
    first = run_exec(cfg, args, 0, name + "-incore")
    if not first.ok:
        row["error"] = "in-core run failed: %s" % first.err
        return row
    peak = first.stats.get("tensor_peak_bytes", 0)
    incore_ms, incore_rss = list(first.ms), [first.stats.get("peak_rss_bytes", 0)]
    per = {f: {"ms": [], "rss": [], "budget": int(peak * f), "raised": False, "err": None, "stats": None}
           for f in fractions}
    for rnd in range(cfg.rounds):
        if rnd:
            r = run_exec(cfg, args, 0, name + "-incore")
            if r.ok:
                incore_ms += r.ms
                incore_rss.append(r.stats.get("peak_rss_bytes", 0))
        for f in fractions:
            e = per[f]
            log("%s: %.0f%% of %.1f MiB (round %d)" % (name, 100 * f, peak / 1048576, rnd + 1))
            r, b, raised = budgeted(cfg, args, e["budget"], "%s-%g" % (name, f))
            e["budget"], e["raised"] = b, e["raised"] or raised
            if not r.ok:
                e["err"] = r.err
                continue
            e["ms"] += r.ms
            e["rss"].append(r.stats.get("peak_rss_bytes", 0))
            e["stats"] = r.stats
    ims = statistics.median(incore_ms)
    row.update({"incore_ms": ims, "incore_peak_tensor_bytes": peak, "incore_peak_rss_bytes": max(incore_rss)})
    row["budgets"] = []
    for f in fractions:
        e = per[f]
        b = {"fraction": f, "budget_bytes": e["budget"], "raised_to_smallest": e["raised"],
             "budget_bounds": "process" if e["budget"] >= PROCESS_FROM else "tensors"}
        if not e["ms"]:
            b["error"] = e["err"] or "no run"
        else:
            ms = statistics.median(e["ms"])
            rss = max(e["rss"])
            b.update({"ms": ms, "ratio_vs_incore": ms / ims, "target": target_of(f),
                      "meets_target": ms / ims <= target_of(f), "peak_rss_bytes": rss,
                      "rss_within_budget": rss <= e["budget"] if e["budget"] >= PROCESS_FROM
                      else rss <= PROCESS_FROM,
                      "tiers_total": tier_bytes(e["stats"])})
            # below 64 MiB tensors get the budget but at most what 64 MiB
            # leaves them (exec/budget.h): the share of the in-core peak the
            # run really held
            tp = e["stats"].get("tensor_peak_bytes", 0)
            b.update({"tensor_peak_bytes": tp, "tensor_peak_fraction": tp / peak if peak else 0})
            log("  %s at %.0f%% (%.1f MiB%s): %.1f ms vs %.1f in core = %.2fx (target %.1fx), peak RSS %.1f MiB, "
                "tensors %.1f MiB (%.0f%% of the in-core peak)"
                % (name, 100 * f, e["budget"] / 1048576, ", raised" if e["raised"] else "", ms, ims, ms / ims,
                   target_of(f), rss / 1048576, tp / 1048576, 100 * tp / peak if peak else 0))
        row["budgets"].append(b)
    return row


def fio_mix(d, read_pct):
    """fio on the file system of d (io_uring, O_DIRECT, 1 MiB, QD 16) with
    the step's mix of reads and writes: (read MB/s, write MB/s), together
    the disk's throughput for that mix; None when fio is missing or fails."""
    f = os.path.join(d, "fio.dat")
    p = subprocess.run(["fio", "--name=bound", "--filename=" + f, "--rw=randrw", "--rwmixread=%d" % read_pct,
                        "--bs=1M", "--size=1G", "--ioengine=io_uring", "--direct=1", "--iodepth=16",
                        "--output-format=json"], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    j = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]
    return j["read"]["bw_bytes"] / 1e6, j["write"]["bw_bytes"] / 1e6


FOOT_RE = re.compile(r"tier footprint +([0-9.]+) (B|KiB|MiB|GiB|TiB)")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def plan_footprint(cfg, args, budget):
    """The tier footprint --plan predicts (the most the tiers below DRAM
    hold at once), or None."""
    p = subprocess.run([cfg.exe] + args + ["--threads", str(cfg.threads), "--plan", "--budget", str(budget)],
                       capture_output=True, text=True, env=dict(os.environ, TMPDIR=cfg.dir))
    m = FOOT_RE.search(p.stdout) if p.returncode == 0 else None
    return int(float(m.group(1)) * UNITS[m.group(2)]) if m else None


class Scale:
    """An MLP for a scale row, its weights' file still sparse, planned
    (plan: --plan's tier footprint, else None)."""
    def __init__(self, cfg, name, width, layers, budget, steps=3, plan=True):
        log("%s: an MLP %d wide, %d layers" % (name, width, layers))
        self.name, self.budget, self.steps, self.filled = name, budget, steps, False
        self.onnx, x, y, self.pbytes, self.dims = write_mlp(cfg.dir, name, width, width, layers, 10, 64, fill=False)
        self.args = [self.onnx, "--train", "--data", x, "--labels", y, "--loss", "cross-entropy", "--optimizer",
                     "adam", "--lr", "1e-4", "--batch", "32", "--steps", str(steps), "--no-shuffle"]
        self.foot = plan_footprint(cfg, self.args, budget) if plan else None
        self.weight = width * width * 4

    def disk_needed(self):
        """The weights' file, the tiers' peak (--plan's footprint, else the
        state once), two weight matrices more (a new version the run may
        place before an old one's last reader is done), fio's 1 GiB."""
        return self.pbytes + (self.foot or 3 * self.pbytes) + 2 * self.weight + (1 << 30)


def bench_scale(cfg, sc):
    """Adam on an MLP whose state exceeds the budget: step time, bytes per
    tier per step, the fio bound of those bytes measured now, the tiers'
    peak against the plan's footprint."""
    name, args, budget, pbytes, steps = sc.name, sc.args, sc.budget, sc.pbytes, sc.steps
    if not sc.filled:
        log("%s: writing %.1f GB of weights" % (name, pbytes / 1e9))
        fill_mlp(cfg.dir, name, sc.dims)
        sc.filled = True
    row = {"row": name, "param_bytes": pbytes, "state_bytes": 3 * pbytes, "budget_bytes": budget,
           "state_over_budget": 3 * pbytes / budget, "steps": steps, "plan_tier_footprint_bytes": sc.foot,
           "disk_needed_bytes": sc.disk_needed()}
    log("%s: %d steps at a %.0f MiB budget (state %.0f MiB)" % (name, steps, budget / 1048576,
                                                               3 * pbytes / 1048576))
    logf = os.path.join(cfg.dir, name + ".jsonl")
    r = run_exec(cfg, args, budget, name)
    if not r.ok:
        row["error"] = r.err
        return row
    with open(logf) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    # bytes of the steady steps: the tier counters are cumulative per step
    def moved(a, b, key):
        return sum(b["tiers"][t][key] - a["tiers"][t][key] for t in b["tiers"] if t != "dram")
    pairs = list(zip(lines, lines[1:]))
    rd = statistics.median(moved(a, b, "bytes_read") for a, b in pairs) if pairs else 0
    wr = statistics.median(moved(a, b, "bytes_written") for a, b in pairs) if pairs else 0
    mix = fio_mix(cfg.dir, round(100 * rd / (rd + wr)) if rd + wr else 50)
    rd_bw, wr_bw = mix if mix else (None, None)
    try:
        os.unlink(os.path.join(cfg.dir, "fio.dat"))
    except OSError:
        pass
    ms = statistics.median(l["ms"] for l in lines[1:]) if len(lines) > 1 else lines[0]["ms"]
    tpeak = r.stats.get("tier_peak_bytes")
    row.update({"ms": ms, "bytes_read_per_step": rd, "bytes_written_per_step": wr,
                "traffic_over_params": (rd + wr) / pbytes, "tier_peak_bytes": tpeak,
                "tier_peak_over_params": tpeak / pbytes if tpeak else None,
                "peak_rss_bytes": r.stats.get("peak_rss_bytes", 0),
                "rss_within_budget": r.stats.get("peak_rss_bytes", 0) <= budget, "fio_mix_read_MBps": rd_bw,
                "fio_mix_write_MBps": wr_bw, "tiers_total": tier_bytes(r.stats)})
    if rd_bw and wr_bw:
        bound = (rd + wr) / (rd_bw + wr_bw) / 1e3  # ms: the step's bytes at fio's throughput for that mix
        row.update({"io_bound_ms": bound, "io_bound_fraction": bound / ms, "target": 0.9,
                    "meets_target": bound / ms >= 0.9})
        log("  %s: %.0f ms/step, read %.0f + written %.0f MiB/step (%.2f P), fio %.0f/%.0f MB/s: bound %.0f ms "
            "= %.2f of the step; peak RSS %.1f MiB" % (name, ms, rd / 1048576, wr / 1048576, (rd + wr) / pbytes,
                                                     rd_bw, wr_bw, bound, bound / ms,
                                                     row["peak_rss_bytes"] / 1048576))
    if tpeak:
        log("  %s: the tiers held at most %.2f P at once (--plan predicted %s)"
            % (name, tpeak / pbytes, "%.2f P" % (sc.foot / pbytes) if sc.foot else "nothing"))
    return row


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMGT]?)", s.strip().upper())
    if not m:
        raise ValueError(s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2)]


class Cfg:
    pass


def parse(argv):
    c = Cfg()
    c.exe, c.rounds, c.threads, c.dir, c.only, c.headline, c.hbudget = None, 2, os.cpu_count(), None, None, False, 8 << 30
    it = iter(argv)
    for a in it:
        if a == "--headline":
            c.headline = True
        elif a in ("--rounds", "--threads", "--dir", "--only", "--headline-budget"):
            v = next(it, None)
            if v is None:
                raise ValueError(a + " needs a value")
            if a == "--rounds":
                c.rounds = int(v)
            elif a == "--threads":
                c.threads = int(v)
            elif a == "--dir":
                c.dir = v
            elif a == "--only":
                c.only = v.split(",")
            else:
                c.hbudget = parse_size(v)
        elif a.startswith("-") or c.exe:
            raise ValueError(a)
        else:
            c.exe = a
    if c.rounds < 1 or c.threads < 1:
        raise ValueError("--rounds and --threads must be >= 1")
    c.exe = os.path.abspath(c.exe or "@HPDLF_EXEC_PATH@")
    return c


def headline_dims(ram):
    """Square layers of width w: P ~ layers x w^2 x 4 = RAM / 2, rounded
    up so that 3 P >= 1.5 RAM."""
    return -(-int((ram / 2 / 8 / 4) ** 0.5) // 256) * 256, 8


def headline_room(cfg, ram):
    """The disk the headline needs in --dir (Scale.disk_needed: 4.25 P +
    1 GiB; it was 7 P + 1 GiB while the tiers held the state's two versions
    within a step) and what it has."""
    width, layers = headline_dims(ram)
    p = layers * width * width * 4
    return p + 3 * p + 2 * width * width * 4 + (1 << 30), shutil.disk_usage(cfg.dir).free


def main():
    try:
        cfg = parse(sys.argv[1:])
    except ValueError as e:
        print("bench_ooc_targets.py: bad usage: %s (see the usage at the top of the script)" % e, file=sys.stderr)
        return 2
    tmp = cfg.dir is None
    cfg.dir = os.path.abspath(cfg.dir or tempfile.mkdtemp(prefix="hpdlf-bench-ooc17-"))
    os.makedirs(cfg.dir, exist_ok=True)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    head = None
    if cfg.headline:
        need, free = headline_room(cfg, ram)
        if free < need:
            print("bench_ooc_targets.py: --headline needs %.0f GB free in %s (the model, the tier footprint, "
                  "fio's file), it has %.0f GB" % (need / 1e9, cfg.dir, free / 1e9), file=sys.stderr)
            if tmp:
                shutil.rmtree(cfg.dir, ignore_errors=True)
            return 2
        width, layers = headline_dims(ram)
        head = Scale(cfg, "headline", width, layers, cfg.hbudget, plan=False)
    rows = []
    want = lambda r: cfg.only is None or r in cfg.only
    t_of = lambda f: TARGETS[f]
    try:
        if want("unet3d_infer") or want("unet3d_train"):
            u, ux, uy = make_unet3d(cfg.dir)
        if want("unet3d_infer"):
            rows.append(bench_row(cfg, "unet3d_infer", [u, "--shape", "input=1x1x64x64x64", "--iterations", "4",
                                                        "--warmup", "1"], (0.5, 0.25), t_of))
        if want("unet3d_train"):
            rows.append(bench_row(cfg, "unet3d_train", [u, "--train", "--data", ux, "--labels", uy, "--loss",
                                                        "cross-entropy", "--optimizer", "sgd", "--lr", "0.02",
                                                        "--batch", "1", "--steps", "4", "--no-shuffle"],
                                  (0.5, 0.25), t_of))
        if want("resnet18_infer"):
            m, _, _ = make_resnet18(cfg.dir, 112, 8)
            rows.append(bench_row(cfg, "resnet18_infer", [m, "--shape", "input=32x3x112x112", "--iterations", "4",
                                                          "--warmup", "1"], (0.5, 0.25), t_of))
        if want("resnet18_train"):
            m, x, y = make_resnet18(cfg.dir, 64, 64)
            rows.append(bench_row(cfg, "resnet18_train", [m, "--train", "--data", x, "--labels", y, "--loss",
                                                          "cross-entropy", "--optimizer", "sgd", "--lr", "0.01",
                                                          "--batch", "16", "--steps", "4", "--no-shuffle"],
                                  (0.5, 0.25), t_of))
        if want("lenet_train"):
            d = os.path.join(SRC, "tests/models/lenet")
            rows.append(bench_row(cfg, "lenet_train", [os.path.join(d, "model.onnx"), "--train", "--data",
                                                       os.path.join(d, "x.npy"), "--labels", os.path.join(d, "y.npy"),
                                                       "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.05",
                                                       "--batch", "64", "--steps", "40", "--no-shuffle"],
                                  (0.25,), lambda f: 2.0))
        if want("scale"):
            # P = 6 x 2048 x 2048 x 4 B + the ends ~ 100 MiB: state 3 P ~ 300 MiB >= 4 x 64 MiB
            rows.append(bench_scale(cfg, Scale(cfg, "scale", 2048, 6, 64 << 20)))
        if head:
            rows.append(bench_scale(cfg, head))
    finally:
        if tmp:
            shutil.rmtree(cfg.dir, ignore_errors=True)
    print(json.dumps({"bench": "ooc_targets", "threads": cfg.threads, "rounds": cfg.rounds,
                      "ram_bytes": ram, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

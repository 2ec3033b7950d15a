#!/usr/bin/python3
"""Issue 16's benchmark: hpdlf against ONNX Runtime (inference) and PyTorch
(training) on real architectures, same threads, same run.

usage: bench_models.py BUILD_DIR [--threads N] [--reps N] [--rounds N] [--steps N]
                       [--export-steps N] [--models DIR] [--only NAME[,NAME...]] [--no-train]
                       [--no-infer] [--no-zoo] [--spin]

Models: bench/make_bench_models.py's exports (resnet18, mobilenetv2, gpt2,
bert, unet2d, and its zoo of eleven more torchvision nets at 96x96;
written to --models DIR, or a temporary folder, when missing) and the
project's test models (tests/models: mlp, lenet, unet3d_tiny) and the 3D
U-Net of tools/make_unet3d.py (48^3, as hpdlf-bench-infer and
hpdlf-bench-train make it).  --no-zoo leaves the zoo out.  Inference: BUILD_DIR/bench/hpdlf-bench-infer
(ONNX Runtime through bench/ort_run.js when node finds onnxruntime-node,
e.g. NODE_PATH=... after `npm install --ignore-scripts
onnxruntime-node@1.20.1`), medians of --reps runs (default 20) after a
warm-up of at least 3 runs and 300 ms on each side, in --rounds fresh
process pairs (default 3; hpdlf then ORT each round): the times are the
medians over the rounds and the ratio the median of the rounds' ratios.
A process on this kind of shared VM sometimes runs in a slow mode for its
whole life (every kernel slower by one factor, on either side), so one
process pair alone can be off by 1.5x.  Training:
BUILD_DIR/bench/hpdlf-bench-train --no-budget (PyTorch through
tools/bench_train_torch.py on the TorchScript module each export was made
from), medians of the steps after the first.  GFLOP/s beside every time use
hpdlf's count of the model's flops for both sides.

Inference rows run both sides as their users get them: ONNX Runtime's
worker spins between kernels (onnxruntime-node 1.20.1 drops session config
entries, so it cannot be asked not to: each row's ort_cpu_per_wall, ORT's
CPU time over wall time in its timed runs, is about the thread count) and
hpdlf's pool polls its default HPDLF_POOL_SPIN_US.  Training rows, unless
--spin, make both sides' workers sleep between kernels: OMP_WAIT_POLICY=
PASSIVE for PyTorch's OpenMP workers, HPDLF_POOL_SPIN_US=0 for hpdlf's pool
(on a machine shared with other jobs spinning workers fight them for the
cores: PyTorch's LeNet step took 139 ms spinning against 5.5 ms passive, on
2 cores at load 12).  With --spin the training rows run as they come too.
(Until this stop the inference rows also set HPDLF_POOL_SPIN_US=0 and asked
ORT not to spin, which it ignored: a sleeping hpdlf pool against a spinning
ORT, SqueezeNet 1.53x and MNASNet 1.84x ORT where both polling gave 1.08
and 1.07.)

Prints a table to stderr and ends with one JSON line on stdout: per model
the times, GFLOP/s, hpdlf/ORT and hpdlf/PyTorch, and the geometric means.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
CORE = ["resnet18", "mobilenetv2", "gpt2", "bert", "unet2d"]
ZOO = ["squeezenet", "googlenet", "densenet", "resnext", "mnasnet", "shufflenet", "effnetb0", "mnv3small", "regnet",
       "convnext", "deeplabv3"]
EXPORTS = CORE + ZOO
TESTS = ["mlp", "lenet", "unet3d_tiny"]


def last_json(out):
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def run(cmd, log, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    log.write(p.stderr)
    return last_json(p.stdout)


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def infer(a, name, path, log):
    rounds = [infer_once(a, name, path, log) for _ in range(a.rounds)]
    ok = [r for r in rounds if "error" not in r]
    if not ok:
        return rounds[0]
    out = {"ms": median([r["ms"] for r in ok]), "gflops": median([r["gflops"] for r in ok]), "rounds": len(ok)}
    paired = [r for r in ok if "ratio_vs_ort" in r]
    if paired:
        out.update(ort_ms=median([r["ort_ms"] for r in paired]), ort_gflops=median([r["ort_gflops"] for r in paired]),
                   ratio_vs_ort=median([r["ratio_vs_ort"] for r in paired]),
                   ratios_vs_ort=[r["ratio_vs_ort"] for r in paired])
        cpu = [r["ort_cpu_per_wall"] for r in paired if "ort_cpu_per_wall" in r]
        if cpu:
            out["ort_cpu_per_wall"] = median(cpu)
    return out


def infer_once(a, name, path, log):
    cmd = [os.path.join(a.build, "bench", "hpdlf-bench-infer"), "--reps", str(a.reps), "--threads", str(a.threads)]
    r = run(cmd + ([path] if path else []), log)
    if not r or not r.get("models"):
        return {"error": "hpdlf-bench-infer failed"}
    m = r["models"][0] if path else r["models"][0 if name == "unet3d" else 1]
    out = {"ms": m["ms_median"], "gflops": m["gflops"]}
    if "ort_ms_median" in m:
        out.update(ort_ms=m["ort_ms_median"], ort_gflops=m["gflops"] * m["ms_median"] / m["ort_ms_median"],
                   ratio_vs_ort=m["ratio_vs_ort"])
        if "ort_cpu_per_wall" in m:
            out["ort_cpu_per_wall"] = m["ort_cpu_per_wall"]
    return out


def train(a, spec, steps, log):
    cmd = [os.path.join(a.build, "bench", "hpdlf-bench-train"), "--threads", str(a.threads), "--no-budget",
           "--python", sys.executable]
    if steps:
        cmd += ["--steps", str(steps)]
    env = None if a.spin else dict(os.environ, HPDLF_POOL_SPIN_US=os.environ.get("HPDLF_POOL_SPIN_US", "0"))
    r = run(cmd + [spec], log, env)
    if not r or not r.get("models") or "incore_ms" not in r["models"][0]:
        return {"error": "hpdlf-bench-train failed"}
    m = r["models"][0]
    out = {"batch": m["batch"], "ms": m["incore_ms"], "gflops": m["incore_gflops"]}
    if "torch_ms" in m:
        out.update(torch_ms=m["torch_ms"], torch_gflops=m["torch_gflops"], ratio_vs_torch=m["ratio_vs_torch"],
                   loss_max_abs_diff_vs_torch=m["loss_max_abs_diff_vs_torch"])
    return out


def geomean(v):
    v = [x for x in v if x and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def fmt(t, key, gkey):
    return " %.2f ms (%.1f GF/s) |" % (t[key], t[gkey]) if key in t else " - |"


def table(rows):
    out = ["| model | hpdlf infer | ORT | hpdlf/ORT | hpdlf train step | PyTorch step | hpdlf/PyTorch |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        i, t = r.get("infer", {}), r.get("train", {})
        line = "| %s |" % r["model"]
        line += fmt(i, "ms", "gflops") + fmt(i, "ort_ms", "ort_gflops")
        line += " %s |" % ("%.2f" % i["ratio_vs_ort"] if "ratio_vs_ort" in i else "-")
        line += fmt(t, "ms", "gflops") + fmt(t, "torch_ms", "torch_gflops")
        line += " %s |" % ("%.2f" % t["ratio_vs_torch"] if "ratio_vs_torch" in t else "-")
        out.append(line)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="inference: process pairs (hpdlf, ORT) per model")
    ap.add_argument("--steps", type=int, default=0, help="training steps of the test models (default: "
                    "hpdlf-bench-train's)")
    ap.add_argument("--export-steps", type=int, default=12, help="training steps of the exports")
    ap.add_argument("--models", default=None)
    ap.add_argument("--only", default=None, help="models, comma-separated (default: all)")
    ap.add_argument("--no-zoo", action="store_true", help="leave out make_bench_models.py's zoo")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--no-infer", action="store_true")
    ap.add_argument("--spin", action="store_true", help="training rows too: PyTorch's and hpdlf's workers poll as they default")
    a = ap.parse_args()
    if a.rounds < 1 or a.reps < 1:
        ap.error("--rounds and --reps must be at least 1")
    if not a.spin:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # PyTorch's training workers; hpdlf's: train()
    names = a.only.split(",") if a.only else CORE + TESTS + ["unet3d"] + ([] if a.no_zoo else ZOO)
    bad = [n for n in names if n not in EXPORTS + TESTS + ["unet3d"]]
    if bad:
        ap.error("unknown model %s (%s)" % (", ".join(bad), ", ".join(EXPORTS + TESTS + ["unet3d"])))
    tmp = tempfile.TemporaryDirectory(prefix="hpdlf-bench-models-")
    mdir = a.models or tmp.name
    log = open(os.path.join(tmp.name, "bench.log"), "w+")
    need = [n for n in names if n in EXPORTS and not os.path.exists(os.path.join(mdir, n, "model.pt"))]
    if need:
        subprocess.run([sys.executable, os.path.join(HERE, "make_bench_models.py"), mdir, "--only", ",".join(need)],
                       check=True)
    rows = []
    for n in names:
        folder = os.path.join(mdir, n) if n in EXPORTS else os.path.join(SRC, "tests", "models", n)
        row = {"model": n}
        if not a.no_infer:
            row["infer"] = infer(a, n, None if n == "unet3d" else os.path.join(folder, "model.onnx"), log)
        if not a.no_train:
            row["train"] = train(a, folder + "/" if n in EXPORTS else n, a.export_steps if n in EXPORTS else a.steps,
                                 log)
        print("%s: %s" % (n, json.dumps(row)), file=sys.stderr, flush=True)
        rows.append(row)
    top = {"bench": "models", "threads": a.threads, "reps": a.reps, "rounds": a.rounds, "spin": a.spin, "models": rows,
           "geomean_ratio_vs_ort": geomean([r.get("infer", {}).get("ratio_vs_ort") for r in rows]),
           "geomean_ratio_vs_torch": geomean([r.get("train", {}).get("ratio_vs_torch") for r in rows])}
    for group, members in (("core", CORE + TESTS + ["unet3d"]), ("zoo", ZOO)):
        sub = [r for r in rows if r["model"] in members]
        if sub:
            for key, side in (("ratio_vs_ort", "infer"), ("ratio_vs_torch", "train")):
                v = [r.get(side, {}).get(key) for r in sub if r.get(side, {}).get(key)]
                if v:
                    top["%s_geomean_%s" % (group, key)] = geomean(v)
                    top["%s_max_%s" % (group, key)] = max(v)
    print(table(rows), file=sys.stderr)
    print("geometric means: hpdlf/ORT %s, hpdlf/PyTorch %s" % (top["geomean_ratio_vs_ort"],
                                                             top["geomean_ratio_vs_torch"]), file=sys.stderr)
    for group in ("core", "zoo"):
        if "%s_geomean_ratio_vs_ort" % group in top or "%s_geomean_ratio_vs_torch" % group in top:
            print("  %s: hpdlf/ORT geomean %s max %s, hpdlf/PyTorch geomean %s max %s" % tuple(
                [group] + [top.get("%s_%s_%s" % (group, s, k)) for k in ("ratio_vs_ort", "ratio_vs_torch")
                           for s in ("geomean", "max")]), file=sys.stderr)
    log.seek(0)
    if any("error" in r.get("infer", {}) or "error" in r.get("train", {}) for r in rows):
        sys.stderr.write(log.read())
    print(json.dumps(top))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A multi-rank run under --budget never calibrates the speed model.

usage: check_fresh_cache.py HPDLF_EXEC WORKDIR

On an empty $XDG_CACHE_HOME (a fresh machine), 2 ranks train a small CNN
(written here with onnx.helper, dynamic batch) at --budget 64M, data
parallel and as a 2-stage --pipeline.  Rank 0 chose the reduction's
bucket (data parallel) or the stage cut (pipeline) with the planner's
speed model, and used to measure it there: the calibration's sessions and
probes took ResNet-18 training at 64M to 118 MiB and a 2-stage ShuffleNet
to 123 MiB.  Checks, for both: the run works, its peak RSS (--stats-json,
rank 0) is within the budget, and the cache holds no measured compute or
tier model afterwards (--plan is what measures and caches them).
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mpi_launch import ENV, LAUNCH  # noqa: E402

MIB = 1 << 20
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1
    return ok


def cnn(path, rng):
    mk, inits, nodes, prev, cin = helper.make_node, [], [], "x", 3
    for i, c in enumerate((16, 32, 32, 64)):
        inits.append(numpy_helper.from_array((rng.standard_normal((c, cin, 3, 3)) * (2 / (9 * cin)) ** .5)
                                             .astype(np.float32), "w%d" % i))
        nodes += [mk("Conv", [prev, "w%d" % i], ["c%d" % i], pads=[1, 1, 1, 1], strides=[1 + (i % 2)] * 2),
                  mk("Relu", ["c%d" % i], ["r%d" % i])]
        prev, cin = "r%d" % i, c
    inits.append(numpy_helper.from_array((rng.standard_normal((cin, 10)) * 0.1).astype(np.float32), "fc"))
    nodes += [mk("GlobalAveragePool", [prev], ["g"]), mk("Flatten", ["g"], ["f"]), mk("MatMul", ["f", "fc"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def main():
    exe, tmp = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rng = np.random.default_rng(5)
    model = os.path.join(tmp, "cnn.onnx")
    cnn(model, rng)
    np.save(os.path.join(tmp, "x.npy"), rng.standard_normal((32, 3, 32, 32)).astype(np.float32))
    np.save(os.path.join(tmp, "y.npy"), rng.integers(0, 10, 32).astype(np.int64))
    for what, extra in (("data parallel", []), ("--pipeline 2", ["--pipeline", "2"])):
        cache = os.path.join(tmp, "cache-" + what[:4].strip("-"))
        st = os.path.join(tmp, "stats.json")
        if os.path.exists(st):
            os.unlink(st)
        env = dict(ENV, XDG_CACHE_HOME=cache)
        cmd = LAUNCH + ["-np", "2", "-x", "XDG_CACHE_HOME", exe, model, "--train", "--data",
                        os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "y.npy"), "--batch", "4",
                        "--steps", "3", "--threads", "1", "--budget", "64M", "--quiet", "--stats-json", st] + extra
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=600)
        if not check(p.returncode == 0 and os.path.exists(st), "%s at 64M on an empty cache: exit %d %s"
                     % (what, p.returncode, p.stderr.strip()[-400:])):
            continue
        rss = json.load(open(st))["peak_rss_bytes"]
        check(rss <= 64 * MIB, "%s: peak RSS %.1f MiB within the budget" % (what, rss / MIB))
        files = os.listdir(os.path.join(cache, "hpdlf")) if os.path.isdir(os.path.join(cache, "hpdlf")) else []
        measured = [f for f in files if f.startswith(("compute-", "tier-"))]
        check(not measured, "%s: the run measured no speed model (cache: %s)" % (what, sorted(files)))
    if fails:
        print("%d failure(s)" % fails)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

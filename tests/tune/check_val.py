#!/usr/bin/env python3
"""--val-data / --eval-every: the validation loss and accuracy hpdlf-exec
logs equal a PyTorch float64 evaluation (BatchNorm with running
statistics, no Dropout) of the weights it exports; validating changes
nothing in training; out of core gives the same figures; bad usage is
status 2.  Usage: check_val.py HPDLF_EXEC"""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunelib as T  # noqa: E402


def log_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def train(exe, d, tag, extra):
    log = os.path.join(d, tag + ".jsonl")
    out = os.path.join(d, tag + ".onnx")
    rc, _, err = T.run(exe, [os.path.join(d, "m.onnx"), "--train", "--data", os.path.join(d, "train.npz"),
                             "--batch", "16", "--steps", "12", "--optimizer", "sgd", "--lr", "0.05",
                             "--momentum", "0.9", "--shuffle", "--threads", "1", "--log-json", log,
                             "--export-onnx", out] + extra)
    T.check(rc == 0, f"{tag}: trains (rc {rc}) {err.strip()[-300:]}")
    return (log_lines(log) if rc == 0 else []), out, err


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        T.make_model(os.path.join(d, "m.onnx"))
        T.make_data(os.path.join(d, "train.npz"), 200)
        vx, vy = T.make_data(os.path.join(d, "val.npz"), 77, seed=2)  # 77: a last, partial batch
        np.save(os.path.join(d, "vx.npy"), vx)
        np.save(os.path.join(d, "vy.npy"), vy.astype(np.int32))
        val = ["--val-data", os.path.join(d, "val.npz")]

        lines, onnx_out, err = train(exe, d, "val", val + ["--eval-every", "5"])
        steps = [l["step"] for l in lines if "val_loss" in l]
        T.check(steps == [4, 9, 11], f"validated after steps 5, 10 and the last (12): {steps}")
        T.check(all("val_accuracy" in l for l in lines if "val_loss" in l), "cross-entropy: val_accuracy too")
        ref_loss, ref_acc = T.torch_eval(onnx_out, vx, vy)
        last = lines[-1] if lines else {}
        got = last.get("val_loss", float("nan"))
        T.check(abs(got - ref_loss) <= 1e-5 * max(1.0, abs(ref_loss)),
                f"val_loss {got} equals PyTorch's evaluation of the exported weights {ref_loss}")
        T.check(abs(last.get("val_accuracy", -1) - ref_acc) < 1e-9,
                f"val_accuracy {last.get('val_accuracy')} equals PyTorch's {ref_acc}")
        T.check(0 < ref_acc < 1, f"the check can fail: accuracy {ref_acc} is neither 0 nor 1")
        T.check("validation after step 11: loss" in err, "the summary names the last validation")

        plain, _, _ = train(exe, d, "plain", [])
        T.check([l["loss"] for l in plain] == [l["loss"] for l in lines],
                "training losses bit for bit those of a run without validation (nothing updated)")
        T.check(not any("val_loss" in l for l in plain), "no val_loss without --val-data")

        once, _, _ = train(exe, d, "once", ["--val-data", os.path.join(d, "vx.npy"), "--val-labels",
                                            os.path.join(d, "vy.npy")])
        T.check([l["step"] for l in once if "val_loss" in l] == [11], "without --eval-every: after the last step")
        T.check(once and once[-1].get("val_loss") == last.get("val_loss"),
                ".npy + int32 labels give the .npz's figure")

        ooc, ooc_onnx, _ = train(exe, d, "ooc", val + ["--budget", "64M"])
        r2, _ = T.torch_eval(ooc_onnx, vx, vy)
        g2 = ooc[-1].get("val_loss", float("nan")) if ooc else float("nan")
        T.check(abs(g2 - r2) <= 1e-5 * max(1.0, abs(r2)), f"out of core: val_loss {g2} equals PyTorch's {r2}")

        # a budget so small that the evaluation too is planned for it (out of core)
        tiny, tiny_onnx, _ = train(exe, d, "tiny", val + ["--budget", "128K"])
        r3, _ = T.torch_eval(tiny_onnx, vx, vy)
        g3 = tiny[-1].get("val_loss", float("nan")) if tiny else float("nan")
        T.check(abs(g3 - r3) <= 1e-5 * max(1.0, abs(r3)), f"--budget 128K: val_loss {g3} equals PyTorch's {r3}")

        # mse: the mean squared error over every element, no accuracy
        np.save(os.path.join(d, "ty.npy"), np.eye(3, dtype=np.float32)[T.make_data(os.path.join(d, "t2.npz"), 200)[1]])
        np.save(os.path.join(d, "tx.npy"), np.load(os.path.join(d, "t2.npz"))["x"])
        np.save(os.path.join(d, "vty.npy"), np.eye(3, dtype=np.float32)[vy])
        mlog, mout = os.path.join(d, "mse.jsonl"), os.path.join(d, "mse.onnx")
        rc, _, err = T.run(exe, [os.path.join(d, "m.onnx"), "--train", "--data", os.path.join(d, "tx.npy"), "--labels",
                                 os.path.join(d, "ty.npy"), "--loss", "mse", "--batch", "16", "--steps", "8",
                                 "--val-data", os.path.join(d, "vx.npy"), "--val-labels", os.path.join(d, "vty.npy"),
                                 "--log-json", mlog, "--export-onnx", mout, "--threads", "1"])
        T.check(rc == 0, f"mse: trains (rc {rc}) {err.strip()[-200:]}")
        if rc == 0:
            last = log_lines(mlog)[-1]
            ref = float(((T.torch_logits(mout, vx) - np.eye(3)[vy]) ** 2).mean())
            T.check("val_accuracy" not in last and abs(last.get("val_loss", -1) - ref) <= 1e-5 * max(1, ref),
                    f"mse: val_loss {last.get('val_loss')} is PyTorch's {ref}, no val_accuracy")

        m = os.path.join(d, "m.onnx")
        base = [m, "--train", "--data", os.path.join(d, "train.npz"), "--batch", "16", "--steps", "2"]
        rc, _, err = T.run(exe, base + ["--eval-every", "1"])
        T.check(rc == 2 and "--val-data" in err, f"--eval-every without --val-data: status 2 ({rc}) {err.strip()}")
        np.save(os.path.join(d, "bad.npy"), np.zeros((77, 1, 7, 7), np.float32))
        rc, _, err = T.run(exe, base + ["--val-data", os.path.join(d, "bad.npy"), "--val-labels",
                                        os.path.join(d, "vy.npy")])
        T.check(rc == 2 and "validation" in err and "step" not in err, f"validation samples of other dims: status 2 ({rc}) {err.strip()}")
        rc, _, err = T.run(exe, [m, "--val-data", os.path.join(d, "val.npz")])
        T.check(rc == 2, f"--val-data without --train: status 2 ({rc})")
    if T.FAILS:
        print(f"{len(T.FAILS)} failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

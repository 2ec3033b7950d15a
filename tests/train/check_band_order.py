#!/usr/bin/env python3
"""Under a budget the backward visits the bands in the order of the weight
gradients' chains (issue 17).

A split operator's weight gradient sums its bands' parts in a chain from
the last band to the first (autodiff.c), and the last band's activations
are the ones still resident when the forward ends.  When the backward ran
band 0 first (the forward's order), every band's data gradient waited,
written below DRAM and read back, until the chain reached it.  The sched
hints of a band's backward nodes and of its recomputations (remat.h
HP_BAND_BWD_SCHED) now run the bands in reverse.

For the shipped LeNet (batch 64) trained at several budgets that cut it
into bands, --plan-dot's schedule is read: forward nodes (no '#', not a
recomputation) that share a name but for their trailing number are the
bands of one operator, numbered in schedule order; a backward node
('FORWARD/OpGrad#k') or a recomputation ('FORWARD.recompute') belongs to
its forward node's band.  For every split Conv, the order in which its
bands' ConvGradFilter nodes run (the chain) must be the order in which the
backward starts the bands (the first backward node of each band), and it
must be the last band first; every recomputation of a band must run after
the backward started the band before it and before it starts the band
after it (before, they all ran at the end, after every band's data
gradient).  Each budget must really be cut (at least two
bands).

usage: check_band_order.py HPDLF_EXEC LENET_DIR WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys

FAILS = []
STEP_RE = re.compile(r'label="(\d+): (\S+) +[0-9.]+ ms\\n([^"]+)"')
BUDGETS = (200000, 265508, 340000)


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILS.append(what)
    return ok


def schedule(exe, d, budget, work):
    dot = os.path.join(work, "plan-%d.dot" % budget)
    cmd = [exe, os.path.join(d, "model.onnx"), "--train", "--data", os.path.join(d, "x.npy"), "--labels",
           os.path.join(d, "y.npy"), "--loss", "cross-entropy", "--optimizer", "sgd", "--lr", "0.05", "--batch",
           "64", "--steps", "2", "--threads", "2", "--budget", str(budget), "--plan", "--plan-dot", dot]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TMPDIR=work))
    if not check(p.returncode == 0, "budget %d: --plan runs (%s)" % (budget, p.stderr.strip()[-200:])):
        return None
    with open(dot) as f:
        steps = [(int(m.group(1)), m.group(2), m.group(3)) for m in STEP_RE.finditer(f.read())]
    return [s for s in sorted(steps)]


def forward_of(name):
    """The forward node a backward node or a recomputation belongs to, or None (forward)."""
    if name.endswith(".recompute"):
        return name[:-len(".recompute")]
    if "#" in name.rsplit("/", 1)[-1]:
        return name.rsplit("/", 1)[0]
    return None


def bands(steps):
    """Forward node name -> (operator, band), for operators cut into bands."""
    groups = {}
    for _, _, name in steps:
        if forward_of(name) is None:
            groups.setdefault(re.sub(r"\d+$", "", name), []).append(name)
    return {n: (op, b) for op, names in groups.items() if len(names) > 1 for b, n in enumerate(names)}


def check_budget(exe, d, budget, work):
    steps = schedule(exe, d, budget, work)
    if steps is None:
        return
    band = bands(steps)
    nb = max((b for _, b in band.values()), default=-1) + 1
    # operators in fewer pieces are the glue of a re-cut between two
    # operators cut differently (a Slice of a band's output for the next
    # operator's bands, their Concat): their k-th piece is not band k
    count = {}
    for op, _ in band.values():
        count[op] = count.get(op, 0) + 1
    band = {n: ob for n, ob in band.items() if count[ob[0]] == nb}
    if not check(nb >= 2, "budget %d: LeNet is cut into %d bands" % (budget, nb)):
        return
    started = []  # bands in the order the backward starts them
    start_at = {}  # band -> schedule position of its first backward node
    recomputes = []  # (position, band) of each recomputation of a band
    chains = {}   # split Conv -> bands in the order of its ConvGradFilter chain
    for pos, op, name in steps:
        fwd = forward_of(name)
        if fwd is None or fwd not in band:
            continue
        conv, b = band[fwd]
        if name.endswith(".recompute"):
            recomputes.append((pos, b))
        elif b not in started:
            started.append(b)
            start_at[b] = pos
        if op == "ConvGradFilter":
            chains.setdefault(conv, []).append(b)
    check(started == list(range(nb - 1, -1, -1)),
          "budget %d: the backward starts the bands last first: %s" % (budget, started))
    # a band's recomputations run while the backward reaches that band:
    # after the band before it in the backward's order (b + 1) started,
    # before the band after it (b - 1) starts.  Whether the band's own
    # first backward node needs one of them (then it runs just before)
    # follows the keep/recompute choice, and so the measured speed model
    # (under load, MaxPoolGrad's input was recomputed rather than kept).
    # (band b of two operators cut in different counts is not one region:
    # the band before may then start after this one, so the window opens
    # at whichever starts first)
    late = [(pos, b) for pos, b in recomputes
            if b in start_at and not (min(start_at.get(b + 1, -1), start_at[b]) < pos < start_at.get(b - 1, 1 << 30))]
    # (whether to recompute follows the machine's measured speed: none is no failure)
    check(not late, "budget %d: %d recomputations of bands each run within its band's backward%s"
          % (budget, len(recomputes), " (not: %s)" % late[:4] if late else ""))
    check(len(chains) >= 2, "budget %d: %d split Convs have a ConvGradFilter chain" % (budget, len(chains)))
    for conv, chain in sorted(chains.items()):
        check(chain == started, "budget %d: %s's weight-gradient chain %s runs in the backward's band order %s"
              % (budget, conv, chain, started))


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    exe, d, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for budget in BUDGETS:
        check_budget(exe, d, budget, work)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

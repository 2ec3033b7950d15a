#!/usr/bin/python3
"""Synthetic 3D segmentation data for the demo: noisy spheres in a volume.

Usage: make_volumes.py X.npy Y.npy [--n 8] [--size 48] [--seed 1]

X: float32 [n, 1, size, size, size], a few random spheres of intensity ~1
plus Gaussian noise; Y: int64 [n, size, size, size], 1 inside a sphere,
0 outside.  Seeded, so every run trains on the same volumes.
"""
import argparse

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("x")
    ap.add_argument("y")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    s = a.size
    grid = np.stack(np.meshgrid(*(np.arange(s),) * 3, indexing="ij"), axis=-1).astype(np.float32)
    x = np.empty((a.n, 1, s, s, s), np.float32)
    y = np.zeros((a.n, s, s, s), np.int64)
    for i in range(a.n):
        for _ in range(rng.integers(2, 5)):
            c = rng.uniform(0.2 * s, 0.8 * s, 3).astype(np.float32)
            r = rng.uniform(0.08 * s, 0.2 * s)
            y[i][np.sum((grid - c) ** 2, axis=-1) < r * r] = 1
        x[i, 0] = y[i] + rng.normal(0, 0.6, (s, s, s))
    np.save(a.x, x)
    np.save(a.y, y)


if __name__ == "__main__":
    main()

"""Host cost of the GPU-stage operators of nnU-Net's 3-D program (nnunet_side_by_side.py), measured with CPU
tensors: each operator's GPU batch kernel run on a batch of ``--batch`` (1, 128, 128, 128) float32 volumes, timed,
with the torch operations it dispatches counted (a TorchDispatchMode) and the host-only time of the kernel
(seconds outside torch operations: Python, NumPy, random draws on the host) shown beside the total.

    python benchmarks/diag/nnunet_gpu_ops.py [--batch 2] [--repeat 3] [--size 128]
    python benchmarks/diag/nnunet_gpu_ops.py --stage ROOT [--batches 4]

On the CPU the torch operations do the arithmetic themselves, so "total" is not a GPU time; "host" and "ops" are
what the GPU stage's thread pays per batch whatever the device (the rule: a bounded number of launches per batch,
no per-sample Python, no host-side per-element work).

``--stage ROOT``: the whole program (nnunet_side_by_side.py's GPU program on ROOT's cases, made by its ``make``)
with its device nodes run on CPU tensors (the executor told that CUDA is there, then handed the CPU as its
device): per node, the torch operations and milliseconds a batch. Kernels that choose a path by the device (the
random draws given an input, Triton kernels) take their CPU path there.
"""
import argparse
import time

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0
        self.op_time = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        t = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.op_time += time.perf_counter() - t
        return out


def stage(root: str, batches: int) -> None:
    import collections
    import glob
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import nnunet_side_by_side as prog
    from sluice.pipeline import executor as ex

    original_init, original_run = ex.Executor.__init__, ex.Executor.run_node

    def init(self, *args, **kwargs):
        available, stream = torch.cuda.is_available, torch.cuda.Stream
        torch.cuda.is_available, torch.cuda.Stream = (lambda: True), (lambda *a, **k: None)
        try:
            original_init(self, *args, **kwargs)
        finally:
            torch.cuda.is_available, torch.cuda.Stream = available, stream
        self.torch_device = torch.device("cpu")

    ops, times, runs = collections.Counter(), collections.defaultdict(float), collections.Counter()

    def run_node(self, node, iteration, values):
        count = _Count()
        t = time.perf_counter()
        with count:
            original_run(self, node, iteration, values)
        times[node.describe()] += time.perf_counter() - t
        ops[node.describe()] += count.ops
        runs[node.describe()] += 1

    ex.Executor.__init__, ex.Executor.run_node = init, run_node
    pipe = prog.build("sluice", sorted(glob.glob(os.path.join(root, "*_x.npy"))),
                      sorted(glob.glob(os.path.join(root, "*_y.npy"))), 2, 2)()
    pipe.build()
    for _ in range(2):
        pipe.run()
    ops.clear(), times.clear(), runs.clear()
    for _ in range(batches):
        pipe.run()
    print(f"nodes of the GPU program, device nodes on CPU tensors; per batch (mean of {batches}): torch ops, ms, "
          "nodes")
    for name in sorted(ops, key=lambda k: -times[k]):
        print(f"  {ops[name] / batches:8.1f} {times[name] / batches * 1e3:9.1f}  {name} x{runs[name] // batches}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--stage", metavar="ROOT", help="run the whole program's nodes (see the module's doc)")
    ap.add_argument("--batches", type=int, default=4)
    a = ap.parse_args()
    if a.stage:
        return stage(a.stage, a.batches)
    from sluice import types
    from sluice.ops import random as rnd
    from sluice.ops.image import flip, gaussian_blur
    from sluice.ops.image.crop import crop_volumes
    from sluice.ops.image.resize import resize_volumes
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext

    n, s = a.batch, a.size
    gen = torch.Generator().manual_seed(0)
    vol = Batch.from_dense(torch.randn((n, 1, s, s, s), generator=gen), "CDHW")
    ctx = BatchContext("x", n, [""] * n, ["CDHW"], torch.device("cpu"), None, seed=1, iteration=0)
    crop_args = {"crop": None, "crop_d": 0.0, "crop_h": 0.0, "crop_w": 0.0, "crop_pos_x": 0.5, "crop_pos_y": 0.5,
                 "crop_pos_z": 0.5, "out_of_bounds_policy": "error", "fill_values": [0.0], "rounding": "round",
                 "dtype": None}
    zoom = [float(s), float(s) * 0.8][:n] + [float(s)] * max(0, n - 2)
    resize_args = {"resize_x": 0.0, "resize_y": 0.0, "resize_z": 0.0, "size": [float(s)] * 3, "resize_shorter": 0.0,
                   "resize_longer": 0.0, "roi_start": None, "roi_end": None, "max_size": None, "mode": "default",
                   "roi_relative": False, "subpixel_scale": True, "interp_type": types.INTERP_CUBIC,
                   "min_filter": None, "mag_filter": None, "dtype": None, "antialias": True, "save_attrs": False}
    cropped = crop_volumes(vol, "CDHW", BatchArgs(crop_args, {k: zoom for k in ("crop_d", "crop_h", "crop_w")}, n))
    cases = {
        "random.normal(img, stddev=per sample)": lambda: rnd.normal(
            ctx, vol, args=BatchArgs({"mean": 0.0, "shape": None, "dtype": types.FLOAT},
                                     {"stddev": [0.1 * (i + 1) for i in range(n)]}, n)),
        "random.normal, the GPU's whole-batch path": lambda: rnd.draw_elements(
            np.arange(2 * n).reshape(n, 2), np.full(n, s ** 3), lambda rng, spread: spread(
                np.full(n, 0.2), torch.float32) * rng.normal(0, torch.float32), torch.float32, torch.device("cpu"),
            pieces=False),
        "crop (identity windows)": lambda: crop_volumes(
            vol, "CDHW", BatchArgs(crop_args, {k: [float(s)] * n for k in ("crop_d", "crop_h", "crop_w")}, n)),
        "crop (zoom windows, ragged)": lambda: cropped,
        "resize cubic (same size)": lambda: resize_volumes(vol, "CDHW", BatchArgs(resize_args, {}, n)),
        "resize cubic (zoom, ragged in)": lambda: resize_volumes(cropped, "CDHW", BatchArgs(resize_args, {}, n)),
        "flip (per-sample flags)": lambda: flip.flip_gpu(
            ctx, vol, args=BatchArgs({}, {"horizontal": [i % 2 for i in range(n)], "vertical": [1] * n,
                                          "depthwise": [(i + 1) % 2 for i in range(n)]}, n)),
        "gaussian_blur (sigma per sample)": lambda: gaussian_blur.gaussian_blur_gpu(
            ctx, vol, args=BatchArgs({"window_size": None, "dtype": None},
                                     {"sigma": [[0.5 + 0.4 * i] for i in range(n)]}, n)),
    }
    print(f"batch {n} x (1, {s}, {s}, {s}) float32 on the CPU; ms per call (mean of {a.repeat})")
    print(f"{'operator':40s} {'total':>9s} {'host':>9s} {'torch ops':>10s}")
    for name, fn in cases.items():
        fn()  # warm
        total = host = 0.0
        ops = 0
        for _ in range(a.repeat):
            count = _Count()
            t = time.perf_counter()
            with count:
                fn()
            dt = time.perf_counter() - t
            total += dt
            host += dt - count.op_time
            ops = count.ops
        print(f"{name:40s} {total / a.repeat * 1e3:9.2f} {host / a.repeat * 1e3:9.2f} {ops:10d}")


if __name__ == "__main__":
    main()

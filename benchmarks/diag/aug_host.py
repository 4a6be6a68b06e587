"""Host cost of the device stage of the augmentation programs (effnet_side_by_side.py's policies, the conditional
program), measured without a GPU: the device stage's GPU kernels run on CPU tensors ("fake GPU": the executor is
built as for a GPU, then given the CPU as its device and no stream), on small images so that the arithmetic is
small beside the Python around it.

    python benchmarks/diag/aug_host.py [autoaug|trivial|conditional|ssd] [--batch 128] [--size 32] [--batches 20]

``ssd``: ssd_side_by_side.py's device stage after its decoder (flip by a coin, resize to size x size, hsv,
brightness_contrast, crop_mirror_normalize) on a ragged batch held packed as the mixed decoder hands it out
(sizes of COCO's aspect, about size to 2 x size on a side).

Prints per batch: host milliseconds, device-stage nodes run, aten operators (a GPU run launches about one kernel
per aten operator), torch-level calls, and the calls that would wait for the GPU (item/tolist/cpu/numpy of a
device stage tensor are not told apart from host ones on the CPU: counted all); then the nodes by time.
"""
import argparse
import collections
import os
import sys
import time
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def build(program: str, batch: int, size: int):
    from sluice import fn, pipeline_def, types
    from sluice.auto_aug import auto_augment, trivial_augment

    rng = np.random.default_rng(0)
    if program == "ssd":
        return _ssd(rng, batch, size)
    images = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(batch)]

    @pipeline_def(enable_conditionals=True, batch_size=batch, num_threads=1, device_id=0, seed=42,
                  exec_async=False, exec_pipelined=False)
    def pipe():
        x = fn.external_source(source=lambda: images, layout="HWC").gpu()
        if program == "conditional":
            if fn.random.coin_flip(probability=0.5, dtype=types.DALIDataType.BOOL):
                x = fn.rotate(x, angle=fn.random.uniform(range=[-30, 30]), fill_value=0)
            elif fn.random.coin_flip(probability=0.5, dtype=types.DALIDataType.BOOL):
                x = fn.hsv(x, hue=fn.random.uniform(range=[-30, 30]), saturation=fn.random.uniform(range=[0.5, 1.5]))
            else:
                x = fn.flip(x, horizontal=1)
            x = fn.resize(x, size=[size, size])
        else:
            x = fn.flip(x, horizontal=fn.random.coin_flip(probability=0.5))
            if program == "autoaug":
                x = auto_augment.auto_augment_image_net(x, shape=[size, size])
            else:
                x = trivial_augment.trivial_augment_wide(x, shape=[size, size])
        return x  # crop_mirror_normalize left out: on CPU tensors it takes its per-sample torch path (Triton on a GPU)

    return pipe()


def _ssd(rng, batch: int, size: int):
    import torch
    from sluice import fn, pipeline_def, types
    from sluice.pipeline.batch import Batch

    shapes = np.array([(int(rng.integers(size, 3 * size // 2 + 1)), int(rng.integers(4 * size // 3, 2 * size + 1)), 3)
                       for _ in range(batch)])
    flat = torch.from_numpy(rng.integers(0, 256, int(shapes.prod(1).sum()), dtype=np.uint8))

    @pipeline_def(batch_size=batch, num_threads=1, device_id=0, seed=15, exec_async=False, exec_pipelined=False)
    def pipe():
        saturation, contrast = fn.random.uniform(range=[0.5, 1.5]), fn.random.uniform(range=[0.5, 1.5])
        brightness, hue = fn.random.uniform(range=[0.875, 1.125]), fn.random.uniform(range=[-0.5, 0.5])
        x = fn.external_source(source=lambda: Batch.from_packed(flat, shapes, "HWC"), layout="HWC", batch=True)
        x = fn.flip(x.gpu(), horizontal=fn.random.coin_flip(probability=0.5))
        x = fn.resize(x, resize_x=size, resize_y=size, min_filter=types.INTERP_TRIANGULAR)
        x = fn.hsv(x, hue=hue, saturation=saturation, dtype=types.FLOAT)
        x = fn.brightness_contrast(x, brightness=brightness, contrast=contrast, contrast_center=128,
                                   dtype=types.UINT8)
        return fn.crop_mirror_normalize(x, crop=(size, size), mean=[124, 116, 104], std=[58, 57, 57], mirror=0,
                                        dtype=types.FLOAT16, output_layout="CHW")

    return pipe()


def fake_gpu():
    """Patches that let the executor build a device stage without CUDA, its device the CPU."""
    import torch
    from sluice.pipeline import executor as ex

    init = ex.Executor.__init__

    def patched(self, *a, **k):
        with mock.patch.object(torch.cuda, "is_available", lambda: True), \
                mock.patch.object(torch.cuda, "Stream", lambda *a, **k: None):
            init(self, *a, **k)
        self.torch_device = torch.device("cpu")
        for op in self.operators.values():
            op.pin_outputs = False
            op.copy_stream = None
    return mock.patch.object(ex.Executor, "__init__", patched)


def print_profile(p, batches: int, top: int) -> None:
    """cProfile's ``top`` functions of most own time over ``batches`` runs of pipeline ``p``."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(batches):
        p.run()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program", choices=("autoaug", "trivial", "conditional", "ssd"), nargs="?", default="trivial")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--profile", type=int, default=0, help="print the N functions of most own time (cProfile)")
    ap.add_argument("--nodes", type=int, default=12, help="slowest nodes to list")
    a = ap.parse_args()
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from sluice.pipeline import executor as ex

    torch.set_num_threads(1)
    with fake_gpu():
        p = build(a.program, a.batch, a.size)
        p.build()
    dev = {n.id for n in p._executor.stages[-1].nodes} if p._executor.stages[-1].on_gpu else set()
    times = collections.defaultdict(float)
    counts = collections.Counter()
    sites = collections.Counter()
    original = ex.Executor.run_node

    def timed(self, node, iteration, values):
        start = time.perf_counter()
        original(self, node, iteration, values)
        out = values.get((node.id, 0))
        kind = "" if out is None or not hasattr(out, "dense") else (" dense" if out.dense is not None else " list")
        times[f"#{node.id} {node.describe()}{kind}"] += time.perf_counter() - start
        counts["device nodes" if node.id in dev else "host nodes"] += 1

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", str(func))
            counts["torch calls"] += 1
            if name in ("item", "tolist", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__"):
                counts["item/tolist/cpu/numpy"] += 1
                frame = sys._getframe(1)
                while frame is not None and "sluice" not in frame.f_code.co_filename:
                    frame = frame.f_back
                if frame is not None:
                    where = f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno} {name}"
                    sites[where] += 1
            return func(*args, **(kwargs or {}))

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts["aten ops"] += 1
            return func(*args, **(kwargs or {}))

    for _ in range(3):
        p.run()
    ex.Executor.run_node = timed
    wall = 0.0
    for _ in range(a.batches):
        with Calls(), Ops():
            p.run()
    counted = dict(counts)
    times.clear()
    for _ in range(a.batches):  # timed without the modes
        t = time.perf_counter()
        p.run()
        wall += time.perf_counter() - t
    ex.Executor.run_node = original
    if a.profile:
        print_profile(p, a.batches, a.profile)
    print(f"{a.program}: batch {a.batch} of {a.size}x{a.size}: {wall / a.batches * 1e3:.2f} ms a batch (CPU, fake GPU)")
    for k in ("device nodes", "host nodes", "aten ops", "torch calls", "item/tolist/cpu/numpy"):
        print(f"  {counted.get(k, 0) / a.batches:9.1f}  {k} a batch")
    print("  call sites that read tensor values on the host (a wait, where the tensor is on the GPU):")
    for where, k in sites.most_common(a.nodes):
        print(f"  {k / a.batches:9.1f}  {where}")
    dev_ms = sum(v for k, v in times.items()) / a.batches * 1e3
    print(f"  nodes' time {dev_ms:.2f} ms a batch; slowest:")
    for name, total in sorted(times.items(), key=lambda kv: -kv[1])[:a.nodes]:
        print(f"  {total / a.batches * 1e3:7.3f} ms  {name}")
    p.close()


if __name__ == "__main__":
    main()

"""``sluice bench``: sluice beside its peers on this machine, in one run, printed as ratios.

Two workloads: the engine's own overhead per iteration (external_source -> GPU -> two arithmetic operators on a
dense batch of small tensors, against a plain PyTorch loop doing the same work), and the demo's image training
pipeline against the PyTorch DataLoader with PIL and torchvision-style transforms. The full-size benchmarks are
the scripts under ``benchmarks/``; they use the same functions.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

import sluice
from sluice import fn, types
from sluice._cache import cache_dir

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


# ------------------------------------------------------------------------------------------------------------
# Demo data: JPEGs drawn from NumPy patterns, one folder per class
# ------------------------------------------------------------------------------------------------------------
def make_demo_images(root: Path, count: int = 320, classes: int = 4, seed: int = 0) -> tuple[list[str], list[int]]:
    """The first ``count`` demo JPEGs (varied sizes; gradients, rings, stripes, checkers, with noise) under
    ``root/class_k/``, written where missing: image ``i`` is the same whatever ``count``, so a larger count
    adds to what an earlier call wrote. Returns their paths relative to ``root`` and their labels."""
    names, labels = [], []
    for i in range(count):
        k = i % classes
        name = f"class_{k}/img_{i:05d}.jpg"
        names.append(name)
        labels.append(k)
        path = root / name
        if path.exists():
            continue
        from PIL import Image

        rng = np.random.default_rng([seed, i])
        h, w = int(rng.integers(240, 480)), int(rng.integers(320, 640))
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        r = np.hypot(y - cy, x - cx)
        if k == 0:
            img = np.stack([x / w, y / h, 1 - x / w], -1)
        elif k == 1:
            img = np.stack([np.sin(r / rng.uniform(5, 20)), np.cos(r / 9), np.sin(r / 13)], -1) * 0.5 + 0.5
        elif k == 2:
            img = np.stack([(np.sin(x / rng.uniform(4, 12)) > 0), (np.sin(y / 7) > 0), np.full_like(x, 0.5)], -1)
        else:
            img = np.stack([((x // 32 + y // 32) % 2), (x / w), (y // 48 % 2)], -1)
        img = img * rng.uniform(0.6, 1.0, 3) + rng.normal(0, 0.04, (h, w, 3))
        img = (np.clip(img, 0, 1) * 255).astype(np.uint8)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        Image.fromarray(img).save(partial, format="JPEG", quality=90)
        os.replace(partial, path)  # a run stopped half-way leaves no truncated JPEG behind
    return names, labels


def demo_pipeline(root: str, files: list[str], labels: list[int], batch_size: int, device_id: int | None,
                  size: int = 224) -> sluice.Pipeline:
    """The ImageNet-style training pipeline of the demo (and of ``sluice bench``), over ``files`` below ``root``."""
    decoder_device = "mixed" if device_id is not None else "cpu"

    @sluice.pipeline_def(batch_size=batch_size, num_threads=min(8, os.cpu_count() or 1), device_id=device_id,
                         seed=2026, prefetch_queue_depth=2)
    def train():
        jpegs, label = fn.readers.file(file_root=root, files=files, labels=labels, random_shuffle=True,
                                       name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device=decoder_device, output_type=types.RGB)
        images = fn.resize(images, resize_x=size, resize_y=size)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                          mirror=fn.random.coin_flip(probability=0.5), mean=MEAN, std=STD)
        return images, label

    return train()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def engine_overhead(iterations: int = 2000, batch_size: int = 256, sample_shape: tuple[int, ...] = (64,),
                    warmup: int = 50) -> dict[str, float]:
    """Seconds per iteration of sluice and of a plain PyTorch loop doing the same arithmetic on the same data.

    Both take a dense CPU batch, copy it to the GPU (when there is one) and compute ``x * 2 + 1``.
    """
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    data = torch.rand(batch_size, *sample_shape)
    if cuda:
        data = data.pin_memory()

    @sluice.pipeline_def(batch_size=batch_size, num_threads=1, device_id=0 if cuda else None, seed=0,
                         prefetch_queue_depth=2)
    def pipe():
        x = fn.external_source(source=lambda: data, no_copy=True)
        if cuda:
            x = x.gpu()
        return x * 2 + 1

    p = pipe()
    for _ in range(warmup):
        p.run()
    _sync(device)
    start = time.perf_counter()
    for _ in range(iterations):
        (out,) = p.run()
        out.as_tensor()
    _sync(device)
    sluice_s = (time.perf_counter() - start) / iterations
    p.close()

    for _ in range(warmup):
        (data.to(device, non_blocking=True) * 2 + 1)
    _sync(device)
    start = time.perf_counter()
    for _ in range(iterations):
        y = data.to(device, non_blocking=True) * 2 + 1
    _sync(device)
    plain_s = (time.perf_counter() - start) / iterations
    del y
    return {"sluice_ms": sluice_s * 1e3, "plain_ms": plain_s * 1e3, "overhead_ms": (sluice_s - plain_s) * 1e3}


class _PILDataset(torch.utils.data.Dataset):
    """The peer: torchvision-style RandomResizedCrop + flip on PIL images, written with PIL alone (torchvision
    has no CPU build on some machines)."""

    def __init__(self, paths: list[str], labels: list[int], size: int = 224):
        self.paths, self.labels = paths, labels
        self.size = size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        rng = np.random.default_rng(i)
        img = Image.open(self.paths[i]).convert("RGB")
        w, h = img.size
        area = w * h * rng.uniform(0.08, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw = int(min(w, round(np.sqrt(area * ratio))))
        ch = int(min(h, round(np.sqrt(area / ratio))))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        img = img.resize((self.size, self.size), Image.BILINEAR, box=(x, y, x + cw, y + ch))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(img)).permute(2, 0, 1), self.labels[i]


def dataloader_images_per_s(paths: list[str], labels: list[int], batch_size: int, iterations: int,
                            workers: int) -> float:
    """Images/s of the PyTorch DataLoader + PIL peer, normalised (on the GPU when there is one)."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    loader = torch.utils.data.DataLoader(_PILDataset(paths, labels), batch_size=batch_size, shuffle=True,
                                         num_workers=workers, pin_memory=cuda, drop_last=True,
                                         persistent_workers=workers > 0)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    # Time only batches made while timed: first use up what the workers prefetched (2 batches each).
    warmup = 2 * workers + 1
    seen, taken, start = 0, 0, None
    while seen < iterations * batch_size:
        for images, _ in loader:
            x = ((images.to(device, non_blocking=True).float() - mean) / std).half()
            taken += 1
            if taken <= warmup:
                if taken == warmup:
                    _sync(device)
                    start = time.perf_counter()
                continue
            seen += x.shape[0]
            if seen >= iterations * batch_size:
                break
    _sync(device)
    return seen / (time.perf_counter() - start)


def sluice_images_per_s(root: str, files: list[str], labels: list[int], batch_size: int, iterations: int) -> float:
    cuda = torch.cuda.is_available()
    pipe = demo_pipeline(root, files, labels, batch_size, 0 if cuda else None)
    pipe.run()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    _sync(device)
    start = time.perf_counter()
    for _ in range(iterations):
        pipe.run()
    _sync(device)
    seconds = time.perf_counter() - start
    pipe.close()
    return iterations * batch_size / seconds


def report(workload: str, unit: str, value: float, peers: dict[str, float], higher_is_better: bool = True) -> None:
    """One line per peer: ``workload | sluice X unit | peer Y unit | ratio R`` (R > 1: sluice is better)."""
    for peer, other in peers.items():
        ratio = (value / other if higher_is_better else other / value) if value and other else float("nan")
        print(f"{workload} | sluice {value:,.3f} {unit} | {peer} {other:,.3f} {unit} | ratio {ratio:.2f}x", flush=True)


def main(args: argparse.Namespace) -> int:
    where = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU, {os.cpu_count()} cores"
    print(f"sluice {sluice.__version__} bench on {where}")
    o = engine_overhead(iterations=max(200, args.iterations * 20))
    report("engine overhead per iteration (batch 256)", "ms", o["sluice_ms"], {"plain PyTorch loop": o["plain_ms"]},
           higher_is_better=False)
    print(f"engine overhead above the plain loop: {o['overhead_ms']:.3f} ms per iteration")
    root = cache_dir("demo_images")
    files, labels = make_demo_images(root, count=args.images)
    ours = sluice_images_per_s(str(root), files, labels, args.batch_size, args.iterations)
    workers = min(16, os.cpu_count() or 1)
    peer = dataloader_images_per_s([str(root / f) for f in files], labels, args.batch_size, args.iterations,
                                   workers)
    report("image training pipeline", "images/s", ours, {f"DataLoader+PIL ({workers} workers)": peer})
    return 0

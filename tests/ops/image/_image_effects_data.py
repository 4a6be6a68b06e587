"""Generated images and a direct caller of batch kernels for the tests of the image effects (laplacian, clahe,
morphology, warps, debayer, grid_mask, water, sphere, jpeg_compression_distortion)."""

from __future__ import annotations

import numpy as np
import torch

from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema

RAGGED = [(20, 30), (17, 9), (25, 25)]


def noise_images(shapes=RAGGED, channels: int | None = 3, dtype=np.uint8, seed: int = 0) -> list[np.ndarray]:
    """Uniform noise images, one per shape (HWC with ``channels``, or HW with None)."""
    rng = np.random.default_rng(seed)
    out = []
    for h, w in shapes:
        shape = (h, w) if channels is None else (h, w, channels)
        if np.issubdtype(dtype, np.floating):
            out.append(rng.random(shape).astype(dtype))
        else:
            out.append(rng.integers(0, 256, shape).astype(dtype))
    return out


def smooth_images(shapes=RAGGED, channels: int | None = 3, seed: int = 0) -> list[np.ndarray]:
    """Smooth uint8 images (low-frequency sines and a gradient): resampling them differs little between
    libraries that quantise coordinates differently (OpenCV to 1/32 pixel)."""
    rng = np.random.default_rng(seed)
    out = []
    for h, w in shapes:
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        planes = []
        for _ in range(channels or 1):
            fy, fx, ph = rng.uniform(0.05, 0.2), rng.uniform(0.05, 0.2), rng.uniform(0, 6)
            planes.append(127 + 60 * np.sin(fy * y + ph) * np.cos(fx * x) + 40 * (x / max(w, 1) - 0.5))
        img = np.clip(np.rint(np.stack(planes, -1)), 0, 255).astype(np.uint8)
        out.append(img if channels else img[..., 0])
    return out


def run_kernel(op: str, kernel, samples, layout: str, *, per_sample: dict | None = None, extra=(),
               device: str = "cpu", seed: int = 0, **const) -> Batch:
    """Call batch ``kernel`` of ``op`` on ``samples`` (NumPy arrays) held as one ragged batch on ``device``, with
    constant arguments ``const`` (checked by the schema) and per-sample values ``per_sample``; ``extra``: more
    input batches (lists of arrays)."""
    schema = get_schema(op)
    node = object()  # stands for the DataNode that would feed a per-sample argument
    values, _ = schema.validate({**const, **{k: node for k in per_sample or {}}}, lambda v: v is node)
    n = len(samples)
    dev = torch.device("cuda" if device == "gpu" else device)
    ctx = BatchContext(op, n, [""] * n, [layout], dev, None, seed, 0)
    args = BatchArgs(values, per_sample or {}, n)
    batch = Batch([torch.from_numpy(np.ascontiguousarray(s)) for s in samples], layout).to(dev)
    more = [Batch([torch.from_numpy(np.ascontiguousarray(s)) for s in x]).to(dev) for x in extra]
    return kernel(ctx, batch, *more, args=args)


def samples_of(batch: Batch) -> list[np.ndarray]:
    return [s.cpu().numpy() for s in batch.samples]

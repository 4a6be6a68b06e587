"""``fn.jitter``: move every pixel by a random offset of at most ``nDegree // 2`` in x and y.

Each output pixel copies the input pixel at ``(y + dy, x + dx)``, ``dx, dy`` uniform integers in
``[-(nDegree // 2), nDegree // 2]`` drawn from the sample's seeded generator (the same on CPU and GPU); sources
outside the image give ``fill_value``. ``mask=0`` leaves a sample unchanged.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.ops.image._geometry import spatial_dims
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["SCHEMA", "jitter_one"]

SCHEMA = OpSchema(
    "jitter",
    sequences="axis",
    doc="""Random pixel jitter.

    Example::

        images = fn.jitter(images, nDegree=4, mask=fn.random.coin_flip(probability=0.2))
    """,
    devices=("cpu", "gpu"),
    random=True,
    args=[
        Arg("nDegree", int, 2, "Neighbourhood size; offsets are at most nDegree // 2."),
        Arg("fill_value", float, 0.0, "Value for sources outside the image."),
        Arg("interp_type", types.DALIInterpType, types.INTERP_NN, "Only INTERP_NN is supported."),
        Arg("mask", int, 1, "Apply to this sample (1) or pass it through (0).", per_sample=True),
    ],
)


def jitter_one(image: torch.Tensor, layout: str, rng: np.random.Generator, args: dict) -> torch.Tensor:
    """One sample on its device, with offsets from ``rng``."""
    if args.get("interp_type") not in (None, types.INTERP_NN):
        raise ValueError(f"Invalid interp_type ({args.get('interp_type')!r}): jitter supports INTERP_NN only.")
    if not args.get("mask", 1):
        return image.clone()
    layout = layout or ("HWC" if image.dim() == 3 else "HW")
    hd, wd, _ = spatial_dims(layout, image.dim())
    h, w = int(image.shape[hd]), int(image.shape[wd])
    r = int(args.get("nDegree", 2)) // 2
    if r < 0:
        raise ValueError("Invalid nDegree: it must be >= 0.")
    dy = rng.integers(-r, r + 1, size=(h, w))
    dx = rng.integers(-r, r + 1, size=(h, w))
    sy = np.arange(h)[:, None] + dy
    sx = np.arange(w)[None, :] + dx
    inside = (sy >= 0) & (sy < h) & (sx >= 0) & (sx < w)
    flat = torch.from_numpy((np.clip(sy, 0, h - 1) * w + np.clip(sx, 0, w - 1)).reshape(-1)).to(image.device)
    x = image.movedim((hd, wd), (0, 1))
    rest = x.shape[2:]
    out = x.reshape(h * w, *rest).index_select(0, flat).reshape(h, w, *rest)
    keep = torch.from_numpy(inside).to(image.device).reshape(h, w, *([1] * len(rest)))
    out = torch.where(keep, out, torch.tensor(args.get("fill_value", 0.0), dtype=torch.float64).to(image.dtype))
    return out.movedim((0, 1), (hd, wd)).contiguous()


@SCHEMA.sample_kernel("cpu")
def jitter_cpu(ctx, image: torch.Tensor, **args) -> torch.Tensor:
    """One sample with the sample's generator."""
    return jitter_one(image, ctx.layout, ctx.rng, args)


@SCHEMA.batch_kernel("gpu")
def jitter_gpu(ctx, images: Batch, *, args) -> Batch:
    """Per sample, with the same generators as the CPU kernel."""
    layout = ctx.layout_of(images)
    return Batch([jitter_one(s, layout, ctx.sample_rng(i, reuse=True), args.sample(i)) for i, s in enumerate(images.samples)],
                 layout)

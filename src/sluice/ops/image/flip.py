"""``fn.flip``: mirror images horizontally and/or vertically (and volumes depthwise), per sample.

On the GPU a batch of equal shapes is flipped with one gather per group of samples sharing the same flags (at most
eight whatever the batch size); ragged batches flip sample by sample.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.ops.image._geometry import flip_dims, flip_image
from sluice.pipeline.batch import Batch
from sluice.pipeline.ragged import host_to_device
from sluice.schema import Arg, OpSchema

__all__ = ["SCHEMA"]

SCHEMA = OpSchema(
    "flip",
    sequences="axis",
    doc="""Flip images along the width (``horizontal``) and/or the height (``vertical``), volumes (layouts with
    ``D``) also along the depth (``depthwise``).

    Example::

        images = fn.flip(images, horizontal=fn.random.coin_flip(), vertical=0)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("horizontal", int, 1, "Flip along the width (0 or 1).", per_sample=True),
        Arg("vertical", int, 0, "Flip along the height (0 or 1).", per_sample=True),
        Arg("depthwise", int, 0, "Flip along the depth (D) of volumes (0 or 1; images have none).", per_sample=True),
    ],
)


def _layout(layout: str, x: torch.Tensor) -> str:
    return layout or ("HWC" if x.dim() == 3 else "HW")


@SCHEMA.sample_kernel("cpu")
def flip_cpu(ctx, image: torch.Tensor, *, horizontal=1, vertical=0, depthwise=0, **_) -> torch.Tensor:
    """One sample; returns a new tensor (the input is never modified)."""
    flags = bool(horizontal), bool(vertical), bool(depthwise)
    return flip_image(image, _layout(ctx.layout, image), *flags).contiguous()


@SCHEMA.batch_kernel("gpu")
def flip_gpu(ctx, images: Batch, *, args) -> Batch:
    """Dense batches: one flip per distinct (horizontal, vertical, depthwise) flags; ragged: per sample."""
    layout = ctx.layout_of(images)
    n = len(images)
    flags = list(zip(*([bool(v) for v in args[name]] for name in ("horizontal", "vertical", "depthwise"))))
    # equal shapes held packed (a slice's patches after .gpu()) are viewed as one tensor too, without a copy
    dense = images.as_tensor() if n and images.is_dense_tensor() else None
    if dense is None:
        return Batch([flip_image(s, _layout(layout, s), *flags[i]).contiguous()
                      for i, s in enumerate(images.samples)], layout)
    out = torch.empty_like(dense)
    for key in set(flags):
        idx = host_to_device(np.array([i for i in range(n) if flags[i] == key], np.int64), dense.device)
        dims = [d + 1 for d in flip_dims(_layout(layout, dense[0]), dense.dim() - 1, *key)]
        part = dense.index_select(0, idx)
        out.index_copy_(0, idx, part.flip(dims) if dims else part)
    return Batch.from_dense(out, layout)

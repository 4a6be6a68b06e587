"""``fn.equalize``: per-channel histogram equalisation of uint8 images and video frames, as DALI's operator (which
follows OpenCV's ``equalizeHist``).

For each channel of each image (of each frame), with ``cdf`` the cumulative histogram of its 256 values,
``first`` the count of its smallest value and ``total`` its number of pixels, value ``v`` becomes
``round((cdf[v] - first) * 255 / (total - first))`` (to nearest, ties to even); a channel of one value is left
as it is. The whole batch, ragged or not, is equalised at once: one ``bincount`` over every (sample, channel,
value), a cumulative sum, one table look-up, on the CPU or the GPU alike.

Example::

    images = fn.equalize(images)     # HWC, CHW or HW uint8; FHWC / FCHW clips frame by frame
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.ops.image._geometry import channel_last_padded, from_channel_last
from sluice.pipeline.batch import Batch
from sluice.pipeline.ragged import valid_mask
from sluice.schema import BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "equalize_luts"]

SCHEMA = OpSchema(
    "equalize",
    sequences="frames",
    doc="""Performs grayscale/per-channel histogram equalization of uint8 images (layouts HW, HWC, CHW) and
    videos (FHW, FHWC, FCHW: every frame on its own), as DALI (OpenCV's formula).

    Example::

        images = fn.equalize(images)
    """,
    devices=("cpu", "gpu"),
)


def equalize_luts(hist: torch.Tensor) -> torch.Tensor:
    """The look-up tables (uint8, ``(groups, 256)``) of histograms ``(groups, 256)`` (int64).

    Example::

        equalize_luts(torch.bincount(torch.tensor([0, 0, 255]), minlength=256)[None])[0, [0, 255]]  # [0, 255]
    """
    cdf = hist.cumsum(1)
    first = hist.gather(1, (hist > 0).to(torch.uint8).argmax(1, keepdim=True))  # count of the smallest value
    total = cdf[:, -1:]
    span = (total - first).to(torch.float64)
    scaled = (cdf - first).to(torch.float64) * (255.0 / span.clamp_min(1.0))
    lut = scaled.round().clamp(0, 255).to(torch.uint8)
    identity = torch.arange(256, device=hist.device, dtype=torch.uint8).expand_as(lut)
    return torch.where(total == first, identity, lut)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def equalize(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The batch padded to one channel-last tensor; padding counts into a bin of its own."""
    layout = ctx.layout_of(images)
    n = len(images)
    if n == 0:
        return images
    if images.dtype != torch.uint8:
        raise ValueError(f"fn.equalize: the input must be uint8, got {images.dtype}")
    hwc, hw, layout = channel_last_padded(images, layout, None, "equalize")
    c = hwc.shape[3]
    groups = n * c
    dev = hwc.device
    key = hwc.to(torch.int32) + (torch.arange(groups, device=dev, dtype=torch.int32) * 256).view(n, 1, 1, c)
    if images.dense is None:  # padding: into bin `groups * 256`, whose table entry is never read back into a sample
        extent = tuple(hwc.shape[1:])
        inside = valid_mask(np.concatenate([hw, np.full((n, 1), c, np.int64)], 1), extent, dev)
        key = torch.where(inside, key, torch.full_like(key, groups * 256))
    hist = torch.bincount(key.reshape(-1), minlength=groups * 256 + 1)[: groups * 256].view(groups, 256)
    lut = torch.cat([equalize_luts(hist).reshape(-1), torch.zeros(1, device=dev, dtype=torch.uint8)])
    out = lut.take(key.to(torch.int64))
    return from_channel_last(out, hw, images, layout)

"""``fn.segmentation.random_mask_pixel``: a random pixel position of a mask, as DALI's operator.

With ``foreground`` non-zero, the position is drawn uniformly among the foreground pixels: those equal to ``value``
(integer masks) or, without ``value``, above ``threshold``; a mask without any, and ``foreground=0``, draw
uniformly among all pixels. The output is one int64 coordinate per dimension.

The draws are made on the host from each sample's seeded generator (a uniform number per sample and per
dimension); the k-th foreground pixel is then found on the batch's device, in one pass over the padded batch
(foreground mask, running count, search), so that the CPU and the GPU pick the same pixels and nothing waits for
the device.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.ops.tensor._util import as_float_list
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "pick_pixels"]

SCHEMA = OpSchema(
    "segmentation.random_mask_pixel",
    doc="""Selects a random pixel of a mask: among the foreground pixels (``value`` or ``threshold``) when
    ``foreground`` is set, else among all pixels. Outputs its coordinates (int64, one per dimension).

    Example::

        center = fn.segmentation.random_mask_pixel(labels, foreground=fn.random.coin_flip(probability=0.7))
        anchor = center - crop_shape // 2
    """,
    devices=("cpu", "gpu"),
    random=True,
    output_layout="",
    args=[
        Arg("value", int, None, "Pixels equal to this value are foreground (excludes threshold).", per_sample=True),
        Arg("threshold", float, None, "Pixels above this value are foreground (default 0.0).", per_sample=True),
        Arg("foreground", int, 0, "Draw among the foreground pixels (non-zero) or among all pixels (0).",
            per_sample=True),
    ],
)


def pick_pixels(masks: torch.Tensor, shapes: np.ndarray, foreground: np.ndarray, u_fg: np.ndarray,
                u_any: np.ndarray) -> torch.Tensor:
    """``(n, ndim)`` int64 positions: in sample ``i`` (the leading ``shapes[i]`` corner of ``masks[i]``, a bool
    foreground mask of the padded batch) the ``floor(u_fg[i] * count)``-th foreground pixel in row-major order
    when ``foreground[i]`` and the sample has any, else ``floor(u_any[i, d] * shapes[i, d])`` per dimension."""
    n, ndim = shapes.shape
    dev = masks.device
    extent = tuple(masks.shape[1:])
    fg = masks & ragged.valid_mask(shapes, extent, dev)
    flat = fg.reshape(n, -1)
    running = torch.cumsum(flat, 1, dtype=torch.int64)
    count = running[:, -1] if flat.shape[1] else torch.zeros(n, dtype=torch.int64, device=dev)
    u = torch.from_numpy(np.asarray(u_fg, np.float64)).to(dev, non_blocking=True)
    k = torch.minimum((u * count.to(torch.float64)).floor().to(torch.int64), (count - 1).clamp_min(0))
    # the first element whose running count exceeds k is the k-th foreground pixel
    idx = torch.searchsorted(running, (k + 1).unsqueeze(1)).squeeze(1).clamp_max(max(flat.shape[1] - 1, 0))
    strides = np.ones(ndim, np.int64)
    for d in range(ndim - 2, -1, -1):
        strides[d] = strides[d + 1] * extent[d + 1]
    st = torch.from_numpy(strides).to(dev, non_blocking=True)
    ext = torch.from_numpy(np.asarray(extent, np.int64)).to(dev, non_blocking=True)
    found = (idx.unsqueeze(1) // st) % ext
    anywhere = np.floor(np.asarray(u_any, np.float64) * shapes).astype(np.int64)
    anywhere = np.minimum(anywhere, np.maximum(shapes - 1, 0))
    any_t = torch.from_numpy(anywhere).to(dev, non_blocking=True)
    use_fg = torch.from_numpy(np.asarray(foreground, bool)).to(dev, non_blocking=True) & (count > 0)
    return torch.where(use_fg.unsqueeze(1), found, any_t)


def _per_sample(values: list, name: str, kind=float) -> np.ndarray:
    out = []
    for i, v in enumerate(values):
        one = as_float_list(v)
        if len(one) != 1:
            raise ValueError(f"segmentation.random_mask_pixel: {name} of sample {i} must be one number, got "
                             f"{len(one)}")
        out.append(kind(one[0]))
    return np.asarray(out)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def random_mask_pixel(ctx: BatchContext, masks: Batch, *, args: BatchArgs) -> Batch:
    n = len(masks)
    if n == 0:
        return Batch([])
    has_value = any(v is not None for v in args["value"])
    has_threshold = any(v is not None for v in args["threshold"])
    if has_value and has_threshold:
        raise ValueError("segmentation.random_mask_pixel: value and threshold cannot be given together")
    shapes = masks.shapes_array()
    ndim = shapes.shape[1]
    dtype = masks.dtype
    foreground = _per_sample(args["foreground"], "foreground", int) != 0
    u_fg = np.empty(n)
    u_any = np.empty((n, ndim))
    for i in range(n):  # a few numbers per sample, from the sample's own generator
        rng = ctx.sample_rng(i, reuse=True)
        u_fg[i] = rng.random()
        u_any[i] = rng.random(ndim)
    data, _ = masks.padded(fill=None)
    dev = data.device
    if has_value:
        if dtype.is_floating_point:
            raise TypeError(f"segmentation.random_mask_pixel: value is for integer masks; the masks are {dtype} "
                            "(use threshold)")
        value = _per_sample(args["value"], "value", int)
        info = torch.iinfo(dtype) if dtype != torch.bool else None
        representable = (value >= info.min) & (value <= info.max) if info else (value == 0) | (value == 1)
        value_t = torch.from_numpy(np.where(representable, value, 0)).to(dev, non_blocking=True)
        ok = torch.from_numpy(representable).to(dev, non_blocking=True)
        view = (n,) + (1,) * ndim
        fg = (data.to(torch.int64) == value_t.view(view)) & ok.view(view)
    else:
        thr = _per_sample([0.0 if v is None else v for v in args["threshold"]], "threshold")
        # as DALI's C++ comparison of a T with a float: integers compare as float (float64 data as itself)
        ftype = torch.float64 if dtype == torch.float64 else torch.float32
        thr_t = torch.from_numpy(thr.astype(np.float32 if ftype == torch.float32 else np.float64))
        fg = data.to(ftype) > thr_t.to(dev, non_blocking=True).view((n,) + (1,) * ndim)
    return Batch.from_dense(pick_pixels(fg, shapes, foreground, u_fg, u_any))

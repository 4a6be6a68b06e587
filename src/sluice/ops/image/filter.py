"""``fn.filter``: 2-D correlation of images with a per-sample filter, as DALI's operator (``fn.experimental.filter``
in older DALI).

The output at ``(y, x)`` is ``sum(filter[i, j] * input[y - a_y + i, x - a_x + j])`` over the filter (a correlation:
the filter is not flipped), with ``anchor = (a_y, a_x)`` (default: ``filter_extent // 2``). Positions outside the
image follow ``border``: ``reflect_101`` (``dcb|abcd|cba``, the default), ``reflect_1001`` (``cba|abcd|dcb``),
``wrap``, ``clamp`` or ``constant`` (the third input, one value per sample, else 0). ``mode="valid"`` keeps only
the positions where the filter lies inside the image (the output is ``filter_extent - 1`` smaller). Math is
float32; integer outputs are rounded to nearest (ties to even) and clamped, as DALI's ``ConvertSat``.

The whole batch runs at once, ragged or not, on the CPU and the GPU: one gather builds every sample's bordered
copy (each sample's borders from its own extents), then one multiply-add per filter tap over the padded batch.

Example::

    kernel = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)
    sharp = fn.filter(images, types.Constant(kernel), border="clamp")
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.ops.image._geometry import channel_last_padded, from_channel_last, reject_volume
from sluice.ops.tensor._util import convert_saturate
from sluice.pipeline.batch import Batch
from sluice.pipeline.ragged import host_to_device
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "BORDERS", "border_index", "filter_padded"]

BORDERS = ("reflect_101", "reflect_1001", "wrap", "clamp", "constant")

SCHEMA = OpSchema(
    "filter",
    sequences="frames",
    doc="""Convolves the image with the provided filter (computing a correlation: the filter is not flipped).

    Inputs: the images (HW, HWC, CHW; the sequences FHW, FHWC, FCHW frame by frame), a float32 2-D filter per
    sample (or per frame, as a sequence with layout ``F**``), and optionally a scalar per sample, the value
    outside the image for ``border="constant"``.

    Example::

        blurred = fn.filter(images, types.Constant(np.full((3, 3), 1 / 9, np.float32)))
    """,
    inputs=(2, 3),
    input_names=["data", "filter", "fill_value"],
    devices=("cpu", "gpu"),
    args=[
        Arg("anchor", "int_list", [-1], "Position of the filter over the output pixel, ``(a_y, a_x)`` within the "
            "filter; -1: the middle (``extent // 2``). Ignored in ``valid`` mode.", per_sample=True),
        Arg("border", str, "reflect_101", "How positions outside the image are read.", choices=BORDERS),
        Arg("mode", str, "same", "``same``: the output has the input's size; ``valid``: only positions where "
            "the filter lies inside the image.", choices=("same", "valid")),
        Arg("dtype", types.DALIDataType, None, "Output type: the input's (default) or FLOAT."),
    ],
)


def border_index(t: torch.Tensor, length: torch.Tensor, border: str) -> torch.Tensor:
    """Map positions ``t`` (int64) to indices inside ``[0, length)`` by the border rule (``length`` broadcasts
    against ``t``). For ``constant`` the positions are clamped (the caller masks them)."""
    if border in ("clamp", "constant"):
        return torch.minimum(t.clamp_min(0), length - 1)
    if border == "wrap":
        return torch.remainder(t, length)
    if border == "reflect_1001":
        period = 2 * length
        r = torch.remainder(t, period)
        return torch.where(r >= length, period - 1 - r, r)
    period = (2 * length - 2).clamp_min(1)  # reflect_101; a length of 1 maps everything to 0
    r = torch.remainder(t, period)
    return torch.where(r >= length, period - r, r).clamp_max(length - 1)


def filter_padded(x: torch.Tensor, hw: np.ndarray, kernels: torch.Tensor, anchors: np.ndarray, border: str,
                  fill: torch.Tensor | None) -> torch.Tensor:
    """Correlate a padded channel-last batch ``x`` (n, H, W, C) whose sample ``i`` spans ``hw[i]`` with
    ``kernels`` (n, R, S) float32 (zero beyond each sample's filter) anchored at ``anchors`` (n, 2). Returns the
    float32 result (n, H, W, C); positions beyond a sample's extent hold anything."""
    n, hh, ww, _ = x.shape
    r, s = kernels.shape[1], kernels.shape[2]
    dev = x.device
    table = host_to_device(np.concatenate([hw, anchors], 1).astype(np.int64), dev)  # one asynchronous copy
    h, w, ay, ax = (table[:, k].view(n, 1) for k in range(4))
    ty = torch.arange(hh + r - 1, device=dev).view(1, -1) - ay  # (n, H + R - 1) source rows
    tx = torch.arange(ww + s - 1, device=dev).view(1, -1) - ax
    rows, cols = border_index(ty, h, border), border_index(tx, w, border)
    ext = x[torch.arange(n, device=dev).view(n, 1, 1), rows.view(n, -1, 1), cols.view(n, 1, -1)].to(torch.float32)
    if border == "constant":
        inside = ((ty >= 0) & (ty < h)).view(n, -1, 1, 1) & ((tx >= 0) & (tx < w)).view(n, 1, -1, 1)
        value = fill.to(dev, torch.float32).view(n, 1, 1, 1) if fill is not None else torch.zeros((), device=dev)
        ext = torch.where(inside, ext, value)
    k = kernels.to(dev, torch.float32)
    out = torch.zeros(x.shape, device=dev, dtype=torch.float32)
    for i in range(r):
        for j in range(s):
            out.addcmul_(ext[:, i:i + hh, j:j + ww], k[:, i, j].view(n, 1, 1, 1))
    return out


def _fill_values(fill: Batch | None, n: int) -> torch.Tensor | None:
    if fill is None:
        return None
    if len(fill) != n:
        raise ValueError(f"fn.filter: the fill_value input has {len(fill)} samples for a batch of {n}")
    sizes = [int(np.prod(s)) for s in fill.shape()]
    if any(k != 1 for k in sizes):
        raise ValueError(f"fn.filter: fill_value must be one scalar per sample, got samples of {sorted(set(sizes))} "
                         "values")
    return fill.as_tensor().reshape(n)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def filter_(ctx: BatchContext, images: Batch, filters: Batch, fill: Batch | None = None, *, args: BatchArgs) -> Batch:
    n = len(images)
    if n == 0:
        return images
    layout = ctx.layout_of(images)
    reject_volume("filter", layout, "HW, HWC, CHW and the sequences FHW, FHWC, FCHW")
    if len(filters) != n:
        raise ValueError(f"fn.filter: {len(filters)} filters for a batch of {n}")
    fshapes = filters.shapes_array()
    if fshapes.shape[1] != 2:
        raise ValueError(f"fn.filter: each filter must be a 2-D array, got samples of shape {tuple(fshapes[0])}")
    if filters.dtype != torch.float32:
        raise ValueError(f"fn.filter: the filters must be float32, got {filters.dtype}")
    in_dtype = images.dtype
    dtype = args.const("dtype")
    out_dtype = in_dtype if dtype is None or dtype == types.NO_TYPE else types.to_torch_dtype(dtype)
    if out_dtype not in (in_dtype, torch.float32):
        raise ValueError(f"fn.filter: dtype must be the input's type ({in_dtype}) or FLOAT, got {out_dtype}")
    valid = args.const("mode") == "valid"
    border = args.const("border")
    anchors = np.zeros((n, 2), np.int64)
    for i, a in enumerate(args["anchor"]):
        a = list(a) if a is not None else [-1]
        if len(a) == 1:
            a = a * 2
        if len(a) != 2:
            raise ValueError(f"fn.filter: sample {i}: anchor needs 1 or 2 values for a 2-D filter, got {a}")
        for d in range(2):
            extent = int(fshapes[i, d])
            if not -1 <= a[d] < extent:
                raise ValueError(f"fn.filter: sample {i}: the anchor {a} must lie within the filter of shape "
                                 f"{tuple(int(v) for v in fshapes[i])}")
            anchors[i, d] = 0 if valid else (extent // 2 if a[d] < 0 else a[d])
    x, hw, layout = channel_last_padded(images, layout, None, "filter")
    if valid:
        small = np.flatnonzero((hw < fshapes).any(1))
        if len(small):
            i = int(small[0])
            raise ValueError(f"fn.filter: sample {i}: in 'valid' mode the filter {tuple(int(v) for v in fshapes[i])} "
                             f"must fit in the image {tuple(int(v) for v in hw[i])}")
    kernels, _ = filters.padded(0.0)
    out = convert_saturate(filter_padded(x, hw, kernels.to(x.device), anchors, border,
                                         _fill_values(fill, n)), out_dtype)
    return from_channel_last(out, hw - fshapes + 1 if valid else hw, images, layout)

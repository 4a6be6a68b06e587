"""``fn.tensor_resize``: resample tensors of any rank along any of their axes, DALI's ``TensorResize``.

The output size of each resized axis comes from ``sizes`` (``0``: keep the aspect ratio of the other given axes) or
``scales`` (``size_rounding(scale * input size)``), refined by ``mode`` and ``max_size`` as ``fn.resize`` does; the
region read is the whole axis or ``roi_start`` .. ``roi_end`` (start > end flips). When the rounded size differs
from the exact one (``subpixel_scale``), the region is stretched to keep the exact scale about the point
``(1 - alignment) * start + alignment * end``. ``axes`` / ``axis_names`` say which axes the arguments refer to
(default: all). Each axis is resampled with resize's separable filters (antialiased when shrinking;
:mod:`sluice.kernels.resample`).

The whole batch, ragged or not, is one padded tensor: per resized axis one gather and one weighted sum
(:func:`sluice.kernels.resample.resample_axis_batch`), with every sample's own filter table, on the CPU and the GPU.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sluice import types
from sluice.kernels.resample import cast_round, filter_id, filter_tables_batch, resample_axis_batch
from sluice.ops.image._geometry import _adjust_output_size, round_half_away
from sluice.ops.image.resize import resampling_args
from sluice.ops.tensor._util import as_float_list, resolve_axes
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "tensor_resize_params"]

_ROUNDING = {"round": lambda x: round_half_away(x), "truncate": lambda x: int(x), "ceil": lambda x: int(math.ceil(x))}

SCHEMA = OpSchema(
    "tensor_resize",
    doc="""Resizes tensors along the given axes (default: all) with resize's resampling filters.

    Give ``sizes`` or ``scales`` (one value per axis of ``axes`` / ``axis_names``); ``mode``, ``max_size``,
    ``roi_start`` / ``roi_end`` (``roi_relative``), ``size_rounding`` and ``alignment`` refine the output as in
    DALI. Example::

        vol = fn.tensor_resize(volumes, scales=[0.5, 0.5, 0.5], axes=[0, 1, 2])
        spec = fn.tensor_resize(spectrograms, sizes=[128], axis_names="t")
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("sizes", "float_list", None, "Output sizes of the axes (0: keep the aspect ratio).", per_sample=True),
        Arg("scales", "float_list", None, "Scale factors of the axes: out = size_rounding(scale * in).",
            per_sample=True),
        Arg("axes", "int_list", None, "Indices of the axes the arguments refer to (negative from the back); "
            "default: all."),
        Arg("axis_names", str, None, "Layout letters of the axes the arguments refer to (excludes axes)."),
        Arg("size_rounding", str, "round", "Rounding of sizes from scales: 'round' (halves away from zero), "
            "'truncate' or 'ceil'.", choices=("round", "truncate", "ceil")),
        Arg("alignment", "float_list", None, "Which point of the region keeps its place when the size is rounded: "
            "0 its start, 0.5 its centre (default), 1 its end; one value or one per axis.", per_sample=True),
        Arg("mode", str, "default", "How given sizes combine: 'default', 'stretch', 'not_larger', 'not_smaller'.",
            choices=("default", "stretch", "not_larger", "not_smaller")),
        Arg("max_size", "float_list", None, "Upper limit of the output sizes (one value or one per axis)."),
        Arg("roi_start", "float_list", None, "Start of the region of interest of each axis.", per_sample=True),
        Arg("roi_end", "float_list", None, "End of the region of interest of each axis (start > end flips).",
            per_sample=True),
        Arg("roi_relative", bool, False, "The region is given as fractions of the input size."),
        Arg("subpixel_scale", bool, True, "Keep the exact fractional scale by stretching the region."),
    ] + resampling_args(),
)


def _values(value, count: int, name: str, default: float | None = None) -> list[float]:
    vals = as_float_list(value)
    if not vals and default is not None:
        return [default] * count
    if len(vals) == 1:
        vals = vals * count
    if len(vals) != count:
        raise ValueError(f"tensor_resize: {name} has {len(vals)} values for {count} axes; give 1 or one per axis")
    return vals


def tensor_resize_params(shape: tuple[int, ...], axes: list[int], a: dict) -> tuple[list[float], list[float],
                                                                                     list[int]]:
    """Per axis of a sample of ``shape``: the source region (``lo``, ``hi``; swapped where flipped) and the output
    size, as DALI's ``TensorResizeAttr`` computes them; ``a`` holds the sample's argument values."""
    ndim = len(shape)
    has_sizes, has_scales = a.get("sizes") is not None, a.get("scales") is not None
    if has_sizes == has_scales:
        raise ValueError("tensor_resize: give exactly one of sizes and scales")
    mode = a.get("mode") or "default"
    if has_scales and mode in ("not_smaller", "not_larger"):
        raise ValueError(f"tensor_resize: scales cannot be combined with mode '{mode}'")
    in_size = [float(s) for s in shape]
    req = list(in_size)
    if has_sizes:
        for d, v in zip(axes, _values(a["sizes"], len(axes), "sizes")):
            req[d] = v
    else:
        for d, v in zip(axes, _values(a["scales"], len(axes), "scales")):
            req[d] = v * in_size[d]
    lo, hi = [0.0] * ndim, list(in_size)
    if (a.get("roi_start") is None) != (a.get("roi_end") is None):
        raise ValueError("tensor_resize: roi_start and roi_end must be given together")
    if a.get("roi_start") is not None:
        starts = _values(a["roi_start"], len(axes), "roi_start")
        ends = _values(a["roi_end"], len(axes), "roi_end")
        for d, s, e in zip(axes, starts, ends):
            lo[d], hi[d] = (s * in_size[d], e * in_size[d]) if a.get("roi_relative") else (s, e)
    align = [0.5] * ndim
    if a.get("alignment") is not None:
        if not a.get("subpixel_scale", True):
            raise ValueError("tensor_resize: alignment needs subpixel_scale")
        for d, v in zip(axes, _values(a["alignment"], len(axes), "alignment")):
            align[d] = v
    size = []
    for d in range(ndim):
        if hi[d] < lo[d]:
            lo[d], hi[d] = hi[d], lo[d]
            req[d] = -req[d]
        size.append(hi[d] - lo[d])
    max_size = None
    if a.get("max_size") is not None:
        max_size = [0.0] * ndim
        for d, v in zip(axes, _values(a["max_size"], len(axes), "max_size")):
            max_size[d] = v
    _adjust_output_size(req, size, mode, max_size)
    empty = any(s == 0 for s in shape)
    rounding = _ROUNDING[a.get("size_rounding") or "round"]
    out = []
    for d in range(ndim):
        if lo[d] == hi[d] and req[d] != 0:
            raise ValueError("tensor_resize: cannot produce a non-empty output from an empty region")
        n = max(0 if empty else 1, rounding(float(np.float32(abs(req[d])))))
        if req[d] < 0:
            lo[d], hi[d] = hi[d], lo[d]
        if a.get("subpixel_scale", True) and req[d] != 0 and n != abs(req[d]):
            adj = min(max(n / abs(req[d]), -10.0), 10.0)
            centre = (1.0 - align[d]) * lo[d] + align[d] * hi[d]
            lo[d], hi[d] = centre + (lo[d] - centre) * adj, centre + (hi[d] - centre) * adj
        out.append(n)
    return lo, hi, out


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def tensor_resize(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    """The padded batch resampled axis by axis, every sample with its own filter tables."""
    n = len(data)
    if not n:
        return data
    layout = ctx.layout_of(data)
    shapes = data.shapes_array()
    ndim = shapes.shape[1]
    axes = resolve_axes(ndim, layout, args.const("axes"), args.const("axis_names"), op="tensor_resize")
    params = [tensor_resize_params(tuple(int(v) for v in shapes[i]), axes, a) for i, a in enumerate(args.samples())]
    lo = np.array([p[0] for p in params], np.float64).reshape(n, ndim)
    hi = np.array([p[1] for p in params], np.float64).reshape(n, ndim)
    out = np.array([p[2] for p in params], np.int64).reshape(n, ndim)
    interp = args.const("interp_type") or types.INTERP_LINEAR
    fmin = filter_id(args.const("min_filter") or interp)
    fmag = filter_id(args.const("mag_filter") or interp)
    dtype = args.const("dtype")
    out_dtype = data.dtype if dtype is None or dtype == types.NO_TYPE else types.to_torch_dtype(dtype)
    if out_dtype not in (data.dtype, torch.float32):
        raise ValueError(f"tensor_resize: output type must be the input's ({data.dtype}) or FLOAT, got {dtype}")
    padded, _ = data.padded(fill=None)
    x = padded.to(torch.float32)
    for d in range(ndim):
        if (out[:, d] == shapes[:, d]).all() and (lo[:, d] == 0).all() and (hi[:, d] == shapes[:, d]).all():
            continue  # untouched axis
        fids = np.where(np.abs(hi[:, d] - lo[:, d]) > out[:, d], fmin, fmag)
        index, weights = filter_tables_batch(lo[:, d], hi[:, d], shapes[:, d], out[:, d], fids,
                                             bool(args.const("antialias")))
        x = resample_axis_batch(x, d + 1, index, weights)
    return Batch.from_padded(cast_round(x, out_dtype), out, layout)

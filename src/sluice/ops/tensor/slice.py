"""``fn.slice``: extracts a region of every sample, on any axes of any layout, as DALI's ``fn.slice``.

The region comes either from two positional inputs, ``fn.slice(data, anchor, shape)`` (normalised to [0, 1] by
default: ``normalized_anchor`` / ``normalized_shape``; e.g. the anchor and shape outputs of
``fn.random_bbox_crop``), or from the arguments ``start`` / ``rel_start`` and ``end`` / ``rel_end`` /
``shape`` / ``rel_shape``. Values are given in the order of ``axis_names`` (default ``"WH"`` when the layout has W
and H) or ``axes`` (default ``[1, 0]``). Fractional coordinates are rounded to the nearest integer (halves away
from zero), the start and the end separately. Regions outside the sample raise (``out_of_bounds_policy="error"``),
are filled with ``fill_values`` (``"pad"``) or are cut at the border (``"trim_to_shape"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from sluice import types
from sluice.kernels.audio.batching import pad_stack
from sluice.ops.tensor._util import as_float_list, resolve_axes
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["filled", "slice_axes", "slice_bounds", "slice_sample"]

_POLICIES = ("error", "pad", "trim_to_shape")


def _llround(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def slice_axes(ndim: int, layout: str, axes: Sequence[int] | None, axis_names: str | None) -> list[int]:
    """The sliced axes, in the order in which anchor/shape values are given."""
    if axis_names:
        return resolve_axes(ndim, layout, None, axis_names, op="slice")
    if axes is not None and len(axes):
        return resolve_axes(ndim, layout, axes, None, op="slice")
    if layout and "W" in layout and "H" in layout:
        return [layout.index("W"), layout.index("H")]
    if ndim < 2:
        raise ValueError(f"slice: the default axes [1, 0] (x, y) need 2-D or larger data; this {ndim}-D input "
                         "needs axes= or axis_names=")
    return [1, 0]


def slice_bounds(shape: Sequence[int], axes: Sequence[int], *, anchor=None, sl_shape=None, normalized_anchor=True,
                 normalized_shape=True, start=None, rel_start=None, end=None, rel_end=None, shape_arg=None,
                 rel_shape=None) -> tuple[list[int], list[int]]:
    """Integer [start, end) of every axis of a sample of ``shape`` (unsliced axes: the whole extent).

    Example::

        slice_bounds((10, 20, 3), [1, 0], rel_start=[0.25, 0.5], rel_shape=[0.5, 0.5])   # ([5, 5, 0], [10, 15, 3])
    """
    n = len(axes)

    def vec(value, name, relative=True):
        # DALI holds relative coordinates as float32: rounding to float32 first makes halves round the same way.
        # Absolute coordinates stay exact (long audio has sample indices beyond float32's integers).
        v = [float(np.float32(x)) if relative else x for x in as_float_list(value)]
        if not v:
            return None
        if len(v) == 1 and n > 1:
            v = v * n
        if len(v) != n:
            raise ValueError(f"slice: {name} has {len(v)} values for {n} sliced axes {list(axes)}")
        return v

    if (start is not None) + (rel_start is not None) + (anchor is not None) > 1:
        raise ValueError("slice: give only one of the anchor input, start and rel_start")
    if (end is not None) + (rel_end is not None) + (shape_arg is not None) + (rel_shape is not None) + \
            (sl_shape is not None) > 1:
        raise ValueError("slice: give only one of the shape input, end, rel_end, shape and rel_shape")
    ext = [float(shape[a]) for a in axes]
    rel = None  # the relative start, when the start is relative
    if anchor is not None:
        a = vec(anchor, "anchor", normalized_anchor)
        rel = a if normalized_anchor else None
        st = [x * e for x, e in zip(a, ext)] if normalized_anchor else a
    elif rel_start is not None:
        rel = vec(rel_start, "rel_start")
        st = [x * e for x, e in zip(rel, ext)]
    elif start is not None:
        st = vec(start, "start", False)
    else:
        st = [0.0] * n
        rel = [0.0] * n
    rel_extent = vec(sl_shape, "shape input") if sl_shape is not None and normalized_shape else \
        vec(rel_shape, "rel_shape") if rel_shape is not None else None
    if rel is not None and rel_extent is not None:
        # Both relative: add before scaling, as DALI does, so that the end rounds the same way.
        en = [(r + x) * e for r, x, e in zip(rel, rel_extent, ext)]
    elif sl_shape is not None:
        s = vec(sl_shape, "shape input", normalized_shape)
        en = [p + (x * e if normalized_shape else x) for p, x, e in zip(st, s, ext)]
    elif rel_shape is not None:
        en = [p + x * e for p, x, e in zip(st, vec(rel_shape, "rel_shape"), ext)]
    elif shape_arg is not None:
        en = [p + x for p, x in zip(st, vec(shape_arg, "shape", False))]
    elif rel_end is not None:
        en = [x * e for x, e in zip(vec(rel_end, "rel_end"), ext)]
    elif end is not None:
        en = vec(end, "end", False)
    else:
        en = ext
    lo = [0] * len(shape)
    hi = list(shape)
    for k, ax in enumerate(axes):
        lo[ax] = _llround(st[k])
        hi[ax] = _llround(en[k])
        if hi[ax] < lo[ax]:
            raise ValueError(f"slice: the region on axis {ax} ends ({hi[ax]}) before it starts ({lo[ax]})")
    return lo, hi


def filled(shape: Sequence[int], fill_values: Sequence[float], dtype: torch.dtype, device: torch.device,
           channel_axis: int = -1) -> torch.Tensor:
    """A tensor of ``shape`` holding the padding: one value, or one per channel along ``channel_axis``."""
    fills = list(fill_values) or [0.0]
    if len(fills) == 1:
        return torch.full(tuple(shape), fills[0], dtype=dtype, device=device)
    ch = channel_axis % len(shape)
    if shape[ch] != len(fills):
        raise ValueError(f"slice: {len(fills)} fill_values for {shape[ch]} channels (axis {ch})")
    view = [1] * len(shape)
    view[ch] = len(fills)
    return torch.tensor(fills, dtype=dtype).reshape(view).to(device).expand(tuple(shape)).clone()


def slice_sample(x: torch.Tensor, lo: Sequence[int], hi: Sequence[int], policy: str = "error",
                 fill_values: Sequence[float] = (0.0,), channel_axis: int = -1,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """Cut [lo, hi) out of ``x`` (any device) following ``policy``. ``fill_values``: one value, or one per
    channel along ``channel_axis`` for padding. ``out``: a destination of the region's shape already holding the
    padding (e.g. a row of a dense batch); the region is written into it."""
    if policy not in _POLICIES:
        raise ValueError(f"slice: invalid out_of_bounds_policy ({policy!r}). Supported values are "
                         f"{', '.join(repr(p) for p in _POLICIES)}.")
    shape = list(x.shape)
    outside = any(lo[a] < 0 or hi[a] > shape[a] for a in range(x.dim()))
    if outside and policy == "error":
        raise ValueError(f"slice: region [{list(lo)}, {list(hi)}) is outside the sample of shape {tuple(shape)}; "
                         "use out_of_bounds_policy='pad' or 'trim_to_shape'")
    if policy == "trim_to_shape" or not outside:
        lo2 = [min(max(lo[a], 0), shape[a]) for a in range(x.dim())]
        hi2 = [min(max(hi[a], lo2[a]), shape[a]) for a in range(x.dim())]
        region = x[tuple(slice(a, b) for a, b in zip(lo2, hi2))]
        return region.clone() if out is None else out.copy_(region)
    if out is None:
        out = filled([hi[a] - lo[a] for a in range(x.dim())], fill_values, x.dtype, x.device, channel_axis)
    src, dst = [], []
    for a in range(x.dim()):
        s0, s1 = max(lo[a], 0), min(hi[a], shape[a])
        if s1 <= s0:
            return out
        src.append(slice(s0, s1))
        dst.append(slice(s0 - lo[a], s1 - lo[a]))
    out[tuple(dst)] = x[tuple(src)]
    return out


SCHEMA = OpSchema(
    "slice",
    doc="""Extracts a region of each sample, given by ``anchor``/``shape`` inputs or by start/end/shape arguments.

    ``fn.slice(data, anchor, shape)`` takes normalised coordinates by default (``normalized_anchor``,
    ``normalized_shape``), in the order of ``axis_names`` (default ``"WH"``) or ``axes`` (default ``[1, 0]``).
    With arguments: ``start`` or ``rel_start``, and ``end``, ``rel_end``, ``shape`` or ``rel_shape``.
    Example::

        crop = fn.slice(images, anchor, shape)                               # from fn.random_bbox_crop
        clip = fn.slice(audio, start=[1000], shape=[16000], axes=[0], out_of_bounds_policy="pad")
        band = fn.slice(spectrogram, rel_start=[0.1], rel_end=[0.9], axis_names="t")
    """,
    inputs=(1, 3),
    input_names=("data", "anchor", "slice_shape"),
    devices=("cpu", "gpu"),
    args=[
        Arg("axes", "int_list", None, "Axes of the anchor/shape values (default [1, 0], i.e. x then y)."),
        Arg("axis_names", str, None, "Layout letters of the anchor/shape values (default \"WH\" when the layout "
            "has W and H); wins over axes."),
        Arg("normalized_anchor", bool, True, "The anchor input is in [0, 1] units of the extent."),
        Arg("normalized_shape", bool, True, "The shape input is in [0, 1] units of the extent."),
        Arg("start", "float_list", None, "Absolute start coordinates.", per_sample=True),
        Arg("rel_start", "float_list", None, "Relative start coordinates (fractions of the extent).",
            per_sample=True),
        Arg("end", "float_list", None, "Absolute end coordinates (exclusive).", per_sample=True),
        Arg("rel_end", "float_list", None, "Relative end coordinates.", per_sample=True),
        Arg("shape", "float_list", None, "Absolute extents of the region.", per_sample=True),
        Arg("rel_shape", "float_list", None, "Relative extents of the region.", per_sample=True),
        Arg("out_of_bounds_policy", str, "error", "What to do with regions outside the sample.",
            choices=_POLICIES),
        Arg("fill_values", "float_list", [0.0], "Padding value(s): one, or one per channel."),
        Arg("dtype", types.DALIDataType, None, "Output type; None keeps the input type."),
    ],
)


def _bounds(x: torch.Tensor, layout: str, anchor, sl_shape, a: dict) -> tuple[list[int], list[int]]:
    if (anchor is None) != (sl_shape is None):
        raise ValueError("slice: give both the anchor and the shape inputs, or neither")
    axes = slice_axes(x.dim(), layout, a["axes"], a["axis_names"])
    return slice_bounds(tuple(x.shape), axes, anchor=anchor, sl_shape=sl_shape,
                        normalized_anchor=a["normalized_anchor"], normalized_shape=a["normalized_shape"],
                        start=a["start"], rel_start=a["rel_start"], end=a["end"], rel_end=a["rel_end"],
                        shape_arg=a["shape"], rel_shape=a["rel_shape"])


def _cast(out: torch.Tensor, dtype) -> torch.Tensor:
    return out if dtype is None or dtype == types.NO_TYPE else out.to(types.to_torch_dtype(dtype))


def _slice_one(x: torch.Tensor, layout: str, anchor, sl_shape, a: dict) -> torch.Tensor:
    lo, hi = _bounds(x, layout, anchor, sl_shape, a)
    ch = layout.index("C") if layout and "C" in layout else -1
    return _cast(slice_sample(x, lo, hi, a["out_of_bounds_policy"], a["fill_values"] or [0.0], ch), a["dtype"])


@SCHEMA.sample_kernel("cpu")
def slice_cpu(ctx, data, anchor=None, sl_shape=None, **args):
    return _slice_one(data, ctx.layout, anchor, sl_shape, args)


@SCHEMA.batch_kernel("gpu")
def slice_gpu(ctx, data: Batch, anchor: Batch | None = None, sl_shape: Batch | None = None, *, args) -> Batch:
    """A dense batch cut at the same place in every sample is one strided copy; otherwise each sample is cut on
    its own (a view, made contiguous by one small copy). Anchor and shape inputs are read on the host."""
    n = len(data)
    anchors = _to_host(anchor) if anchor is not None else [None] * n
    shapes = _to_host(sl_shape) if sl_shape is not None else [None] * n
    if not n:
        return Batch([], data.layout())
    layout = data.layout()
    if anchor is None and sl_shape is None and all(args.is_const(k) for k in args.names()):
        # one set of arguments: the bounds are worked out once per distinct sample shape
        a, by_shape = args.sample(0), {}
        bounds = [by_shape[x.shape] if x.shape in by_shape else
                  by_shape.setdefault(x.shape, _bounds(x, layout, None, None, a)) for x in data]
    else:
        bounds = [_bounds(x, layout, anchors[i], shapes[i], args.sample(i)) for i, x in enumerate(data)]
    dtype, policy = args.const("dtype"), args.const("out_of_bounds_policy")
    lo, hi = bounds[0]
    if data.dense is not None and all(b == bounds[0] for b in bounds) and \
            all(0 <= a <= b <= e for a, b, e in zip(lo, hi, data[0].shape)):
        cut = data.dense[(slice(None), *(slice(a, b) for a, b in zip(lo, hi)))].contiguous()
        return Batch.from_dense(_cast(cut, dtype), layout)
    ch = layout.index("C") if layout and "C" in layout else -1
    fills = args.const("fill_values") or [0.0]
    extents = {tuple(h - a for a, h in zip(*b)) for b in bounds}
    if policy != "trim_to_shape" and len(extents) == 1 and len({x.dim() for x in data}) == 1:
        extent = extents.pop()
        padded = _padded_at_the_end(data, bounds, extent, policy, fills)
        if padded is not None:
            return Batch.from_dense(_cast(padded, dtype), layout)
        # Equal output shapes (e.g. audio padded or cut to one length): fill one dense tensor, copy each region.
        out = filled((n, *extent), fills, data[0].dtype, data[0].device, ch if ch < 0 else ch + 1)
        for i, x in enumerate(data):
            slice_sample(x, *bounds[i], policy, fills, ch, out=out[i])
        return Batch.from_dense(_cast(out, dtype), layout)
    out = [_cast(slice_sample(x, *bounds[i], policy, fills, ch), dtype) for i, x in enumerate(data)]
    return Batch(out, layout)


def _padded_at_the_end(data: Batch, bounds: list, extent: tuple, policy: str, fills: list) -> torch.Tensor | None:
    """The usual audio case in one call: every region starts inside its sample on the first axis and at 0 on the
    others, and only runs past the sample's end on the first axis (``start=[0], shape=[N]`` with "pad"): the regions
    are views, stacked and padded with one fill value by :func:`~sluice.kernels.audio.batching.pad_stack` (one
    call), then padded to ``extent``. None when the batch is not like that."""
    if len(fills) != 1:
        return None
    views = []
    for x, (lo, hi) in zip(data, bounds):
        if x.dim() == 0 or lo[0] < 0 or any(lo[a] != 0 or hi[a] != x.shape[a] for a in range(1, x.dim())):
            return None
        if hi[0] > x.shape[0] and policy == "error":
            return None  # slice_sample raises, naming the region
        views.append(x[lo[0]:min(hi[0], x.shape[0])])
    out, _ = pad_stack(views, float(fills[0]))
    if out.shape[1] < extent[0]:  # every region runs past its sample's end
        out = torch.cat([out, out.new_full((out.shape[0], extent[0] - out.shape[1], *out.shape[2:]),
                                           float(fills[0]))], dim=1)
    return out


def _to_host(batch: Batch) -> list[torch.Tensor]:
    """The samples of a small batch (anchors, shapes) on the host, in one copy."""
    flat = [t.reshape(-1).double() for t in batch.samples]
    if not flat:
        return []
    return list(torch.cat(flat).cpu().split([t.numel() for t in flat]))

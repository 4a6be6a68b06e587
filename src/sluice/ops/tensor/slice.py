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

from collections.abc import Sequence

import numpy as np
import torch

from sluice import types
from sluice.errors import SampleError
from sluice.ops._host import batch_buffer
from sluice.ops.tensor._util import as_float_list, resolve_axes
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import share_range
from sluice.schema import Arg, OpSchema

__all__ = ["coordinate_rows", "filled", "slice_axes", "slice_bounds", "slice_bounds_batch", "slice_sample"]

_POLICIES = ("error", "pad", "trim_to_shape")


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """Round to the nearest integer, halves away from zero (C's llround), as int64."""
    return np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5)).astype(np.int64)


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


def _per_sample(values, n: int, k: int, name: str, relative: bool) -> np.ndarray | None:
    """One argument's values for ``n`` samples as an ``(n, k)`` float64 array (one value stands for every axis);
    None when not given. ``values``: one entry per sample (a number, a list or an array; None: not given) or an
    ``(n, k)`` / ``(n,)`` array. DALI holds relative coordinates as float32: rounding them to float32 first makes
    halves round the same way; absolute coordinates stay exact (long audio has sample indices beyond float32's
    integers)."""
    if values is None:
        return None
    if isinstance(values, np.ndarray) and values.dtype != object:
        rows = values.reshape(n, -1).astype(np.float64)
    else:
        lists = [as_float_list(v) for v in values]
        if all(not v for v in lists):
            return None
        if any(not v for v in lists):
            raise ValueError(f"slice: {name} is given for some samples and not for others")
        lists = [v * k if len(v) == 1 else v for v in lists]
        bad = next((len(v) for v in lists if len(v) != k), None)
        if bad is not None:
            raise ValueError(f"slice: {name} has {bad} values for {k} sliced axes")
        rows = np.array(lists, dtype=np.float64).reshape(n, k)
    if rows.shape[1] == 1 and k > 1:
        rows = np.repeat(rows, k, axis=1)
    if rows.shape[1] != k:
        raise ValueError(f"slice: {name} has {rows.shape[1]} values for {k} sliced axes")
    return rows.astype(np.float32).astype(np.float64) if relative else rows


def slice_bounds_batch(shapes: np.ndarray, axes: Sequence[int], *, anchor=None, sl_shape=None,
                       normalized_anchor=True, normalized_shape=True, start=None, rel_start=None, end=None,
                       rel_end=None, shape_arg=None, rel_shape=None) -> tuple[np.ndarray, np.ndarray]:
    """Integer [start, end) of every axis of every sample (``shapes``: ``(n, ndim)``), as two ``(n, ndim)`` int64
    arrays (unsliced axes: the whole extent). Each coordinate argument is None or one entry per sample (see
    :func:`_per_sample`). The anchor and shape inputs are normalised (fractions of the extent) when
    ``normalized_anchor`` / ``normalized_shape``; pass False for integer inputs, which DALI takes as absolute
    whatever the flags say. Fractional coordinates round to the nearest integer, halves away from zero, the start
    and the end separately; when both start and extent are relative they are added before scaling, as DALI does."""
    shapes = np.asarray(shapes, dtype=np.int64)
    n, k = len(shapes), len(axes)
    if (start is not None) + (rel_start is not None) + (anchor is not None) > 1:
        raise ValueError("slice: give only one of the anchor input, start and rel_start")
    if (end is not None) + (rel_end is not None) + (shape_arg is not None) + (rel_shape is not None) + \
            (sl_shape is not None) > 1:
        raise ValueError("slice: give only one of the shape input, end, rel_end, shape and rel_shape")
    ext = shapes[:, list(axes)].astype(np.float64)
    rel = None  # the relative start, when the start is relative
    if anchor is not None:
        a = _per_sample(anchor, n, k, "anchor", normalized_anchor)
        rel = a if normalized_anchor else None
        st = a * ext if normalized_anchor else a
    elif rel_start is not None:
        rel = _per_sample(rel_start, n, k, "rel_start", True)
        st = rel * ext
    elif start is not None:
        st = _per_sample(start, n, k, "start", False)
    else:
        st = np.zeros((n, k))
        rel = st
    rel_extent = _per_sample(sl_shape, n, k, "shape input", True) if sl_shape is not None and normalized_shape \
        else _per_sample(rel_shape, n, k, "rel_shape", True) if rel_shape is not None else None
    if rel is not None and rel_extent is not None:
        en = (rel + rel_extent) * ext
    elif sl_shape is not None:
        s = _per_sample(sl_shape, n, k, "shape input", normalized_shape)
        en = st + (s * ext if normalized_shape else s)
    elif rel_shape is not None:
        en = st + _per_sample(rel_shape, n, k, "rel_shape", True) * ext
    elif shape_arg is not None:
        en = st + _per_sample(shape_arg, n, k, "shape", False)
    elif rel_end is not None:
        en = _per_sample(rel_end, n, k, "rel_end", True) * ext
    elif end is not None:
        en = _per_sample(end, n, k, "end", False)
    else:
        en = ext
    lo, hi = np.zeros_like(shapes), shapes.copy()
    lo[:, list(axes)] = _round_half_away(st)
    hi[:, list(axes)] = _round_half_away(en)
    backwards = np.argwhere(hi < lo)
    if len(backwards):
        i, ax = (int(v) for v in backwards[0])
        raise SampleError(i, "", ValueError(f"slice: the region on axis {ax} ends ({hi[i, ax]}) before it starts "
                                            f"({lo[i, ax]})"))
    return lo, hi


def slice_bounds(shape: Sequence[int], axes: Sequence[int], *, anchor=None, sl_shape=None, normalized_anchor=True,
                 normalized_shape=True, start=None, rel_start=None, end=None, rel_end=None, shape_arg=None,
                 rel_shape=None) -> tuple[list[int], list[int]]:
    """Integer [start, end) of every axis of one sample of ``shape`` (:func:`slice_bounds_batch` for one sample).

    Example::

        slice_bounds((10, 20, 3), [1, 0], rel_start=[0.25, 0.5], rel_shape=[0.5, 0.5])   # ([5, 5, 0], [10, 15, 3])
    """
    def one(v):
        return None if v is None else [v]

    try:
        lo, hi = slice_bounds_batch(np.array([tuple(shape)], np.int64).reshape(1, len(shape)), axes,
                                    anchor=one(anchor), sl_shape=one(sl_shape), normalized_anchor=normalized_anchor,
                                    normalized_shape=normalized_shape, start=one(start), rel_start=one(rel_start),
                                    end=one(end), rel_end=one(rel_end), shape_arg=one(shape_arg),
                                    rel_shape=one(rel_shape))
    except SampleError as e:
        raise e.cause from None
    return lo[0].tolist(), hi[0].tolist()


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


def coordinate_rows(batch: Batch | None) -> tuple[np.ndarray | None, bool]:
    """An anchor or shape input as an ``(n, k)`` float64 array on the host (one copy), and whether it is of an
    integer type (DALI takes integer coordinates as absolute, whatever ``normalized_*`` say)."""
    if batch is None:
        return None, False
    if not len(batch):
        return np.zeros((0, 0)), False
    host = batch.as_cpu()
    if host.dense is not None:      # one value (or one row) per sample, the usual case: no per-sample work
        dense = host.dense
        return dense.reshape(len(host), -1).numpy().astype(np.float64), not dense.dtype.is_floating_point
    flat, shapes, offsets = host.packed_form()
    sizes = ragged.sample_sizes(shapes)
    if (sizes != sizes[0]).any():
        raise ValueError(f"slice: the anchor and shape inputs need the same number of values for every sample, got "
                         f"{sorted(set(sizes.tolist()))}")
    values = flat.numpy()
    rows = np.stack([values[o: o + sizes[0]] for o in offsets.tolist()]) if len(offsets) else values.reshape(0, 0)
    return rows.astype(np.float64), not flat.dtype.is_floating_point


def _const_rows(value, n: int) -> np.ndarray | None:
    """A coordinate argument given once for the batch as the ``(n, k)`` rows :func:`_per_sample` takes (None when
    not given): read once, not once per sample."""
    row = as_float_list(value)
    return np.broadcast_to(np.array(row, dtype=np.float64), (n, len(row))) if row else None


def slice_plan(data: Batch, anchor: Batch | None, sl_shape: Batch | None, args) -> tuple[np.ndarray, np.ndarray,
                                                                                          np.ndarray]:
    """The region of every sample, worked out for the whole batch at once: ``(lo, hi, outside)``, ``(n, ndim)``
    int64 bounds (after ``out_of_bounds_policy``: trimmed, or checked, raising naming the sample) and whether each
    region reaches outside its sample (to be padded)."""
    if (anchor is None) != (sl_shape is None):
        raise ValueError("slice: give both the anchor and the shape inputs, or neither")
    shapes = data.shapes_array()
    axes = slice_axes(shapes.shape[1], data.layout(), args.const("axes"), args.const("axis_names"))
    anc, anc_integer = coordinate_rows(anchor)
    extent, extent_integer = coordinate_rows(sl_shape)
    names = ("start", "rel_start", "end", "rel_end", "shape", "rel_shape")
    given = {k: _const_rows(args.const(k), len(shapes)) if args.is_const(k) else args[k] for k in names}
    try:
        lo, hi = slice_bounds_batch(shapes, axes, anchor=anc, sl_shape=extent,
                                    normalized_anchor=args.const("normalized_anchor") and not anc_integer,
                                    normalized_shape=args.const("normalized_shape") and not extent_integer,
                                    start=given["start"], rel_start=given["rel_start"], end=given["end"],
                                    rel_end=given["rel_end"], shape_arg=given["shape"], rel_shape=given["rel_shape"])
    except SampleError as e:
        raise SampleError(e.index, data.source_info[e.index], e.cause) from e.cause
    policy = args.const("out_of_bounds_policy")
    if policy not in _POLICIES:
        raise ValueError(f"slice: invalid out_of_bounds_policy ({policy!r}). Supported values are "
                         f"{', '.join(repr(p) for p in _POLICIES)}.")
    outside = ((lo < 0) | (hi > shapes)).any(axis=1)
    if policy == "trim_to_shape":
        lo = np.clip(lo, 0, shapes)
        hi = np.clip(hi, lo, shapes)
        outside[:] = False
    elif policy == "error" and outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise SampleError(i, data.source_info[i], ValueError(
            f"slice: region [{lo[i].tolist()}, {hi[i].tolist()}) is outside the sample of shape "
            f"{tuple(shapes[i].tolist())}; use out_of_bounds_policy='pad' or 'trim_to_shape'"))
    return lo, hi, outside


def _cast(out: torch.Tensor, dtype) -> torch.Tensor:
    return out if dtype is None or dtype == types.NO_TYPE else out.to(types.to_torch_dtype(dtype))


def _views(data: Batch, lo: np.ndarray, hi: np.ndarray, outside: np.ndarray, dtype) -> Batch | None:
    """The regions as views of the input's buffer, without copying anything, when each is one run of it: cut on
    the first axis only, inside the sample, keeping the type (audio cut to its speech, rows of images). None
    otherwise, or for a padded input (its rows are not runs)."""
    shapes = data.shapes_array()
    if data.storage == "padded":
        return None
    if outside.any() or shapes.shape[1] == 0 or (dtype is not None and dtype != types.NO_TYPE and
                                                 types.to_torch_dtype(dtype) != data.dtype):
        return None
    if not ((lo[:, 1:] == 0).all() and (hi[:, 1:] == shapes[:, 1:]).all()):
        return None
    flat, _, offsets = data.packed_form()
    row = ragged.sample_sizes(shapes[:, 1:])
    return Batch.from_packed(flat, hi - lo, data.layout(), data.source_info, offsets + lo[:, 0] * row)


def _fill_tensor(fills: Sequence[float], ndim: int, channel_axis: int, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """The padding value(s) broadcastable over an ``(n, *extent)`` padded batch: one value, or one per channel."""
    fills = list(fills) or [0.0]
    if len(fills) == 1:
        return torch.full((), fills[0], dtype=dtype, device=device)
    view = [1] * (ndim + 1)
    view[(channel_axis % ndim) + 1] = len(fills)
    return ragged.host_to_device(np.asarray(fills, np.float64), device).to(dtype).view(view)


def gather_regions(src: torch.Tensor, shapes: np.ndarray, lo: np.ndarray, out_shapes: np.ndarray,
                   outside: np.ndarray, fills: Sequence[float], channel_axis: int = -1) -> torch.Tensor:
    """Every sample's region ``[lo, lo + out_shape)`` of a padded batch ``src`` (sample ``i`` of ``shapes[i]`` in
    row ``i``) as a padded batch of ``out_shapes``, in one gather; elements outside their sample get ``fills``.
    Any device."""
    n, ndim = shapes.shape
    dev = src.device
    extent = ragged.largest(out_shapes)
    if (lo == lo[0]).all() and not outside.any() and all(int(lo[0, k]) + extent[k] <= src.shape[k + 1]
                                                         for k in range(ndim)):
        # one region for every sample (audio cut to one length, a fixed crop): a view, no copy
        return src[(slice(None),) + tuple(slice(int(lo[0, k]), int(lo[0, k]) + extent[k]) for k in range(ndim))]
    if src.numel() == 0 or n == 0:
        return _fill_tensor(fills, ndim, channel_axis, src.dtype, dev).expand((n, *extent)).clone()
    if (lo == lo[0]).all():
        # one start for every sample (audio padded or cut to one length from its start): the padded form cut (and
        # grown with zeros) to the region, and what lies outside each sample filled, in a few launches
        start = [int(v) for v in lo[0]]
        cut = src[(slice(None),) + tuple(slice(max(0, a), max(0, a) + e) for a, e in zip(start, extent))]
        grow = []
        for k in reversed(range(ndim)):
            before = max(0, -start[k])
            grow += [before, extent[k] - before - cut.shape[k + 1]]
        if any(grow):
            cut = torch.nn.functional.pad(cut, grow)
        if not outside.any():
            return cut
        # inside a sample: before its end (per sample) and, where the start is negative, at or after its 0
        inside = ragged.valid_mask(np.clip(shapes - lo, 0, None), extent, dev)
        if (lo[0] < 0).any():
            inside = inside & _after_start(lo[0], extent, dev)
        return torch.where(inside, cut, _fill_tensor(fills, ndim, channel_axis, src.dtype, dev))
    table = ragged.host_to_device(np.concatenate([lo, shapes], axis=1), dev)
    col = (n,) + (1,) * ndim
    index: list[torch.Tensor] = [torch.arange(n, device=dev).view(col)]
    inside = None
    for k in range(ndim):
        view = [1] * (ndim + 1)
        view[k + 1] = extent[k]
        pos = torch.arange(extent[k], device=dev).view(view) + table[:, k].view(col)
        if outside.any():
            ok = (pos >= 0) & (pos < table[:, ndim + k].view(col))
            inside = ok if inside is None else inside & ok
        index.append(pos.clamp(0, src.shape[k + 1] - 1))
    out = src[tuple(index)]
    if inside is not None:
        out = torch.where(inside, out, _fill_tensor(fills, ndim, channel_axis, src.dtype, dev))
    return out


def _after_start(start: np.ndarray, extent: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """True where a region that starts at ``start`` (negative on some axes) lies at or after each axis's 0."""
    ndim = len(extent)
    mask = torch.ones((1,) + (1,) * ndim, dtype=torch.bool, device=device)
    for k in range(ndim):
        if start[k] < 0:
            view = [1] * (ndim + 1)
            view[k + 1] = extent[k]
            mask = mask & (torch.arange(extent[k], device=device).view(view) >= -int(start[k]))
    return mask


def _channel_axis(layout: str) -> int:
    return layout.index("C") if layout and "C" in layout else -1


def _plan_or_views(data: Batch, anchor, sl_shape, args) -> tuple[Batch | None, np.ndarray, np.ndarray, np.ndarray]:
    """Both kernels' first step: the plan, and the output already made when the regions are views (or none)."""
    if not len(data):
        return Batch([], data.layout()), None, None, None
    lo, hi, outside = slice_plan(data, anchor, sl_shape, args)
    return _views(data, lo, hi, outside, args.const("dtype")), lo, hi, outside


@SCHEMA.batch_kernel("cpu")
def slice_cpu(ctx, data: Batch, anchor: Batch | None = None, sl_shape: Batch | None = None, *, args) -> Batch:
    """The regions of the whole batch from one plan (:func:`slice_plan`): views of the input's buffer where they
    can be (audio cut on its time axis), else copied sample by sample into one packed buffer by the pipeline's
    threads (torch copies, the GIL released)."""
    done, lo, hi, outside = _plan_or_views(data, anchor, sl_shape, args)
    if done is not None:
        return done
    dtype = args.const("dtype")
    out_shapes = hi - lo
    sizes = ragged.sample_sizes(out_shapes)
    offsets = ragged.packed_offsets(out_shapes)
    # one buffer for the batch: page-locked when a GPU operator takes it (its copy is then one DMA, no staging
    # copy), else a reused block (no page faults on first touch each batch)
    flat = batch_buffer(int(sizes.sum()) * data.dtype.itemsize, ctx is not None and ctx.pin_outputs,
                        ctx.device_id if ctx is not None else None).view(data.dtype)
    policy, ch = args.const("out_of_bounds_policy"), _channel_axis(data.layout())
    fills = args.const("fill_values") or [0.0]
    samples = data.samples

    def cut(first: int, last: int) -> None:
        for i in range(first, last):
            out = flat[offsets[i]: offsets[i] + sizes[i]].view(tuple(out_shapes[i].tolist()))
            if outside[i]:
                out.copy_(filled(out.shape, fills, out.dtype, out.device, ch))
            slice_sample(samples[i], lo[i].tolist(), hi[i].tolist(), policy, fills, ch, out=out)

    share_range(ctx.thread_pool if ctx is not None else None, len(data), cut)
    return Batch.from_packed(_cast(flat, dtype), out_shapes, data.layout(), data.source_info)


@SCHEMA.batch_kernel("gpu")
def slice_gpu(ctx, data: Batch, anchor: Batch | None = None, sl_shape: Batch | None = None, *, args) -> Batch:
    """The regions of the whole batch from one plan (:func:`slice_plan`): views of a packed input's buffer where
    they can be, else one gather over the batch's padded form (:func:`gather_regions`), padding included."""
    done, lo, hi, outside = _plan_or_views(data, anchor, sl_shape, args)
    if done is not None:
        return done
    dtype = args.const("dtype")
    src, shapes = data.padded(fill=None)
    out_shapes = hi - lo
    out = gather_regions(src, shapes, lo, out_shapes, outside, args.const("fill_values") or [0.0],
                         _channel_axis(data.layout()))
    return Batch.from_padded(_cast(out, dtype), out_shapes, data.layout(), data.source_info)

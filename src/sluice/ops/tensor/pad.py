"""``fn.pad``: pads samples at the end of the chosen axes, as DALI's ``fn.pad``.

Per padded axis the output extent is the largest extent in the batch or, where ``shape`` gives a positive value,
that value; a sample longer than either keeps its own extent (padding never crops). The extent is then rounded up
to a multiple of ``align``. ``shape``, ``align`` and ``fill_value`` may vary per sample. Axes come from ``axes``
or ``axis_names`` (all axes by default), so the same operator pads images (``axis_names="HW"``), spectrograms
(``"t"`` of ``"ft"`` or ``"tf"``) and 1-D audio (``axes=[0]``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sluice.ops.tensor._util import as_float_list, resolve_axes
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["pad_shapes", "pad_samples"]


def _per_axis(values, n: int, name: str, default: int) -> list[int]:
    values = [int(v) for v in as_float_list(values)]
    if not values:
        return [default] * n
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise ValueError(f"pad: {name} has {len(values)} values for {n} padded axes; give 1 or {n}")
    return values


def pad_shapes(shapes: Sequence[Sequence[int]], axes: Sequence[int], shape=None, align=None,
               per_sample: bool = False) -> list[tuple[int, ...]]:
    """The output shape of every sample. ``shape`` / ``align``: one value or one per padded axis for the whole
    batch, or (``per_sample=True``) lists with one such entry per sample.

    Example::

        pad_shapes([(2, 5), (3, 4)], axes=[1], align=[4])    # [(2, 8), (3, 8)]
        pad_shapes([(5,), (9,)], axes=[0], shape=[7])        # [(7,), (9,)]: the longer sample is not cropped
    """
    n = len(shapes)
    if not n:
        return []
    table = np.asarray(shapes, dtype=np.int64).reshape(n, -1)
    if per_sample:
        targets = np.array([_per_axis(v, len(axes), "shape", -1) for v in (shape or [None] * n)], np.int64)
        aligns = np.array([_per_axis(v, len(axes), "align", 1) for v in (align or [None] * n)], np.int64)
    else:   # one target for the batch: worked out once
        targets = np.array([_per_axis(shape, len(axes), "shape", -1)] * n, np.int64)
        aligns = np.array([_per_axis(align, len(axes), "align", 1)] * n, np.int64)
    if (aligns < 1).any():
        raise ValueError(f"pad: align values must be positive, got {aligns[np.argmax((aligns < 1).any(axis=1))].tolist()}")
    out = table.copy()
    for k, ax in enumerate(axes):
        want = np.maximum(np.where(targets[:, k] > 0, targets[:, k], table[:, ax].max()), table[:, ax])
        out[:, ax] = -(-want // aligns[:, k]) * aligns[:, k]
    return [tuple(row) for row in out.tolist()]


def pad_samples(samples: Sequence[torch.Tensor], out_shapes: Sequence[Sequence[int]],
                fill_value: float | Sequence[float] = 0.0, layout: str = "",
                dense: torch.Tensor | None = None) -> Batch:
    """Copy each sample into the leading corner of a ``fill_value`` tensor of its output shape. Any device.
    ``fill_value``: one value, or one per sample. When all outputs share one shape the result is one dense tensor
    (one allocation); samples that need no padding are passed through. ``dense``: the input batch as one tensor,
    when it is one."""
    if not samples:
        return Batch([], layout)
    if all(tuple(s.shape) == tuple(o) for s, o in zip(samples, out_shapes)):
        return Batch.from_dense(dense, layout) if dense is not None else Batch(list(samples), layout)
    dtype, dev = samples[0].dtype, samples[0].device
    n = len(samples)
    fills = [as_float_list(v)[0] for v in fill_value] if isinstance(fill_value, (list, tuple)) \
        else [float(fill_value)] * n
    uniform = all(tuple(s) == tuple(out_shapes[0]) for s in out_shapes)
    if uniform:
        shape = (n, *out_shapes[0])
        if len(set(fills)) == 1:
            out = torch.full(shape, fills[0], dtype=dtype, device=dev)
        else:  # one fill value per sample, broadcast in one copy
            view = torch.tensor(fills, dtype=dtype).reshape(n, *([1] * len(out_shapes[0])))
            out = view.to(dev).expand(shape).clone()
        same_in = all(s.shape == samples[0].shape for s in samples)
        if same_in:  # one copy for the whole batch
            src = dense if dense is not None else torch.stack(list(samples))
            out[(slice(None), *(slice(0, d) for d in samples[0].shape))] = src
        else:
            for i, s in enumerate(samples):
                out[(i, *(slice(0, d) for d in s.shape))] = s
        return Batch.from_dense(out, layout)
    result = []
    for s, shp, fill in zip(samples, out_shapes, fills):
        o = torch.full(tuple(shp), fill, dtype=dtype, device=dev)
        o[tuple(slice(0, d) for d in s.shape)] = s
        result.append(o)
    return Batch(result, layout)


SCHEMA = OpSchema(
    "pad",
    doc="""Pads all samples with ``fill_value`` at the end of the chosen axes to a common (or given) extent.

    The extent of a padded axis is the largest in the batch, or ``shape`` where given (-1: batch maximum); a
    longer sample keeps its extent (no cropping). It is then rounded up to a multiple of ``align``. Unpadded axes
    keep their extents. ``shape``, ``align`` and ``fill_value`` may vary per sample. Example::

        spectrograms = fn.pad(spectrograms, axis_names="t", align=8)      # layout "ft"
        images = fn.pad(images, axis_names="HW", fill_value=0)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("axes", "int_list", None, "Indices of the padded axes (negative counts from the end); default all."),
        Arg("axis_names", str, None, "Layout letters of the padded axes, e.g. \"HW\" or \"t\"."),
        Arg("fill_value", float, 0.0, "Value of the padding.", per_sample=True),
        Arg("shape", "int_list", None, "Output extent of each padded axis; -1 uses the batch maximum; never "
            "smaller than the sample.", per_sample=True),
        Arg("align", "int_list", None, "Round each padded extent up to a multiple of this (one value or one per "
            "axis).", per_sample=True),
    ],
)


def _pad_batch(ctx, data: Batch, *, args) -> Batch:
    """The output extents are decided for the whole batch; with one fill value the batch's padded form, filled
    with it and grown where ``shape`` or ``align`` ask for more, is the output (one launch sequence, any spread of
    shapes); per-sample fill values copy each sample into its place."""
    if not len(data):
        return Batch([], data.layout())
    shapes = data.shapes_array()
    ndim = shapes.shape[1]
    axes = resolve_axes(ndim, data.layout(), args.const("axes"), args.const("axis_names"), op="pad")
    if args.is_const("shape") and args.is_const("align"):    # one target for the batch: worked out once
        out_shapes = pad_shapes(shapes.tolist(), axes, args.const("shape"), args.const("align"))
    else:
        out_shapes = pad_shapes(shapes.tolist(), axes, args["shape"], args["align"], per_sample=True)
    if not args.is_const("fill_value"):
        return pad_samples(list(data.samples), out_shapes, list(args["fill_value"]), data.layout(), data.dense)
    fill = float(args.const("fill_value"))
    out_shapes = np.array(out_shapes, np.int64).reshape(len(data), ndim)
    if (out_shapes == shapes).all():
        return data
    x, _ = data.padded(fill=fill)
    extent = ragged.largest(out_shapes)
    grow = [extent[k] - x.shape[k + 1] for k in range(ndim)]
    if any(grow):
        x = torch.nn.functional.pad(x, [p for g in reversed(grow) for p in (0, g)], value=fill)
    return Batch.from_padded(x, out_shapes, data.layout(), fill=fill)


# The whole batch decides the output extents, so both devices run per batch (the same torch code).
SCHEMA.batch_kernel("cpu")(_pad_batch)
SCHEMA.batch_kernel("gpu")(_pad_batch)

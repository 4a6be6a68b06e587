"""``fn.pad``: pads every sample at the end of the chosen axes to a common extent, as DALI does.

Per padded axis the output extent is the largest extent in the batch, or ``shape[i]`` when given (``-1`` keeps the
batch maximum), then rounded up to a multiple of ``align[i]``. Axes come from ``axes`` or ``axis_names`` (all axes
by default), so the same operator pads images (``axis_names="HW"``), spectrograms (``"t"`` of ``"ft"`` or ``"tf"``)
and 1-D audio (``axes=[0]``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sluice.ops.tensor._util import resolve_axes
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["pad_shapes", "pad_samples"]


def _per_axis(values: Sequence[int] | None, n: int, name: str, default: int) -> list[int]:
    if not values:
        return [default] * n
    values = [int(v) for v in values]
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise ValueError(f"pad: {name} has {len(values)} values for {n} padded axes; give 1 or {n}")
    return values


def pad_shapes(shapes: Sequence[Sequence[int]], axes: Sequence[int], shape: Sequence[int] | None = None,
               align: Sequence[int] | None = None) -> list[tuple[int, ...]]:
    """The output shape of every sample.

    Example::

        pad_shapes([(2, 5), (3, 4)], axes=[1], align=[4])    # [(2, 8), (3, 8)]
    """
    if not shapes:
        return []
    targets = _per_axis(shape, len(axes), "shape", -1)
    aligns = _per_axis(align, len(axes), "align", 1)
    if any(a < 1 for a in aligns):
        raise ValueError(f"pad: align values must be positive, got {list(align or [])}")
    extent = {}
    for k, ax in enumerate(axes):
        largest = max(s[ax] for s in shapes)
        want = targets[k] if targets[k] > 0 else largest
        if want < largest:
            raise ValueError(f"pad: shape[{k}]={want} for axis {ax} is smaller than the largest sample extent "
                             f"{largest}; pad never crops (use fn.slice or fn.crop first)")
        extent[ax] = -(-want // aligns[k]) * aligns[k]
    return [tuple(extent.get(a, s[a]) for a in range(len(s))) for s in shapes]


def pad_samples(samples: Sequence[torch.Tensor], out_shapes: Sequence[Sequence[int]],
                fill_value: float = 0.0, layout: str = "", dense: torch.Tensor | None = None) -> Batch:
    """Copy each sample into the leading corner of a ``fill_value`` tensor of its output shape. Any device.
    When all outputs share one shape the result is one dense tensor (one allocation); samples that need no
    padding are passed through. ``dense``: the input batch as one tensor, when it is one."""
    if not samples:
        return Batch([], layout)
    if all(tuple(s.shape) == tuple(o) for s, o in zip(samples, out_shapes)):
        return Batch.from_dense(dense, layout) if dense is not None else Batch(list(samples), layout)
    dtype, dev = samples[0].dtype, samples[0].device
    uniform = all(tuple(s) == tuple(out_shapes[0]) for s in out_shapes)
    if uniform:
        out = torch.full((len(samples), *out_shapes[0]), fill_value, dtype=dtype, device=dev)
        same_in = all(s.shape == samples[0].shape for s in samples)
        if same_in:  # one copy for the whole batch
            src = dense if dense is not None else torch.stack(list(samples))
            out[(slice(None), *(slice(0, d) for d in samples[0].shape))] = src
        else:
            for i, s in enumerate(samples):
                out[(i, *(slice(0, d) for d in s.shape))] = s
        return Batch.from_dense(out, layout)
    result = []
    for s, shp in zip(samples, out_shapes):
        o = torch.full(tuple(shp), fill_value, dtype=dtype, device=dev)
        o[tuple(slice(0, d) for d in s.shape)] = s
        result.append(o)
    return Batch(result, layout)


SCHEMA = OpSchema(
    "pad",
    doc="""Pads all samples with ``fill_value`` at the end of the chosen axes to a common (or given) extent.

    The extent of a padded axis is the largest in the batch, or ``shape`` where given (-1: batch maximum), rounded
    up to a multiple of ``align``. Unpadded axes keep their extents. Example::

        spectrograms = fn.pad(spectrograms, axis_names="t", align=8)      # layout "ft"
        images = fn.pad(images, axis_names="HW", fill_value=0)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("axes", "int_list", None, "Indices of the padded axes (negative counts from the end); default all."),
        Arg("axis_names", str, None, "Layout letters of the padded axes, e.g. \"HW\" or \"t\"."),
        Arg("fill_value", float, 0.0, "Value of the padding."),
        Arg("shape", "int_list", None, "Output extent of each padded axis; -1 uses the batch maximum."),
        Arg("align", "int_list", None, "Round each padded extent up to a multiple of this (one value or one per "
            "axis)."),
    ],
)


def _pad_batch(ctx, data: Batch, *, args) -> Batch:
    samples = list(data.samples)
    if not samples:
        return Batch([], data.layout())
    ndim = samples[0].dim()
    if any(s.dim() != ndim for s in samples):
        raise ValueError("pad: all samples must have the same number of dimensions")
    axes = resolve_axes(ndim, data.layout(), args.const("axes"), args.const("axis_names"), op="pad")
    shapes = pad_shapes([tuple(s.shape) for s in samples], axes, args.const("shape"), args.const("align"))
    return pad_samples(samples, shapes, args.const("fill_value"), data.layout(), data.dense)


# The whole batch decides the output extents, so both devices run per batch (the same torch code).
SCHEMA.batch_kernel("cpu")(_pad_batch)
SCHEMA.batch_kernel("gpu")(_pad_batch)

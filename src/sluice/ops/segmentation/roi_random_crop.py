"""``fn.roi_random_crop``: the start of a fixed-size crop window placed at random so that it holds as much of a
region of interest as it can, as DALI's operator.

Per axis, with ROI ``[s, e)`` and crop extent ``c``: the start is drawn uniformly (integers, inclusive) between
``s`` and ``e - c`` (in whichever order they come: a crop larger than the ROI contains it, a smaller one lies inside
it); with a known input shape (``in_shape``, or the shape of the input given) the range is also cut to
``[0, in_shape - c]``. An ROI of exactly the crop's extent gives its start. Output: int64, one value per axis.
Like DALI's, it runs on the CPU; the draws come from each sample's seeded generator.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "roi_crop_start"]

SCHEMA = OpSchema(
    "roi_random_crop",
    doc="""Produces the start of a fixed-shape crop window (``crop_shape``) placed at random so that as much of the
    region of interest (``roi_start`` with ``roi_end`` or ``roi_shape``) as possible lies in it; within the
    input's bounds when ``in_shape`` (or the input itself) is given.

    Example::

        anchor = fn.roi_random_crop(label, roi_start=roi_start, roi_end=roi_end, crop_shape=[64, 64, 64])
        image = fn.slice(image, anchor, [64, 64, 64], axis_names="DHW")
    """,
    inputs=(0, 1),
    input_names=("input",),
    devices=("cpu",),
    random=True,
    output_layout="",
    args=[
        Arg("crop_shape", "int_list", REQUIRED, "Extents of the crop window.", per_sample=True, min=0),
        Arg("roi_start", "int_list", REQUIRED, "Start of the region of interest.", per_sample=True),
        Arg("roi_end", "int_list", None, "End of the region of interest (excludes roi_shape).", per_sample=True),
        Arg("roi_shape", "int_list", None, "Extents of the region of interest (excludes roi_end).", per_sample=True),
        Arg("in_shape", "int_list", None, "Shape of the input the window must stay in (excludes an input).",
            per_sample=True, min=0),
    ],
)


def roi_crop_start(crop: np.ndarray, roi_start: np.ndarray, roi_end: np.ndarray, in_shape: np.ndarray | None,
                   rng: np.random.Generator) -> np.ndarray:
    """The crop start of one sample (arrays of one value per axis)."""
    out = np.empty(len(crop), np.int64)
    for d in range(len(crop)):
        if roi_end[d] - roi_start[d] == crop[d]:
            out[d] = roi_start[d]
            continue
        lo, hi = sorted((int(roi_start[d]), int(roi_end[d] - crop[d])))
        if in_shape is not None:
            lo, hi = max(0, lo), min(int(in_shape[d] - crop[d]), hi)
        out[d] = rng.integers(lo, hi + 1)
    return out


def _ints(value) -> np.ndarray | None:
    return None if value is None else np.asarray([round(v) for v in as_float_list(value)], np.int64)


@SCHEMA.batch_kernel("cpu")
def roi_random_crop(ctx: BatchContext, data: Batch | None = None, *, args: BatchArgs) -> Batch:
    has_end = any(v is not None for v in args["roi_end"])
    has_shape = any(v is not None for v in args["roi_shape"])
    if has_end == has_shape:
        raise ValueError("roi_random_crop: give either roi_end or roi_shape (exactly one of them)")
    has_in_shape = any(v is not None for v in args["in_shape"])
    if has_in_shape and data is not None:
        raise ValueError("roi_random_crop: in_shape is incompatible with giving the input")
    n = ctx.batch_size if data is None else len(data)
    shapes = data.shapes_array() if data is not None else None
    starts = np.zeros((n, 0), np.int64)
    rows = []
    for i in range(n):
        crop = _ints(args["crop_shape"][i])
        ndim = len(crop)
        start = _ints(args["roi_start"][i])
        end = _ints(args["roi_end"][i]) if has_end else start + _ints(args["roi_shape"][i])
        in_shape = shapes[i] if shapes is not None else (_ints(args["in_shape"][i]) if has_in_shape else None)
        for name, v in (("roi_start", start), ("roi_end" if has_end else "roi_shape", end),
                        ("in_shape", in_shape)):
            if v is not None and len(v) != ndim:
                raise ValueError(f"roi_random_crop: {name} of sample {i} has {len(v)} values but crop_shape {ndim}")
        if in_shape is not None:
            if (crop > in_shape).any():
                raise ValueError(f"roi_random_crop: crop_shape {crop.tolist()} is larger than the input shape "
                                 f"{in_shape.tolist()} of sample {i}")
            if (start < 0).any() or (end > in_shape).any():
                raise ValueError(f"roi_random_crop: the ROI {start.tolist()}..{end.tolist()} of sample {i} is out of "
                                 f"the input's bounds {in_shape.tolist()}")
        rows.append(roi_crop_start(crop, start, end, in_shape, ctx.sample_rng(i, reuse=True)))
    if rows:
        if len({len(r) for r in rows}) > 1:
            raise ValueError("roi_random_crop: crop_shape must have the same number of values in every sample")
        starts = np.stack(rows)
    return Batch.from_dense(torch.from_numpy(starts))

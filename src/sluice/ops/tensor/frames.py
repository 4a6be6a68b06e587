"""Operators on the frames (outermost slices) of sequences, as DALI's operators of these names:
``fn.element_extract`` (frames as samples of their own), ``fn.sequence_rearrange`` (frames reordered, repeated or
dropped per sample) and ``fn.per_frame`` (marks a batch as sequences: its layout starts with F).

When every sample's frames have one shape (a video batch, however long each clip), all frames of the batch are one
tensor and each output is one gather over it, on the CPU and the GPU alike; otherwise the frames are picked sample
by sample.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.errors import SampleError
from sluice.ops.tensor._views import rows_of
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["ELEMENT_EXTRACT", "SEQUENCE_REARRANGE", "PER_FRAME", "gather_frames"]


def _check_sequence(op: str, layout: str) -> None:
    if layout and not layout.startswith("F"):
        raise ValueError(f"{op}: the input layout {layout!r} does not start with F (frames); give sequences, or mark "
                         "the batch as one with fn.per_frame")


def _check_indices(op: str, ctx: BatchContext, i: int, indices: list[int], frames: int) -> None:
    bad = [k for k in indices if not 0 <= k < frames]
    if bad:
        raise SampleError(i, ctx.source_info[i] if ctx.source_info else "",
                          IndexError(f"{op}: frame indices {bad} are out of range for a sequence of {frames} frames "
                                     f"(valid: 0..{frames - 1})"))


def gather_frames(batch: Batch, picks: list[list[int]], layout: str) -> Batch:
    """Sample ``i`` of the output holds the frames ``picks[i]`` of sample ``i`` of ``batch``, stacked. One gather over
    the whole batch when the frames share one shape (a dense output when every sample picks as many), else per
    sample."""
    rows = rows_of(batch)
    if rows is None:
        return Batch([s.index_select(0, torch.tensor(p, dtype=torch.long, device=s.device))
                      for s, p in zip(batch.samples, picks)], layout)
    frames, counts = rows
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    index = np.concatenate([np.asarray(p, np.int64) + s for p, s in zip(picks, starts)]) if picks else \
        np.zeros(0, np.int64)
    out = frames.index_select(0, torch.from_numpy(index).to(frames.device, non_blocking=True))
    lengths = [len(p) for p in picks]
    row = tuple(frames.shape[1:])
    if lengths and all(k == lengths[0] for k in lengths):
        return Batch.from_dense(out.view(len(picks), lengths[0], *row), layout)
    return Batch.from_packed(out.reshape(-1), np.array([(k, *row) for k in lengths], np.int64), layout)


# ------------------------------------------------------------------------------------------------------------
ELEMENT_EXTRACT = OpSchema(
    "element_extract",
    doc="""Extracts frames of sequences as samples: one output per index of ``element_map``, holding that frame of
    every sequence (an FHWC sequence gives HWC frames).

    Example::

        first, last = fn.element_extract(video, element_map=[0, 15])
    """,
    devices=("cpu", "gpu"),
    outputs=lambda a: len(a["element_map"]),
    args=[Arg("element_map", "int_list", REQUIRED, "The frame indices to extract, one output each.")],
    output_layout=lambda a, layouts: (layouts[0][1:] if layouts and layouts[0] else ""),
)


@ELEMENT_EXTRACT.batch_kernel("cpu")
@ELEMENT_EXTRACT.batch_kernel("gpu")
def element_extract(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> tuple[Batch, ...]:
    layout = ctx.layout_of(data)
    _check_sequence("element_extract", layout)
    element_map = [int(k) for k in args.const("element_map")]
    if not element_map:
        raise ValueError("element_extract: element_map is empty; give the indices of the frames to extract")
    for i, shape in enumerate(data.shape()):
        if not shape:
            raise SampleError(i, ctx.source_info[i] if ctx.source_info else "",
                              ValueError("element_extract: a scalar sample has no frames"))
        _check_indices("element_extract", ctx, i, element_map, shape[0])
    n = len(data)
    outs = []
    for k in element_map:
        picked = gather_frames(data, [[k]] * n, layout[1:])
        outs.append(picked if not n else _drop_frame_axis(picked))
    return tuple(outs)


def _drop_frame_axis(batch: Batch) -> Batch:
    if batch.dense is not None:
        return Batch.from_dense(batch.dense.squeeze(1), batch.layout())
    return Batch([s[0] for s in batch.samples], batch.layout())


# ------------------------------------------------------------------------------------------------------------
SEQUENCE_REARRANGE = OpSchema(
    "sequence_rearrange",
    doc="""Reorders the frames of each sequence: output frame ``i`` is input frame ``new_order[i]``. Frames may repeat
    or be dropped; the output may not be empty.

    Example::

        reversed_clip = fn.sequence_rearrange(video, new_order=[3, 2, 1, 0])
    """,
    devices=("cpu", "gpu"),
    args=[Arg("new_order", "int_list", REQUIRED, "For each output frame, the input frame it copies.",
              per_sample=True)],
)


@SEQUENCE_REARRANGE.batch_kernel("cpu")
@SEQUENCE_REARRANGE.batch_kernel("gpu")
def sequence_rearrange(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    layout = ctx.layout_of(data)
    _check_sequence("sequence_rearrange", layout)
    picks = []
    for i, (shape, order) in enumerate(zip(data.shape(), args["new_order"])):
        order = [int(k) for k in np.asarray(order).reshape(-1)]
        if not order:
            raise SampleError(i, ctx.source_info[i] if ctx.source_info else "",
                              ValueError("sequence_rearrange: new_order is empty; an output sequence needs a frame"))
        if not shape:
            raise SampleError(i, ctx.source_info[i] if ctx.source_info else "",
                              ValueError("sequence_rearrange: a scalar sample has no frames"))
        _check_indices("sequence_rearrange", ctx, i, order, shape[0])
        picks.append(order)
    return gather_frames(data, picks, layout)


# ------------------------------------------------------------------------------------------------------------
PER_FRAME = OpSchema(
    "per_frame",
    doc="""Marks the batch as sequences (its layout starts with F), so that an argument fed from it gives one value
    per frame. Only the layout changes.

    An input without a layout gets ``F`` followed by ``*`` for its other dimensions; one whose layout starts with
    another letter is refused, or with ``replace=True`` gets F in its place. Example::

        sigma = fn.random.uniform(range=[0.5, 5.0], shape=[8])
        blurred = fn.gaussian_blur(video, sigma=fn.per_frame(sigma))
    """,
    devices=("cpu", "gpu"),
    args=[Arg("replace", bool, False, "Replace the first letter of an existing layout with F instead of refusing "
              "a layout that does not start with F.")],
    output_layout=lambda a, layouts: _frame_layout(layouts[0] if layouts else "", None, a["replace"]),
)


def _frame_layout(layout: str, ndim: int | None, replace: bool) -> str:
    if not layout:
        return "" if not ndim else "F" + "*" * (ndim - 1)
    if layout.startswith("F"):
        return layout
    if not replace:
        raise ValueError(f"per_frame: the input layout {layout!r} does not start with F; pass replace=True to mark "
                         "its first dimension as frames")
    return "F" + layout[1:]


@PER_FRAME.batch_kernel("cpu")
@PER_FRAME.batch_kernel("gpu")
def per_frame(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    shapes = data.shape()
    ndim = len(shapes[0]) if shapes else None
    if ndim == 0:
        raise ValueError("per_frame: the samples are scalars; a per-frame argument needs one value per frame (a 1-D "
                         "sample at least)")
    return data.with_layout(_frame_layout(ctx.layout_of(data), ndim, args.const("replace")))

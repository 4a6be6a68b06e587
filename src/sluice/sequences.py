"""Sequences of frames (layouts with ``F``: ``FHWC``, ``FCHW``, ``CFHW``) through image operators, as DALI runs them.

An image operator applies to every frame of a sequence. Per-sample arguments are shared by the frames of their
sample; a scalar argument given one value per frame (a per-sample argument whose sample holds as many values as
the sequence has frames) applies frame by frame. Random operators draw once per sample, and every frame of the
sample gets that draw (the same crop window for a whole clip). The output of a sequence is a sequence: the
layout keeps its leading ``F``, and the frames of one sample must come out in one shape.

An operator declares how it takes sequences in its schema (``OpSchema(sequences=...)``, DALI's
``AllowSequences``):

* ``"frames"`` -- the batch of sequences runs as the batch of their frames (DALI's ``SequenceOperator``, which
  unfolds the outer ``F`` dimension): ``resize``, ``crop_mirror_normalize``, ``rotate``, ``warp_affine``,
  ``random_resized_crop`` and the fused GPU resize/crop_mirror_normalize node, so a batch of clips is one
  kernel launch over all their frames. A sequence whose ``F`` is not outermost (``CFHW``) runs the same way:
  its frames are views with ``F`` moved to the front. The folded output takes the layout the schema declares
  for the sequence (``output_layout(args, input_layouts)``): the frames' layout behind ``F``, or a permutation
  of it (``crop_mirror_normalize(clips, output_layout="CFHW")``, a ``CFHW`` input given back as ``CFHW``);
* ``"axis"`` -- the kernels take the ``F`` axis themselves (crops, flips, colour operators, blurs keep working
  on views of the whole clip); only a per-frame argument makes the batch run frame by frame.

Example::

    clips = fn.readers.video(filenames=files, sequence_length=16)            # FHWC
    small = fn.resize(clips, size=(112, 112))                                # FHWC, 16 frames of 112 x 112
    angle = fn.external_source(source=lambda: [np.linspace(-10, 10, 16, dtype=np.float32)] * 4)
    turned = fn.rotate(small, angle=angle)                                   # one angle per frame
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from sluice.errors import SampleError
from sluice.pipeline.batch import Batch

__all__ = ["MODES", "is_sequence", "frame_axis", "frame_counts", "per_frame_values", "spread", "frames_of", "unfold", "fold",
           "needs_frames", "run_as_frames"]

MODES = ("frames", "axis")
_SCALAR_TYPES = (bool, int, float)
_ONE_VALUE = {bool, int, float, type(None)}  # types whose value counts as at most one (_count)


def is_sequence(batch: Batch) -> bool:
    """Whether ``batch`` holds sequences (its layout starts with ``F``)."""
    return batch.layout().startswith("F")


def frame_axis(layout: str) -> int:
    """The axis of the frames (``F``) in ``layout``, or -1."""
    return (layout or "").find("F")


def frame_counts(batch: Batch) -> list[int]:
    """The number of frames of each sample of a sequence batch (the extent of its ``F`` axis, outermost when the
    layout names none)."""
    axis = max(frame_axis(batch.layout()), 0)
    return [int(s[axis]) if len(s) > axis else 1 for s in batch.shape()]


def frames_first(batch: Batch) -> Batch:
    """A sequence batch with its ``F`` axis moved to the front (views, no copy): ``CFHW`` -> ``FCHW``."""
    layout = batch.layout()
    axis = frame_axis(layout)
    if axis <= 0:
        return batch
    moved = "F" + layout[:axis] + layout[axis + 1:]
    dense = batch.dense
    if dense is not None:
        return Batch.from_dense(dense.movedim(axis + 1, 1), moved, batch.source_info)
    return Batch([s.movedim(axis, 0) for s in batch.samples], moved, batch.source_info)


def to_layout(batch: Batch, layout: str) -> Batch:
    """``batch`` transposed to ``layout``, a permutation of its own layout (contiguous samples); as it is when
    equal or when ``layout`` is not a permutation of it."""
    have = batch.layout()
    if not layout or layout == have or sorted(layout) != sorted(have):
        return batch
    perm = [have.index(c) for c in layout]
    dense = batch.dense
    if dense is not None:
        return Batch.from_dense(dense.permute(0, *(p + 1 for p in perm)).contiguous(), layout, batch.source_info)
    return Batch([s.permute(*perm).contiguous() for s in batch.samples], layout, batch.source_info)


def _count(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return int(value.size if isinstance(value, np.ndarray) else value.numel())
    if isinstance(value, (list, tuple)):
        return len(value)
    return 1


def per_frame_values(name: str, values: Sequence[Any], counts: Sequence[int] | None) -> bool:
    """Whether the per-sample ``values`` of scalar argument ``name`` give one value per frame. A sample holds one
    value, or one per frame of its sequence (``counts[i]``; ``counts`` None: the samples are not sequences);
    anything else is an error naming the argument."""
    if set(map(type, values)) <= _ONE_VALUE:  # plain numbers (the executor's values): one value per sample
        return False
    per_frame = False
    for i, v in enumerate(values):
        k = _count(v)
        if k > 1:
            if counts is None:
                raise ValueError(f"argument '{name}' has {k} values for sample {i}; give one value (several, one "
                                 "per frame, only for sequences: inputs whose layout starts with F)")
            if k != counts[i]:
                raise ValueError(f"argument '{name}' has {k} values for sample {i}; give one value, or one per "
                                 f"frame of the sequence ({counts[i]} frames)")
            per_frame = True
    return per_frame


def spread(values: Sequence[Any], counts: Sequence[int], per_frame: bool) -> list[Any]:
    """Per-sample values as per-frame values: each sample's value repeated for its frames, or (``per_frame``) its
    values one per frame."""
    out: list[Any] = []
    for v, c in zip(values, counts):
        if per_frame and _count(v) > 1:
            flat = v.reshape(-1).tolist() if isinstance(v, (np.ndarray, torch.Tensor)) else list(v)
            out.extend(flat)
        else:
            if per_frame and isinstance(v, (np.ndarray, list, tuple)) and _count(v) == 1:
                v = np.asarray(v).reshape(-1)[0].item()
            out.extend([v] * c)
    return out


def frames_of(batch: Batch, counts: Sequence[int]) -> Batch:
    """The frames of a sequence batch as a batch (a view of a dense batch)."""
    layout = batch.layout()[1:]
    source = [s for s, c in zip(batch.source_info, counts) for _ in range(c)]
    dense = batch.dense
    if dense is not None and dense.dim() >= 2:
        return Batch.from_dense(dense.reshape(-1, *dense.shape[2:]), layout, source)
    return Batch([f for x in batch.samples for f in x.unbind(0)], layout, source)


def _broadcast(batch: Batch, counts: Sequence[int]) -> Batch:
    """A non-sequence input repeated for each frame of its sample (warp_affine's matrices)."""
    samples = [s for s, c in zip(batch.samples, counts) for _ in range(c)]
    return Batch(samples, batch.layout(), [s for s, c in zip(batch.source_info, counts) for _ in range(c)])


def unfold(schema: Any, ctx: Any, inputs: Sequence[Batch], args: Any, counts: Sequence[int]):
    """``(ctx, inputs, args)`` of the batch of frames: input 0's frames, other sequence inputs' frames (the same
    frame counts), other inputs and per-sample arguments repeated per frame, per-frame scalar arguments spread.
    The frames' ``ctx.sample_ids`` name the sample each frame belongs to (its random draws are the sample's)."""
    frames = [frames_of(frames_first(inputs[0]), counts)]
    for k, extra in enumerate(inputs[1:], 1):
        if frame_axis(extra.layout()) >= 0:
            extra = frames_first(extra)
            if frame_counts(extra) != list(counts):
                raise ValueError(f"input {k} is a sequence of {frame_counts(extra)} frames, input 0 of "
                                 f"{list(counts)}; sequence inputs must have the same frames")
            frames.append(frames_of(extra, counts))
        else:
            frames.append(_broadcast(extra, counts))
    per_sample = {}
    for name in args.names():
        if args.is_const(name):
            continue
        values = args[name]
        arg = schema.args.get(name)
        scalar = arg is not None and arg.type in _SCALAR_TYPES
        per_sample[name] = spread(values, counts, scalar and per_frame_values(name, values, counts))
    n = int(sum(counts))
    const = {name: args.const(name) for name in args.names() if args.is_const(name)}
    ids = [i for i, c in enumerate(counts) for _ in range(c)]
    if ctx.sample_ids is not None:  # already frames of something: keep the outer samples' ids
        ids = [ctx.sample_ids[i] for i in ids]
    frame_ctx = dataclasses.replace(ctx, batch_size=n, source_info=frames[0].source_info,
                                    layouts=[b.layout() for b in frames], sample_ids=ids, _rng=None,
                                    _rekeyed=None, prepared=None)
    return frame_ctx, frames, type(args)(const, per_sample, n)


def fold(batch: Batch, counts: Sequence[int], layout: str, what: str) -> Batch:
    """Frames back into sequences: ``counts[i]`` frames per sample, stacked along a new ``F`` axis (a dense batch of
    equal counts is reshaped, not copied). ``layout`` is the frames' layout (``F`` is put in front)."""
    out_layout = "F" + layout if layout else ""
    dense = batch.dense
    if dense is not None and counts and all(c == counts[0] for c in counts) and counts[0] > 0:
        return Batch.from_dense(dense.reshape(len(counts), counts[0], *dense.shape[1:]), out_layout)
    samples = batch.samples
    out, k = [], 0
    for i, c in enumerate(counts):
        part = samples[k:k + c]
        k += c
        shapes = {tuple(f.shape) for f in part}
        if len(shapes) > 1:
            raise ValueError(f"{what}: the frames of sample {i} came out in different shapes {sorted(shapes)}; the "
                             "frames of a sequence must keep one shape (give per-frame arguments that agree)")
        out.append(torch.stack(part) if part else torch.empty(0, dtype=batch.dtype or torch.uint8))
    return Batch(out, out_layout)


def needs_frames(schema: Any, inputs: Sequence[Batch], args: Any) -> list[int] | None:
    """The frame counts when this batch must run as frames under ``schema.sequences``, else None. ``"frames"``
    operators take any layout with ``F`` as a sequence; ``"axis"`` operators run frame by frame only for per-frame
    arguments of sequences whose ``F`` is outermost."""
    if not inputs:
        return None
    if schema.sequences == "frames" and frame_axis(inputs[0].layout()) >= 0:
        return frame_counts(inputs[0])
    if not is_sequence(inputs[0]):
        return None
    counts = frame_counts(inputs[0])
    for name in args.names():
        arg = schema.args.get(name)
        if not args.is_const(name) and arg is not None and arg.type in _SCALAR_TYPES and \
                per_frame_values(name, args[name], counts):
            return counts
    return None


def run_as_frames(schema: Any, spec: Any, run: Callable[..., Any], ctx: Any, inputs: Sequence[Batch],
                  args: Any, counts: Sequence[int]) -> Batch | tuple[Batch, ...]:
    """Run ``run(ctx, *inputs, args=args)`` on the frames of the sequences and fold its outputs back into
    sequences (outputs past ``schema.sequence_outputs`` are per sample: each sample's first frame's value). A
    folded output takes the layout the schema declares for the sequences when that is a permutation of
    ``F`` + the frames' layout (``CFHW``); the frames' own layout is the declared one without ``F``."""
    frame_ctx, frames, frame_args = unfold(schema, ctx, inputs, args, counts)
    try:
        result = run(frame_ctx, *frames, args=frame_args)
    except SampleError as e:
        ids = frame_ctx.sample_ids
        sample = ids[e.index] if 0 <= e.index < len(ids) else e.index
        frame = e.index - ids.index(sample) if sample in ids else 0
        e.cause.add_note(f"(in frame {frame} of the sequence)")
        raise SampleError(sample, e.source, e.cause) from e.cause
    outs = result if isinstance(result, tuple) else (result,)
    declared = schema.output_layouts(spec.args, [b.layout() for b in inputs], len(outs))
    keep = schema.sequence_outputs if schema.sequence_outputs is not None else len(outs)
    firsts = np.cumsum([0] + list(counts[:-1])).tolist()
    folded = []
    for k, out in enumerate(outs):
        if k < keep:
            seq = fold(out, counts, out.layout() or declared[k].replace("F", ""), f"fn.{schema.name}")
            folded.append(to_layout(seq, declared[k]) if frame_axis(declared[k]) >= 0 else seq)
        else:
            folded.append(Batch([out[j] for j in firsts], out.layout()))
    return tuple(folded) if isinstance(result, tuple) else folded[0]

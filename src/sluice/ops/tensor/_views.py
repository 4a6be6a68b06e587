"""Helpers of the operators that only change how a batch is viewed (expand_dims, squeeze, reinterpret, per_frame):
new shapes (and element type) over the same memory, never a copy where the batch's storage allows it, and of the
operators that pick whole rows of samples (sequence_rearrange, element_extract, permute_batch).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sluice.pipeline.batch import Batch

__all__ = ["viewed", "flat_of", "rows_of", "flat_or_joined", "like"]


def _volume(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def flat_of(batch: Batch) -> torch.Tensor | None:
    """The batch's samples back to back in one 1-D contiguous tensor, without a copy: its dense tensor (when
    contiguous) or its packed buffer. None for a batch held as a list of samples."""
    if batch.dense is not None:
        return batch.dense.reshape(-1) if batch.dense.is_contiguous() else None
    if batch.packed is not None:
        flat, shapes = batch.packed
        return flat[: int(sum(_volume(s) for s in shapes.tolist()))]
    return None


def _retyped(x: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor | None:
    """``x`` (1-D) viewed as ``dtype``; None when its offset or length do not fit the new element size."""
    if dtype is None or dtype == x.dtype:
        return x
    try:
        return x.view(dtype)
    except RuntimeError:
        return None


def viewed(batch: Batch, shapes: Sequence[Sequence[int]], layout: str, dtype: torch.dtype | None = None) -> Batch:
    """``batch`` with sample ``i`` viewed as ``shapes[i]`` (and its bytes as ``dtype``): one dense or packed batch
    over the same buffer when the batch has one, else a view of each sample (a copy only of a sample whose memory
    cannot be viewed so). The caller has checked that every new shape holds the sample's bytes."""
    n = len(batch)
    shapes = [tuple(int(d) for d in s) for s in shapes]
    flat = flat_of(batch)
    if flat is not None and n:
        flat = _retyped(flat, dtype)
    if flat is not None and n:
        if all(s == shapes[0] for s in shapes):
            return Batch.from_dense(flat.view(n, *shapes[0]), layout)
        return Batch.from_packed(flat, np.array(shapes, dtype=np.int64).reshape(n, -1), layout)
    out = []
    for sample, shape in zip(batch.samples, shapes):
        one = _retyped(sample.reshape(-1), dtype)
        if one is None:  # misaligned for the new element size: copy the sample's bytes
            one = sample.reshape(-1).clone().view(dtype)
        out.append(one.view(shape))
    return Batch(out, layout)


def rows_of(batch: Batch) -> tuple[torch.Tensor, list[int]] | None:
    """The outermost slices (rows, e.g. the frames of sequences) of all samples stacked into one tensor, and how
    many each sample has, when every sample has the same row shape; else None. A dense batch is viewed, a packed one
    too; a list of samples is concatenated (one copy)."""
    shapes = batch.shape()
    if not shapes or any(len(s) == 0 for s in shapes) or any(s[1:] != shapes[0][1:] for s in shapes):
        return None
    counts = [s[0] for s in shapes]
    row = shapes[0][1:]
    if batch.dense is not None:
        return batch.dense.reshape(-1, *row), counts
    flat = flat_of(batch)
    if flat is not None:
        return flat.view(-1, *row), counts
    return torch.cat(list(batch.samples)), counts


def flat_or_joined(batch: Batch) -> torch.Tensor:
    """The batch's elements as one 1-D contiguous tensor: :func:`flat_of` without a copy where it can, else the
    samples joined (one copy)."""
    flat = flat_of(batch)
    if flat is not None:
        return flat
    samples = batch.samples
    if not samples:
        return torch.zeros(0)
    return torch.cat([s.reshape(-1) for s in samples])


def like(batch: Batch, flat: torch.Tensor, layout: str | None = None) -> Batch:
    """A batch of ``batch``'s sample shapes over ``flat`` (one element per input element, any type): dense when the
    shapes agree, else packed."""
    shapes = batch.shape()
    layout = batch.layout() if layout is None else layout
    if not shapes:
        return Batch([], layout)
    if all(s == shapes[0] for s in shapes):
        return Batch.from_dense(flat.view(len(shapes), *shapes[0]), layout)
    return Batch.from_packed(flat, np.array(shapes, dtype=np.int64).reshape(len(shapes), -1), layout)

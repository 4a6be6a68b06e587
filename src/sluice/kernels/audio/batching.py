"""Padding a ragged batch into one dense tensor for a single batched GPU computation, and cutting it back.

Example::

    dense, shapes = pad_stack([torch.ones(2, 5), torch.ones(2, 3)])    # dense: (2, 2, 5)
    samples = unpad(dense, shapes)                                      # views of shapes (2, 5), (2, 3)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from sluice.kernels.audio.spectral import apply_matrix
from sluice.pipeline.batch import Batch

__all__ = ["pad_stack", "unpad", "make_batch", "as_signal", "contract_batch"]


def pad_stack(samples: Sequence[torch.Tensor] | Batch,
              fill: float = 0.0) -> tuple[torch.Tensor, list[tuple[int, ...]]]:
    """Stack samples of one rank, padding every dimension at the end to the batch's largest extent. A dense
    Batch is returned as it is (no copy)."""
    if isinstance(samples, Batch):
        if samples.dense is not None:
            return samples.dense, [tuple(samples.dense.shape[1:])] * len(samples)
        samples = list(samples)
    shapes = [tuple(s.shape) for s in samples]
    if not samples:
        return torch.zeros(0), shapes
    ranks = {len(s) for s in shapes}
    if len(ranks) != 1:
        raise ValueError(f"all samples must have the same number of dimensions, got shapes {shapes}")
    if all(s == shapes[0] for s in shapes):
        return torch.stack(list(samples)), shapes
    if all(s[1:] == shapes[0][1:] for s in shapes) and shapes[0]:
        # ragged in the first dimension only (signals of different lengths): one call, no copy per sample here
        return torch.nn.utils.rnn.pad_sequence(list(samples), batch_first=True, padding_value=fill), shapes
    big = tuple(max(dims) for dims in zip(*shapes))
    out = samples[0].new_full((len(samples),) + big, fill)
    for i, s in enumerate(samples):
        out[(i,) + tuple(slice(0, d) for d in s.shape)] = s
    return out, shapes


def unpad(dense: torch.Tensor, shapes: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Views of the leading corners of ``dense``'s rows with the given shapes."""
    return [dense[(i,) + tuple(slice(0, d) for d in shape)] for i, shape in enumerate(shapes)]


def make_batch(dense: torch.Tensor, shapes: Sequence[Sequence[int]], layout: str = "") -> Batch:
    """A Batch of ``dense`` cut to ``shapes``: held dense when every shape is the full extent."""
    full = tuple(dense.shape[1:])
    if all(tuple(s) == full for s in shapes):
        return Batch.from_dense(dense, layout)
    return Batch(unpad(dense, shapes), layout)


def as_signal(sample: torch.Tensor, op: str) -> torch.Tensor:
    """A 1-D view of a one-channel signal given as ``(n,)``, ``(n, 1)`` or ``(1, n)``."""
    if sample.dim() == 1:
        return sample
    if sample.dim() == 2 and 1 in sample.shape:
        return sample.reshape(-1)
    raise ValueError(f"{op}: expected a one-channel signal of shape (n,), (n, 1) or (1, n), got "
                     f"{tuple(sample.shape)}; downmix it first (decoders.audio(downmix=True))")


def contract_batch(batch: Batch, axis_of: Callable[[int], int],
                   matrix_for: Callable[[int, torch.Tensor], torch.Tensor], op: str) -> Batch:
    """Multiply one axis of every sample by a matrix (mel filters, DCT) as one product over the batch's padded
    form (its padding stays padding: zeros stay zeros). ``axis_of(ndim)`` gives the contracted axis of a sample;
    ``matrix_for(extent, x)`` the ``(out, extent)`` matrix (on ``x``'s device and dtype). Samples must share the
    extent of that axis."""
    if not len(batch):
        return Batch([], batch.layout())
    shapes = batch.shapes_array()
    axis = axis_of(shapes.shape[1])
    extents = sorted(set(shapes[:, axis].tolist()))
    if len(extents) != 1:
        raise ValueError(f"{op}: all samples of a batch must have the same extent along axis {axis}, got {extents}")
    zeros = batch.padding_fill == 0.0
    dense, _ = batch.padded(fill=None)
    x = dense if dense.dtype == torch.float64 else dense.float()
    m = matrix_for(extents[0], x)
    out = apply_matrix(x, m, axis + 1)
    out_shapes = shapes.copy()
    out_shapes[:, axis] = m.shape[0]
    return Batch.from_padded(out, out_shapes, batch.layout(), fill=0.0 if zeros else None)   # 0 maps to 0

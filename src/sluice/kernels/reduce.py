"""Reductions of ragged batches along some axes of every sample: sum, min, max, mean, mean square, root mean square,
variance and standard deviation (the last two around given means), as DALI's ``fn.reductions.*`` compute them.

:func:`reduce_dense` reduces an N x ... tensor with torch's reductions; :func:`reduce_flat` reduces samples of any
shapes lying back to back in one 1-D buffer in a fixed number of whole-batch launches: each element's output index
is computed on the device (:mod:`sluice.kernels.ragged`), min and max scatter to it, integer sums add to it, and
float sums sort the elements by output (only when the reduced axes are not the innermost ones) and sum each run
with ``torch.segment_reduce``, so that results do not depend on the order of atomic additions.

Sums of integers accumulate in int64; everything else in float64 (min and max keep the input's type). The caller
converts to the output type.

Example::

    >>> x = torch.arange(10, dtype=torch.float32)
    >>> out, shapes = reduce_flat(x, np.array([[2, 2], [3, 2]]), [0], "sum", keep_dims=False)
    >>> out.tolist(), shapes.tolist()
    ([2.0, 4.0, 18.0, 21.0], [[2], [2]])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sluice.kernels.ragged import per_element, segments

__all__ = ["KINDS", "reduce_dense", "reduce_flat", "reduced_shape"]

KINDS = ("sum", "min", "max", "mean", "mean_square", "rms", "variance", "std_dev")
_CENTRED = ("variance", "std_dev")


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keep_dims: bool) -> tuple[int, ...]:
    """The shape of a sample after reducing ``axes``: those extents become 1 (``keep_dims``) or go."""
    return tuple(1 if d in axes else e for d, e in enumerate(shape) if keep_dims or d not in axes)


def _accumulate(x: torch.Tensor, kind: str) -> torch.Tensor:
    if kind in ("min", "max"):
        return x
    if kind == "sum" and not x.dtype.is_floating_point:
        return x.to(torch.int64)
    return x.to(torch.float64)


def _elementwise(v: torch.Tensor, kind: str) -> torch.Tensor:
    """A reduction over no axes: each element on its own."""
    if kind == "mean_square":
        return v * v
    if kind == "rms":
        return v.abs()
    if kind in _CENTRED:
        return torch.zeros_like(v)
    return v


def _finish(total: torch.Tensor, count: torch.Tensor | float, kind: str) -> torch.Tensor:
    """sum -> mean / mean square / rms / variance / standard deviation, given the count (already less ddof)."""
    if kind == "sum":
        return total
    out = total / count
    return out.sqrt() if kind in ("rms", "std_dev") else out


def reduce_dense(x: torch.Tensor, axes: Sequence[int], kind: str, *, keep_dims: bool,
                 mean: torch.Tensor | None = None, ddof: int = 0) -> torch.Tensor:
    """Reduce ``axes`` (of each sample) of the N x ... tensor ``x``. ``mean``: for variance and std_dev, the means
    in the shape of the output with ``keep_dims`` (or broadcastable to it)."""
    v = _accumulate(x, kind)
    if not axes:
        return _elementwise(v, kind)
    dims = [a + 1 for a in axes]
    if kind == "min":
        out = v.amin(dim=dims, keepdim=True)
    elif kind == "max":
        out = v.amax(dim=dims, keepdim=True)
    else:
        if kind in ("mean_square", "rms"):
            v = v * v
        elif kind in _CENTRED:
            v = (v - mean.to(v.dtype)) ** 2
        count = float(np.prod([x.shape[d] for d in dims]))
        out = _finish(v.sum(dim=dims, keepdim=True), count - (ddof if kind in _CENTRED else 0), kind)
    return out if keep_dims else out.squeeze(dims)


def reduce_flat(flat: torch.Tensor, shapes: np.ndarray, axes: Sequence[int], kind: str, *, keep_dims: bool,
                mean: torch.Tensor | None = None, ddof: int = 0) -> tuple[torch.Tensor, np.ndarray]:
    """Reduce ``axes`` of samples of ``shapes`` (an (n, ndim) array) lying back to back in ``flat``. ``mean``: for
    variance and std_dev, one value per output element (in the order of the output). Returns the output, back to
    back, and its shapes."""
    shapes = np.asarray(shapes, np.int64).reshape(len(shapes), -1)
    n, ndim = shapes.shape
    axes = sorted(axes)
    out_shapes = np.array([reduced_shape(s, axes, keep_dims) for s in shapes.tolist()], np.int64).reshape(n, -1)
    v = _accumulate(flat, kind)
    if not axes or n == 0:
        return _elementwise(v, kind), out_shapes
    kept = [d for d in range(ndim) if d not in axes]
    sizes = shapes.prod(axis=1)
    out_sizes = shapes[:, kept].prod(axis=1) if kept else np.ones(n, np.int64)
    reduced = shapes[:, axes].prod(axis=1)
    if kind in ("min", "max") and np.any((reduced == 0) & (out_sizes > 0)):
        i = int(np.argmax((reduced == 0) & (out_sizes > 0)))
        raise ValueError(f"cannot take the {kind} of no elements: sample {i} of shape {tuple(shapes[i])} has an "
                         f"extent of 0 along the reduced axes {axes}")
    device = flat.device
    seg, local = segments(sizes, device)
    out_starts = np.concatenate([[0], np.cumsum(out_sizes)[:-1]]).astype(np.int64)
    index = per_element(out_starts, seg)
    if kept:
        strides = np.ones((n, len(kept)), np.int64)  # row-major strides of the kept extents in the output
        for j in range(len(kept) - 2, -1, -1):
            strides[:, j] = strides[:, j + 1] * shapes[:, kept[j + 1]]
        for d in range(ndim - 1, -1, -1):
            extent = per_element(shapes[:, d], seg)
            coord = local % extent
            local = local // extent
            if d in kept:
                index = index + coord * per_element(strides[:, kept.index(d)], seg)
    total = int(out_sizes.sum())
    if kind in ("min", "max"):
        # scatter in a type every device's atomics take (8/16-bit integers and halves widen; exact either way)
        wide = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.bool: torch.int32,
                torch.uint32: torch.int64}.get(
            v.dtype, torch.int32 if not v.dtype.is_floating_point and v.dtype.itemsize < 4 else v.dtype)
        out = torch.empty(total, dtype=wide, device=device)
        out = out.scatter_reduce_(0, index, v.to(wide), "amin" if kind == "min" else "amax", include_self=False)
        return out.to(v.dtype), out_shapes
    if kind in ("mean_square", "rms"):
        v = v * v
    elif kind in _CENTRED:
        v = (v - mean.to(v.dtype)[index]) ** 2
    if not v.dtype.is_floating_point:  # integer sums are exact in any order
        sums = torch.zeros(total, dtype=v.dtype, device=device).index_add_(0, index, v)
    else:
        if kept and kept != list(range(len(kept))):  # the reduced axes are not the innermost: group by output
            order = torch.argsort(index, stable=True)
            v = v[order]
        lengths = torch.from_numpy(np.repeat(reduced, out_sizes)).to(device, non_blocking=True)
        sums = torch.segment_reduce(v, "sum", lengths=lengths, unsafe=True)
    if kind == "sum":
        return sums, out_shapes
    count = per_element(reduced.astype(np.float64) - (ddof if kind in _CENTRED else 0),
                        torch.repeat_interleave(torch.arange(n, device=device),
                                                torch.from_numpy(out_sizes).to(device), output_size=total))
    return _finish(sums, count, kind), out_shapes

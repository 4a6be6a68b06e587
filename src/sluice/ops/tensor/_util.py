"""Helpers shared by the tensor, colour and detection operators: axis resolution, saturating casts, per-sample
argument tensors and grouping a ragged batch by shape so that GPU kernels run once per group, not per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from sluice import sequences
from sluice.pipeline.batch import Batch

__all__ = [
    "convert_saturate", "half_range", "resolve_axes", "arg_tensor", "group_by_shape", "map_groups", "map_batch",
    "as_float_list",
    "to_batch", "check_channel_last", "has_per_frame", "with_frames",
]


def convert_saturate(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Cast float data to ``dtype`` as DALI's ``ConvertSat`` does: round to nearest (ties to even) and clamp to the
    range of an integer type; floating types are a plain cast.

    Example::

        convert_saturate(torch.tensor([-3.0, 2.5, 300.0]), torch.uint8)   # tensor([0, 2, 255], dtype=torch.uint8)
    """
    if dtype.is_floating_point:
        return x.to(dtype)
    if dtype == torch.bool:
        return x != 0
    info = torch.iinfo(dtype)
    x = torch.nan_to_num(x.round(), nan=0.0)
    # float32 cannot hold the limits of 32/64-bit integers exactly; clamp in float64 for those.
    if info.bits >= 32 and x.dtype != torch.float64:
        x = x.double()
    return x.clamp(info.min, info.max).to(dtype)


def half_range(dtype: torch.dtype) -> float:
    """Half of the positive range of a type: 0.5 for floats, 128 for uint8, 16384 for int16 (DALI's mid-grey)."""
    if dtype.is_floating_point:
        return 0.5
    return (float(torch.iinfo(dtype).max) + 1.0) / 2.0


def resolve_axes(ndim: int, layout: str, axes: Sequence[int] | None, axis_names: str | None, *, op: str,
                 default: Sequence[int] | None = None) -> list[int]:
    """Turn ``axes`` (indices, negative allowed) or ``axis_names`` (letters of ``layout``) into sorted-as-given
    non-negative axis indices. ``default`` (None: all axes) is used when neither is given.

    Example::

        resolve_axes(2, "ft", None, "t", op="normalize")   # [1]
    """
    if axes is not None and len(axes) and axis_names:
        raise ValueError(f"{op}: give either axes or axis_names, not both")
    if axis_names:
        if not layout:
            raise ValueError(f"{op}: axis_names={axis_names!r} needs an input with a layout; the input has none "
                             "(use axes= with dimension indices instead)")
        out = []
        for name in axis_names:
            if name not in layout:
                raise ValueError(f"{op}: axis name {name!r} is not in the input layout {layout!r}")
            out.append(layout.index(name))
        return out
    if axes is not None and len(axes):
        out = []
        for a in axes:
            a = int(a)
            if not -ndim <= a < ndim:
                raise ValueError(f"{op}: axis {a} is out of range for {ndim}-D input (valid: {-ndim}..{ndim - 1})")
            out.append(a % ndim)
        if len(set(out)) != len(out):
            raise ValueError(f"{op}: axes {list(axes)} repeat an axis")
        return out
    return list(range(ndim)) if default is None else [a % ndim for a in default] if ndim else []


def as_float_list(value: Any) -> list[float]:
    """A scalar, list or array argument as a flat list of floats."""
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return [float(v) for v in np.asarray(value, dtype=np.float64).reshape(-1)]


_FLOAT = {float}


def arg_tensor(values: Sequence[Any], device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per-sample scalar argument values (python numbers or 0-/1-element arrays) as one tensor of shape (N,)."""
    if set(map(type, values)) <= _FLOAT:  # the executor's float values: no loop (the same float32 values)
        flat = values
    else:
        flat = []
        for v in values:
            if isinstance(v, (int, float)):  # the executor's scalars (bool is an int): no array round trip
                flat.append(float(v))
                continue
            lst = as_float_list(v)
            if len(lst) != 1:
                raise ValueError(f"expected one value per sample, got {len(lst)}")
            flat.append(lst[0])
    values = torch.tensor(flat, dtype=dtype)
    if torch.device(device).type == "cpu":
        return values
    return values.pin_memory().to(device, non_blocking=True)  # from pageable memory the copy waits for the stream


def group_by_shape(samples: Sequence[torch.Tensor]) -> list[list[int]]:
    """Indices of samples grouped by (shape, dtype), in order of first appearance."""
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault((tuple(s.shape), s.dtype), []).append(i)
    return list(groups.values())


def map_groups(samples: Sequence[torch.Tensor],
               fn: Callable[[torch.Tensor, list[int]], torch.Tensor | tuple[torch.Tensor, ...]],
               dense: torch.Tensor | None = None) -> list[Any]:
    """Run ``fn(stacked, indices)`` once per group of equally shaped samples and scatter its output back to
    per-sample results (a tensor each, or a tuple of tensors each when ``fn`` returns a tuple).

    ``dense``: the batch's dense N x ... tensor when it has one; then ``fn`` runs once on it without stacking.
    """
    n = len(samples)
    out: list[Any] = [None] * n
    groups = [list(range(n))] if dense is not None and n else group_by_shape(samples)
    for idx in groups:
        stacked = dense if dense is not None else torch.stack([samples[i] for i in idx])
        res = fn(stacked, idx)
        if isinstance(res, tuple):
            parts = [r.unbind(0) for r in res]
            for k, i in enumerate(idx):
                out[i] = tuple(p[k] for p in parts)
        else:
            for k, t in enumerate(res.unbind(0)):
                out[idx[k]] = t
    return out


def map_batch(samples: Sequence[torch.Tensor], fn: Callable[[torch.Tensor, list[int]], torch.Tensor],
              dense: torch.Tensor | None = None) -> torch.Tensor | list[torch.Tensor]:
    """:func:`map_groups` for a kernel that keeps dense batches dense: with ``dense`` (the batch as one N x ...
    tensor) ``fn`` runs once on it and its N x ... result is returned as it is, not cut into a list of samples
    (which would make every later operator, and a conditional's merge, take the per-sample path)."""
    if dense is not None and len(samples):
        return fn(dense, list(range(len(samples))))
    return map_groups(samples, fn, dense)


def to_batch(result: torch.Tensor | Sequence[torch.Tensor], layout: str = "") -> Batch:
    """A kernel's result as a Batch: a dense N x ... tensor stays dense, a list of samples stays a list."""
    if isinstance(result, torch.Tensor):
        return Batch.from_dense(result, layout)
    return Batch(list(result), layout)


def check_channel_last(layout: str, op: str) -> None:
    """Colour operators read channels from the last axis: reject layouts that put them elsewhere (e.g. CHW)."""
    if layout and not layout.endswith("C"):
        raise ValueError(f"{op}: layout {layout!r} is not supported; the channels must be the last axis (HWC, FHWC, "
                         "DHWC); transpose the data first (fn.transpose)")


def has_per_frame(args: dict[str, Any]) -> bool:
    """Whether any argument value holds more than one number (one per frame of a sequence)."""
    return any(v is not None and len(as_float_list(v)) > 1 for v in args.values())


def with_frames(run: Callable[[Batch, dict[str, list | None]], Any], images: Batch,
                args: dict[str, list | None]) -> Any:
    """Run ``run(images, args)`` (``args``: per-sample value lists, or None for defaults). When the layout starts
    with F and a sample gets several values of an argument, one per frame (DALI's per-frame arguments), the frames
    of every sample run as samples of their own and the results are joined back into sequences (a dense tensor
    stays dense); :mod:`sluice.sequences` holds the rules."""
    counts = sequences.frame_counts(images) if sequences.is_sequence(images) else None
    per_frame = {name for name, values in args.items()
                 if values is not None and sequences.per_frame_values(name, values, counts)}
    if not per_frame:
        return run(images, args)
    frame_args = {name: None if values is None else sequences.spread(values, counts, name in per_frame)
                  for name, values in args.items()}
    result = run(sequences.frames_of(images, counts), frame_args)
    folded = sequences.fold(to_batch(result), counts, "", "sequence")
    return folded.dense if folded.dense is not None else folded.samples

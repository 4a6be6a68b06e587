"""``fn.normalize``: ``out = scale * (in - mean) / stddev + shift`` over any axes of any layout.

Mean and standard deviation are computed over the reduced axes (``axes`` / ``axis_names``; all axes by default)
of each sample, or of the whole batch with ``batch=True``, unless given as ``mean`` / ``stddev`` (scalars, arrays
broadcastable to the input with extent 1 on the reduced axes, or per-sample tensors). The computed variance is
``sum((in - mean)^2) / (count - ddof)``; ``epsilon`` is added to the variance before the square root. A zero
variance with ``epsilon=0`` gives ``shift`` (DALI keeps the zero instead of dividing by it). Statistics and output
are float32; integer ``dtype`` outputs are rounded to nearest and clamped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sluice import env, types
from sluice.ops.tensor._util import convert_saturate, group_by_shape, resolve_axes
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["normalize_samples", "infer_reduced_axes"]


def _as_stat(value) -> torch.Tensor | None:
    """A given mean or stddev as a float32 host tensor (moved to the device once per group, not per sample)."""
    if value is None:
        return None
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value, dtype=np.float32))
    return t.detach().to("cpu", torch.float32)


def _inv_std(var: torch.Tensor, epsilon: float) -> torch.Tensor:
    """1 / sqrt(var + epsilon), and 0 where that is 0 (DALI keeps the zero instead of dividing by it)."""
    v = var + epsilon
    return torch.where(v > 0, v.clamp_min(1e-38).rsqrt(), torch.zeros_like(v))


def _variance(sum_sq: torch.Tensor, count: int, ddof: int) -> torch.Tensor:
    """sum_sq / (count - ddof); with no degrees of freedom left the variance counts as 0 (DALI's rule: the output
    is then ``shift``, or scaled by 1 / sqrt(epsilon) when epsilon is set)."""
    return sum_sq / (count - ddof) if count > ddof else torch.zeros_like(sum_sq)


def _inv_given_std(std: torch.Tensor, epsilon: float) -> torch.Tensor:
    """1 / stddev for a given stddev (0 where it is 0), or 1 / sqrt(stddev^2 + epsilon), as DALI."""
    if epsilon:
        return _inv_std(std * std, epsilon)
    return torch.where(std != 0, 1.0 / torch.where(std != 0, std, torch.ones_like(std)), torch.zeros_like(std))


def _merge(given: list[torch.Tensor | None], computed: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """One group's statistics: the given values (host tensors) where present, the computed ones elsewhere."""
    if all(r is None for r in given):
        return computed
    if all(r is not None for r in given):
        rows = [r.unsqueeze(0) for r in given]
        stacked = torch.cat(torch.broadcast_tensors(*rows)) if len(rows) > 1 else rows[0]
        return stacked.to(device, non_blocking=True)
    rows = [r.unsqueeze(0).to(device) if r is not None else computed[k:k + 1] for k, r in enumerate(given)]
    return torch.cat(torch.broadcast_tensors(*rows))


def infer_reduced_axes(shape: Sequence[int], stat_shape: Sequence[int]) -> list[int]:
    """DALI's rule when no axes are given: an axis is reduced where the mean/stddev extent is 1 and the input's
    is not. A scalar (or 1-element) statistic reduces every axis."""
    if len(stat_shape) == 0 or int(np.prod(stat_shape)) == 1:
        return list(range(len(shape)))
    if len(stat_shape) != len(shape):
        raise ValueError(f"normalize: mean/stddev of shape {tuple(stat_shape)} has {len(stat_shape)} dimensions; "
                         f"the input has {len(shape)} ({tuple(shape)})")
    return [a for a, (s, m) in enumerate(zip(shape, stat_shape)) if m == 1 and s != 1]


def _check_stat(name: str, stat: torch.Tensor, shape: Sequence[int], axes: Sequence[int]) -> torch.Tensor:
    if stat.dim() == 0 or stat.numel() == 1:
        return stat.reshape((1,) * len(shape))
    if stat.dim() != len(shape):
        raise ValueError(f"normalize: {name} of shape {tuple(stat.shape)} does not match the input rank "
                         f"{len(shape)}")
    for a, (s, m) in enumerate(zip(shape, stat.shape)):
        want = 1 if a in axes else s
        if m != want:
            raise ValueError(f"normalize: {name} has extent {m} in axis {a}; expected {want} (input shape "
                             f"{tuple(shape)}, reduced axes {sorted(axes)})")
    return stat


def normalize_samples(samples: Sequence[torch.Tensor], *, layout: str = "", axes: Sequence[int] | None = None,
                      axis_names: str | None = None, mean: Sequence | None = None, stddev: Sequence | None = None,
                      batch: bool = False, scale: float = 1.0, shift: float = 0.0, epsilon: float = 0.0,
                      ddof: int = 0, out_dtype: torch.dtype = torch.float32,
                      dense: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Normalize a list of samples (any device, any rank). ``mean`` / ``stddev``: None (computed) or one value
    per sample (a scalar or an array). Samples of equal shape are processed as one stacked tensor; ``dense`` (the
    batch as one N x ... tensor, when it is one) saves the stacking copy.

    Example::

        out = normalize_samples([torch.rand(3, 100)], layout="ft", axis_names="t")   # per-row zero mean, unit std
    """
    samples = list(samples)
    if not samples:
        return []
    if ddof < 0:
        raise ValueError(f"normalize: ddof must be >= 0, got {ddof}")
    dev = samples[0].device
    ndim = samples[0].dim()
    if any(s.dim() != ndim for s in samples):
        raise ValueError("normalize: all samples must have the same number of dimensions")
    means = [_as_stat(m) for m in mean] if mean is not None else [None] * len(samples)
    stds = [_as_stat(s) for s in stddev] if stddev is not None else [None] * len(samples)
    if (axes is not None and len(axes)) or axis_names:
        red = resolve_axes(ndim, layout, axes, axis_names, op="normalize")
    else:
        given = next((t for t in means + stds if t is not None), None)
        red = infer_reduced_axes(samples[0].shape, given.shape) if given is not None else list(range(ndim))
    red_stack = [a + 1 for a in red]
    if batch:
        kept = {tuple(e for a, e in enumerate(x.shape) if a not in red) for x in samples}
        if len(kept) > 1:
            raise ValueError(f"normalize: with batch=True the samples must agree in the axes that are not reduced "
                             f"(reduced: {sorted(red)}); got {sorted(kept)}")
    means = [None if m is None else _check_stat("mean", m, s.shape, red) for m, s in zip(means, samples)]
    stds = [None if v is None else _check_stat("stddev", v, s.shape, red) for v, s in zip(stds, samples)]
    if dense is not None:
        groups = [list(range(len(samples)))]
        stacks = {0: dense.to(torch.float32)}
    else:
        groups = group_by_shape(samples)
        stacks = {g[0]: torch.stack([samples[i] for i in g]).to(torch.float32) for g in groups}
    need_mean = any(m is None for m in means)
    need_std = any(v is None for v in stds)

    def count(shape) -> int:
        return int(np.prod([shape[a] for a in red])) if red else 1

    # ---- means -------------------------------------------------------------------------------------------
    mean_of: dict[int, torch.Tensor] = {}
    if need_mean:
        if batch:
            total = sum(stacks[g[0]].sum(dim=[0] + red_stack, keepdim=True) for g in groups)
            n = sum(count(samples[g[0]].shape) * len(g) for g in groups)
            shared = total / n
            for g in groups:
                mean_of[g[0]] = shared.expand(len(g), *shared.shape[1:])
        else:
            for g in groups:
                mean_of[g[0]] = stacks[g[0]].mean(dim=red_stack, keepdim=True) if red else stacks[g[0]]
    for g in groups:  # given means replace computed ones sample by sample
        mean_of[g[0]] = _merge([means[i] for i in g], mean_of.get(g[0]), dev)

    # ---- inverse standard deviations ---------------------------------------------------------------------
    inv_of: dict[int, torch.Tensor] = {}
    if need_std:
        sq = {g[0]: ((stacks[g[0]] - mean_of[g[0]]) ** 2).sum(dim=red_stack, keepdim=True) if red
              else (stacks[g[0]] - mean_of[g[0]]) ** 2 for g in groups}
        if batch:
            total = sum(v.sum(dim=0, keepdim=True) for v in sq.values())
            n = sum(count(samples[g[0]].shape) * len(g) for g in groups)
            var = {g[0]: _variance(total, n, ddof).expand(len(g), *total.shape[1:]) for g in groups}
        else:
            var = {g[0]: _variance(sq[g[0]], count(samples[g[0]].shape), ddof) for g in groups}
        for g in groups:
            inv_of[g[0]] = _inv_std(var[g[0]], epsilon)
    for g in groups:
        given = [None if stds[i] is None else _inv_given_std(stds[i], epsilon) for i in g]
        inv_of[g[0]] = _merge(given, inv_of.get(g[0]), dev)

    out: list[torch.Tensor] = [None] * len(samples)  # type: ignore[list-item]
    for g in groups:
        y = (stacks[g[0]] - mean_of[g[0]]) * (inv_of[g[0]] * scale) + shift
        y = convert_saturate(y, out_dtype)
        for k, i in enumerate(g):
            out[i] = y[k]
    return out


SCHEMA = OpSchema(
    "normalize",
    doc="""Normalizes the input: ``out = scale * (in - mean) / stddev + shift``.

    Mean and standard deviation are computed over ``axes`` / ``axis_names`` (default: all axes) per sample, or
    over the whole batch with ``batch=True``, unless given as ``mean`` / ``stddev`` (scalars, arrays with extent 1
    on the reduced axes, or per-sample DataNodes). ``epsilon`` is added to the variance; ``ddof`` is the delta
    degrees of freedom of the variance. Example::

        mel = fn.normalize(mel, axis_names="t")                       # per frequency row of an "ft" spectrogram
        images = fn.normalize(images, axes=[0, 1], batch=True, scale=64, shift=128, dtype=types.UINT8)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("axes", "int_list", None, "Indices of the reduced axes (negative counts from the end)."),
        Arg("axis_names", str, None, "Layout letters of the reduced axes, e.g. \"HW\" or \"t\"."),
        Arg("mean", object, None, "Mean to subtract: a scalar or an array broadcastable to the input; computed "
            "when not given.", per_sample=True),
        Arg("stddev", object, None, "Standard deviation to divide by; computed when not given.", per_sample=True),
        Arg("batch", bool, False, "Compute mean and stddev over the whole batch instead of per sample."),
        Arg("scale", float, 1.0, "Multiplier of the normalized value."),
        Arg("shift", float, 0.0, "Value added after scaling (the value the mean maps to)."),
        Arg("epsilon", float, 0.0, "Added to the variance before the square root."),
        Arg("ddof", int, 0, "Delta degrees of freedom: the variance divides by count - ddof."),
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type; integer outputs are rounded and clamped."),
    ],
)


def _out_dtype(dtype) -> torch.dtype:
    return torch.float32 if dtype is None or dtype == types.NO_TYPE else types.to_torch_dtype(dtype)


def normalize_padded(data: Batch, axes: Sequence[int], *, scale: float = 1.0, shift: float = 0.0,
                     epsilon: float = 0.0, ddof: int = 0, out_dtype: torch.dtype = torch.float32) -> Batch:
    """Per-sample statistics over ``axes`` computed on the batch's padded form at once, the padding masked out,
    each sample's element count from its shape: the values of :func:`normalize_samples` (up to the order of float
    additions). The output's padding holds ``shift`` (there ``in - mean`` counts as 0)."""
    x, shapes = data.padded(fill=None)
    x = x.to(torch.float32)
    dims = [a + 1 for a in axes]
    n, ndim = shapes.shape
    if _rows_kernel_applies(x, shapes, axes, out_dtype):
        return Batch.from_padded(_normalize_rows(x, shapes[:, -1], scale, shift, epsilon, ddof), shapes,
                                 data.layout(), fill=float(np.float32(shift)))
    if not dims:
        return Batch.from_padded(convert_saturate(torch.full_like(x, shift), out_dtype), shapes, data.layout())
    counts = np.prod(shapes[:, list(axes)], axis=1).astype(np.float32)
    stats = ragged.host_to_device(np.stack([np.maximum(counts, 1), np.maximum(counts - ddof, 1),
                                            (counts > ddof).astype(np.float32)], 1), x.device)
    stats = stats.view((n, 3) + (1,) * (ndim - 1))
    mask = ragged.valid_mask(shapes, tuple(x.shape[1:]), x.device)
    # in place where the values allow it: each temporary of the padded form's size is a launch and an allocation,
    # and freeing it a trip through the GIL (the arithmetic is that of x - mean, (x - mean)^2, ...: the same bits)
    centred = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    mean = centred.sum(dim=dims, keepdim=True).div_(stats[:, 0:1])
    centred.sub_(mean).masked_fill_(~mask, 0.0)
    var = centred.square().sum(dim=dims, keepdim=True).div_(stats[:, 1:2]).mul_(stats[:, 2:3])  # no degrees left: 0
    inv = _inv_std(var, epsilon)
    if scale != 1.0:
        inv.mul_(scale)
    y = centred.mul_(inv).add_(shift)
    fill = float(np.float32(shift)) if out_dtype == torch.float32 else \
        float(convert_saturate(torch.tensor(shift), out_dtype))
    return Batch.from_padded(convert_saturate(y, out_dtype), shapes, data.layout(), fill=fill)


def _rows_kernel_applies(x: torch.Tensor, shapes: np.ndarray, axes: Sequence[int], out_dtype: torch.dtype) -> bool:
    """Whether :func:`_normalize_rows` takes the batch: float32 on a GPU with Triton, the statistics over the last
    axis alone, every other axis whole in every sample (a speech batch's spectra, normalised over time)."""
    ndim = shapes.shape[1]
    return (x.is_cuda and x.dtype == torch.float32 and out_dtype == torch.float32 and list(axes) == [ndim - 1]
            and x.is_contiguous() and bool((shapes[:, :-1] == np.asarray(x.shape[1:-1], np.int64)).all())
            and not env.eager() and ragged.triton_kernels() is not None)


def _normalize_rows(x: torch.Tensor, lengths: np.ndarray, scale: float, shift: float, epsilon: float,
                    ddof: int) -> torch.Tensor:
    """:func:`normalize_padded` over the last axis by one Triton launch, one program a row (its padding
    ``shift``)."""
    k = ragged.triton_kernels()
    rows, extent = int(np.prod(x.shape[1:-1])), int(x.shape[-1])
    out = torch.empty_like(x)
    if x.numel():
        table = ragged.host_to_device(np.asarray(lengths, np.int64), x.device)
        k.normalize_rows_kernel[(x.shape[0] * rows,)](x, table, out, rows, extent, int(ddof), float(epsilon),
                                                      float(scale), float(shift), BLOCK=k.ROW_BLOCK)
    return out


def _normalize_batch(ctx, data: Batch, *, args) -> Batch:
    """Both devices: statistics may span the batch (``batch=True``), so the kernel runs once per batch; equally
    shaped samples are reduced as one stacked tensor. Per-sample statistics over a ragged batch (a speech
    program's spectrograms) are computed on its padded form at once (:func:`normalize_padded`)."""
    n = len(data)
    mean = None if args.is_const("mean") and args.const("mean") is None else args["mean"]
    stddev = None if args.is_const("stddev") and args.const("stddev") is None else args["stddev"]
    if not n:
        return Batch([], data.layout())
    if mean is None and stddev is None and not args.const("batch") and data.dense is None:
        ddof = args.const("ddof")
        if ddof < 0:
            raise ValueError(f"normalize: ddof must be >= 0, got {ddof}")
        ndim = data.shapes_array().shape[1]
        axes, names = args.const("axes"), args.const("axis_names")
        red = resolve_axes(ndim, data.layout(), axes, names, op="normalize") if (axes or names) else \
            list(range(ndim))
        return normalize_padded(data, red, scale=args.const("scale"), shift=args.const("shift"),
                                epsilon=args.const("epsilon"), ddof=ddof, out_dtype=_out_dtype(args.const("dtype")))
    out = normalize_samples(
        list(data.samples), layout=data.layout(), axes=args.const("axes"), axis_names=args.const("axis_names"),
        mean=mean, stddev=stddev, batch=args.const("batch"), scale=args.const("scale"),
        shift=args.const("shift"), epsilon=args.const("epsilon"), ddof=args.const("ddof"),
        out_dtype=_out_dtype(args.const("dtype")), dense=data.dense)
    return Batch(out, data.layout())


SCHEMA.batch_kernel("cpu")(_normalize_batch)
SCHEMA.batch_kernel("gpu")(_normalize_batch)

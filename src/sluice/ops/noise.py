"""``fn.noise.gaussian``, ``fn.noise.shot`` and ``fn.noise.salt_and_pepper``: random noise added to the input, as
DALI's operators of those names. The output has the input's shape and type: integer outputs are rounded to nearest
and clamped to the type's range (DALI's ``ConvertSat``).

The noise comes from :class:`sluice.kernels.counter_rng.CounterRNG`, keyed per sample from the sample's seeded
generator: the same seed gives the same noise on every run, on the CPU and the GPU, and a sample's noise does not
depend on the rest of its batch. The whole batch, ragged or not, is drawn and applied in one launch sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
import numpy as np
import torch

from sluice.kernels.counter_rng import CounterRNG, sample_keys
from sluice.kernels.ragged import per_element, segments
from sluice.ops.arithmetic import convert_saturate
from sluice.ops.tensor._views import flat_or_joined, like
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["GAUSSIAN", "SHOT", "SALT_AND_PEPPER"]


def _noise_setup(ctx: BatchContext, data: Batch, counter_of=None) -> tuple[torch.Tensor, torch.Tensor, CounterRNG]:
    """The batch's elements back to back, each element's sample, and the generator of their noise. ``counter_of(seg,
    local, shapes)``: the counter of each element (default: its index in the sample)."""
    flat = flat_or_joined(data)
    shapes = data.shape()
    sizes = np.array([int(np.prod(s)) if s else 1 for s in shapes], np.int64)
    seg, local = segments(sizes, flat.device)
    counter = local if counter_of is None else counter_of(seg, local, shapes)
    keys = sample_keys(len(shapes), lambda i: ctx.sample_rng(i, reuse=True))
    return flat, seg, CounterRNG(keys, seg, counter)


def _compute_type(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _values(args: BatchArgs, name: str) -> np.ndarray:
    return np.array([float(np.asarray(v).reshape(-1)[0]) for v in args[name]], np.float64)


# ------------------------------------------------------------------------------------------------------------
GAUSSIAN = OpSchema(
    "noise.gaussian",
    doc="""Adds normally distributed noise of ``mean`` and ``stddev`` to every element.

    Example::

        noisy = fn.noise.gaussian(images, stddev=fn.random.uniform(range=[0.0, 20.0]))
    """,
    devices=("cpu", "gpu"),
    random=True,
    args=[
        Arg("mean", float, 0.0, "Mean of the noise.", per_sample=True),
        Arg("stddev", float, 1.0, "Standard deviation of the noise.", per_sample=True, min=0),
    ],
)


@GAUSSIAN.batch_kernel("cpu")
@GAUSSIAN.batch_kernel("gpu")
def gaussian(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    if not len(data):
        return data
    flat, seg, rng = _noise_setup(ctx, data)
    work = _compute_type(flat.dtype)
    noise = per_element(_values(args, "mean"), seg, work) + per_element(_values(args, "stddev"), seg, work) \
        * rng.normal(0, work)
    return like(data, convert_saturate(flat.to(work) + noise, flat.dtype))


# ------------------------------------------------------------------------------------------------------------
SHOT = OpSchema(
    "noise.shot",
    doc="""Shot (Poisson) noise: each element becomes ``poisson(max(0, x / factor)) * factor``, as a sensor counting
    events of size ``factor`` whose expected total is the input; ``factor=0`` leaves the input unchanged. Larger
    factors give more noise.

    Example::

        noisy = fn.noise.shot(images, factor=fn.random.uniform(range=[0.0, 20.0]))
    """,
    devices=("cpu", "gpu"),
    random=True,
    args=[Arg("factor", float, 20.0, "The size of one event.", per_sample=True, min=0)],
)


@SHOT.batch_kernel("cpu")
@SHOT.batch_kernel("gpu")
def shot(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    if not len(data):
        return data
    flat, seg, rng = _noise_setup(ctx, data)
    factor = per_element(_values(args, "factor"), seg, torch.float64)
    x = flat.to(torch.float64)
    safe = torch.where(factor > 0, factor, torch.ones_like(factor))
    counts = rng.poisson(torch.where(factor > 0, (x / safe).clamp(min=0), torch.zeros_like(x)))
    out = torch.where(factor > 0, counts * factor, x)
    return like(data, convert_saturate(out, flat.dtype))


# ------------------------------------------------------------------------------------------------------------
SALT_AND_PEPPER = OpSchema(
    "noise.salt_and_pepper",
    doc="""Salt-and-pepper noise: with probability ``prob`` a value is replaced, by ``salt_val`` with probability
    ``salt_vs_pepper``, else by ``pepper_val`` (defaults: 1 and -1 for floats, the type's maximum and minimum for
    integers). Unless ``per_channel``, a pixel's channels (the C axis of the layout; the last axis when the input has
    no layout and 2 or more dimensions) are replaced together.

    Example::

        noisy = fn.noise.salt_and_pepper(images, prob=0.05)
    """,
    devices=("cpu", "gpu"),
    random=True,
    args=[
        Arg("prob", float, 0.05, "Probability of a value to be replaced.", per_sample=True, min=0, max=1),
        Arg("salt_vs_pepper", float, 0.5, "Probability of a replaced value to be salt.", per_sample=True, min=0,
            max=1),
        Arg("salt_val", float, None, "The salt value; default: 1.0 for floats, the type's maximum for integers.",
            per_sample=True),
        Arg("pepper_val", float, None, "The pepper value; default: -1.0 for floats, the type's minimum for "
            "integers.", per_sample=True),
        Arg("per_channel", bool, False, "Draw the noise for each channel on its own instead of once per pixel."),
    ],
)


def _channel_axis(layout: str, ndim: int) -> int | None:
    """Where the channels are: the C of the layout; without a layout the last axis, as DALI assumes (1-D samples
    have no channels: each element draws on its own)."""
    if not layout:
        return ndim - 1 if ndim >= 2 else None
    return layout.index("C") if "C" in layout else None


def _pixel_counter(axis: int | None):
    """The counter of each element when its pixel's channels share their noise: the index of its pixel."""

    def counter(seg: torch.Tensor, local: torch.Tensor, shapes: Sequence[tuple[int, ...]]) -> torch.Tensor:
        if axis is None:
            return local
        channels = np.array([s[axis] for s in shapes], np.int64)
        inner = np.array([int(np.prod(s[axis + 1:])) for s in shapes], np.int64)
        c, i = per_element(channels, seg), per_element(inner, seg)
        return torch.div(local, c * i, rounding_mode="floor") * i + local % i

    return counter


def _fill_values(args: BatchArgs, name: str, default: float) -> np.ndarray:
    values = [default if v is None else float(np.asarray(v).reshape(-1)[0]) for v in args[name]]
    return np.array(values, np.float64)


def _extremes(dtype: torch.dtype) -> tuple[float, float]:
    if dtype.is_floating_point:
        return 1.0, -1.0
    if dtype == torch.bool:
        return 1.0, 0.0
    info = torch.iinfo(dtype)
    return float(info.max), float(info.min)


@SALT_AND_PEPPER.batch_kernel("cpu")
@SALT_AND_PEPPER.batch_kernel("gpu")
def salt_and_pepper(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    if not len(data):
        return data
    layout = ctx.layout_of(data)
    ndim = len(data.shape()[0])
    axis = None if args.const("per_channel") else _channel_axis(layout, ndim)
    flat, seg, rng = _noise_setup(ctx, data, _pixel_counter(axis))
    salt, pepper = _extremes(flat.dtype)
    salt_v = convert_saturate(torch.from_numpy(_fill_values(args, "salt_val", salt)), flat.dtype)
    pepper_v = convert_saturate(torch.from_numpy(_fill_values(args, "pepper_val", pepper)), flat.dtype)
    prob = _values(args, "prob")
    u = rng.uniform(0, dtype=torch.float64)
    salt_below = per_element(prob * _values(args, "salt_vs_pepper"), seg)
    out = torch.where(u < salt_below, per_element(salt_v, seg),
                      torch.where(u < per_element(prob, seg), per_element(pepper_v, seg), flat))
    return like(data, out)

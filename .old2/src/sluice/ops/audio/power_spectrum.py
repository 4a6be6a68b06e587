"""``fn.power_spectrum``: power (or magnitude) of the real FFT along one axis."""

from __future__ import annotations

import torch

from sluice.kernels.audio.batching import make_batch, pad_stack
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, SampleContext

__all__ = ["SCHEMA"]

SCHEMA = OpSchema(
    "power_spectrum",
    doc="""Computes the power spectrum of a signal along ``axis``: ``|rfft(x, nfft)|**power``.

    The output has ``nfft // 2 + 1`` values along ``axis`` (``nfft`` defaults to the input's extent; a larger
    ``nfft`` zero-pads, a smaller one truncates). ``power`` 2 gives power, 1 magnitude. Example::

        spectrum = fn.power_spectrum(frames, nfft=512, axis=1)
    """,
    inputs=1,
    outputs=1,
    devices=("cpu", "gpu"),
    graph_safe=True,
    args=[
        Arg("axis", int, -1, "Axis transformed to the frequency domain (default: the last)."),
        Arg("nfft", int, None, "FFT size; defaults to the extent of axis.", min=1),
        Arg("power", int, 2, "Exponent of the magnitude: 1 (amplitude) or 2 (power).", choices=(1, 2)),
    ],
)


def _spectrum(x: torch.Tensor, axis: int, nfft: int, power: int) -> torch.Tensor:
    x = x if x.dtype in (torch.float32, torch.float64) else x.float()
    spec = torch.fft.rfft(x, n=nfft, dim=axis)
    out = spec.real.square() + spec.imag.square()
    return out.sqrt() if power == 1 else out


def _check(ndim: int, axis: int, nfft) -> int:
    if ndim == 0 or not -ndim <= axis < ndim:
        raise ValueError(f"power_spectrum: axis {axis} is out of range for a {ndim}-D input")
    if nfft is not None and nfft <= 0:
        raise ValueError(f"power_spectrum: nfft must be > 0, got {nfft}")
    return axis % ndim


@SCHEMA.sample_kernel("cpu")
def power_spectrum_cpu(ctx: SampleContext, x: torch.Tensor, *, axis, nfft, power, **_) -> torch.Tensor:
    ax = _check(x.dim(), axis, nfft)
    return _spectrum(x, ax, nfft or x.shape[ax], power)


@SCHEMA.batch_kernel("gpu")
def power_spectrum_gpu(ctx: BatchContext, x: Batch, *, args: BatchArgs) -> Batch:
    if not len(x):
        return Batch([], x.layout())
    axis, nfft, power = (args.const(k) for k in ("axis", "nfft", "power"))
    dense, shapes = pad_stack(x)
    ax = _check(dense.dim() - 1, axis, nfft)
    if nfft is None and len({s[ax] for s in shapes}) != 1:
        # Zero padding along the FFT axis would change the spectrum: transform each sample on its own.
        return Batch([_spectrum(s, ax, s.shape[ax], power) for s in x], x.layout())
    n = nfft or shapes[0][ax]
    out = _spectrum(dense, ax + 1, n, power)
    return make_batch(out, [s[:ax] + (n // 2 + 1,) + s[ax + 1:] for s in shapes], x.layout())

"""``fn.nonsilent_region``: where a 1-D signal stops being silent, and for how long."""

from __future__ import annotations

import math

import torch

from sluice.kernels.audio.batching import as_signal
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, SampleContext

__all__ = ["SCHEMA", "nonsilent_region"]

SCHEMA = OpSchema(
    "nonsilent_region",
    doc="""Performs leading and trailing silence detection in an audio buffer.

    The short-term power is the mean of ``x**2`` over every window of ``window_length`` samples (every start
    position; a signal shorter than the window is one window). A window is silent when
    ``10 * log10(power / reference_power) < cutoff_db``; ``reference_power`` 0 uses the largest short-term power
    of the signal. Outputs: the first sample of the first non-silent window (int32) and the length (int32) up to
    the end of the last non-silent window; ``(0, 0)`` when everything is silent. Sums are accumulated in float64,
    so ``reset_interval`` (DALI's periodic re-summation against float32 drift) is accepted but not needed.
    Example::

        begin, length = fn.nonsilent_region(audio, cutoff_db=-60)
        speech = fn.slice(audio, begin, length, axes=[0])
    """,
    inputs=1,
    outputs=2,
    devices=("cpu", "gpu"),
    output_layout="",
    args=[
        Arg("cutoff_db", float, -60.0, "Threshold in dB below which the signal is silent."),
        Arg("reference_power", float, 0.0, "Reference power; 0 uses the maximum short-term power."),
        Arg("reset_interval", int, 8192, "Accepted for DALI compatibility (float64 sums need no reset)."),
        Arg("window_length", int, 2048, "Window of the short-term power, in samples."),
    ],
)


def nonsilent_region(x: torch.Tensor, cutoff_db: float, reference_power: float,
                     window_length: int) -> tuple[int, int]:
    """``(begin, length)`` of the non-silent part of the 1-D signal ``x``."""
    if window_length <= 0:
        raise ValueError(f"nonsilent_region: window_length must be > 0, got {window_length}")
    n = x.shape[0]
    if n == 0:
        return 0, 0
    w = min(window_length, n)
    sq = x.to(torch.float64).square()
    csum = torch.nn.functional.pad(torch.cumsum(sq, 0), (1, 0))
    power = (csum[w:] - csum[:-w]) / w                    # window starting at i, for i in 0 .. n - w
    ref = reference_power if reference_power > 0 else float(power.max())
    if ref <= 0:
        return 0, 0
    loud = torch.nonzero(power >= ref * 10.0 ** (cutoff_db / 10.0)).flatten()
    if loud.numel() == 0:
        return 0, 0
    begin, last = int(loud[0]), int(loud[-1])
    return begin, last + w - begin


def _region(x: torch.Tensor, a: dict) -> tuple[int, int]:
    if not math.isfinite(a["cutoff_db"]):
        raise ValueError(f"nonsilent_region: cutoff_db must be finite, got {a['cutoff_db']}")
    return nonsilent_region(as_signal(x, "nonsilent_region"), a["cutoff_db"], a["reference_power"],
                            a["window_length"])


@SCHEMA.sample_kernel("cpu")
def nonsilent_region_cpu(ctx: SampleContext, x: torch.Tensor, **args) -> tuple[torch.Tensor, torch.Tensor]:
    begin, length = _region(x, args)
    return torch.tensor(begin, dtype=torch.int32), torch.tensor(length, dtype=torch.int32)


@SCHEMA.batch_kernel("gpu")
def nonsilent_region_gpu(ctx: BatchContext, x: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
    a = {k: args.const(k) for k in ("cutoff_db", "reference_power", "window_length")}
    # The power profile is computed on the GPU; only the two indices per sample come back to the host.
    results = [_region(s, a) for s in x]
    dev = ctx.device
    begins = torch.tensor([r[0] for r in results], dtype=torch.int32, device=dev)
    lengths = torch.tensor([r[1] for r in results], dtype=torch.int32, device=dev)
    return Batch.from_dense(begins), Batch.from_dense(lengths)

"""``fn.nonsilent_region``: where a 1-D signal stops being silent, and for how long."""

from __future__ import annotations

import math

import numpy as np
import torch

from sluice.errors import SampleError
from sluice.native import signal
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import share_range
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "nonsilent_region"]

SCHEMA = OpSchema(
    "nonsilent_region",
    doc="""Performs leading and trailing silence detection in an audio buffer.

    The short-term power is the mean of ``x**2`` over every window of ``window_length`` samples (every start
    position; a signal shorter than the window is one window). A window is silent when
    ``10 * log10(power / reference_power) < cutoff_db``; ``reference_power`` 0 uses the largest short-term power
    of the signal. Outputs: the first sample of the first non-silent window (int32) and the length (int32) up to
    the end of the last non-silent window; ``(0, 0)`` when everything is silent. Sums are accumulated in float64,
    so ``reset_interval`` (DALI's periodic re-summation against float32 drift) is accepted but not needed. On
    the CPU the batch is analysed by sluice's compiled core in the pipeline's threads, where each signal lies in
    the batch's buffer; on the GPU the whole (padded) batch at once, without copying anything back to the host.
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
        Arg("window_length", int, 2048, "Window of the short-term power, in samples.", min=1),
    ],
)


def nonsilent_region(x: torch.Tensor, lengths: torch.Tensor, cutoff_db: float, reference_power: float,
                     window_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(begin, length)`` (int32, one per row) of the non-silent part of each row of the padded batch ``x``
    ``(B, N)`` whose row ``b`` holds ``lengths[b]`` samples. Vectorised over the batch: no host round trip."""
    if window_length <= 0:
        raise ValueError(f"nonsilent_region: window_length must be > 0, got {window_length}")
    if not math.isfinite(cutoff_db):
        raise ValueError(f"nonsilent_region: cutoff_db must be finite, got {cutoff_db}")
    batch, n_max = x.shape
    dev = x.device
    lengths = lengths.to(dev)
    if batch == 0 or n_max == 0:
        zeros = torch.zeros(batch, dtype=torch.int32, device=dev)
        return zeros, zeros.clone()
    w = torch.clamp(torch.minimum(lengths, torch.full_like(lengths, window_length)), min=1)     # (B,)
    csum = running_sums(x.to(torch.float64).square())                                          # (B, N + 1)
    starts = torch.arange(n_max, device=dev)[None, :]                                          # (1, N)
    valid = starts <= (lengths - w)[:, None]
    ends = torch.clamp(starts + w[:, None], max=n_max)
    power = (torch.gather(csum, 1, ends) - csum[:, :n_max]) / w[:, None]                       # window at s
    power = torch.where(valid, power, torch.full_like(power, -1.0))
    if reference_power > 0:
        ref = torch.full((batch,), float(reference_power), dtype=torch.float64, device=dev)
    else:
        ref = power.amax(dim=1)
    loud = valid & (power >= (ref * 10.0 ** (cutoff_db / 10.0))[:, None]) & (ref > 0)[:, None]
    found = loud.any(dim=1)
    first = torch.argmax(loud.to(torch.int8), dim=1)
    last = n_max - 1 - torch.argmax(loud.flip(1).to(torch.int8), dim=1)
    begin = torch.where(found, first, torch.zeros_like(first))
    length = torch.where(found, last + w - first, torch.zeros_like(first))
    return begin.to(torch.int32), length.to(torch.int32)


_ARGS = ("cutoff_db", "reference_power", "window_length")


def running_sums(squares: torch.Tensor) -> torch.Tensor:
    """``(B, N + 1)`` running sums of each row of ``squares`` as :func:`sluice.native.signal.running_sums` defines
    them (four residues mod 4, each summed in index order, combined as ``(A0 + A1) + (A2 + A3)``): on the CPU the
    same bits as the compiled core; on the GPU torch's scans add in another order."""
    rows, n = squares.shape
    m = -(-n // 4)
    cols = torch.nn.functional.pad(squares, (0, 4 * m - n)).view(rows, m, 4)
    ends = torch.nn.functional.pad(torch.cumsum(cols, dim=1), (0, 0, 1, 0))      # (B, m + 1, 4)
    parts = []
    for j in range(4):
        a = [ends[:, 1:, r] if r < j else ends[:, :-1, r] for r in range(4)]
        parts.append((a[0] + a[1]) + (a[2] + a[3]))
    c = torch.stack(parts, dim=2).reshape(rows, 4 * m)
    last = (ends[:, -1, 0] + ends[:, -1, 1]) + (ends[:, -1, 2] + ends[:, -1, 3])
    return torch.cat([c, last[:, None]], dim=1)[:, : n + 1]


def _signal_lengths(x: Batch) -> np.ndarray:
    """Each sample's length as a one-channel signal ((n,), (n, 1) or (1, n)); raises naming the first other one."""
    shapes = x.shapes_array()
    if shapes.shape[1] == 1:
        return shapes[:, 0]
    if shapes.shape[1] == 2:
        bad = np.flatnonzero((shapes != 1).all(axis=1))
        if not len(bad):
            return shapes.prod(axis=1)
        i = int(bad[0])
    else:
        i = 0
    raise SampleError(i, x.source_info[i] if i < len(x.source_info) else "", ValueError(
        f"nonsilent_region: expected a one-channel signal of shape (n,), (n, 1) or (1, n), got "
        f"{tuple(shapes[i].tolist())}; downmix it first (decoders.audio(downmix=True))"))


def _check(args: BatchArgs) -> tuple[float, float, int]:
    cutoff_db, reference, window = (args.const(k) for k in _ARGS)
    if not math.isfinite(cutoff_db):
        raise ValueError(f"nonsilent_region: cutoff_db must be finite, got {cutoff_db}")
    return cutoff_db, reference, window


@SCHEMA.batch_kernel("cpu")
def nonsilent_region_cpu(ctx: BatchContext, x: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
    """The whole batch in the compiled core (:func:`sluice.native.signal.nonsilent_region`), the signals read where
    they lie in the batch's buffer, in chunks taken by the pipeline's threads with the GIL released."""
    cutoff_db, reference, window = _check(args)
    n = len(x)
    if n == 0:
        return Batch([]), Batch([])
    lengths = _signal_lengths(x)
    flat, _, offsets = x.packed_form()
    data = flat.numpy()
    parts = share_range(ctx.thread_pool, n, lambda lo, hi: signal.nonsilent_region(
        data, offsets[lo:hi], lengths[lo:hi], window=window, factor=10.0 ** (cutoff_db / 10.0),
        reference=reference))
    begin = np.concatenate([p[0] for p in parts])
    length = np.concatenate([p[1] for p in parts])
    return Batch.from_dense(torch.from_numpy(begin)), Batch.from_dense(torch.from_numpy(length))


@SCHEMA.batch_kernel("gpu")
def nonsilent_region_gpu(ctx: BatchContext, x: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
    """The whole batch at once over its padded form (:func:`nonsilent_region`): no host round trip."""
    cutoff_db, reference, window = _check(args)
    if not len(x):
        return Batch([]), Batch([])
    lengths = _signal_lengths(x)
    padded, _ = x.padded(fill=None)
    padded = padded.reshape(len(x), -1)
    begin, length = nonsilent_region(padded, ragged.host_to_device(lengths, padded.device), cutoff_db, reference,
                                     window)
    return Batch.from_dense(begin), Batch.from_dense(length)

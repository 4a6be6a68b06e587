"""Batched windowed-sinc resampling in torch (used on the GPU; runs on the CPU too, where soxr is the default).

The filter is a sinc low-pass at ``min(in_rate, out_rate) / 2`` under a Hann window spanning ``lobes`` zero
crossings on each side; DALI's ``quality`` (0..100) maps to 3..64 lobes (16 at the default 50), as in DALI.
Output sample ``j`` sits at input time ``j * in_rate / out_rate``; samples outside the signal count as zeros;
every output's taps are normalised to unit sum (unit gain at DC).

Two schedules compute the same filter:

* *polyphase* — when the reduced ratio ``out/in = L/M`` has few phases (``L * (M + taps)`` small, e.g.
  44.1 kHz -> 16 kHz is 160/441): the signal is cut into strided frames of ``M + taps`` samples (a view), and one
  matrix product with the ``(L, M + taps)`` phase matrix gives ``L`` outputs per frame for the whole batch.
* *direct* — any other ratio: taps positions and weights are computed per output sample, in chunks.

Example::

    y, out_len = resample_batch(x, torch.tensor([441000, 300000]), 44100, 16000)
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import torch

from sluice.backends.audio import resample_length
from sluice.kernels.audio.spectral import _on_device, to_device, triton_audio

__all__ = ["quality_to_lobes", "polyphase_ratio", "resample_batch", "resample_rows"]

_MAX_PHASE_MATRIX = 1 << 22      # elements of the (L, M + taps) matrix above which the direct schedule is used
_DIRECT_CHUNK = 1 << 24          # (batch * outputs * taps) elements per chunk of the direct schedule


def quality_to_lobes(quality: float) -> int:
    """DALI's mapping of ``quality`` to sinc lobes: 0 -> 3, 50 -> 16, 100 -> 64."""
    if not 0 <= quality <= 100:
        raise ValueError(f"quality must be within [0, 100], got {quality}")
    return int(round(0.007 * quality * quality - 0.09 * quality + 3))


def _kernel(t: np.ndarray | torch.Tensor, cutoff: float, half_width: float, lib):
    """Hann-windowed sinc at offsets ``t`` (input samples); ``cutoff`` in cycles per input sample."""
    arg = 2.0 * cutoff * t
    sinc = lib.sinc(arg)
    win = 0.5 * (1.0 + lib.cos(math.pi * t / half_width))
    return lib.where(lib.abs(t) < half_width, sinc * win, lib.zeros_like(t))


@functools.lru_cache(maxsize=32)
def _phase_matrix(L: int, M: int, lobes: int) -> tuple[np.ndarray, int, int]:
    """``(L, M + 2 * half)`` float64 matrix: row ``p`` weights the frame samples for output ``q * L + p``.

    Frame ``q`` covers input samples ``q * M - half + 1 ... q * M - half + M + 2 * half``."""
    cutoff = 0.5 * min(1.0, L / M)
    half_width = lobes / (2.0 * cutoff)
    half = int(math.ceil(half_width)) + 1
    width = M + 2 * half
    k = np.arange(width, dtype=np.float64)[None, :] - half + 1       # input offset of column k from q * M
    p = np.arange(L, dtype=np.float64)[:, None]
    t = p * M / L - k                                                 # output time minus input position
    w = _kernel(t, cutoff, half_width, np)
    w /= w.sum(axis=1, keepdims=True)
    w.setflags(write=False)
    return w, half, width


def _polyphase(x: torch.Tensor, n_out: int, L: int, M: int, lobes: int) -> torch.Tensor:
    w_np, half, width = _phase_matrix(L, M, lobes)
    w = _on_device(w_np, x.dtype, str(x.device))                   # cached: no per-batch copy (and stream sync)
    q = -(-n_out // L)                                               # frames needed
    need = (q - 1) * M + width                                       # padded input length for q frames
    left = half - 1
    right = max(0, need - left - x.shape[1])
    xp = torch.nn.functional.pad(x, (left, right))
    frames = xp.unfold(1, width, M)[:, :q]                           # (B, q, width), a strided view
    out = torch.matmul(frames, w.T)                                  # (B, q, L)
    return out.reshape(x.shape[0], q * L)[:, :n_out]


def _direct(x: torch.Tensor, n_out: int, in_rate: float, out_rate: float, lobes: int) -> torch.Tensor:
    ratio = float(out_rate) / float(in_rate)
    cutoff = 0.5 * min(1.0, ratio)
    half_width = lobes / (2.0 * cutoff)
    half = int(math.ceil(half_width)) + 1
    taps = 2 * half
    batch, n_in = x.shape
    xp = torch.nn.functional.pad(x, (half, half + 1))
    out = x.new_empty(batch, n_out)
    chunk = max(1, _DIRECT_CHUNK // max(1, batch * taps))
    k = torch.arange(taps, device=x.device, dtype=torch.int64) - half + 1
    for s in range(0, n_out, chunk):
        j = torch.arange(s, min(n_out, s + chunk), device=x.device, dtype=torch.float64)
        centre = j / ratio
        base = torch.floor(centre).to(torch.int64)
        pos = base[:, None] + k[None, :]                               # (J, taps) input positions
        w = _kernel(centre[:, None] - pos.to(torch.float64), cutoff, half_width, torch)
        w = (w / w.sum(dim=1, keepdim=True)).to(x.dtype)
        idx = (pos + half).clamp(0, xp.shape[1] - 1)                  # positions in the padded signal
        out[:, s: s + j.shape[0]] = (xp[:, idx] * w).sum(-1)
    return out


def polyphase_ratio(in_rate: float, out_rate: float, lobes: int) -> tuple[int, int] | None:
    """``(L, M)``, the reduced ratio ``out_rate / in_rate``, where the polyphase schedule serves this pair (an exact
    ratio whose phase matrix is small enough); None where the direct schedule runs."""
    frac = Fraction(float(out_rate) / float(in_rate)).limit_denominator(1 << 20)
    L, M = frac.numerator, frac.denominator
    exact = abs(L / M - float(out_rate) / float(in_rate)) < 1e-12
    half = int(math.ceil(lobes / min(1.0, L / M))) + 1
    return (L, M) if exact and L * (M + 2 * half) <= _MAX_PHASE_MATRIX else None


@functools.lru_cache(maxsize=32)
def _phase_taps(L: int, M: int, lobes: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The phase matrix (:func:`_phase_matrix`) cut to each row's run of nonzero weights: ``((taps, L)`` float32
    weights, tap-major and zero-padded; ``(L,)`` int64 column of each run's first weight; the frames' left margin
    ``half - 1``)."""
    w, half, width = _phase_matrix(L, M, lobes)
    nonzero = w != 0
    first = nonzero.argmax(1)
    last = width - 1 - nonzero[:, ::-1].argmax(1)
    taps = int((last - first + 1).max())
    cols = first[:, None] + np.arange(taps)[None, :]
    compact = np.where(cols <= last[:, None], w[np.arange(L)[:, None], np.minimum(cols, width - 1)], 0.0)
    compact = np.ascontiguousarray(compact.T.astype(np.float32))
    first = first.astype(np.int64)
    compact.setflags(write=False)
    first.setflags(write=False)
    return compact, first, half - 1


def resample_rows(flat: torch.Tensor, table: np.ndarray, out: torch.Tensor, in_rate: float, out_rate: float,
                  quality: float, scale: float) -> bool:
    """Resample 1-D signals of one rate pair where they lie, by one Triton launch, into rows of ``out`` (a
    ``(rows, extent)`` float32 CUDA tensor): ``table`` (int64, on the host) holds per signal ``(start in flat,
    length, output length, output row)``; samples are divided by ``scale`` as read (an integer type's largest
    value, as :func:`sluice.ops.audio.resample.convert_audio_dtype` converts, or 1; the sums are divided, within a
    float32 rounding of converting first). The filter is
    :func:`resample_batch`'s polyphase schedule, its zero weights skipped. False, doing nothing, where that
    schedule does not serve the pair (equal rates, an inexact or large ratio) or Triton is missing."""
    k = triton_audio()
    lobes = quality_to_lobes(quality)
    ratio = None if float(in_rate) == float(out_rate) else polyphase_ratio(in_rate, out_rate, lobes)
    if k is None or ratio is None:
        return False
    rows, extent = len(table), out.shape[1]
    if rows == 0 or extent == 0:
        return True
    weights, first, left = _phase_taps(*ratio, lobes)
    dev = str(out.device)
    block = 1024
    grid = (-(-int(np.asarray(table)[:, 2].max()) // block), rows)
    k.polyphase_kernel[grid](flat, to_device(torch.from_numpy(np.ascontiguousarray(table, np.int64)), out.device),
                             _on_device(weights, torch.float32, dev), _on_device(first, torch.int64, dev), out,
                             extent, ratio[0], ratio[1], left, weights.shape[0], float(scale), BLOCK=block)
    return True


def resample_batch(signals: torch.Tensor, lengths: torch.Tensor, in_rate: float, out_rate: float,
                   quality: float = 50.0) -> tuple[torch.Tensor, list[int]]:
    """Resample a padded batch ``(B, N)`` (or ``(B, N, C)``) of signals sharing one rate pair.

    Samples of row ``b`` past ``lengths[b]`` must be zero (they are treated as the silence after the signal).
    Returns the padded output (float32, or float64 for float64 input) and the per-signal output lengths
    (:func:`sluice.backends.audio.resample_length`, DALI's ``ceil(length * out_rate / in_rate)``).
    """
    if in_rate <= 0 or out_rate <= 0:
        raise ValueError(f"sample rates must be > 0, got in_rate={in_rate}, out_rate={out_rate}")
    lobes = quality_to_lobes(quality)
    dtype = signals.dtype if signals.dtype == torch.float64 else torch.float32
    x = signals.to(dtype)
    channels = x.shape[2] if x.dim() == 3 else None
    if channels is not None:
        x = x.permute(0, 2, 1).reshape(-1, x.shape[1])
    out_lengths = resample_length(np.asarray(lengths.tolist(), dtype=np.int64), in_rate, out_rate).tolist()
    n_out = max(out_lengths, default=0)
    if x.shape[0] == 0 or n_out == 0 or x.shape[1] == 0:
        y = x.new_zeros(x.shape[0], n_out)
    elif float(in_rate) == float(out_rate):
        y = x[:, :n_out]
    else:
        ratio = polyphase_ratio(in_rate, out_rate, lobes)
        y = _polyphase(x, n_out, *ratio, lobes) if ratio else _direct(x, n_out, in_rate, out_rate, lobes)
    if channels is not None:
        y = y.reshape(-1, channels, n_out).permute(0, 2, 1)
    return y, out_lengths

"""Triton kernels of the speech operators on a GPU, each ONE launch for a ragged batch:

* :func:`preemphasis_kernel` (``fn.preemphasis_filter``, :mod:`sluice.ops.audio.preemphasis`): 1-D signals read
  where they lie (the packed form, at any offsets, or the rows of a padded one) and filtered into the rows of the
  padded output;
* :func:`frames_kernel` and :func:`power_kernel` (``fn.spectrogram``'s ragged batches,
  :func:`sluice.kernels.audio.spectral.stft_power`): every signal's windowed frames, each signal extended at its
  own ends; then the power of the batched FFT;
* :func:`polyphase_kernel` (``fn.audio_resample`` on a GPU, :func:`sluice.kernels.audio.resample.resample_rows`):
  every signal of one rate pair resampled where it lies, integers converted as they are read, only the nonzero
  taps of each phase summed (the torch schedule's matrix product pads the batch to its longest signal, converts
  it, and multiplies the phase matrix's zeros too: 533 columns of which about 90 are nonzero at 44.1 -> 16 kHz).

The torch paths took about ten launches each (index arithmetic, a gather, shifted copies, window products) and as
many temporaries, each a trip through the GIL for the device stage's thread, which shares it with the CPU stage's.

Imported on first use, only where Triton and CUDA are present (importing Triton takes a second of start-up).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["preemphasis_kernel", "frames_kernel", "power_kernel", "polyphase_kernel", "BLOCK", "BORDERS"]

BLOCK = 2048
BORDERS = {"zero": 0, "clamp": 1, "reflect": 2}


@triton.jit
def preemphasis_kernel(x_ptr, table_ptr, coeff_ptr, out_ptr, extent, coeff, PER_SAMPLE: tl.constexpr,
                       BORDER: tl.constexpr, BLOCK: tl.constexpr):
    """Row ``i`` of the ``(n, extent)`` float32 output: ``y[t] = x[t] - c * x[t - 1]`` for ``t < length_i`` with
    ``x[-1]`` the border value (0, ``x[0]``, or ``x[1]`` when the signal has two samples or more), 0 beyond.
    ``table`` holds ``(start_i, length_i)`` as int64 pairs; ``c`` is ``coeff``, or ``coeff_ptr[i]``."""
    i = tl.program_id(1)
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    start = tl.load(table_ptr + 2 * i)
    length = tl.load(table_ptr + 2 * i + 1)
    inside = t < length
    base = x_ptr + start
    x = tl.load(base + t, mask=inside, other=0).to(tl.float32)
    prev = tl.load(base + t - 1, mask=inside & (t > 0), other=0).to(tl.float32)
    if BORDER == 1:
        prev = tl.where(t == 0, x, prev)
    if BORDER == 2:
        two = (t * 0 + length) > 1          # as a block: a scalar mask is not a load's mask everywhere
        second = tl.load(base + t + 1, mask=(t == 0) & two, other=0).to(tl.float32)
        prev = tl.where(t == 0, tl.where(two, second, x), prev)
    if PER_SAMPLE:
        c = tl.load(coeff_ptr + i)
    else:
        c = coeff
    y = tl.where(inside, x - c * prev, 0.0)
    tl.store(out_ptr + i.to(tl.int64) * extent + t, y, mask=t < extent)


@triton.jit
def frames_kernel(x_ptr, len_ptr, w_ptr, out_ptr, x_stride, frames, step, offset, NFFT: tl.constexpr,
                  REFLECT: tl.constexpr, BLOCK: tl.constexpr):
    """Frame ``t`` of signal ``b`` (row ``b`` of a padded ``(B, x_stride)`` batch holding ``len_ptr[b]`` samples),
    windowed: ``out[b, t, k] = x[b, p] * w[k]`` for ``k < NFFT``, ``p = t * step + k - offset`` mirrored into the
    signal (``REFLECT``, NumPy's ``pad(mode="reflect")``; a one-sample signal repeats) or 0 outside it. ``w`` is the
    window zero-padded to ``NFFT``. ``out`` is ``(B, frames, NFFT)``."""
    t = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    k = tl.arange(0, BLOCK)
    n = k * 0 + tl.load(len_ptr + b)       # as a block: a scalar in a load's mask is not taken everywhere
    p = t * step + k - offset
    if REFLECT:
        period = tl.maximum(2 * (n - 1), 1)
        m = p % period
        m = tl.where(m < 0, m + period, m)
        m = tl.where(m >= n, period - m, m)
        m = tl.where(n > 1, m, 0)
        src = tl.minimum(m, tl.maximum(n - 1, 0))
        inside = (k < NFFT) & (n > 0)
    else:
        src = p
        inside = (k < NFFT) & (p >= 0) & (p < n)
    x = tl.load(x_ptr + b * x_stride + src, mask=inside, other=0.0)
    w = tl.load(w_ptr + k, mask=k < NFFT, other=0.0)
    tl.store(out_ptr + (b * frames + t) * NFFT + k, x * w, mask=k < NFFT)


@triton.jit
def power_kernel(spec_ptr, out_ptr, spec_frames, frames, NBINS: tl.constexpr, MAGNITUDE: tl.constexpr,
                 BLOCK: tl.constexpr):
    """Frame ``t`` of row ``b`` of the spectra: ``re^2 + im^2`` (its square root with ``MAGNITUDE``) of the complex
    ``(B, spec_frames, NBINS)`` FFT (read as float pairs) into the ``(B, frames, NBINS)`` output."""
    t = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    f = tl.arange(0, BLOCK)
    keep = f < NBINS
    at = ((b * spec_frames + t) * NBINS + f) * 2
    re = tl.load(spec_ptr + at, mask=keep, other=0.0)
    im = tl.load(spec_ptr + at + 1, mask=keep, other=0.0)
    p = re * re + im * im
    if MAGNITUDE:
        p = tl.sqrt(p)
    tl.store(out_ptr + (b * frames + t) * NBINS + f, p, mask=keep)


@triton.jit
def polyphase_kernel(x_ptr, table_ptr, w_ptr, first_ptr, out_ptr, extent, L, M, left, taps, scale,
                     BLOCK: tl.constexpr):
    """``fn.audio_resample`` of one rate pair ``L / M``, each signal read where it lies: output ``j = q * L + p`` of
    signal ``r`` is ``sum_t w[t, p] * x[q * M - left + first[p] + t] / scale``, ``x`` read as float32 (``scale``:
    1 for floats, the integer type's largest value for integers; divided once, after the sum) and 0 outside
    ``[0, length_r)``; 0 from the signal's output length on. ``w`` holds each phase's nonzero taps, tap-major
    (``(taps, L)``, zero-padded: neighbouring outputs read neighbouring weights), ``first`` where they start in
    the phase matrix's frame. ``table`` row ``r`` holds ``(start, length, out_length, output row)`` as int64; the
    output is ``(rows, extent)`` float32."""
    r = tl.program_id(1)
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    start = tl.load(table_ptr + 4 * r)
    length = tl.load(table_ptr + 4 * r + 1)
    n_out = tl.load(table_ptr + 4 * r + 2)
    row = tl.load(table_ptr + 4 * r + 3)
    live = j < n_out
    q = j // L
    p = j - q * L
    pos = q * M - left + tl.load(first_ptr + p, mask=live, other=0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for t in range(0, taps):
        at = pos + t
        x = tl.load(x_ptr + start + at, mask=live & (at >= 0) & (at < length), other=0).to(tl.float32)
        w = tl.load(w_ptr + t * L + p, mask=live, other=0.0)
        acc += x * w
    tl.store(out_ptr + row * extent + j, acc / scale, mask=j < extent)

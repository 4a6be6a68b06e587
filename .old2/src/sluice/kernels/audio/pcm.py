"""Batched conversion of raw WAV sample bytes (PCM 8/16/24/32-bit, IEEE float 32/64-bit) to audio, with
libsndfile's exact arithmetic, on any device (the mixed audio decoder runs it on the GPU; tests on the CPU).

The input is a ``(rows, row_bytes)`` uint8 tensor whose row ``i`` holds the interleaved little-endian samples of
one signal; the output is ``(rows, frames, channels)`` (or ``(rows, frames)`` downmixed) of the requested type.
The conversions are libsndfile's (``sf_read_short`` / ``_int`` / ``_float`` with normalisation on, soundfile's
default), so that the result equals ``soundfile.read(..., dtype=...)`` bit for bit:

==========  ===================  ==================  =====================================
source      int16                int32               float32
==========  ===================  ==================  =====================================
u8          (u - 128) << 8       (u - 128) << 24     (u - 128) / 2^7
s16         s                    s << 16             s / 2^15
s24         s >> 8 (truncates)   s << 8              s / 2^23
s32         s >> 16 (truncates)  s                   float(s) / 2^31 (rounded to nearest)
f32 / f64   rint(x), clipped     rint(x), clipped    x (f64: rounded to nearest)
==========  ===================  ==================  =====================================

(libsndfile reads float files as integers without scaling, ``rint(x)``, unless asked to; soundfile does not ask.)
Downmixing averages the converted channels in float64 and rounds to nearest-even for integer types, as
:func:`sluice.backends.audio.read_into` does.

Example::

    raw = torch.frombuffer(bytearray(pcm16_bytes), dtype=torch.uint8).view(1, -1)
    audio = pcm_to_audio(raw, "s16", channels=2, frames=raw.shape[1] // 4, dtype=torch.float32)   # (1, n, 2)
"""

from __future__ import annotations

import torch

__all__ = ["PAD_BYTE", "SAMPLE_BYTES", "pcm_to_audio"]

#: Bytes per sample of each format.
SAMPLE_BYTES = {"u8": 1, "s16": 2, "s24": 3, "s32": 4, "f32": 4, "f64": 8}
#: The byte that decodes to silence (rows are padded with it beyond their samples).
PAD_BYTE = {"u8": 0x80}


def _integers(raw: torch.Tensor, fmt: str) -> tuple[torch.Tensor, int]:
    """Integer samples and their width in bits (u8 comes back signed, s24 as a 32-bit value shifted left by 8)."""
    if fmt == "u8":
        return raw.to(torch.int16) - 128, 8
    if fmt == "s16":
        return raw.view(torch.int16), 16
    if fmt == "s32":
        return raw.view(torch.int32), 32
    # s24: three little-endian bytes, left-justified in an int32 as libsndfile does (exact in float32 too)
    b = raw.reshape(raw.shape[0], -1, 3).to(torch.int64)
    v = (b[..., 0] << 8) | (b[..., 1] << 16) | (b[..., 2] << 24)
    return torch.where(v >= 1 << 31, v - (1 << 32), v).to(torch.int32), 32


def _float_to_int(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float samples read as integers, as libsndfile does with clipping on (soundfile's setting): ``lrint(x)``,
    clipped above the type's maximum and below -32768.0 / -2147483647.0 (libsndfile's thresholds), NaN giving
    INT_MIN (x86's cvtsd2si), of which int16 keeps the low bits (0). Compared in float64: float32 cannot hold
    2147483647.0."""
    x = x.to(torch.float64)
    info = torch.iinfo(dtype)
    low = -32768.0 if dtype == torch.int16 else -2147483647.0
    r = torch.where(torch.isnan(x), float(torch.iinfo(torch.int32).min), torch.round(x))
    r = torch.where(x > info.max, float(info.max), torch.where(x < low, float(info.min), r))
    return r.to(torch.int64).to(dtype)   # C's narrowing conversion


def _convert(raw: torch.Tensor, fmt: str, dtype: torch.dtype) -> torch.Tensor:
    """``(rows, samples)`` raw bytes -> ``(rows, samples)`` of ``dtype`` (see the module's table)."""
    if fmt in ("f32", "f64"):
        x = raw.view(torch.float32 if fmt == "f32" else torch.float64)
        if dtype == torch.float32:
            return x.to(torch.float32)
        return _float_to_int(x, dtype)
    v, bits = _integers(raw, fmt)
    if dtype == torch.float32:
        return v.to(torch.float32) * (2.0 ** (1 - bits))
    target = 16 if dtype == torch.int16 else 32
    if bits < target:
        return v.to(dtype) << (target - bits)
    if bits > target:
        return (v >> (bits - target)).to(dtype)
    return v.to(dtype)


def pcm_to_audio(raw: torch.Tensor, fmt: str, *, channels: int, frames: int, dtype: torch.dtype,
                 downmix: bool = False) -> torch.Tensor:
    """Convert the first ``frames * channels`` samples of each row of ``raw`` ((rows, row_bytes) uint8, rows
    padded with :data:`PAD_BYTE` beyond their own samples) to ``dtype`` (int16, int32 or float32).

    ``fmt`` is a key of :data:`SAMPLE_BYTES`, or ``"native"`` when the rows already hold samples of ``dtype``
    (decoded elsewhere; they are then only reinterpreted). Returns ``(rows, frames, channels)``, or
    ``(rows, frames)`` when ``downmix`` averages the channels (or ``channels`` is 1 and ``downmix`` is set)."""
    if dtype not in (torch.int16, torch.int32, torch.float32):
        raise ValueError(f"Invalid dtype ({dtype}). Supported values are torch.int16, torch.int32, torch.float32.")
    rows = raw.shape[0]
    width = dtype.itemsize if fmt == "native" else SAMPLE_BYTES[fmt]
    body = raw[:, : frames * channels * width]
    out = body.view(dtype) if fmt == "native" else _convert(body, fmt, dtype)
    out = out.reshape(rows, frames, channels)
    if not downmix:
        return out
    if channels == 1:
        return out[..., 0]
    mean = out.to(torch.float64).mean(dim=2)
    return mean.to(dtype) if dtype.is_floating_point else torch.round(mean).to(dtype)

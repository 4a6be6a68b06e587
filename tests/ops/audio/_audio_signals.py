"""Test signals for the audio tests: sine sweeps and tone mixtures made with NumPy (deterministic)."""

from __future__ import annotations

import io

import numpy as np


def sweep(n: int, rate: int = 16000, f0: float = 100.0, f1: float = 4000.0, amp: float = 0.5,
          seed: int = 0) -> np.ndarray:
    """A linear sine sweep from ``f0`` to ``f1`` Hz over ``n`` samples, plus a little noise (float64)."""
    t = np.arange(n) / rate
    dur = max(n / rate, 1e-9)
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * dur))
    noise = np.random.default_rng(seed).normal(0, 0.01, n)
    return amp * np.sin(phase) + noise


def tones(n: int, rate: int, freqs=(440.0, 1000.0, 3000.0), amps=(0.4, 0.3, 0.1)) -> np.ndarray:
    """A sum of sines (float64)."""
    t = np.arange(n) / rate
    return sum(a * np.sin(2 * np.pi * f * t) for f, a in zip(freqs, amps))


def encode(signal: np.ndarray, rate: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    """Encode ``signal`` ((n,) or (n, channels), float in [-1, 1]) with soundfile."""
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, signal, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def rel_err(actual, expected) -> float:
    """max |actual - expected| / max |expected|: the error relative to the reference's scale."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = np.abs(expected).max()
    return float(np.abs(actual - expected).max() / (scale if scale > 0 else 1.0))

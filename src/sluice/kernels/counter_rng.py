"""Counter-based random numbers for the elements of a batch: the same values on the CPU and on the GPU, drawn in a
few whole-batch launches, whatever the batch's raggedness.

Each element's numbers are a function of its sample's two 32-bit keys (drawn from the sample's seeded generator,
so that a sample's noise does not depend on its batch), the element's counter (its index in the sample, or the
index of its pixel when channels share their noise) and a stream number (one per random number an element needs)::

    bits = mix(mix(counter ^ key1) ^ (key2 + stream * 0x9E3779B9))

``mix`` is a 32-bit integer hash (xor-shift-multiply; the low-bias constants 0x21F0AAAD and 0x735A2D97 found by
Chris Wellons' hash prospector). The arithmetic runs on int64 tensors holding 32-bit values and never overflows
(the multipliers are below 2**31), so it is exact, and equal, on every device. Uniform floats take the top 24 bits;
normal values come from the Box-Muller transform; Poisson values from inversion (rates below 10) or Hörmann's
transformed rejection PTRS (rates of 10 and more, as NumPy draws them), in float64.

Example::

    >>> from sluice.kernels.ragged import segments
    >>> rng = CounterRNG(np.array([[1, 2]], np.uint32), *segments(np.array([4]), torch.device("cpu")))
    >>> rng.uniform(0).shape
    torch.Size([4])
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from sluice.kernels.ragged import per_element

__all__ = ["CounterRNG", "mix32", "sample_keys", "stream_key"]

M32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
_C1 = 0x21F0AAAD
_C2 = 0x735A2D97
_SMALL_RATE = 10.0


def mix32(x: torch.Tensor) -> torch.Tensor:
    """The 32-bit hash of ``x`` (int64 holding values in [0, 2**32)), elementwise."""
    x = x ^ (x >> 16)
    x = (x * _C1) & M32
    x = x ^ (x >> 15)
    x = (x * _C2) & M32
    return x ^ (x >> 15)


def stream_key(key2, stream: int):
    """What the bits of ``stream`` mix with the hashed counter: ``(key2 + stream * 0x9E3779B9) & 0xFFFFFFFF`` (an
    int, NumPy array or tensor of second keys)."""
    return (key2 + stream * _GOLDEN) & M32


def sample_keys(n: int, rng_of: Callable[[int], np.random.Generator]) -> np.ndarray:
    """Two 32-bit keys for each of ``n`` samples, one row each, drawn from ``rng_of(i)`` (the sample's generator;
    each is used at once, so a generator re-keyed per call serves)."""
    if not n:
        return np.zeros((0, 2), np.int64)
    return np.stack([rng_of(i).integers(0, 1 << 32, size=2, dtype=np.int64) for i in range(n)])


class CounterRNG:
    """Random numbers for elements identified by their sample (``seg``) and ``counter`` (both int64 tensors on the
    device the numbers are wanted on), given each sample's ``keys`` (an (n, 2) array)."""

    def __init__(self, keys: np.ndarray, seg: torch.Tensor | None, counter: torch.Tensor):
        keys = np.asarray(keys, np.int64).reshape(-1, 2)
        if seg is None:  # the elements of one sample (keys one row): its keys as scalars, nothing spread
            self._base = mix32((counter & M32) ^ int(keys[0, 0]))
            self._key2: torch.Tensor | int = int(keys[0, 1])
        else:
            self._base = mix32((counter & M32) ^ per_element(keys[:, 0], seg))
            self._key2 = per_element(keys[:, 1], seg)

    def bits(self, stream: int, index: torch.Tensor | None = None) -> torch.Tensor:
        """32 random bits per element (int64), or per element of ``index`` (positions into the elements)."""
        key2 = self._key2
        base = self._base if index is None else self._base[index]
        if index is not None and isinstance(key2, torch.Tensor):
            key2 = key2[index]
        return mix32(base ^ stream_key(key2, stream))

    def uniform(self, stream: int, index: torch.Tensor | None = None, dtype: torch.dtype = torch.float32,
                open_low: bool = False) -> torch.Tensor:
        """Uniform values in [0, 1) (``open_low``: in (0, 1]), multiples of 2**-24."""
        top = (self.bits(stream, index) >> 8).to(dtype)
        return (top + 1 if open_low else top) * (2.0 ** -24)

    def normal(self, stream: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Standard normal values (Box-Muller over the streams ``stream`` and ``stream + 1``)."""
        u1 = self.uniform(stream, dtype=dtype, open_low=True)
        u2 = self.uniform(stream + 1, dtype=dtype)
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u2)

    def poisson(self, rate: torch.Tensor, stream: int = 0, max_rounds: int = 64) -> torch.Tensor:
        """Poisson values (float64) of the per-element ``rate`` (float64, non-negative). Rates below 10 invert the
        cumulative distribution; larger ones run PTRS rounds on the elements still pending (two streams a round)."""
        out = torch.zeros_like(rate)
        small = torch.nonzero((rate > 0) & (rate < _SMALL_RATE)).reshape(-1)
        if small.numel():
            lam = rate[small]
            u = self.uniform(stream, small, torch.float64)
            # enough terms for the largest rate: its tail beyond lam + 8 sqrt(lam) + 10 is below 1e-12
            top = float(lam.max())
            terms = int(math.ceil(top + 8.0 * math.sqrt(top) + 10.0))
            p = torch.exp(-lam)
            cdf = p.clone()
            k = torch.zeros_like(lam)
            for i in range(1, terms + 1):
                k += (u > cdf).to(k.dtype)
                p = p * lam / i
                cdf = cdf + p
            out[small] = k
        pending = torch.nonzero(rate >= _SMALL_RATE).reshape(-1)
        if pending.numel():
            lam = rate[pending]
            slam, loglam = torch.sqrt(lam), torch.log(lam)
            b = 0.931 + 2.53 * slam
            a = -0.059 + 0.02483 * b
            log_invalpha = torch.log(1.1239 + 1.1328 / (b - 3.4))
            vr = 0.9277 - 3.6224 / (b - 2.0)
            for r in range(max_rounds):
                uu = self.uniform(stream + 1 + 2 * r, pending, torch.float64) - 0.5
                v = self.uniform(stream + 2 + 2 * r, pending, torch.float64)
                us = 0.5 - uu.abs()
                k = torch.floor((2.0 * a / us + b) * uu + lam + 0.43)
                quick = (us >= 0.07) & (v <= vr)
                usable = (k >= 0) & ~((us < 0.013) & (v > us))
                bound = -lam + k * loglam - torch.lgamma(k.clamp(min=0) + 1.0)
                slow = usable & (torch.log(v) + log_invalpha - torch.log(a / (us * us) + b) <= bound)
                accept = quick | slow
                out[pending[accept]] = k[accept]
                keep = ~accept
                pending, lam, slam, loglam = pending[keep], lam[keep], slam[keep], loglam[keep]
                b, a, log_invalpha, vr = b[keep], a[keep], log_invalpha[keep], vr[keep]
                if not pending.numel():
                    break
            else:  # practically never (each round accepts about 9 in 10): the rate itself
                out[pending] = torch.round(lam)
        return out

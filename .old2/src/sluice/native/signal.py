"""Per-signal analysis of a packed batch, with the GIL released (see :mod:`sluice.native`).

:func:`nonsilent_region` finds the non-silent part of each 1-D signal of a packed buffer: the short-term power of
every window of ``window`` samples is the mean of ``x**2`` (:func:`running_sums` of ``x**2`` in float64, the same
bits in the compiled core, this module's NumPy twin and the operator's torch function on the CPU);
a window is loud when its power is at least ``reference * factor`` (``factor = 10 ** (cutoff_db / 10)``;
``reference`` 0 takes the signal's largest power). The result is the first sample of the first loud window and the
length up to the end of the last, ``(0, 0)`` when nothing is loud.

Example::

    begin, length = nonsilent_region(flat, offsets, lengths, window=2048, factor=1e-6)
"""

from __future__ import annotations

import numpy as np

from sluice.native import core

__all__ = ["nonsilent_region", "running_sums"]


def running_sums(squares: np.ndarray) -> np.ndarray:
    """``c[k]``, ``k = 0..n``: the running sums of ``squares`` (float64) as sluice defines them: four sums, one per
    residue of the index mod 4, each added in index order, combined as ``(A0 + A1) + (A2 + A3)`` (four chains of
    additions let the compiled core add four at a time; its values are these to the bit)."""
    n = squares.size
    m = -(-n // 4)
    cols = np.zeros((m, 4))
    cols.reshape(-1)[:n] = squares
    ends = np.zeros((m + 1, 4))
    np.cumsum(cols, axis=0, out=ends[1:])          # ends[q, r]: the sum of residue r over the blocks before q
    c = np.empty(4 * m + 1)
    c[0::4] = (ends[:, 0] + ends[:, 1]) + (ends[:, 2] + ends[:, 3])
    for j in (1, 2, 3):                            # c[4q + j]: residues below j include block q
        a = [ends[1:, r] if r < j else ends[:-1, r] for r in range(4)]
        c[j::4] = (a[0] + a[1]) + (a[2] + a[3])
    return c[: n + 1]


def nonsilent_region(data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, *, window: int, factor: float,
                     reference: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(begin, length)`` (int32 arrays) of signal ``i`` = ``data[offsets[i]: offsets[i] + lengths[i]]``.
    ``data``: a contiguous 1-D array of any real sample type. One core call, the GIL released."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if window < 1:
        raise ValueError(f"nonsilent_region: window_length must be >= 1, got {window}")
    c = core()
    if c is not None:
        return c.nonsilent_region(np.ascontiguousarray(data).reshape(-1), offsets, lengths, int(window), float(factor),
                                  float(reference))
    return _nonsilent_region_py(data.reshape(-1), offsets, lengths, int(window), float(factor), float(reference))


def _nonsilent_region_py(data, offsets, lengths, window, factor, reference):
    n = len(offsets)
    begin, length = np.zeros(n, np.int32), np.zeros(n, np.int32)
    if ((offsets < 0) | (lengths < 0) | (offsets + lengths > data.size)).any():
        raise IndexError("nonsilent_region: a sample lies outside the buffer")
    for i, (o, count) in enumerate(zip(offsets.tolist(), lengths.tolist())):
        if count <= 0:
            continue
        w = max(1, min(count, window))
        x = data[o: o + count].astype(np.float64)
        sums = running_sums(x * x)
        power = (sums[w:] - sums[: count - w + 1]) / float(w)
        ref = reference if reference > 0 else power.max()
        if not ref > 0:
            continue
        loud = np.flatnonzero(power >= ref * factor)
        if len(loud):
            begin[i], length[i] = loud[0], loud[-1] + w - loud[0]
    return begin, length

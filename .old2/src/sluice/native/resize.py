"""Separable antialiased resampling of a batch of uint8 images into one buffer (see :mod:`sluice.native`).

The algorithm is :func:`sluice.kernels.resample.resample`'s (filters nn, linear, cubic, lanczos3, gaussian,
triangular; widened by the scale when shrinking with ``antialias``; taps outside the image dropped and the rest
renormalised; ROIs fractional, flipped or outside the image; the horizontal pass on the rows the vertical pass
needs, then the vertical pass, in float32; rounding half away from zero last). Its arithmetic is pinned down here
so that the compiled core and the NumPy twin below give identical bytes: weights summed tap by tap in float64 and
divided by that sum, then rounded to float32; each pass adds the float32 products tap by tap. The torch path
sums in another order, so the two agree within 1 grey level. Several threads may share a batch through a
``counter`` (as in :func:`sluice.native.jpeg.decode`). Example::

    from sluice.native import resize
    out = np.empty((n, 224, 224, 3), np.uint8)
    resize.resize(images, rois, np.full((n, 2), 224), FILTER_IDS["linear"], FILTER_IDS["linear"], True,
                  out.reshape(-1), np.arange(n) * 224 * 224 * 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sluice.kernels.resample import FILTER_IDS, filter_radius
from sluice.native import core
from sluice.native.jpeg import take

__all__ = ["resize", "axis_table"]

_NN, _LINEAR, _CUBIC, _LANCZOS3, _GAUSSIAN, _TRIANGULAR = (FILTER_IDS[k] for k in (
    "nn", "linear", "cubic", "lanczos3", "gaussian", "triangular"))


def resize(images: Sequence[np.ndarray], rois: np.ndarray, out_sizes: np.ndarray, min_filter: int, mag_filter: int,
           antialias: bool, out: np.ndarray, out_offsets: np.ndarray, counter: np.ndarray | None = None) -> None:
    """Resample each of ``images`` (C-contiguous uint8 ``HW`` or ``HWC``) from its region ``rois[i] = (y0, x0,
    y1, x1)`` (float64) to ``out_sizes[i] = (oh, ow)`` and write it as ``oh x ow x C`` HWC rows into ``out``
    (1-D uint8) at ``out_offsets[i]``. ``min_filter`` / ``mag_filter`` are filter ids
    (:data:`sluice.kernels.resample.FILTER_IDS`) for the axes that shrink / grow. With ``counter`` (one int64
    shared by calls in other threads) the call takes the next untaken image until none is left."""
    rois = np.ascontiguousarray(rois, np.float64)
    out_sizes = np.ascontiguousarray(out_sizes, np.int64)
    out_offsets = np.ascontiguousarray(out_offsets, np.int64)
    c = core()
    if c is not None:
        c.resize(images, rois, out_sizes, int(min_filter), int(mag_filter), bool(antialias), out, out_offsets,
                 counter)
        return
    for i in take(counter, len(images)):
        image = images[i] if images[i].ndim == 3 else images[i][:, :, None]
        oh, ow = (int(v) for v in out_sizes[i])
        start = int(out_offsets[i])
        dst = out[start: start + oh * ow * image.shape[2]].reshape(oh, ow, image.shape[2])
        dst[:] = _resize_one(image, rois[i], oh, ow, min_filter, mag_filter, antialias)


def _filter_weights(fid: int, d: np.ndarray) -> np.ndarray:
    """Filter ``fid`` at distances ``d`` (float64). sin and exp run per element through Python's math module (the
    C library, as in the core): NumPy's vectorised versions may differ in the last bit."""
    a = np.abs(d)
    if fid == _LINEAR:
        return np.maximum(0.0, 1.0 - a)
    if fid == _CUBIC:
        c = -0.5
        return np.where(a < 1.0, ((c + 2.0) * a - (c + 3.0)) * a * a + 1.0,
                        np.where(a < 2.0, (((a - 5.0) * a + 8.0) * a - 4.0) * c, 0.0))
    if fid == _LANCZOS3:
        return np.array([0.0 if abs(v) >= 3.0 else 1.0 if abs(v) < 1e-8 else
                         3.0 * math.sin(math.pi * v) * math.sin(math.pi * v / 3.0) / ((math.pi * v) * (math.pi * v))
                         for v in d.tolist()])
    if fid == _GAUSSIAN:
        floor = math.exp(-4.5)  # the filter reaches 0 at its radius
        return np.array([max(math.exp(-2.0 * v * v) - floor, 0.0) for v in a.tolist()])
    raise ValueError(f"no weights for filter id {fid}")


def axis_table(lo: float, hi: float, in_size: int, out_size: int, fid: int,
               antialias: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One axis's filter table: output pixel ``o`` reads ``count[o]`` source pixels from ``first[o]`` with weights
    ``w[o, :count[o]]`` (float32; ``w`` is ``(out_size, taps)``, zero beyond ``count``). The stretch runs from the
    first to the last tap of non-zero weight; a region outside the image reads its nearest edge pixel."""
    scale = (hi - lo) / out_size
    centre = lo + (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    nearest = np.minimum(np.maximum(np.floor(centre), 0.0), float(in_size - 1)).astype(np.int64)
    ones = np.ones(out_size, np.int64)
    if fid == _NN:
        return nearest, ones, np.ones((out_size, 1), np.float32)
    if fid == _TRIANGULAR:
        fid, antialias = _LINEAR, True
    fscale = max(abs(scale), 1.0) if antialias else 1.0
    support = filter_radius(fid) * fscale
    taps = int(math.ceil(support)) * 2 + 1
    xmin = np.floor(centre - support + 0.5)
    xend = np.floor(centre + support + 0.5)
    ws = np.zeros((out_size, taps))
    total = np.zeros(out_size)
    for k in range(taps):  # summed tap by tap, as the core does
        xs = xmin + k
        valid = (xs >= 0) & (xs < in_size) & (xs < xend)
        ws[valid, k] = _filter_weights(fid, (xs[valid] + 0.5 - centre[valid]) / fscale)
        total = total + ws[:, k]
    nonzero = ws != 0
    lo_tap = np.argmax(nonzero, axis=1)
    count = taps - np.argmax(nonzero[:, ::-1], axis=1) - lo_tap
    rows = np.arange(out_size)
    empty = np.abs(total) < 1e-12
    w = np.zeros((out_size, taps), np.float32)
    for k in range(taps):
        inside = (k < count) & ~empty
        w[inside, k] = (ws[rows[inside], lo_tap[inside] + k] / total[inside]).astype(np.float32)
    first = xmin.astype(np.int64) + lo_tap
    if empty.any():  # the region lies outside the image: the nearest edge pixel
        first[empty], count[empty] = nearest[empty], 1
        w[empty] = 0.0
        w[empty, 0] = 1.0
    return first, count, w


def _pass(x: np.ndarray, axis: int, first: np.ndarray, count: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Resample float32 ``x`` along ``axis`` (0 or 1) with a table, adding the products tap by tap. Taps beyond an
    output's count have weight 0 and read a pixel inside the image: they add +-0."""
    shape = list(x.shape)
    shape[axis] = first.size
    acc = np.zeros(shape, np.float32)
    product = np.empty(shape, np.float32)
    last = x.shape[axis] - 1
    for k in range(int(count.max())):
        np.take(x, np.minimum(first + k, last), axis=axis, out=product)
        product *= w[:, k, None, None] if axis == 0 else w[None, :, k, None]
        acc += product
    return acc


def _resize_one(image: np.ndarray, roi, oh: int, ow: int, fmin: int, fmag: int, antialias: bool) -> np.ndarray:
    y0, x0, y1, x1 = (float(v) for v in roi)
    fy = fmin if abs(y1 - y0) > oh else fmag
    fx = fmin if abs(x1 - x0) > ow else fmag
    fy_first, fy_count, wy = axis_table(y0, y1, image.shape[0], oh, fy, antialias)
    fx_first, fx_count, wx = axis_table(x0, x1, image.shape[1], ow, fx, antialias)
    r0, r1 = int(fy_first.min()), int((fy_first + fy_count).max())  # the rows the vertical pass reads
    rows = _pass(image[r0:r1].astype(np.float32), 1, fx_first, fx_count, wx)
    acc = _pass(rows, 0, fy_first - r0, fy_count, wy)
    # sluice.kernels.resample.cast_round to uint8: halves away from zero; below 0 it always gives 0.
    rounded = np.where(acc >= 0, np.floor(acc + np.float32(0.5)), np.float32(0.0))
    return np.minimum(rounded, np.float32(255.0)).astype(np.uint8)

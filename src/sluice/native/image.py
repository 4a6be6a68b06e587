"""Image headers and random crop windows for a whole batch (see :mod:`sluice.native`).

Example::

    from sluice.native.image import random_crop_windows
    win = random_crop_windows(seed, iteration, heights, widths, (0.08, 1.0), (3 / 4, 4 / 3), 10)   # (n, 4)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sluice.native import core

__all__ = ["random_crop_windows"]


def random_crop_windows(seed: int, iteration: int, heights: Sequence[int] | np.ndarray,
                        widths: Sequence[int] | np.ndarray, random_area: Sequence[float],
                        random_aspect_ratio: Sequence[float], num_attempts: int) -> np.ndarray:
    """The crop windows ``(y, x, h, w)`` (an ``(n, 4)`` int64 array) that
    :func:`sluice.ops.decoders.crop_window.random_crop_window` draws for samples ``0..n-1`` of one batch, each with
    the sample's own generator (:meth:`sluice.schema.BatchContext.sample_rng`): the same values whatever thread
    or worker computes them. Raises ValueError naming the argument for invalid ranges."""
    from sluice.ops.decoders.crop_window import check_crop_ranges, random_crop_window
    from sluice.schema import _rng

    heights = np.asarray(heights, dtype=np.int64).reshape(-1)
    widths = np.asarray(widths, dtype=np.int64).reshape(-1)
    area, ratio = check_crop_ranges(random_area, random_aspect_ratio, num_attempts)
    c = core()
    if c is not None and hasattr(c, "random_crop_windows"):
        return c.random_crop_windows(int(seed) & 0xFFFFFFFFFFFFFFFF, int(iteration), heights, widths,
                                     float(area[0]), float(area[1]), float(ratio[0]), float(ratio[1]),
                                     int(num_attempts))
    out = np.empty((heights.size, 4), np.int64)
    for i, (h, w) in enumerate(zip(heights.tolist(), widths.tolist())):
        out[i] = random_crop_window(_rng(seed, iteration, i + 1), h, w, area, ratio, num_attempts)
    return out

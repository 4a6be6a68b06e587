"""Random crop windows as DALI's RandomCropGenerator draws them (Inception-style "random resized crop").

Shared by ``fn.decoders.image_random_crop`` (which decodes only the window), ``fn.random_resized_crop`` and
``fn.random_crop_generator``; the pure-Python twin of the compiled core's ``random_crop_windows``
(:func:`sluice.native.image.random_crop_windows`), which draws the same windows.

Each attempt draws an area fraction uniformly from ``random_area`` and an aspect ratio (width / height)
log-uniformly from ``random_aspect_ratio``; the window is ``w = round(sqrt(area * ratio))``,
``h = round(sqrt(area / ratio))`` (at least 1) and is accepted when it fits in the image and its rounded aspect
ratio is still in range. When no window of the smallest area can have an allowed aspect ratio (a very wide or
very tall image), the widest (tallest) allowed window is taken at once. When all ``num_attempts`` fail, the
fallback is the whole image narrowed to the nearest allowed aspect ratio, then shrunk (keeping its shape) to the
largest allowed area. The window's position is uniform over the places where it fits, fallback included.

Example::

    rng = np.random.default_rng(0)
    y, x, h, w = random_crop_window(rng, 480, 640, (0.08, 1.0), (3 / 4, 4 / 3), 10)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["random_crop_window", "check_crop_ranges"]


def check_crop_ranges(random_area: Sequence[float], random_aspect_ratio: Sequence[float], num_attempts: int,
                      op: str = "random crop") -> tuple[tuple[float, float], tuple[float, float]]:
    """Validate and normalise the ranges (a single value means a fixed one); raises ValueError naming the
    argument."""
    area = tuple(float(v) for v in random_area)
    ratio = tuple(float(v) for v in random_aspect_ratio)
    if len(area) == 1:
        area = (area[0], area[0])
    if len(ratio) == 1:
        ratio = (ratio[0], ratio[0])
    if len(area) != 2 or not 0 < area[0] <= area[1] <= 1:
        raise ValueError(f"{op}: Invalid random_area ({list(random_area)}). Give [min, max] with 0 < min <= max <= 1.")
    if len(ratio) != 2 or not 0 < ratio[0] <= ratio[1]:
        raise ValueError(f"{op}: Invalid random_aspect_ratio ({list(random_aspect_ratio)}). Give [min, max] with "
                         "0 < min <= max.")
    if int(num_attempts) < 1:
        raise ValueError(f"{op}: Invalid num_attempts ({num_attempts}). It must be at least 1.")
    return area, ratio  # type: ignore[return-value]


@functools.lru_cache(maxsize=64)
def _checked_ranges(random_area: tuple, random_aspect_ratio: tuple, num_attempts: int):
    # The ranges are usually the same for every sample: validate each distinct set once.
    return check_crop_ranges(random_area, random_aspect_ratio, num_attempts)


def random_crop_window(rng: np.random.Generator, height: int, width: int,
                       random_area: Sequence[float] = (0.08, 1.0),
                       random_aspect_ratio: Sequence[float] = (3 / 4, 4 / 3),
                       num_attempts: int = 10) -> tuple[int, int, int, int]:
    """Draw a crop window (y, x, h, w) inside a ``height`` x ``width`` image (see the module docstring).

    Example::

        random_crop_window(np.random.default_rng(1), 300, 400)   # e.g. (41, 87, 212, 250)
    """
    if height <= 0 or width <= 0:
        return 0, 0, max(height, 0), max(width, 0)
    (a_min, a_max), (r_min, r_max) = _checked_ranges(tuple(random_area), tuple(random_aspect_ratio),
                                                     int(num_attempts))
    H, W = int(height), int(width)
    widest = max(1, int(H * r_max))   # widest allowed window at full height
    tallest = max(1, int(W / r_min))  # tallest allowed window at full width
    smallest_area = a_min * H * W
    if H * widest < smallest_area:      # image too wide for any allowed window of the smallest area
        h, w = H, widest
        draws = rng.random(2).tolist()
    elif W * tallest < smallest_area:   # image too tall
        h, w = tallest, W
        draws = rng.random(2).tolist()
    else:
        log_lo, log_hi = math.log(r_min), math.log(r_max)
        # All the draws in one call, the same values in the same order as a call per draw (area, ratio, area,
        # ratio ..., then the position): each call releases the GIL, and under a busy pipeline getting it back
        # costs far more than the arithmetic.
        draws = rng.random(2 * int(num_attempts) + 2).tolist()
        for k in range(int(num_attempts)):
            area = (a_min + (a_max - a_min) * draws[2 * k]) * H * W
            ratio = math.exp(log_lo + (log_hi - log_lo) * draws[2 * k + 1])
            w = max(1, int(round(math.sqrt(area * ratio))))
            h = max(1, int(round(math.sqrt(area / ratio))))
            if w <= W and h <= H and r_min <= w / h <= r_max:
                break
        else:
            # Fallback: the whole image narrowed to an allowed aspect ratio, shrunk to the largest allowed area.
            if W / H > r_max:
                h, w = H, widest
            elif W / H < r_min:
                h, w = tallest, W
            else:
                h, w = H, W
            shrink = math.sqrt(min(1.0, a_max * H * W / (h * w)))
            h, w = max(1, int(h * shrink)), max(1, int(w * shrink))
    h, w = min(h, H), min(w, W)
    u, v = draws[-2:]
    y = min(int(u * (H - h + 1)), H - h)  # uniform over the H - h + 1 places
    x = min(int(v * (W - w + 1)), W - w)
    return y, x, h, w

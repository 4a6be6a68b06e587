"""Random crop windows as DALI's RandomCropGenerator draws them (Inception-style "random resized crop").

Shared by ``fn.decoders.image_random_crop`` (which decodes only the window) and ``fn.random_resized_crop``.

Each attempt draws an area fraction uniformly from ``random_area`` and an aspect ratio (width / height)
log-uniformly from ``random_aspect_ratio``; the window is ``w = round(sqrt(area * ratio))``,
``h = round(sqrt(area / ratio))`` and is accepted when it fits in the image, its position then being uniform.
When ``num_attempts`` attempts all fail, the fallback is the whole image narrowed to the nearest allowed aspect
ratio, centred.

Example::

    rng = np.random.default_rng(0)
    y, x, h, w = random_crop_window(rng, 480, 640, (0.08, 1.0), (3 / 4, 4 / 3), 10)
"""

from __future__ import annotations

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
    (a_min, a_max), (r_min, r_max) = check_crop_ranges(random_area, random_aspect_ratio, num_attempts)
    log_lo, log_hi = math.log(r_min), math.log(r_max)
    image_area = float(height) * float(width)
    for _ in range(int(num_attempts)):
        area = rng.uniform(a_min, a_max) * image_area
        ratio = math.exp(rng.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(area * ratio)))
        h = int(round(math.sqrt(area / ratio)))
        if 0 < w <= width and 0 < h <= height:
            y = int(rng.integers(0, height - h + 1))
            x = int(rng.integers(0, width - w + 1))
            return y, x, h, w
    # Fallback: the whole image, narrowed to the closest allowed aspect ratio, centred.
    h, w = height, width
    ratio = width / height
    if ratio < r_min:
        h = max(1, min(height, int(round(width / r_min))))
    elif ratio > r_max:
        w = max(1, min(width, int(round(height * r_max))))
    return (height - h) // 2, (width - w) // 2, h, w

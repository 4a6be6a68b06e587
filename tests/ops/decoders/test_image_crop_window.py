"""random_crop_window follows DALI's RandomCropGenerator: area and aspect ratio in range, uniform position,
fallback to a centred whole-image window with the aspect ratio clamped when every attempt fails."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sluice.ops.decoders.crop_window import random_crop_window


def test_windows_in_range_and_spread():
    rng = np.random.default_rng(0)
    H, W = 300, 400
    areas, ratios, xs = [], [], []
    for _ in range(2000):
        y, x, h, w = random_crop_window(rng, H, W, (0.08, 1.0), (3 / 4, 4 / 3), 10)
        assert 0 <= y and 0 <= x and y + h <= H and x + w <= W and h > 0 and w > 0
        areas.append(h * w / (H * W))
        ratios.append(w / h)
        xs.append(x / max(W - w, 1))
    areas, ratios = np.array(areas), np.array(ratios)
    # Rounding to whole pixels moves area and ratio a little beyond the drawn values.
    assert areas.min() >= 0.08 * 0.97 and areas.max() <= 1.0
    assert ratios.min() >= 0.75 * 0.98 and ratios.max() <= 4 / 3 * 1.02
    # Area is drawn uniformly (before rejection): small windows must be common, not only large ones.
    assert (areas < 0.3).mean() > 0.15 and (areas > 0.7).mean() > 0.1
    assert 0.4 < np.mean(xs) < 0.6  # positions are uniform, not pinned to a corner
    # Log-uniform ratio: about as many below 1 as above.
    assert 0.35 < (np.log(ratios) < 0).mean() < 0.65


def test_same_seed_same_windows():
    a = [random_crop_window(np.random.default_rng(5), 100, 120) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    others = {random_crop_window(np.random.default_rng(s), 100, 120) for s in range(6, 16)}
    assert len(others) > 5  # different seeds, different windows


@pytest.mark.parametrize("H,W,ratio_range,expected", [
    (100, 100, (3.0, 4.0), (33, 0, 33, 100)),     # too tall for 3:1 -> keep width, narrow height
    (100, 100, (0.25, 0.5), (0, 25, 100, 50)),    # too wide for 1:2 -> keep height, narrow width
    (60, 80, (0.5, 2.0), (0, 0, 60, 80)),         # ratio already allowed -> whole image
])
def test_fallback_after_all_attempts(H, W, ratio_range, expected):
    # A window of >= 99% area with such ratios cannot fit: every attempt fails.
    rng = np.random.default_rng(1)
    y, x, h, w = random_crop_window(rng, H, W, (0.99, 1.0), ratio_range, 10)
    if ratio_range == (0.5, 2.0):
        # here attempts can succeed with near-full windows; with area >= 0.99 it is (almost) the whole image
        assert h * w >= 0.97 * H * W
        return
    assert (y, x, h, w) == expected
    assert ratio_range[0] - 0.05 <= w / h <= ratio_range[1] + 0.05


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="random_area"):
        random_crop_window(rng, 10, 10, (0.5, 0.1))
    with pytest.raises(ValueError, match="random_aspect_ratio"):
        random_crop_window(rng, 10, 10, (0.1, 1.0), (0.0, 1.0))
    with pytest.raises(ValueError, match="num_attempts"):
        random_crop_window(rng, 10, 10, num_attempts=0)
    assert math.isclose(sum(random_crop_window(rng, 10, 10, (1.0,), (1.0,))), 20)  # fixed: the whole image

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


@pytest.mark.parametrize("H,W,area,ratio_range,expected_hw", [
    (100, 100, (0.99, 1.0), (3.0, 4.0), (33, 100)),     # too tall for 3:1 at 99% area: tallest allowed at once
    (100, 100, (0.99, 1.0), (0.25, 0.5), (100, 50)),    # too wide for 1:2: tallest allowed at once
    (100, 400, (0.5, 0.6), (0.9, 1.1), (100, 110)),     # too wide: full height, widest allowed ratio
])
def test_impossible_ranges_take_the_nearest_allowed_window(H, W, area, ratio_range, expected_hw):
    for seed in range(5):
        y, x, h, w = random_crop_window(np.random.default_rng(seed), H, W, area, ratio_range, 10)
        assert (h, w) == expected_hw
        assert 0 <= y <= H - h and 0 <= x <= W - w


def test_fallback_after_all_attempts_fail():
    # 2 x 2 image, ratio range [1.2, 1.5]: every rounded window has ratio 1/2, 1 or 2, so all attempts fail and
    # the fallback (whole image, ratio 1 < 1.2 -> tallest allowed: 2 / 1.2 -> 1 row) is used.
    y, x, h, w = random_crop_window(np.random.default_rng(0), 2, 2, (0.25, 1.0), (1.2, 1.5), 3)
    assert (h, w) == (1, 2) and x == 0 and y in (0, 1)
    # 3 x 3, ratio [1.2, 1.3]: rounding gives ratios 1 or 1.5, so attempts fail; the fallback 2 x 3 window (6 px)
    # is above random_area's maximum (0.6 * 9 = 5.4 px) and is shrunk, keeping its shape, to 1 x 2.
    for seed in range(5):
        assert random_crop_window(np.random.default_rng(seed), 3, 3, (0.5, 0.6), (1.2, 1.3), 2)[2:] == (1, 2)


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="random_area"):
        random_crop_window(rng, 10, 10, (0.5, 0.1))
    with pytest.raises(ValueError, match="random_aspect_ratio"):
        random_crop_window(rng, 10, 10, (0.1, 1.0), (0.0, 1.0))
    with pytest.raises(ValueError, match="num_attempts"):
        random_crop_window(rng, 10, 10, num_attempts=0)
    assert math.isclose(sum(random_crop_window(rng, 10, 10, (1.0,), (1.0,))), 20)  # fixed: the whole image

"""bb_flip, coord_flip and random_bbox_crop against hand-computed boxes."""

import numpy as np
import pytest
import torch

from sluice.ops.detection.bb_flip import bb_flip_kernel
from sluice.ops.detection.coord_flip import coord_flip_kernel
from sluice.ops.detection.random_bbox_crop import from_ltrb, random_bbox_crop_sample, to_ltrb

BOXES = torch.tensor([[0.1, 0.2, 0.5, 0.6], [0.6, 0.0, 1.0, 0.3]])


def test_bb_flip_ltrb_horizontal_and_vertical():
    out = bb_flip_kernel(BOXES, torch.tensor(1), torch.tensor(0), ltrb=True)
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.2, 0.9, 0.6], [0.0, 0.0, 0.4, 0.3]]))
    out = bb_flip_kernel(BOXES, torch.tensor(0), torch.tensor(1), ltrb=True)
    torch.testing.assert_close(out, torch.tensor([[0.1, 0.4, 0.5, 0.8], [0.6, 0.7, 1.0, 1.0]]))


def test_bb_flip_xywh_and_per_row_flags():
    xywh = torch.tensor([[0.1, 0.2, 0.4, 0.4], [0.1, 0.2, 0.4, 0.4]])
    out = bb_flip_kernel(xywh, torch.tensor([1, 0]), torch.tensor([1, 0]))
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.4, 0.4, 0.4], [0.1, 0.2, 0.4, 0.4]]))
    with pytest.raises(ValueError, match="4 coordinates"):
        bb_flip_kernel(torch.zeros(2, 6), torch.tensor(1), torch.tensor(0))


def test_bb_flip_is_consistent_with_flipped_image():
    img = np.zeros((10, 20), np.uint8)
    img[2:6, 2:10] = 1  # box l=0.1, t=0.2, r=0.5, b=0.6 in pixels
    flipped = img[:, ::-1]
    ys, xs = np.nonzero(flipped)
    box = bb_flip_kernel(BOXES[:1], torch.tensor(1), torch.tensor(0), ltrb=True)[0].numpy()
    np.testing.assert_allclose(box, [xs.min() / 20, ys.min() / 10, (xs.max() + 1) / 20, (ys.max() + 1) / 10])


def test_coord_flip_layouts_and_centres():
    pts = torch.tensor([[0.2, 0.3, 0.9]])
    out = coord_flip_kernel(pts, "xyz", {"x": torch.tensor(1), "y": torch.tensor(0), "z": torch.tensor(1)},
                            {"x": torch.tensor(0.5), "y": torch.tensor(0.5), "z": torch.tensor(0.4)})
    torch.testing.assert_close(out, torch.tensor([[0.8, 0.3, -0.1]]))
    out = coord_flip_kernel(torch.tensor([[0.3, 0.2]]), "yx", {"x": torch.tensor(1)}, {"x": torch.tensor(0.5)})
    torch.testing.assert_close(out, torch.tensor([[0.3, 0.8]]))
    with pytest.raises(ValueError, match="names 2 coordinates"):
        coord_flip_kernel(pts, "xy", {}, {})


def test_box_layout_round_trip():
    b = np.array([[0.1, 0.2, 0.3, 0.5]])
    np.testing.assert_allclose(to_ltrb(b, "xyWH"), [[0.1, 0.2, 0.4, 0.7]])
    np.testing.assert_allclose(to_ltrb(b, "yxYX"), [[0.2, 0.1, 0.5, 0.3]])
    for layout in ("xyXY", "xyWH", "yxYX", "yxHW"):
        np.testing.assert_allclose(from_ltrb(to_ltrb(b, layout), layout), b)


class _FixedRng:
    """A generator whose draws are scripted, to check the crop arithmetic by hand."""

    def __init__(self, integers, uniforms):
        self._i, self._u = list(integers), list(uniforms)

    def integers(self, n):
        return self._i.pop(0)

    def uniform(self, lo, hi, size=None):
        if size is not None:
            return np.array([self.uniform(lo, hi) for _ in range(size)])
        return lo + (hi - lo) * self._u.pop(0)


def test_random_bbox_crop_hand_computed_window():
    # option 0 (threshold 0.0); scales w=0.5, h=0.5 (u=0, range [0.5, 1]); anchor x=0.25, y=0.1 (u=0.5, 0.2)
    rng = _FixedRng([0], [0.0, 0.0, 0.5, 0.2])
    boxes = np.array([[0.3, 0.2, 0.6, 0.5],    # centre (0.45, 0.35): kept; clipped to the window's x range
                      [0.0, 0.0, 0.1, 0.1],    # centre outside: dropped
                      [0.7, 0.5, 0.9, 0.7]])   # centre (0.8, 0.6) outside x in [0.25, 0.75]: dropped
    crop, out, keep, no_crop = random_bbox_crop_sample(boxes, rng, thresholds=[0.0], scaling=[0.5, 1.0],
                                                       aspect_ratio=[0.5, 2.0], allow_no_crop=False)
    np.testing.assert_allclose(crop, [0.25, 0.1, 0.75, 0.6])
    assert list(keep) == [0] and not no_crop
    # box [0.3, 0.2, 0.6, 0.5] in window coordinates: ((0.3-0.25)/0.5, (0.2-0.1)/0.5, (0.6-0.25)/0.5, (0.5-0.1)/0.5)
    np.testing.assert_allclose(out, [[0.1, 0.2, 0.7, 0.8]])


def test_random_bbox_crop_thresholds_are_met():
    rng = np.random.default_rng(0)
    boxes = np.array([[0.2, 0.2, 0.6, 0.7], [0.5, 0.4, 0.9, 0.9]])
    for _ in range(50):
        crop, out, keep, no_crop = random_bbox_crop_sample(boxes, rng, thresholds=[0.3], scaling=[0.3, 1.0],
                                                           aspect_ratio=[0.5, 2.0], allow_no_crop=True,
                                                           num_attempts=50, threshold_type="overlap")
        w, h = crop[2] - crop[0], crop[3] - crop[1]
        assert 0.3 - 1e-9 <= w <= 1 and 0.3 - 1e-9 <= h <= 1 and 0.5 <= w / h <= 2.0
        assert np.all((out >= -1e-9) & (out <= 1 + 1e-9))
        if no_crop:
            np.testing.assert_allclose(out, boxes)


def test_random_bbox_crop_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="aspect ratio"):
        random_bbox_crop_sample(np.zeros((0, 4)), rng, scaling=[0.9, 1.0], aspect_ratio=[3.0, 4.0])
    with pytest.raises(ValueError, match="threshold_type"):
        random_bbox_crop_sample(np.zeros((0, 4)), rng, threshold_type="dice")
    with pytest.raises(ValueError, match="bbox_layout"):
        random_bbox_crop_sample(np.zeros((1, 4)), rng, bbox_layout="ltrb")


def test_fixed_aspect_ratio_sets_one_extent_from_the_other():
    rng = np.random.default_rng(3)
    boxes = np.array([[0.4, 0.4, 0.6, 0.6]])
    for _ in range(20):  # default aspect_ratio [1, 1]: square windows, never a rejection loop
        crop, _, keep, no_crop = random_bbox_crop_sample(boxes, rng, thresholds=[0.0], scaling=[0.3, 1.0],
                                                         allow_no_crop=False)
        w, h = crop[2] - crop[0], crop[3] - crop[1]
        assert w == pytest.approx(h) and 0.3 <= w <= 1.0 and not no_crop and list(keep) == [0]
    crop, *_ = random_bbox_crop_sample(boxes, rng, thresholds=[0.0], scaling=[0.3, 1.0], aspect_ratio=[2.0, 2.0],
                                       allow_no_crop=False)
    assert (crop[2] - crop[0]) / (crop[3] - crop[1]) == pytest.approx(2.0)


def test_windows_that_drop_every_box_are_rejected():
    rng = np.random.default_rng(4)
    boxes = np.array([[0.0, 0.0, 0.1, 0.1]])  # a small box in a corner
    for _ in range(20):
        crop, out, keep, _ = random_bbox_crop_sample(boxes, rng, thresholds=[0.0], scaling=[0.3, 1.0],
                                                     aspect_ratio=[0.5, 2.0], allow_no_crop=False,
                                                     num_attempts=100)
        assert list(keep) == [0] and crop[0] <= 0.05 and crop[1] <= 0.05


def test_absolute_crop_shape_uses_integer_anchors():
    rng = np.random.default_rng(5)
    for _ in range(10):
        crop, *_ = random_bbox_crop_sample(np.zeros((0, 4)), rng, crop_shape=[30, 20], input_shape=[80, 60],
                                           allow_no_crop=False)
        assert (crop[0] * 80).is_integer() and (crop[1] * 60).is_integer()
        np.testing.assert_allclose(crop[2:] - crop[:2], [30 / 80, 20 / 60])
    with pytest.raises(ValueError, match="fit in input_shape"):
        random_bbox_crop_sample(np.zeros((0, 4)), rng, crop_shape=[90, 20], input_shape=[80, 60])

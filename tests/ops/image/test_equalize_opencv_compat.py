"""fn.equalize against DALI's GPU formula written in NumPy (double precision, ties to even) exactly, and against
OpenCV's equalizeHist (which DALI follows; its float scale rounds some near-halves the other way) within 1,
channel by channel, on ragged batches."""

import cv2
import numpy as np
import pytest
import torch

from sluice.ops.image.equalize import equalize_luts
from sluice.testing import run_op


def _images(seed=0, sizes=((17, 23), (40, 31), (5, 9), (1, 1))):
    rng = np.random.default_rng(seed)
    out = []
    for h, w in sizes:  # narrow, shifted ranges: equalisation changes them a lot
        low = int(rng.integers(0, 100))
        out.append((rng.integers(0, 256, (h, w, 3)) // int(rng.integers(2, 8)) + low).astype(np.uint8))
    return out


def _opencv(image):
    return np.stack([cv2.equalizeHist(np.ascontiguousarray(image[..., c])) for c in range(image.shape[2])], -1)


def _numpy(channel):
    """DALI's table: round((cdf[v] - first) * 255 / (total - first)), a channel of one value left as it is."""
    hist = np.bincount(channel.reshape(-1), minlength=256).astype(np.int64)
    cdf = hist.cumsum()
    first, total = hist[np.flatnonzero(hist)[0]], cdf[-1]
    if first == total:
        return channel
    lut = np.clip(np.round((cdf - first) * (255.0 / (total - first))), 0, 255).astype(np.uint8)
    return lut[channel]


def _check(got, image):
    ref = np.stack([_numpy(image[..., c]) for c in range(image.shape[2])], -1)
    np.testing.assert_array_equal(got, ref)
    diff = np.abs(got.astype(int) - _opencv(image))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.98


def test_hwc_ragged_matches_opencv(device):
    images = _images()
    out = run_op("equalize", images, layout="HWC", device=device)
    assert out.layout() == "HWC"
    for i, image in enumerate(images):
        got = out[i].cpu().numpy()
        assert got.shape == image.shape and got.dtype == np.uint8
        _check(got, image)
    assert out[0].cpu().numpy().max() == 255  # stretched to the full range


def test_chw_hw_and_frames(device):
    images = _images(1, ((12, 7), (6, 20)))
    chw = run_op("equalize", [np.ascontiguousarray(x.transpose(2, 0, 1)) for x in images], layout="CHW",
                 device=device)
    hw = run_op("equalize", [np.ascontiguousarray(x[..., 1]) for x in images], layout="HW", device=device)
    clips = run_op("equalize", [np.stack(images[:1] * 2 + [images[0] // 2])], layout="FHWC", device=device)
    for i, image in enumerate(images):
        _check(chw[i].cpu().numpy().transpose(1, 2, 0), image)
        _check(hw[i].cpu().numpy()[..., None], image[..., 1:2])
    clip = clips[0].cpu().numpy()
    assert clips.layout() == "FHWC"
    _check(clip[1], images[0])
    _check(clip[2], images[0] // 2)  # each frame has its own histogram


def test_lut_formula_and_constant_channel():
    hist = torch.zeros(2, 256, dtype=torch.int64)
    hist[0, [10, 20, 30]] = torch.tensor([2, 1, 1])
    hist[1, 7] = 5  # one value: left as it is
    lut = equalize_luts(hist)
    assert lut[0, [10, 20, 30]].tolist() == [0, 128, 255]  # (cdf - 2) * 255 / 2: 0, 127.5 -> 128 (ties to even), 255
    assert lut[1, 7].item() == 7


def test_refuses_other_types():
    with pytest.raises(Exception, match="uint8"):
        run_op("equalize", [np.zeros((4, 4, 3), np.float32)], layout="HWC")

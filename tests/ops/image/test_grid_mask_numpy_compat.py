"""grid_mask against a NumPy rendering of DALI's GridMask rule (black where both grid-frame fractions are below
``ratio``), on ragged batches with per-sample tiles, ratios, angles and shifts: exact."""

import numpy as np
import pytest

from _image_effects_data import noise_images, run_kernel, samples_of
from sluice.ops.image.grid_mask import grid_mask
from sluice.testing import run_op


def _numpy(img, tile, ratio, angle, sx, sy):
    h, w = img.shape[:2]
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    u = ((x - sx) * np.cos(angle) - (y - sy) * np.sin(angle)) / tile
    v = ((x - sx) * np.sin(angle) + (y - sy) * np.cos(angle)) / tile
    keep = (u - np.floor(u) >= ratio) | (v - np.floor(v) >= ratio)
    return img * (keep[..., None] if img.ndim == 3 else keep).astype(img.dtype)


def test_per_sample_grids_match_numpy():
    imgs = noise_images([(40, 50), (33, 21), (64, 64)])
    per = {"tile": [10, 7, 16], "ratio": [0.5, 0.3, 0.6], "angle": [0.0, 0.4, 2.0], "shift_x": [0.0, 3.5, -2.0],
           "shift_y": [0.0, 1.0, 5.0]}
    got = run_kernel("grid_mask", grid_mask, imgs, "HWC", per_sample=per)
    for i, (img, out) in enumerate(zip(imgs, samples_of(got))):
        ref = _numpy(img, *(per[k][i] for k in ("tile", "ratio", "angle", "shift_x", "shift_y")))
        np.testing.assert_array_equal(out, ref)


def test_unrotated_grid_is_squares_and_float_chw():
    img = np.ones((20, 20, 1), np.float32)
    out = run_op("grid_mask", [img], layout="HWC", tile=10, ratio=0.3)[0].numpy()[..., 0]
    assert out[:3, :3].sum() == 0 and out[3:10, :].all() and out[10:13, 10:13].sum() == 0
    assert out.mean() == pytest.approx(1 - 4 * 9 / 400)
    chw = noise_images([(12, 15)], dtype=np.float32)[0].transpose(2, 0, 1).copy()
    got = run_op("grid_mask", [chw], layout="CHW", tile=5, angle=0.7)[0].numpy()
    np.testing.assert_array_equal(got.transpose(1, 2, 0), _numpy(chw.transpose(1, 2, 0), 5, 0.5, 0.7, 0, 0))


@pytest.mark.cuda
def test_gpu_equals_cpu():
    imgs = noise_images([(40, 50), (33, 21)])
    cpu = run_op("grid_mask", imgs, layout="HWC", tile=9, ratio=0.4, angle=0.3, shift_x=2.0)
    gpu = run_op("grid_mask", imgs, layout="HWC", tile=9, ratio=0.4, angle=0.3, shift_x=2.0, device="gpu").as_cpu()
    for a, b in zip(cpu, gpu):
        assert (a.numpy() != b.numpy()).mean() < 0.001  # positions on a square's edge may round either way

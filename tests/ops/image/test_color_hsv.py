"""hsv / hue / saturation / color_twist: the per-sample RGB matrix built as DALI documents it (YIQ space), checked
against an independent NumPy float64 evaluation of the same formula, and against OpenCV where the result is a
standard conversion: ``saturation=0`` gives luma, which must equal ``cv2.COLOR_RGB2GRAY`` (+-1)."""

import math

import cv2
import numpy as np
import pytest
import torch

from sluice.ops.image.hsv import apply_color_matrix, color_matrix

RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
YIQ2RGB = np.array([[1.0, 0.956, 0.621], [1.0, -0.272, -0.647], [1.0, -1.107, 1.705]])


def _reference(img, hue=0.0, sat=1.0, val=1.0, bright=1.0, contr=1.0, half=128.0):
    t = math.radians(hue)
    h = np.array([[1, 0, 0], [0, math.cos(t), math.sin(t)], [0, -math.sin(t), math.cos(t)]])
    m = bright * contr * val * YIQ2RGB @ h @ np.diag([1, sat, sat]) @ RGB2YIQ
    return img.astype(np.float64) @ m.T + (half - half * contr) * bright


def _run(img, hue=0.0, sat=1.0, val=1.0, bright=1.0, contr=1.0, dtype=None, bgr=False):
    x = torch.from_numpy(img)[None]
    m = color_matrix(*(torch.tensor([v], dtype=torch.float64) for v in (hue, sat, val, bright, contr)), bgr=bgr)
    half = 0.5 if x.dtype.is_floating_point else 128.0
    off = torch.tensor([(half - half * contr) * bright])
    return apply_color_matrix(x, m, off, dtype)[0].numpy()


def _image(seed=0):
    return np.random.default_rng(seed).integers(0, 256, (8, 9, 3), dtype=np.uint8)


@pytest.mark.parametrize("hue,sat,val", [(0, 1, 1), (30, 1, 1), (-120, 0.5, 1.2), (200, 1.5, 0.8)])
def test_hsv_matches_formula(hue, sat, val):
    img = _image()
    ref = np.clip(np.round(_reference(img, hue, sat, val)), 0, 255)
    assert np.abs(_run(img, hue, sat, val).astype(int) - ref).max() <= 1


def test_zero_saturation_is_opencv_gray():
    img = _image(1)
    out = _run(img, sat=0.0)
    gray = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    for c in range(3):
        assert np.abs(out[..., c].astype(int) - gray).max() <= 1


def test_hue_full_turn_is_identity_up_to_matrix_rounding():
    img = _image(2)
    # DALI's YIQ constants are rounded to 3 digits, so even the identity moves values by a little.
    assert np.abs(_run(img, hue=360.0).astype(int) - img).max() <= 2


def test_color_twist_float_matches_formula():
    x = np.random.default_rng(3).random((4, 5, 3)).astype(np.float32)
    out = _run(x, hue=15, sat=1.2, bright=1.1, contr=0.8)
    np.testing.assert_allclose(out, _reference(x, 15, 1.2, 1, 1.1, 0.8, 0.5), atol=1e-5)


def test_bgr_is_rgb_with_channels_swapped():
    img = _image(4)
    rgb = _run(img, hue=40, sat=1.3)
    bgr = _run(np.ascontiguousarray(img[..., ::-1]), hue=40, sat=1.3, bgr=True)
    np.testing.assert_array_equal(bgr[..., ::-1], rgb)


def test_cpu_operators_match_formula():
    from sluice import types
    from sluice.testing import run_op

    imgs = [_image(7), _image(8)[:4]]
    for op, kw, ref_kw in (("hsv", dict(hue=35.0, saturation=0.6, value=1.1), dict(hue=35, sat=0.6, val=1.1)),
                           ("color_twist", dict(hue=-20.0, brightness=1.2, contrast=0.7),
                            dict(hue=-20, bright=1.2, contr=0.7)),
                           ("saturation", dict(saturation=0.0), dict(sat=0.0))):
        out = run_op(op, imgs, layout="HWC", **kw)
        for img, y in zip(imgs, out):
            ref = np.clip(np.round(_reference(img, **ref_kw)), 0, 255)
            assert np.abs(y.numpy().astype(int) - ref).max() <= 1, op
    out = run_op("hue", [_image(9)], layout="HWC", hue=50.0, image_type=types.BGR, dtype=types.FLOAT)[0].numpy()
    ref = _reference(_image(9)[..., ::-1], hue=50)[..., ::-1]
    np.testing.assert_allclose(out, ref, atol=1e-3)


def test_rejects_non_rgb_channels():
    with pytest.raises(ValueError, match="3 channels"):
        apply_color_matrix(torch.zeros(1, 4, 4, 1), torch.eye(3)[None], torch.zeros(1))


@pytest.mark.cuda
def test_cuda_equals_cpu():
    x = torch.from_numpy(np.stack([_image(5), _image(6)]))
    m = color_matrix(torch.tensor([10.0, -50.0]), torch.tensor([1.2, 0.4]), torch.ones(2), torch.tensor([1.0, 1.3]),
                     torch.tensor([0.9, 1.1]))
    off = torch.tensor([12.8, -14.3])
    cpu = apply_color_matrix(x, m, off)
    gpu = apply_color_matrix(x.cuda(), m.cuda(), off.cuda()).cpu()
    assert (cpu.int() - gpu.int()).abs().max() <= 1

"""color_space_conversion against OpenCV (GRAY: ``COLOR_RGB2GRAY``, BGR: ``COLOR_RGB2BGR``), Pillow (GRAY: mode
"L") and scikit-image (YCbCr: ``rgb2ycbcr`` / ``ycbcr2rgb``, ITU-R BT.601 studio swing, as DALI). Tolerance +-1
for uint8 (float32 rounding vs the references' own arithmetic); skimage's YCbCr differs from DALI's 3-digit
constants by < 1 level."""

import cv2
import numpy as np
import pytest
import torch
from skimage.color import rgb2ycbcr, ycbcr2rgb

from sluice import types
from sluice.ops.image.color_space_conversion import convert_color


def _image(seed=0):
    return np.random.default_rng(seed).integers(0, 256, (9, 11, 3), dtype=np.uint8)


def _conv(img, src, dst, dtype=None):
    return convert_color(torch.from_numpy(img), src, dst, dtype).numpy()


def test_rgb_to_gray_matches_opencv():
    img = _image()
    out = _conv(img, types.RGB, types.GRAY)
    assert out.shape == (9, 11, 1)
    assert np.abs(out[..., 0].astype(int) - cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)).max() <= 1


def test_rgb_to_gray_matches_pillow():
    from PIL import Image

    img = _image(7)
    ref = np.asarray(Image.fromarray(img).convert("L"))
    assert np.abs(_conv(img, types.RGB, types.GRAY)[..., 0].astype(int) - ref).max() <= 1


def test_bgr_to_gray_matches_opencv():
    img = _image(1)
    out = _conv(img, types.BGR, types.GRAY)
    assert np.abs(out[..., 0].astype(int) - cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)).max() <= 1


def test_rgb_bgr_swap_is_exact():
    img = _image(2)
    np.testing.assert_array_equal(_conv(img, types.RGB, types.BGR), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))


def test_rgb_to_ycbcr_matches_skimage():
    img = _image(3)
    assert np.abs(_conv(img, types.RGB, types.YCbCr).astype(float) - rgb2ycbcr(img)).max() <= 1


def test_ycbcr_to_rgb_matches_skimage():
    ycc = np.clip(rgb2ycbcr(_image(4)).round(), 0, 255).astype(np.uint8)
    ref = np.clip(np.round(ycbcr2rgb(ycc.astype(float)) * 255), 0, 255)
    assert np.abs(_conv(ycc, types.YCbCr, types.RGB).astype(float) - ref).max() <= 1


def test_gray_ycbcr_round_trip():
    gray = np.arange(0, 256, dtype=np.uint8).reshape(16, 16, 1)
    ycc = _conv(gray, types.GRAY, types.YCbCr)
    assert ycc[..., 0].min() == 16 and ycc[..., 0].max() == 235
    assert np.all(ycc[..., 1:] == 128)
    assert np.abs(_conv(ycc, types.YCbCr, types.GRAY).astype(int) - gray).max() <= 1


def test_float_output_is_normalised():
    img = _image(5)
    out = _conv(img, types.RGB, types.GRAY, torch.float32)
    ref = cv2.cvtColor(img.astype(np.float32) / 255, cv2.COLOR_RGB2GRAY)
    np.testing.assert_allclose(out[..., 0], ref, atol=1e-5)


def test_cpu_operator_matches_opencv_and_skimage():
    from sluice.testing import run_op

    imgs = [_image(8), _image(9)[:5]]
    gray = run_op("color_space_conversion", imgs, layout="HWC", image_type=types.RGB, output_type=types.GRAY)
    ycc = run_op("color_space_conversion", imgs, layout="HWC", image_type=types.RGB, output_type=types.YCbCr)
    back = run_op("color_space_conversion", [y.numpy() for y in ycc], layout="HWC", image_type=types.YCbCr,
                  output_type=types.RGB)
    rgb = run_op("color_space_conversion", [g.numpy() for g in gray], layout="HWC", image_type=types.GRAY,
                 output_type=types.RGB)
    for g, c in zip(gray, rgb):
        np.testing.assert_array_equal(c.numpy(), np.repeat(g.numpy(), 3, axis=-1))
    for img, g, y, b in zip(imgs, gray, ycc, back):
        assert np.abs(g.numpy()[..., 0].astype(int) - cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)).max() <= 1
        assert np.abs(y.numpy().astype(float) - rgb2ycbcr(img)).max() <= 1
        ref = np.clip(np.round(ycbcr2rgb(y.numpy().astype(float)) * 255), 0, 255)
        assert np.abs(b.numpy().astype(float) - ref).max() <= 1


def test_wrong_channel_count_is_a_clear_error():
    with pytest.raises(ValueError, match="needs 3 channel"):
        _conv(np.zeros((4, 4, 1), np.uint8), types.RGB, types.GRAY)
    with pytest.raises(ValueError, match="not supported"):
        _conv(np.zeros((4, 4, 3), np.uint8), types.RGB, types.ANY_DATA)


@pytest.mark.cuda
def test_cuda_equals_cpu():
    img = torch.from_numpy(_image(6))
    for dst in (types.GRAY, types.YCbCr, types.BGR):
        cpu = convert_color(img, types.RGB, dst)
        gpu = convert_color(img.cuda(), types.RGB, dst).cpu()
        assert (cpu.int() - gpu.int()).abs().max() <= 1

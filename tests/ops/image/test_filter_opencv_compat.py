"""fn.filter against OpenCV's filter2D (DALI's CPU operator calls it), for every border mode, anchors, the
'valid' mode, per-sample filters of different sizes and the fill_value input, on ragged batches."""

import cv2
import numpy as np
import pytest

from sluice import types
from sluice.testing import run_op

_CV_BORDERS = {"reflect_101": cv2.BORDER_REFLECT_101, "reflect_1001": cv2.BORDER_REFLECT,
               "clamp": cv2.BORDER_REPLICATE, "wrap": cv2.BORDER_WRAP, "constant": cv2.BORDER_CONSTANT}


def _images(dtype=np.float32, sizes=((17, 23), (9, 31), (6, 5))):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (h, w, 3)).astype(dtype) for h, w in sizes]


def _opencv(image, kernel, border, anchor=(-1, -1), fill=0.0):
    ky, kx = kernel.shape
    ay = ky // 2 if anchor[0] < 0 else anchor[0]
    ax = kx // 2 if anchor[1] < 0 else anchor[1]
    if border in ("wrap", "constant"):  # filter2D takes neither as a border type for every case: pad first
        padded = cv2.copyMakeBorder(image, ay, ky - ay - 1, ax, kx - ax - 1, _CV_BORDERS[border], value=[fill] * 3)
        return cv2.filter2D(padded, -1, kernel, anchor=(ax, ay))[ay:ay + image.shape[0], ax:ax + image.shape[1]]
    return cv2.filter2D(image, -1, kernel, anchor=(ax, ay), borderType=_CV_BORDERS[border])


@pytest.mark.parametrize("border", list(_CV_BORDERS))
def test_borders_match_opencv(border, device):
    images = _images()
    kernel = np.array([[1, 2, 0, 1], [0, 1, -1, 2], [3, 1, 1, 0]], np.float32) / 9  # even width: anchor 2
    out = run_op("filter", images, [kernel] * len(images), layout=["HWC", ""], border=border, device=device)
    for i, image in enumerate(images):
        np.testing.assert_allclose(out[i].cpu().numpy(), _opencv(image, kernel, border), atol=1e-4)


def test_anchor_valid_mode_and_per_sample_filters():
    images = _images()
    kernels = [np.arange(9, dtype=np.float32).reshape(3, 3) / 36, np.ones((1, 5), np.float32) / 5,
               np.array([[0.5], [0.25], [0.25]], np.float32)]
    out = run_op("filter", images, [kernels[0]] * 3, layout=["HWC", ""], anchor=[0, 2])
    for i in range(3):
        np.testing.assert_allclose(out[i].numpy(), _opencv(images[i], kernels[0], "reflect_101", (0, 2)), atol=1e-4)
    with pytest.raises(Exception, match="anchor"):  # the anchor must lie in every sample's filter
        run_op("filter", images, kernels, layout=["HWC", ""], anchor=[0, 2])
    out = run_op("filter", images, kernels, layout=["HWC", ""], border="clamp")
    for i in range(3):
        np.testing.assert_allclose(out[i].numpy(), _opencv(images[i], kernels[i], "clamp"), atol=1e-4)
    valid = run_op("filter", images, kernels, layout=["HWC", ""], mode="valid")
    for i, (image, k) in enumerate(zip(images, kernels)):
        h, w = image.shape[0] - k.shape[0] + 1, image.shape[1] - k.shape[1] + 1
        ref = cv2.filter2D(image, -1, k, anchor=(0, 0))[:h, :w]
        assert valid[i].shape == ref.shape
        np.testing.assert_allclose(valid[i].numpy(), ref, atol=1e-4)


def test_uint8_rounding_chw_fill_value_and_dtype():
    images = _images(np.uint8)
    kernel = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)
    out = run_op("filter", images, [kernel] * 3, layout=["HWC", ""])
    for i, image in enumerate(images):
        np.testing.assert_array_equal(out[i].numpy(), _opencv(image, kernel, "reflect_101"))  # saturated, rounded
    chw = run_op("filter", [np.ascontiguousarray(x.transpose(2, 0, 1)) for x in images], [kernel] * 3,
                 layout=["CHW", ""], dtype=types.FLOAT)
    assert chw[0].dtype.is_floating_point
    np.testing.assert_allclose(chw[1].numpy().transpose(1, 2, 0),
                               _opencv(images[1].astype(np.float32), kernel, "reflect_101"), atol=1e-3)
    fills = [np.uint8(v) for v in (0, 200, 77)]
    out = run_op("filter", images, [kernel] * 3, fills, layout=["HWC", "", ""], border="constant")
    for i, image in enumerate(images):
        np.testing.assert_array_equal(out[i].numpy(), _opencv(image, kernel, "constant", fill=int(fills[i])))


@pytest.mark.cuda
def test_gpu_ragged_matches_cpu():
    images = _images(np.uint8)
    kernels = [np.full((3, 3), 1 / 9, np.float32), np.ones((1, 5), np.float32) / 5, np.eye(3, dtype=np.float32)]
    for border in _CV_BORDERS:
        cpu = run_op("filter", images, kernels, layout=["HWC", ""], border=border)
        gpu = run_op("filter", images, kernels, layout=["HWC", ""], border=border, device="gpu")
        for a, b in zip(cpu.samples, gpu.samples):
            assert (a.int() - b.cpu().int()).abs().max() <= 1

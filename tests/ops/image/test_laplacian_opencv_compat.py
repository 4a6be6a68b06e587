"""laplacian against OpenCV: ``cv2.Laplacian(ksize=k)`` for equal windows, ``cv2.sepFilter2D`` with
``getDerivKernels`` windows for separate smoothing sizes and scales (BORDER_REFLECT_101 in both). Exact in float32
(the windows hold small integers), and for uint8 outputs (rounded, saturated) too. Ragged batches; volumes against
SciPy-free NumPy sums of the same separable passes."""

import cv2
import numpy as np
import pytest
import torch

from _image_effects_data import RAGGED, noise_images, run_kernel, samples_of
from sluice import types
from sluice.ops.image.laplacian import derivative_window, laplacian, smoothing_window
from sluice.testing import run_op


def _sep(img, kx, ky):
    return cv2.sepFilter2D(img.astype(np.float32), cv2.CV_32F, np.float32(kx), np.float32(ky),
                           borderType=cv2.BORDER_REFLECT_101)


@pytest.mark.parametrize("k", [3, 5, 7])
def test_equal_windows_match_cv2_laplacian(k):
    imgs = noise_images()
    out = run_op("laplacian", imgs, layout="HWC", window_size=k, dtype=types.FLOAT)
    for img, got in zip(imgs, out):
        np.testing.assert_array_equal(got.numpy(), cv2.Laplacian(img.astype(np.float32), cv2.CV_32F, ksize=k))


def test_uint8_output_saturates_like_opencv():
    imgs = noise_images(channels=None)
    out = run_op("laplacian", imgs, layout="HW")
    for img, got in zip(imgs, out):
        assert got.dtype == torch.uint8
        np.testing.assert_array_equal(got.numpy(), cv2.Laplacian(img, cv2.CV_8U, ksize=3))


def test_per_axis_windows_smoothing_and_scale():
    imgs = noise_images(channels=1)
    out = run_op("laplacian", imgs, layout="HWC", window_size=[5, 3], smoothing_size=[1, 7], scale=[0.5, 2.0],
                 dtype=types.FLOAT)
    for img, got in zip(imgs, out):
        # d2/dy2: derivative 5 along y, smoothing 7 along x; d2/dx2: derivative 3 along x, smoothing 1 along y
        ref = 0.5 * _sep(img[..., 0], smoothing_window(7), derivative_window(5)) + \
            2.0 * _sep(img[..., 0], derivative_window(3), smoothing_window(1))
        np.testing.assert_allclose(got.numpy()[..., 0], ref, rtol=1e-6, atol=1e-3)


def test_normalized_kernel_and_per_sample_windows():
    imgs = noise_images(dtype=np.float32)
    got = run_kernel("laplacian", laplacian, imgs, "HWC", per_sample={"window_size": [[3], [5], [7]]},
                     normalized_kernel=True)
    for img, k, o in zip(imgs, (3, 5, 7), samples_of(got)):
        ref = cv2.Laplacian(img, cv2.CV_32F, ksize=k) * 2.0 ** -(2 * k - 4)
        np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-5)


def test_chw_and_volume():
    img = noise_images([(12, 14)], dtype=np.float32)[0]
    chw = run_op("laplacian", [img.transpose(2, 0, 1).copy()], layout="CHW", window_size=5)[0].numpy()
    np.testing.assert_allclose(chw.transpose(1, 2, 0), cv2.Laplacian(img, cv2.CV_32F, ksize=5), rtol=1e-6, atol=1e-3)
    vol = np.random.default_rng(1).random((5, 6, 7)).astype(np.float32)
    got = run_op("laplacian", [vol], layout="DHW")[0].numpy()
    pad = np.pad(vol, 1, mode="reflect")  # NumPy's 'reflect' is OpenCV's reflect_101
    ref = np.zeros_like(vol)
    d, s = derivative_window(3), smoothing_window(3)
    for axis in range(3):
        windows = [d if a == axis else s for a in range(3)]
        acc = np.zeros_like(vol, dtype=np.float64)
        for i in range(3):
            for j in range(3):
                for k in range(3):
                    acc += windows[0][i] * windows[1][j] * windows[2][k] * pad[i:i + 5, j:j + 6, k:k + 7]
        ref += acc.astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-3)


def test_errors_name_the_argument():
    img = noise_images([(8, 8)])
    with pytest.raises(Exception, match="window_size must be an odd integer"):
        run_op("laplacian", img, layout="HWC", window_size=4)
    with pytest.raises(Exception, match="scale cannot be given"):
        run_op("laplacian", img, layout="HWC", normalized_kernel=True, scale=2.0)


@pytest.mark.cuda
def test_gpu_equals_cpu():
    imgs = noise_images(RAGGED + [(40, 33)])
    cpu = run_op("laplacian", imgs, layout="HWC", window_size=5, smoothing_size=3, dtype=types.FLOAT)
    gpu = run_op("laplacian", imgs, layout="HWC", window_size=5, smoothing_size=3, dtype=types.FLOAT,
                 device="gpu").as_cpu()
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-2)

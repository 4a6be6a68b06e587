"""jpeg_compression_distortion against OpenCV's ``imencode`` / ``imdecode`` (DALI's CPU operator): the CPU kernel
(libjpeg-turbo through Pillow, with OpenCV's settings) gives the same pixels; the distortion grows as quality falls; the GPU operator without a CUDA JPEG codec
(torchvision absent here) takes the host path and equals the CPU."""

import cv2
import numpy as np
import pytest

from _image_effects_data import RAGGED, run_kernel, samples_of, smooth_images
from sluice.ops.image.jpeg_compression_distortion import jpeg_compression_distortion_gpu
from sluice.testing import run_op


def _opencv(img, quality):
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


@pytest.mark.parametrize("quality", [5, 50, 95, 100])
def test_cpu_matches_opencv_roundtrip(quality):
    imgs = smooth_images(RAGGED + [(64, 48)])
    out = run_op("jpeg_compression_distortion", imgs, layout="HWC", quality=quality)
    for img, o in zip(imgs, out):
        ref = _opencv(img, quality)
        np.testing.assert_array_equal(o.numpy(), ref)


def test_quality_orders_the_distortion_and_clamps():
    img = smooth_images([(64, 64)], seed=3)[0]
    noisy = np.clip(img.astype(int) + np.random.default_rng(0).integers(-30, 30, img.shape), 0, 255).astype(np.uint8)
    errs = [np.abs(run_op("jpeg_compression_distortion", [noisy], layout="HWC", quality=q)[0].numpy().astype(int)
                   - noisy).mean() for q in (5, 30, 90)]
    assert errs[0] > errs[1] > errs[2] > 0
    low = run_op("jpeg_compression_distortion", [noisy], layout="HWC", quality=-7)[0].numpy()
    np.testing.assert_array_equal(low, run_op("jpeg_compression_distortion", [noisy], layout="HWC",
                                              quality=1)[0].numpy())


def test_gpu_kernel_host_path_per_sample_quality():
    imgs = smooth_images()
    got = run_kernel("jpeg_compression_distortion", jpeg_compression_distortion_gpu, imgs, "HWC",
                     per_sample={"quality": [10, 60, 95]})
    for img, q, o in zip(imgs, [10, 60, 95], samples_of(got)):
        ref = run_op("jpeg_compression_distortion", [img], layout="HWC", quality=q)[0].numpy()
        np.testing.assert_array_equal(o, ref)


def test_rejects_non_rgb():
    with pytest.raises(Exception, match="RGB"):
        run_op("jpeg_compression_distortion", smooth_images(channels=1), layout="HWC")


@pytest.mark.cuda
def test_gpu_close_to_cpu():
    imgs = smooth_images(RAGGED + [(64, 48)])
    cpu = run_op("jpeg_compression_distortion", imgs, layout="HWC", quality=40)
    gpu = run_op("jpeg_compression_distortion", imgs, layout="HWC", quality=40, device="gpu").as_cpu()
    for a, b, x in zip(cpu, gpu, imgs):
        # two JPEG encoders (OpenCV's libjpeg, nvJPEG) quantise the blocks differently (a 64 x 48 image differed by
        # 4.05 levels on average on the H100): the GPU's output must be as close to the image as the CPU's, and
        # both close to each other
        a, b, x = (np.asarray(v, dtype=int) for v in (a.numpy(), b.numpy(), x))
        assert np.abs(b - x).mean() <= 1.5 * np.abs(a - x).mean() + 1.0
        assert np.abs(a - b).mean() < 6.0

"""clahe against OpenCV's ``cv2.createCLAHE``: the CPU operator is OpenCV itself; the GPU batch kernel (run here on
CPU tensors, ragged batches, tile counts that do and do not divide the sizes, clipping on and off) equals it exactly
on grey images and per channel. With ``luma_only`` on RGB the GPU kernel converts to Lab with the float formula
where OpenCV's 8-bit conversion uses fixed-point tables (DALI's GPU operator does the same): the conversions agree
within 2 levels, and the equalised images within a mean of 4 levels (CLAHE's steep tables amplify a lightness that
differs by one)."""

import cv2
import numpy as np
import pytest
import torch

from _image_effects_data import noise_images, run_kernel, samples_of, smooth_images
from sluice.ops.image.clahe import clahe_gpu, lab_to_rgb, rgb_to_lab
from sluice.testing import run_op

SHAPES = [(40, 64), (37, 29), (64, 64), (9, 11)]
SETTINGS = [(8, 8, 2.0), (4, 3, 4.0), (2, 2, 0.0), (3, 5, 40.0)]


def _opencv(img, tx, ty, clip):
    return cv2.createCLAHE(clipLimit=clip, tileGridSize=(tx, ty)).apply(img)


@pytest.mark.parametrize("tx,ty,clip", SETTINGS)
def test_grey_gpu_kernel_equals_opencv(tx, ty, clip):
    imgs = smooth_images(SHAPES, channels=None)
    got = run_kernel("clahe", clahe_gpu, imgs, "HW", tiles_x=tx, tiles_y=ty, clip_limit=clip)
    for img, out in zip(imgs, samples_of(got)):
        np.testing.assert_array_equal(out, _opencv(img, tx, ty, clip))


def test_cpu_operator_is_opencv_and_per_channel_gpu_matches():
    imgs = noise_images(SHAPES)
    cpu = run_op("clahe", imgs, layout="HWC", tiles_x=4, tiles_y=4, clip_limit=3.0, luma_only=False)
    gpu = run_kernel("clahe", clahe_gpu, imgs, "HWC", tiles_x=4, tiles_y=4, clip_limit=3.0, luma_only=False)
    for img, a, b in zip(imgs, cpu, samples_of(gpu)):
        ref = np.stack([_opencv(np.ascontiguousarray(img[..., c]), 4, 4, 3.0) for c in range(3)], -1)
        np.testing.assert_array_equal(a.numpy(), ref)
        np.testing.assert_array_equal(b, ref)


def test_lab_conversions_agree_with_opencv():
    img = noise_images([(48, 48)])[0]
    lab = rgb_to_lab(torch.from_numpy(img).permute(2, 0, 1)[None].float())[0].permute(1, 2, 0).numpy()
    assert np.abs(lab - cv2.cvtColor(img, cv2.COLOR_RGB2Lab)).max() <= 2
    ref_lab = cv2.cvtColor(img, cv2.COLOR_RGB2Lab)
    back = lab_to_rgb(torch.from_numpy(ref_lab).permute(2, 0, 1)[None].float())[0].permute(1, 2, 0).numpy()
    assert np.abs(np.rint(back) - cv2.cvtColor(ref_lab, cv2.COLOR_Lab2RGB)).max() <= 1


@pytest.mark.parametrize("tx,ty,clip", SETTINGS[:3])
def test_luma_only_close_to_opencv(tx, ty, clip):
    imgs = smooth_images(SHAPES[:3])
    cpu = run_op("clahe", imgs, layout="HWC", tiles_x=tx, tiles_y=ty, clip_limit=clip)
    gpu = run_kernel("clahe", clahe_gpu, imgs, "HWC", tiles_x=tx, tiles_y=ty, clip_limit=clip)
    for img, a, b in zip(imgs, cpu, samples_of(gpu)):
        lab = cv2.cvtColor(img, cv2.COLOR_RGB2Lab)
        lab[..., 0] = _opencv(np.ascontiguousarray(lab[..., 0]), tx, ty, clip)
        np.testing.assert_array_equal(a.numpy(), cv2.cvtColor(lab, cv2.COLOR_Lab2RGB))
        diff = np.abs(a.numpy().astype(int) - b.astype(int))
        assert diff.mean() < 4.0
        assert np.abs(b.astype(int) - img.astype(int)).mean() > 2 * diff.mean()  # it did equalise


def test_rejects_what_opencv_rejects():
    with pytest.raises(Exception, match="uint8"):
        run_op("clahe", noise_images(dtype=np.float32), layout="HWC", tiles_x=2, tiles_y=2, clip_limit=2.0)
    with pytest.raises(Exception, match="power of 2"):
        run_op("clahe", noise_images(), layout="HWC", tiles_x=2, tiles_y=2, clip_limit=2.0, bins=100)


@pytest.mark.cuda
def test_gpu_equals_cpu_on_grey_and_close_on_rgb():
    grey = smooth_images(SHAPES, channels=None)
    cpu = run_op("clahe", grey, layout="HW", tiles_x=4, tiles_y=3, clip_limit=2.0)
    gpu = run_op("clahe", grey, layout="HW", tiles_x=4, tiles_y=3, clip_limit=2.0, device="gpu").as_cpu()
    for a, b in zip(cpu, gpu):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    rgb = smooth_images(SHAPES)
    cpu = run_op("clahe", rgb, layout="HWC", tiles_x=4, tiles_y=3, clip_limit=2.0)
    gpu = run_op("clahe", rgb, layout="HWC", tiles_x=4, tiles_y=3, clip_limit=2.0, device="gpu").as_cpu()
    for a, b in zip(cpu, gpu):
        assert np.abs(a.numpy().astype(int) - b.numpy().astype(int)).mean() < 4.0

"""experimental.dilate / erode / median_blur against OpenCV (``cv2.dilate`` / ``cv2.erode`` with a rectangular
element, ``cv2.medianBlur``), as DALI's own tests compare them: exact. The GPU batch kernels run here on CPU
tensors over ragged batches with per-sample windows and anchors; ``wrap`` borders (which OpenCV's morphology
refuses) against a NumPy window maximum."""

import cv2
import numpy as np
import pytest

from _image_effects_data import RAGGED, noise_images, run_kernel, samples_of
from sluice.ops.image import morphology
from sluice.testing import run_op

BORDERS = {"constant": cv2.BORDER_CONSTANT, "replicate": cv2.BORDER_REPLICATE, "reflect": cv2.BORDER_REFLECT,
           "reflect_101": cv2.BORDER_REFLECT_101}
SIZES = [[3, 5], [4, 2], [1, 6]]
ANCHORS = [[-1, -1], [0, 1], [0, 5]]


def _cv(op, img, size, anchor, iterations, border):
    fn = cv2.dilate if op == "dilate" else cv2.erode
    return fn(img, np.ones((size[1], size[0]), np.uint8), anchor=tuple(anchor), iterations=iterations,
              borderType=BORDERS[border])


@pytest.mark.parametrize("op", ["dilate", "erode"])
@pytest.mark.parametrize("border", list(BORDERS))
def test_gpu_kernel_equals_opencv(op, border):
    imgs = noise_images()
    schema = morphology.DILATE if op == "dilate" else morphology.ERODE
    got = run_kernel(schema.name, schema.kernels["gpu"].kernel, imgs, "HWC",
                     per_sample={"mask_size": SIZES, "anchor": ANCHORS}, border_mode=border, iterations=2)
    for img, size, anchor, out in zip(imgs, SIZES, ANCHORS, samples_of(got)):
        np.testing.assert_array_equal(out, _cv(op, img, size, anchor, 2, border))


@pytest.mark.parametrize("layout,dtype", [("CHW", np.float32), ("HW", np.uint16)])
def test_cpu_operator_layouts_and_types(layout, dtype):
    imgs = noise_images(channels=None if layout == "HW" else 3, dtype=dtype)
    if layout == "CHW":
        imgs = [i.transpose(2, 0, 1).copy() for i in imgs]
    for op in ("dilate", "erode"):
        out = run_op(f"experimental.{op}", imgs, layout=layout, mask_size=[5, 3], border_mode="reflect")
        gpu = run_kernel(f"experimental.{op}", getattr(morphology, op.upper()).kernels["gpu"].kernel, imgs, layout,
                         mask_size=[5, 3], border_mode="reflect")
        for img, o, g in zip(imgs, out, samples_of(gpu)):
            planes = list(img) if layout == "CHW" else [img]
            ref = np.stack([_cv(op, p, [5, 3], [-1, -1], 1, "reflect") for p in planes])
            ref = ref if layout == "CHW" else ref[0]
            np.testing.assert_array_equal(o.numpy(), ref)
            np.testing.assert_array_equal(g, ref)


def test_wrap_border_against_numpy():
    imgs = noise_images(channels=None)
    got = run_kernel("experimental.dilate", morphology.DILATE.kernels["gpu"].kernel, imgs, "HW",
                     mask_size=[3, 5], border_mode="wrap")
    for img, out in zip(imgs, samples_of(got)):
        pad = np.pad(img, ((2, 2), (1, 1)), mode="wrap")
        h, w = img.shape
        ref = np.max([pad[dy:dy + h, dx:dx + w] for dy in range(5) for dx in range(3)], axis=0)
        np.testing.assert_array_equal(out, ref)


def test_median_blur_equals_opencv_with_per_sample_windows():
    imgs = noise_images(RAGGED + [(12, 40)])
    windows = [[3, 3], [5, 5], [7, 7], [1, 1]]
    got = run_kernel("experimental.median_blur", morphology.median_blur_gpu, imgs, "HWC",
                     per_sample={"window_size": windows})
    cpu = run_op("experimental.median_blur", imgs, layout="HWC", window_size=5)
    for img, win, out, c in zip(imgs, windows, samples_of(got), cpu):
        np.testing.assert_array_equal(out, cv2.medianBlur(img, win[0]) if win[0] > 1 else img)
        np.testing.assert_array_equal(c.numpy(), cv2.medianBlur(img, 5))


def test_median_blur_float_large_window_and_rectangle():
    img = noise_images([(15, 18)], dtype=np.float32)[0]
    out = run_op("experimental.median_blur", [img], layout="HWC", window_size=7)[0].numpy()
    pad = np.pad(img, ((3, 3), (3, 3), (0, 0)), mode="edge")
    ref = np.median(np.stack([pad[dy:dy + 15, dx:dx + 18] for dy in range(7) for dx in range(7)]), axis=0)
    np.testing.assert_array_equal(out, ref)
    rect = run_op("experimental.median_blur", [img], layout="HWC", window_size=[5, 3])[0].numpy()
    pad = np.pad(img, ((1, 1), (2, 2), (0, 0)), mode="edge")
    ref = np.median(np.stack([pad[dy:dy + 15, dx:dx + 18] for dy in range(3) for dx in range(5)]), axis=0)
    np.testing.assert_array_equal(rect, ref)


def test_errors():
    with pytest.raises(Exception, match="window_size must be odd"):
        run_op("experimental.median_blur", noise_images(), layout="HWC", window_size=4)
    with pytest.raises(Exception, match="anchor"):
        run_op("experimental.erode", noise_images(), layout="HWC", mask_size=3, anchor=[5, 0])
    with pytest.raises(Exception, match="border_mode"):
        run_op("experimental.erode", noise_images(), layout="HWC", border_mode="mirror")


@pytest.mark.cuda
def test_gpu_equals_cpu():
    imgs = noise_images(RAGGED)
    for op, kw in (("experimental.dilate", dict(mask_size=[5, 3], border_mode="reflect_101")),
                   ("experimental.erode", dict(mask_size=[3, 3], iterations=3)),
                   ("experimental.median_blur", dict(window_size=5))):
        cpu = run_op(op, imgs, layout="HWC", **kw)
        gpu = run_op(op, imgs, layout="HWC", device="gpu", **kw).as_cpu()
        for a, b in zip(cpu, gpu):
            np.testing.assert_array_equal(a.numpy(), b.numpy())

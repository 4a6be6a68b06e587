"""experimental.warp_perspective, experimental.remap, water and sphere against OpenCV (``cv2.warpPerspective``,
``cv2.remap``) on ragged batches: the CPU operators are OpenCV; the GPU batch kernels, run here on CPU tensors,
agree with them exactly on these smooth images for every border mode and interpolation (OpenCV quantises source
positions to 1/32 pixel, which on smooth images never moves a rounded value here); nearest-neighbour with
``pixel_origin="corner"`` may differ where a position is a rounding tie, so those compare with
``"center"``. water and sphere against ``cv2.remap`` of their documented source positions."""

import math

import cv2
import numpy as np
import pytest
import torch

from _image_effects_data import noise_images, run_kernel, samples_of, smooth_images
from sluice import types
from sluice.ops.image import displacement
from sluice.ops.image.remap import remap_gpu
from sluice.ops.image.warp_perspective import opencv_matrix, warp_perspective_gpu
from sluice.testing import run_op

MATRICES = [[1.05, 0.1, -2, 0.05, 0.95, 1, 0.001, 0.002, 1], [0.9, -0.1, 3, 0.1, 1.1, -2, -0.002, 0.001, 1],
            [1, 0, 0.5, 0, 1, 0.25, 0, 0, 1]]
SIZES = [[22, 31], [17, 9], [30, 20]]
CV_BORDER = {"constant": 0, "replicate": 1, "reflect": 2, "wrap": 3, "reflect_101": 4}
CV_INTERP = {types.INTERP_NN: 0, types.INTERP_LINEAR: 1, types.INTERP_CUBIC: 2}


def _cv_warp(img, m, size, interp, border, origin, inverse=True, fill=(10, 20, 30, 0)):
    mm = opencv_matrix(m, origin)
    flags = CV_INTERP[interp] | (cv2.WARP_INVERSE_MAP if inverse else 0)
    return cv2.warpPerspective(img, mm, (size[1], size[0]), flags=flags, borderMode=CV_BORDER[border],
                               borderValue=fill)


@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR, types.INTERP_CUBIC])
@pytest.mark.parametrize("border", list(CV_BORDER))
def test_warp_perspective_gpu_kernel_equals_opencv(interp, border):
    imgs = smooth_images()
    origin = "center" if interp == types.INTERP_NN else "corner"
    got = run_kernel("experimental.warp_perspective", warp_perspective_gpu, imgs, "HWC",
                     per_sample={"matrix": MATRICES, "size": SIZES}, interp_type=interp, border_mode=border,
                     pixel_origin=origin, fill_value=[10, 20, 30])
    for img, m, size, out in zip(imgs, MATRICES, SIZES, samples_of(got)):
        np.testing.assert_array_equal(out, _cv_warp(img, m, size, interp, border, origin))


def test_warp_perspective_operator_matrix_input_forward_map_and_layouts():
    imgs = smooth_images(channels=None)
    mats = [np.asarray(m, np.float32).reshape(3, 3) for m in MATRICES]
    cpu = run_op("experimental.warp_perspective", imgs, mats, layout=["HW", ""], inverse_map=False,
                 border_mode="replicate")
    gpu = run_kernel("experimental.warp_perspective", warp_perspective_gpu, imgs, "HW", extra=(mats,),
                     inverse_map=False, border_mode="replicate")
    for img, m, a, b in zip(imgs, MATRICES, cpu, samples_of(gpu)):
        ref = _cv_warp(img, m, img.shape, types.INTERP_LINEAR, "replicate", "corner", inverse=False)
        np.testing.assert_array_equal(a.numpy(), ref)
        assert np.abs(b.astype(int) - ref).max() <= 1  # the forward matrix inverted in float64 vs OpenCV's own
    chw = [i.transpose(2, 0, 1).copy() for i in smooth_images()]
    out = run_op("experimental.warp_perspective", chw, layout="CHW", matrix=MATRICES[0], fill_value=7)
    for img, o in zip(chw, out):
        ref = np.stack([_cv_warp(p, MATRICES[0], p.shape, types.INTERP_LINEAR, "constant", "corner", fill=(7,) * 4)
                        for p in img])
        np.testing.assert_array_equal(o.numpy(), ref)


def test_warp_perspective_needs_a_matrix():
    with pytest.raises(Exception, match="9 values"):
        run_op("experimental.warp_perspective", smooth_images(), layout="HWC")


def _maps(imgs, shapes, seed=3):
    rng = np.random.default_rng(seed)
    mx = [(rng.random(s) * (i.shape[1] + 4) - 2).astype(np.float32) for s, i in zip(shapes, imgs)]
    my = [(rng.random(s) * (i.shape[0] + 4) - 2).astype(np.float32) for s, i in zip(shapes, imgs)]
    return mx, my


@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR, types.INTERP_CUBIC])
@pytest.mark.parametrize("origin", ["corner", "center"])
def test_remap_equals_opencv(interp, origin):
    imgs = smooth_images()
    mx, my = _maps(imgs, SIZES)
    cpu = run_op("experimental.remap", imgs, mx, my, layout=["HWC", "", ""], interp=interp, pixel_origin=origin)
    gpu = run_kernel("experimental.remap", remap_gpu, imgs, "HWC", extra=(mx, my), interp=interp,
                     pixel_origin=origin)
    shift = 0.5 if origin == "corner" else 0.0
    for img, x, y, a, b in zip(imgs, mx, my, cpu, samples_of(gpu)):
        ref = cv2.remap(img, x - shift, y - shift, CV_INTERP[interp], borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        np.testing.assert_array_equal(a.numpy(), ref)
        np.testing.assert_array_equal(b, ref)


def test_remap_rejects_mismatched_maps():
    imgs = smooth_images()
    mx, my = _maps(imgs, SIZES)
    with pytest.raises(Exception, match="must"):
        run_op("experimental.remap", imgs, mx, my[::-1], layout=["HWC", "", ""])


def _cv_remap(img, sx, sy, interp, fill):
    return cv2.remap(img, sx.astype(np.float32), sy.astype(np.float32),
                     cv2.INTER_NEAREST if interp == types.INTERP_NN else cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_CONSTANT, borderValue=(fill,) * 4)


@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR])
def test_water_matches_its_formula_through_opencv(interp):
    imgs = smooth_images()
    waves = dict(ampl_x=[3.0, 5.0, 0.0], ampl_y=[2.0, 4.0, 1.0], freq_x=[0.2, 0.3, 0.1], phase_y=[0.0, 1.0, 2.0])
    got = run_kernel("water", displacement.water, imgs, "HWC", per_sample=waves, interp_type=interp, fill_value=9)
    for i, (img, out) in enumerate(zip(imgs, samples_of(got))):
        h, w = img.shape[:2]
        yc, xc = np.mgrid[0:h, 0:w] + 0.5
        sx = xc + waves["ampl_x"][i] * np.sin(waves["freq_x"][i] * yc) - 0.5
        sy = yc + waves["ampl_y"][i] * np.cos(2 * math.pi / 128 * xc + waves["phase_y"][i]) - 0.5
        ref = _cv_remap(img, sx, sy, interp, 9)
        assert np.abs(out.astype(int) - ref).max() <= (0 if interp == types.INTERP_NN else 1)


@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR])
def test_sphere_matches_its_formula_through_opencv_and_mask(interp):
    imgs = noise_images()
    got = run_op("sphere", imgs, layout="HWC", interp_type=interp)
    for img, out in zip(imgs, got):
        h, w = img.shape[:2]
        mid_y, mid_x = h / 2, w / 2
        d = int(max(mid_x, mid_y))
        yc, xc = np.mgrid[0:h, 0:w] + 0.5
        tx, ty = xc - mid_x, yc - mid_y
        rad = np.sqrt(tx * tx + ty * ty) / d
        ref = _cv_remap(img, mid_x + rad * tx - 0.5, mid_y + rad * ty - 0.5, interp, 0)
        diff = np.abs(out.numpy().astype(int) - ref)
        assert (diff > (0 if interp == types.INTERP_NN else 1)).mean() < 0.01  # rounding ties only
    masked = run_kernel("sphere", displacement.sphere, imgs, "HWC", per_sample={"mask": [0, 1, 0]})
    np.testing.assert_array_equal(samples_of(masked)[0], imgs[0])
    np.testing.assert_array_equal(samples_of(masked)[2], imgs[2])
    assert not np.array_equal(samples_of(masked)[1], imgs[1])


@pytest.mark.cuda
def test_gpu_equals_cpu():
    imgs = smooth_images()
    mx, my = _maps(imgs, SIZES)
    cases = [("experimental.warp_perspective", [imgs], dict(matrix=MATRICES[1], border_mode="reflect_101")),
             ("experimental.remap", [imgs, mx, my], dict(pixel_origin="center")),
             ("water", [imgs], dict(ampl_x=4.0, interp_type=types.INTERP_LINEAR)),
             ("sphere", [imgs], dict())]
    for op, inputs, kw in cases:
        layouts = ["HWC"] + [""] * (len(inputs) - 1)
        cpu = run_op(op, *inputs, layout=layouts, **kw)
        gpu = run_op(op, *inputs, layout=layouts, device="gpu", **kw).as_cpu()
        for a, b in zip(cpu, gpu):
            assert (np.abs(a.numpy().astype(int) - b.numpy().astype(int)) > 1).mean() < 0.01, op

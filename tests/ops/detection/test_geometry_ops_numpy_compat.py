"""fn.coord_transform against NumPy's ``M @ x + T``, fn.random_crop_generator against the window rules it shares
with random_resized_crop, and fn.bbox_rotate against the painted pixels of an image turned by fn.rotate (the
box encloses them) and DALI's documented modes, on ragged batches."""

import math

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.testing import run_op, run_pipeline

RNG = np.random.default_rng(21)


def test_coord_transform_equals_numpy_per_sample_matrices():
    pts = [RNG.normal(size=(k, 3)).astype(np.float32) for k in (4, 0, 7)]
    ms = [RNG.normal(size=(2, 3)).astype(np.float32) for _ in pts]
    ts = [RNG.normal(size=2).astype(np.float32) for _ in pts]

    def build():
        x = fn.external_source(source=lambda: pts, cycle=True)
        m = fn.external_source(source=lambda: [m.reshape(-1) for m in ms], cycle=True)
        t = fn.external_source(source=lambda: ts, cycle=True)
        return fn.coord_transform(x, M=m, T=t)

    (out,) = run_pipeline(build, batch_size=3)
    for p, m, t, got in zip(pts, ms, ts, out):
        assert got.shape == (len(p), 2)
        np.testing.assert_allclose(got.numpy(), p @ m.T + t, rtol=1e-5, atol=1e-5)


def test_coord_transform_scalars_mt_and_integer_output():
    pts = [np.array([[1.0, 2.0], [3.0, -4.0]], np.float32), np.array([[0.25, 0.75]], np.float32)]
    out = run_op("coord_transform", pts, M=2.0, T=0.5)
    np.testing.assert_allclose(out[0].numpy(), pts[0] * 2 + 0.5)
    mt = [0, -1, 1, 1, 0, 0]  # rotate by 90 degrees and shift x by 1
    out = run_op("coord_transform", pts, MT=mt)
    np.testing.assert_allclose(out[1].numpy(), [[1 - 0.75, 0.25]])
    out = run_op("coord_transform", pts, M=[100.0], dtype=types.UINT8)
    assert out[0].dtype == torch.uint8 and out[0].tolist() == [[100, 200], [255, 0]]
    with pytest.raises(Exception, match="MT cannot be given"):
        run_op("coord_transform", pts, MT=mt, T=1.0)
    with pytest.raises(Exception, match="D_out x 2"):
        run_op("coord_transform", pts, M=[1.0, 2.0, 3.0])


@pytest.mark.cuda
def test_coord_transform_gpu_equals_cpu():
    pts = [RNG.normal(size=(k, 2)).astype(np.float32) for k in (3, 5)]
    c = run_op("coord_transform", pts, M=[1, 2, 3, 4], T=[1, -1])
    g = run_op("coord_transform", pts, M=[1, 2, 3, 4], T=[1, -1], device="gpu").as_cpu()
    for a, b in zip(c, g):
        torch.testing.assert_close(b, a)


def test_random_crop_generator_windows_fit_and_follow_the_ranges():
    shapes = [np.array([480, 640, 3], np.int64), np.array([100, 50], np.int64), np.array([64, 64, 1], np.int64)]
    seen = set()
    for seed in range(6):
        anchor, shape = run_op("random_crop_generator", shapes, seed=seed, random_area=[0.3, 0.6],
                               random_aspect_ratio=[0.5, 2.0])
        for s, a, w in zip(shapes, anchor, shape):
            (y, x), (h, ww) = a.tolist(), w.tolist()
            assert a.dtype == torch.int32 and w.dtype == torch.int32
            assert 0 <= y and 0 <= x and y + h <= s[0] and x + ww <= s[1]
            assert 0.3 * 0.9 <= h * ww / (s[0] * s[1]) <= 0.6 * 1.1
            seen.add((y, x, h, ww))
    assert len(seen) > 6  # the windows vary with the seed and the sample
    with pytest.raises(Exception, match="random_area"):
        run_op("random_crop_generator", shapes, random_area=[0.5, 0.2])


def _painted(h, w, box):
    img = np.zeros((h, w, 1), np.uint8)
    x0, y0, x1, y1 = box
    img[round(y0 * h):round(y1 * h), round(x0 * w):round(x1 * w)] = 255
    return img


@pytest.mark.parametrize("angle", [90.0, 30.0, -45.0])
def test_bbox_rotate_encloses_the_rotated_pixels(angle):
    h, w = 40, 60
    boxes = np.array([[0.2, 0.25, 0.5, 0.6], [0.6, 0.1, 0.9, 0.3]], np.float32)
    img = np.zeros((h, w, 1), np.uint8)
    for b in boxes:
        img += _painted(h, w, b) // 2
    rotated = run_op("rotate", [img], layout="HWC", angle=angle, interp_type=types.INTERP_NN)[0].numpy()[..., 0]
    out, labels = run_op("bbox_rotate", [boxes], [np.array([3, 4], np.int32)], angle=angle, input_shape=[h, w, 1])
    assert labels[0].tolist() == [3, 4]
    oh, ow = rotated.shape
    for b in out[0].numpy():
        x0, y0, x1, y1 = b * np.array([ow, oh, ow, oh])
        inside = rotated[max(0, math.floor(y0)):math.ceil(y1), max(0, math.floor(x0)):math.ceil(x1)]
        assert inside.sum() > 0
    # every painted pixel lies in some box (within a pixel of rounding)
    ys, xs = np.nonzero(rotated)
    px = (xs + 0.5) / ow
    py = (ys + 0.5) / oh
    tol = 1.5 / min(oh, ow)
    covered = np.zeros(len(xs), bool)
    for b in out[0].numpy():
        covered |= (px >= b[0] - tol) & (px <= b[2] + tol) & (py >= b[1] - tol) & (py <= b[3] + tol)
    assert covered.all()


def test_bbox_rotate_90_degrees_is_exact_and_modes_keep_extents():
    boxes = np.array([[0.1, 0.2, 0.3, 0.6]], np.float32)  # in a 100 x 200 (H x W) image
    out = run_op("bbox_rotate", [boxes], angle=90.0, input_shape=[100, 200])
    # a counter-clockwise quarter turn: (x, y) -> (y, 1 - x) in normalised coordinates of the turned image
    np.testing.assert_allclose(out[0].numpy(), [[0.2, 0.7, 0.6, 0.9]], atol=1e-5)
    wide = np.array([[0.4, 0.45, 0.6, 0.55]], np.float32)  # 40 x 10 px in 200 x 100
    for mode in ("fixed", "halfway", "expand"):
        got = run_op("bbox_rotate", [wide], angle=45.0, input_shape=[100, 200], keep_size=True, mode=mode)[0]
        x0, y0, x1, y1 = got[0].numpy() * np.array([200, 100, 200, 100])
        if mode == "fixed":
            np.testing.assert_allclose([x1 - x0, y1 - y0], [40, 10], atol=1e-3)
        elif mode == "expand":
            e = 50 / math.sqrt(2)
            np.testing.assert_allclose([x1 - x0, y1 - y0], [e, e], atol=1e-3)
    xywh = run_op("bbox_rotate", [np.array([[20, 20, 40, 10]], np.float32)], angle=0.0, input_shape=[100, 200],
                  bbox_layout="xyWH", bbox_normalized=False, keep_size=True)
    np.testing.assert_allclose(xywh[0].numpy(), [[20, 20, 40, 10]], atol=1e-4)


def test_bbox_rotate_drops_boxes_turned_out_of_the_canvas():
    boxes = np.array([[0.0, 0.0, 0.1, 0.1], [0.45, 0.45, 0.55, 0.55]], np.float32)
    out, labels = run_op("bbox_rotate", [boxes], [np.array([1, 2], np.int32)], angle=45.0,
                         input_shape=[100, 300], keep_size=True, remove_threshold=0.5)
    assert labels[0].tolist() == [2] and out[0].shape == (1, 4)
    with pytest.raises(Exception, match="keep_size is mutually exclusive"):
        run_op("bbox_rotate", [boxes], angle=10.0, input_shape=[10, 10], keep_size=True, size=[20, 20])

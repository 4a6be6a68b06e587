"""fn.rotate and fn.warp_affine against OpenCV warpAffine (WARP_INVERSE_MAP, matrix shifted to OpenCV's integer
pixel centres): INTERP_LINEAR <= 1 grey level (OpenCV's 5-bit fixed-point weights), constant and replicated
borders; quarter turns equal NumPy's rot90 exactly; GPU == CPU within 1."""

import math

import numpy as np
import pytest
import torch

cv2 = pytest.importorskip("cv2")

from sluice import types  # noqa: E402
from sluice.ops.image.rotate import rotated_size, rotation_matrix  # noqa: E402
from sluice.testing import run_op  # noqa: E402


def _img(h=40, w=50, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 5, yy * 6, (xx * yy) % 200], axis=2) + rng.normal(0, 8, (h, w, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def _cv_matrix(m):
    a, t = m[:, :2], m[:, 2]
    return np.hstack([a, (a @ [0.5, 0.5] + t - 0.5)[:, None]])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_quarter_turns_equal_rot90(k):
    img = _img(7, 10)
    for interp in (types.INTERP_NN, types.INTERP_LINEAR):
        out = run_op("rotate", [img], layout="HWC", angle=90.0 * k, interp_type=interp)[0].numpy()
        np.testing.assert_array_equal(out, np.rot90(img, k))


@pytest.mark.parametrize("angle", [17.0, -33.0, 120.0])
def test_rotate_matches_opencv(angle):
    img = _img()
    out = run_op("rotate", [img], layout="HWC", angle=angle, fill_value=9.0)[0].numpy()
    oh, ow = rotated_size(40, 50, angle)
    assert out.shape == (oh, ow, 3)
    m = rotation_matrix(40, 50, oh, ow, angle)
    ref = cv2.warpAffine(img, _cv_matrix(m), (ow, oh), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                         borderMode=cv2.BORDER_CONSTANT, borderValue=(9, 9, 9))
    d = np.abs(out.astype(int) - ref.astype(int))
    assert d.max() <= 1 and d.mean() < 0.05


def test_rotation_direction_is_counter_clockwise():
    img = np.zeros((9, 9, 1), np.uint8)
    img[4, 8] = 255  # a dot right of the centre
    out = run_op("rotate", [img], layout="HWC", angle=90.0, interp_type=types.INTERP_NN)[0].numpy()
    assert out[0, 4, 0] == 255  # ends up above the centre


def test_keep_size_and_size():
    img = _img()
    assert run_op("rotate", [img], layout="HWC", angle=30.0, keep_size=True)[0].shape == (40, 50, 3)
    assert run_op("rotate", [img], layout="HWC", angle=30.0, size=[20, 25])[0].shape == (20, 25, 3)
    assert rotated_size(40, 50, 30.0) == (math.ceil(40 * math.cos(math.pi / 6) + 25), math.ceil(50 * math.cos(
        math.pi / 6) + 20))


@pytest.mark.parametrize("border", ["fill", "replicate"])
def test_warp_affine_matches_opencv(border):
    img = _img()
    m = np.array([[0.9, 0.2, 3.0], [-0.1, 1.1, -2.0]])
    kw = dict(fill_value=7.0) if border == "fill" else {}
    out = run_op("warp_affine", [img], layout="HWC", matrix=m.reshape(-1).tolist(), size=[30, 45], **kw)[0].numpy()
    ref = cv2.warpAffine(img, _cv_matrix(m), (45, 30), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                         borderMode=cv2.BORDER_CONSTANT if border == "fill" else cv2.BORDER_REPLICATE,
                         borderValue=(7, 7, 7))
    assert np.abs(out.astype(int) - ref.astype(int)).max() <= 1


def test_warp_affine_forward_map_and_errors():
    img = _img()
    m = np.array([[1.0, 0.0, 5.0], [0.0, 1.0, 3.0]])  # forward: shift right 5, down 3
    out = run_op("warp_affine", [img], layout="HWC", matrix=m.reshape(-1).tolist(), inverse_map=False,
                 fill_value=0.0, interp_type=types.INTERP_NN)[0].numpy()
    np.testing.assert_array_equal(out[3:, 5:], img[:-3, :-5])
    assert (out[:3] == 0).all()
    with pytest.raises(Exception, match="6 values"):
        run_op("warp_affine", [img], layout="HWC", matrix=[1.0, 2.0])
    with pytest.raises(Exception, match="interp_type"):
        run_op("warp_affine", [img], layout="HWC", matrix=m.reshape(-1).tolist(),
               interp_type=types.INTERP_LANCZOS3)


@pytest.mark.cuda
def test_gpu_equals_cpu():
    imgs = [_img(), _img(30, 20, 1)]
    for op, kw in (("rotate", dict(angle=25.0, fill_value=3.0)),
                   ("warp_affine", dict(matrix=[1.1, 0.1, -2.0, 0.0, 0.9, 1.0]))):
        cpu = run_op(op, imgs, layout="HWC", **kw)
        gpu = run_op(op, imgs, layout="HWC", device="gpu", **kw)
        for a, b in zip(cpu.samples, gpu.samples):
            assert a.shape == b.shape and (a.int() - b.cpu().int()).abs().max() <= 1


def test_batch_kernels_on_ragged_batches_equal_the_sample_kernels():
    """The GPU kernels (one grid_sample over the padded batch) run here on CPU tensors."""
    from sluice.ops.image.rotate import rotate_gpu
    from sluice.ops.image.warp_affine import warp_affine_gpu
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext

    imgs = [_img(17, 23), _img(40, 31), _img(5, 9)]
    chw = [np.ascontiguousarray(x.transpose(2, 0, 1)) for x in imgs]
    ctx = BatchContext("warp_affine", 3, [""] * 3, ["HWC"], torch.device("cpu"), None)
    for fill in (None, 9.0):
        warp = dict(matrix=[1.0, 0.2, 3.0, 0.1, 1.0, -2.0], size=None, fill_value=fill,
                    interp_type=types.INTERP_LINEAR, inverse_map=False, dtype=None)
        turn = dict(angle=20.0, size=None, fill_value=fill, interp_type=types.INTERP_LINEAR, keep_size=False,
                    dtype=None)
        for op, kernel, kw in (("warp_affine", warp_affine_gpu, warp), ("rotate", rotate_gpu, turn)):
            ref = run_op(op, imgs, layout="HWC", **{k: v for k, v in kw.items() if v is not None})
            got = kernel(ctx, Batch([torch.from_numpy(x) for x in imgs], "HWC"), args=BatchArgs(kw, {}, 3))
            got_chw = kernel(ctx, Batch([torch.from_numpy(x) for x in chw], "CHW"), args=BatchArgs(kw, {}, 3))
            assert got.shape() == ref.shape()
            for i in range(3):  # the padded batch's grid differs from one sample's in the last float bit: <= 1
                assert np.abs(got[i].numpy().astype(int) - ref[i].numpy()).max() <= 1
                np.testing.assert_array_equal(got_chw[i].numpy().transpose(1, 2, 0), got[i].numpy())

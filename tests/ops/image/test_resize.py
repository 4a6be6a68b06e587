"""fn.resize: sizes as DALI computes them, pixels against Pillow and OpenCV, GPU against CPU.

References and tolerances (uint8 images, max abs difference in grey levels):
  - INTERP_LINEAR with antialias, any scale: Pillow BILINEAR, <= 1 (Pillow rounds its intermediate pass to uint8;
    sluice keeps float32).
  - INTERP_CUBIC / INTERP_LANCZOS3: Pillow BICUBIC / LANCZOS, <= 1 on >= 99.5 % of pixels, <= 4 anywhere (Pillow
    also clips the intermediate pass where these filters overshoot).
  - INTERP_LINEAR without antialias (down) and upscaling: OpenCV INTER_LINEAR, <= 1.
  - INTERP_NN: OpenCV INTER_NEAREST_EXACT, exact.
  - GPU (Triton) vs CPU: <= 1 on uint8, 1e-3 on float.
"""

import numpy as np
import pytest
import torch

cv2 = pytest.importorskip("cv2")
from PIL import Image  # noqa: E402

from sluice import types  # noqa: E402
from sluice.kernels.resample import filter_table, resample  # noqa: E402
from sluice.ops.image._geometry import resize_params  # noqa: E402
from sluice.testing import run_op  # noqa: E402


def _image(h=45, w=60, seed=0):
    """A smooth-ish RGB pattern with some noise (a pure noise image would make every filter disagree)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 255 / w), (yy * 255 / h), 128 + 100 * np.sin(xx / 5.0 + yy / 7.0)], axis=2)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("out", [(20, 31), (90, 140), (13, 97)])
@pytest.mark.parametrize("interp,pil", [(types.INTERP_LINEAR, Image.BILINEAR), (types.INTERP_CUBIC, Image.BICUBIC),
                                        (types.INTERP_LANCZOS3, Image.LANCZOS)])
def test_resize_matches_pillow(out, interp, pil):
    img = _image()
    got = run_op("resize", [img], layout="HWC", size=list(out), interp_type=interp)[0].numpy()
    ref = np.asarray(Image.fromarray(img).resize((out[1], out[0]), pil))
    assert got.shape == ref.shape
    diff = np.abs(got.astype(int) - ref.astype(int))
    if interp == types.INTERP_LINEAR:
        assert diff.max() <= 1, f"max diff {diff.max()}"
    else:  # Pillow clips its uint8 intermediate pass where cubic/lanczos overshoot (next to noise spikes)
        assert diff.max() <= 4, f"max diff {diff.max()}"
        assert (diff > 1).mean() < 0.005
    assert diff.mean() < 0.3


@pytest.mark.parametrize("out", [(20, 31), (90, 140), (30, 41)])
def test_resize_linear_no_antialias_matches_opencv(out):
    img = _image()
    got = run_op("resize", [img], layout="HWC", size=list(out), antialias=False)[0].numpy()
    ref = cv2.resize(img, (out[1], out[0]), interpolation=cv2.INTER_LINEAR)
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1


@pytest.mark.parametrize("out", [(20, 31), (90, 140), (11, 7)])
def test_resize_nn_matches_opencv_nearest_exact(out):
    img = _image()
    got = run_op("resize", [img], layout="HWC", size=list(out), interp_type=types.INTERP_NN)[0].numpy()
    ref = cv2.resize(img, (out[1], out[0]), interpolation=cv2.INTER_NEAREST_EXACT)
    np.testing.assert_array_equal(got, ref)


def test_antialias_changes_downscale_only():
    img = _image()
    a = run_op("resize", [img], layout="HWC", size=[15, 20])[0].numpy().astype(int)
    b = run_op("resize", [img], layout="HWC", size=[15, 20], antialias=False)[0].numpy().astype(int)
    assert np.abs(a - b).max() > 5  # a 3x shrink: antialiasing must matter
    c = run_op("resize", [img], layout="HWC", size=[90, 120])[0].numpy().astype(int)
    d = run_op("resize", [img], layout="HWC", size=[90, 120], antialias=False)[0].numpy().astype(int)
    assert np.abs(c - d).max() <= 1  # the same filter when enlarging (the uint8 CPU path rounds once more)


@pytest.mark.parametrize("kwargs,expected", [
    (dict(resize_shorter=256), (256, 341)),
    (dict(resize_longer=320), (240, 320)),
    (dict(resize_x=320), (240, 320)),
    (dict(resize_x=320, mode="stretch"), (480, 320)),
    (dict(size=[100, 100], mode="not_larger"), (75, 100)),
    (dict(size=[100, 100], mode="not_smaller"), (100, 133)),
    (dict(size=[1000, 0], max_size=[2000, 1200]), (1000, 1200)),  # default mode clamps per axis
    (dict(resize_shorter=400, max_size=500), (375, 500)),
    (dict(size=[200, 300]), (200, 300)),
])
def test_output_size_rules(kwargs, expected):
    _, out = resize_params(480, 640, **kwargs)
    assert out == expected


def test_dali_doc_examples():
    # "a 1280x720, with a desired output size of 640x480, actually produces a 640x360 output"
    assert resize_params(720, 1280, size=[480, 640], mode="not_larger")[1] == (360, 640)
    # "a 640x480 image with a desired output size of 1920x1080, actually produces a 1920x1440 output"
    assert resize_params(480, 640, size=[1080, 1920], mode="not_smaller")[1] == (1440, 1920)
    # "mode='not_smaller', size=800, max_size=1400: an image of size 1200x600 would be resized to 1400x700"
    assert resize_params(600, 1200, size=800, mode="not_smaller", max_size=1400)[1] == (700, 1400)


def test_subpixel_scale_keeps_exact_scale():
    roi, out = resize_params(480, 640, resize_shorter=256)
    assert out == (256, 341)
    assert roi[3] - roi[1] == pytest.approx(341 * 480 / 256)  # the ROI shrank to keep scale 480/256
    roi, _ = resize_params(480, 640, resize_shorter=256, subpixel_scale=False)
    assert roi == (0.0, 0.0, 480.0, 640.0)


def test_argument_errors():
    img = _image()
    with pytest.raises(Exception, match="Exactly one method"):
        run_op("resize", [img], layout="HWC")
    with pytest.raises(Exception, match="Exactly one method"):
        run_op("resize", [img], layout="HWC", resize_x=10, resize_shorter=5)
    with pytest.raises(Exception, match="mutually exclusive"):
        run_op("resize", [img], layout="HWC", resize_shorter=10, mode="stretch")
    with pytest.raises(Exception, match="mode"):
        run_op("resize", [img], layout="HWC", resize_x=10, mode="bogus")


def test_roi_flip_and_negative_size():
    img = _image()
    flipped = run_op("resize", [img], layout="HWC", size=[45, 60], roi_start=[0, 60], roi_end=[45, 0])[0].numpy()
    np.testing.assert_array_equal(flipped, img[:, ::-1])
    neg = run_op("resize", [img], layout="HWC", resize_x=-60, resize_y=45)[0].numpy()
    np.testing.assert_array_equal(neg, img[:, ::-1])
    rel = run_op("resize", [img], layout="HWC", size=[20, 30], roi_start=[0.0, 0.5], roi_end=[1.0, 1.0],
                 roi_relative=True)[0].numpy()
    ref = np.asarray(Image.fromarray(img).resize((30, 20), Image.BILINEAR, box=(30, 0, 60, 45)))
    assert np.abs(rel.astype(int) - ref.astype(int)).max() <= 1


def test_ragged_batch_per_sample_sizes_chw_and_float():
    imgs = [_image(45, 60), _image(30, 20, 1)]
    out = run_op("resize", imgs, layout="HWC", resize_shorter=16)
    assert out.shape() == [(16, 21, 3), (24, 16, 3)]
    chw = [torch.from_numpy(i).permute(2, 0, 1).contiguous() for i in imgs]
    out_chw = run_op("resize", chw, layout="CHW", resize_shorter=16)
    for a, b in zip(out.samples, out_chw.samples):  # HWC uint8 goes through Pillow on the CPU: within 1
        assert (a.int() - b.permute(1, 2, 0).int()).abs().max() <= 1
    f = run_op("resize", imgs, layout="HWC", resize_shorter=16, dtype=types.FLOAT)
    assert f[0].dtype == torch.float32
    assert np.abs(f[0].numpy() - out[0].numpy()).max() <= 1.0
    with pytest.raises(Exception, match="dtype"):
        run_op("resize", imgs, layout="HWC", resize_shorter=16, dtype=types.INT16)


def test_constant_image_stays_constant_and_input_not_mutated():
    img = np.full((33, 47, 3), 77, np.uint8)
    before = img.copy()
    for interp in (types.INTERP_LINEAR, types.INTERP_CUBIC, types.INTERP_LANCZOS3, types.INTERP_GAUSSIAN,
                   types.INTERP_TRIANGULAR):
        out = run_op("resize", [img], layout="HWC", size=[10, 70], interp_type=interp)[0].numpy()
        assert (out == 77).all(), interp
    np.testing.assert_array_equal(img, before)


def test_filter_table_weights_sum_to_one():
    for fid in (1, 2, 3, 4, 5):
        idx, w = filter_table(0.0, 100.0, 100, 37, fid, True)
        np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-5)
        assert idx.min() >= 0 and idx.max() < 100


def test_save_attrs_output():
    out, attrs = run_op("resize", [_image()], layout="HWC", resize_x=30, save_attrs=True)
    assert attrs[0].tolist() == [23, 30]  # 45 * 30 / 60 = 22.5 rounds away from zero, as DALI's roundf
    assert out[0].shape == (23, 30, 3)


@pytest.mark.cuda
@pytest.mark.parametrize("interp", [types.INTERP_LINEAR, types.INTERP_CUBIC, types.INTERP_NN, types.INTERP_LANCZOS3])
def test_gpu_equals_cpu(interp):
    imgs = [_image(45, 60), _image(30, 20, 1), _image(64, 64, 2)]
    for kwargs in (dict(resize_shorter=24), dict(size=[50, 70]), dict(resize_x=-33, resize_y=12)):
        cpu = run_op("resize", imgs, layout="HWC", interp_type=interp, **kwargs)
        gpu = run_op("resize", imgs, layout="HWC", interp_type=interp, device="gpu", **kwargs)
        assert gpu.shape() == cpu.shape()
        for a, b in zip(cpu.samples, gpu.samples):
            assert b.is_cuda
            assert (a.int() - b.cpu().int()).abs().max() <= 1


@pytest.mark.cuda
def test_gpu_matches_torchvision_antialias():
    """torch.nn.functional.interpolate(antialias=True) implements the same triangle filter."""
    img = _image(90, 120)
    gpu = run_op("resize", [img], layout="HWC", size=[30, 50], device="gpu", dtype=types.FLOAT)[0].cpu()
    t = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    ref = torch.nn.functional.interpolate(t, size=(30, 50), mode="bilinear", antialias=True,
                                          align_corners=False)[0].permute(1, 2, 0)
    assert (gpu - ref).abs().max() < 0.05


def test_resample_function_direct():
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4, 1)
    y = resample(x, (0, 0, 4, 4), (2, 2), "linear", "linear", antialias=True)
    # a 2x shrink widens the triangle to radius 2: output 0 is centred at 1.0 and takes pixels 0, 1, 2 with
    # weights 0.75, 0.75, 0.25 (pixel -1 is outside and dropped), renormalised to (3, 3, 1) / 7 per axis
    assert y.shape == (2, 2, 1)
    assert y[0, 0, 0].item() == pytest.approx((0 * 3 + 1 * 3 + 2 * 1) / 7 + 4 * (0 * 3 + 1 * 3 + 2 * 1) / 7, rel=1e-5)


class _ConstArgs:
    """BatchArgs-like view of constant arguments."""

    def __init__(self, values, n):
        self.values, self.n = values, n

    def __getitem__(self, name):
        return [self.values.get(name)] * self.n

    def is_const(self, name):
        return True


@pytest.mark.parametrize("kwargs", [dict(resize_shorter=256), dict(resize_longer=300), dict(resize_x=224, resize_y=224),
                                    dict(resize_x=320), dict(resize_y=100, mode="stretch"),
                                    dict(size=[100, 100], mode="not_larger"), dict(size=[100, 0], mode="not_smaller"),
                                    dict(size=[300, 300], mode="not_smaller", max_size=[400, 350]),
                                    dict(resize_shorter=256, max_size=300), dict(size=[1000, 0], max_size=[2000, 1200]),
                                    dict(resize_x=50, resize_y=70, subpixel_scale=False), dict(resize_x=-30),
                                    dict(size=[20, 20], roi_start=[0.1, 0.2], roi_end=[0.9, 0.7], roi_relative=True)])
def test_batch_size_rules_equal_per_sample_rules(kwargs):
    from sluice.ops.image._geometry import resize_params_batch

    names = ["resize_x", "resize_y", "size", "resize_shorter", "resize_longer", "roi_start", "roi_end", "mode",
             "max_size", "subpixel_scale", "roi_relative"]
    full = dict({k: None for k in names}, **kwargs)
    hw = np.random.default_rng(0).integers(1, 900, (64, 2))
    rois, outs = resize_params_batch(hw, _ConstArgs(full, len(hw)), lambda i: full)
    for i, (h, w) in enumerate(hw):
        roi, out = resize_params(int(h), int(w), **kwargs)
        assert tuple(outs[i]) == out
        np.testing.assert_allclose(rois[i], roi, rtol=1e-9, atol=1e-9)

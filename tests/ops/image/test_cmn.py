"""fn.crop_mirror_normalize against NumPy, exactly: out = (in - mean) * float32(scale / std) + shift, mirrored,
transposed, padded and cast; GPU equal to CPU (exact for float32 on the same formula up to FMA: 1e-5 relative)."""

import numpy as np
import pytest
import torch

from sluice import types
from sluice.testing import run_op

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _img(h=37, w=53, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _numpy_cmn(img, y0, x0, h, w, mirror, mean, std, scale=1.0, shift=0.0):
    x = img[y0:y0 + h, x0:x0 + w].astype(np.float32)
    if mirror:
        x = x[:, ::-1]
    mul = np.float32(scale) / np.asarray(std, np.float32)
    return (x - np.asarray(mean, np.float32)) * mul + np.float32(shift)


@pytest.mark.parametrize("mirror", [0, 1])
def test_float_chw_matches_numpy_exactly(mirror):
    img = _img()
    out = run_op("crop_mirror_normalize", [img], layout="HWC", crop=(20, 24), mirror=mirror, mean=MEAN,
                 std=STD)[0].numpy()
    ref = _numpy_cmn(img, 9, 15, 20, 24, mirror, MEAN, STD).transpose(2, 0, 1)  # round(8.5) = 9, round(14.5) = 15
    assert out.dtype == np.float32 and out.shape == (3, 20, 24)
    np.testing.assert_array_equal(out, ref)


def test_scale_shift_hwc_fp16_and_integer_outputs():
    img = _img()
    out = run_op("crop_mirror_normalize", [img], layout="HWC", mean=[128.0], std=[64.0], scale=2.0, shift=1.5,
                 output_layout="HWC", dtype=types.FLOAT16)[0]
    ref = _numpy_cmn(img, 0, 0, 37, 53, 0, [128.0] * 3, [64.0] * 3, 2.0, 1.5)
    assert out.dtype == torch.float16
    np.testing.assert_array_equal(out.numpy(), ref.astype(np.float16))
    u8 = run_op("crop_mirror_normalize", [img], layout="HWC", mean=[10.0], std=[0.5], output_layout="HWC",
                dtype=types.UINT8)[0].numpy()
    r = _numpy_cmn(img, 0, 0, 37, 53, 0, [10.0] * 3, [0.5] * 3)
    np.testing.assert_array_equal(u8, np.clip(np.sign(r) * np.floor(np.abs(r) + 0.5), 0, 255).astype(np.uint8))
    i8 = run_op("crop_mirror_normalize", [img], layout="HWC", mean=[128.0], std=[1.0], output_layout="HWC",
                dtype=types.INT8)[0].numpy()
    r = img.astype(np.float32) - 128
    np.testing.assert_array_equal(i8, np.clip(r, -128, 127).astype(np.int8))


def test_pad_output_and_out_of_bounds_pad():
    img = _img(10, 8)
    out = run_op("crop_mirror_normalize", [img], layout="HWC", pad_output=True, fill_values=[9.0],
                 output_layout="HWC")[0].numpy()
    assert out.shape == (10, 8, 4)
    assert (out[..., 3] == 9.0).all()
    np.testing.assert_array_equal(out[..., :3], img.astype(np.float32))
    pad = run_op("crop_mirror_normalize", [img], layout="HWC", crop=(12, 8), out_of_bounds_policy="pad",
                 fill_values=[-1.0], mean=[1.0], output_layout="HWC")[0].numpy()
    assert (pad[0] == -1).all() and (pad[11] == -1).all()  # fill values are output values, not normalised
    np.testing.assert_array_equal(pad[1:11], img.astype(np.float32) - 1)


def test_per_sample_mirror_and_ragged_inputs():
    imgs = [_img(30, 40), _img(50, 30, 1)]
    out = run_op("crop_mirror_normalize", imgs, layout="HWC", crop=(24, 24), mean=MEAN, std=STD, mirror=1)
    assert out.shape() == [(3, 24, 24), (3, 24, 24)]
    np.testing.assert_array_equal(out[1].numpy(), _numpy_cmn(imgs[1], 13, 3, 24, 24, 1, MEAN, STD).transpose(2, 0, 1))


def test_errors():
    img = _img()
    with pytest.raises(Exception, match="output_layout"):
        run_op("crop_mirror_normalize", [img], layout="HWC", output_layout="CWX")
    with pytest.raises(Exception, match="std"):
        run_op("crop_mirror_normalize", [img], layout="HWC", std=[0.0])
    with pytest.raises(Exception, match="mean"):
        run_op("crop_mirror_normalize", [img], layout="HWC", mean=[1.0, 2.0])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [types.FLOAT, types.FLOAT16, types.UINT8])
def test_gpu_equals_cpu(dtype):
    imgs = [_img(30, 40), _img(50, 30, 1), _img(24, 24, 2)]
    kw = dict(layout="HWC", crop=(24, 24), crop_pos_x=0.2, mean=MEAN, std=STD, mirror=1, dtype=dtype,
              pad_output=True, fill_values=[0.5])
    cpu = run_op("crop_mirror_normalize", imgs, **kw)
    gpu = run_op("crop_mirror_normalize", imgs, device="gpu", **kw)
    assert gpu.shape() == cpu.shape()
    for a, b in zip(cpu.samples, gpu.samples):
        np.testing.assert_allclose(b.cpu().float().numpy(), a.float().numpy(), rtol=1e-5, atol=1e-5 if dtype ==
                                   types.FLOAT else 1e-2)

"""fn.crop: DALI's window arithmetic (anchor = round(pos * (in - crop))), the three out-of-bounds policies,
compared with NumPy slicing (exact)."""

import numpy as np
import pytest
import torch

from sluice import types
from sluice.ops.image._geometry import crop_window
from sluice.testing import run_op


def _img(h=37, w=53):
    return (np.arange(h * w * 3) % 251).astype(np.uint8).reshape(h, w, 3)


@pytest.mark.parametrize("pos", [(0.0, 0.0), (0.5, 0.5), (1.0, 1.0), (0.3, 0.8)])
def test_crop_matches_numpy(device, pos):
    img = _img()
    out = run_op("crop", [img], layout="HWC", crop=(20, 24), crop_pos_y=pos[0], crop_pos_x=pos[1],
                 device=device)[0].cpu().numpy()
    y0 = int(np.floor(pos[0] * (37 - 20) + 0.5))
    x0 = int(np.floor(pos[1] * (53 - 24) + 0.5))
    np.testing.assert_array_equal(out, img[y0:y0 + 20, x0:x0 + 24])


def test_window_rounding_and_whole_extent():
    assert crop_window(10, 10, 5, 5, 0.5, 0.5) == (3, 3, 5, 5)  # 2.5 rounds away from zero, as roundf
    assert crop_window(10, 10, 5, 5, 0.5, 0.5, "truncate") == (2, 2, 5, 5)
    assert crop_window(10, 12, 0, 5, 0.9, 0.0) == (0, 0, 10, 5)  # crop_h 0 keeps the whole height
    with pytest.raises(ValueError, match="crop_pos_x"):
        crop_window(10, 10, 5, 5, 0.5, 1.5)


def test_crop_h_w_and_per_sample_positions():
    imgs = [_img(), _img(40, 40)]
    out = run_op("crop", imgs, layout="HWC", crop_h=10, crop_w=12, crop_pos_x=0.0, crop_pos_y=1.0)
    np.testing.assert_array_equal(out[0].numpy(), imgs[0][27:37, 0:12])
    np.testing.assert_array_equal(out[1].numpy(), imgs[1][30:40, 0:12])


def test_out_of_bounds_policies(device):
    img = _img(10, 8)
    with pytest.raises(Exception, match="out of bounds"):
        run_op("crop", [img], layout="HWC", crop=(12, 4), device=device)
    trim = run_op("crop", [img], layout="HWC", crop=(12, 4), out_of_bounds_policy="trim_to_shape",
                  device=device)[0].cpu().numpy()
    np.testing.assert_array_equal(trim, img[:, 2:6])
    pad = run_op("crop", [img], layout="HWC", crop=(12, 4), out_of_bounds_policy="pad", fill_values=[1, 2, 3],
                 device=device)[0].cpu().numpy()
    assert pad.shape == (12, 4, 3)
    np.testing.assert_array_equal(pad[0, 0], [1, 2, 3])  # round(0.5 * -2) = -1: one padded row on top
    np.testing.assert_array_equal(pad[1:11], img[:, 2:6])
    np.testing.assert_array_equal(pad[11, 3], [1, 2, 3])


def test_chw_and_dtype_and_errors():
    img = _img()
    chw = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    out = run_op("crop", [chw], layout="CHW", crop=(20, 24), dtype=types.FLOAT)[0]
    assert out.dtype == torch.float32
    np.testing.assert_array_equal(out.permute(1, 2, 0).numpy(), img[9:29, 15:39].astype(np.float32))
    with pytest.raises(Exception, match="incompatible"):
        run_op("crop", [img], layout="HWC", crop=(20, 24), crop_w=3, crop_h=3)
    with pytest.raises(Exception, match="out_of_bounds_policy"):
        run_op("crop", [img], layout="HWC", crop=(20, 24), out_of_bounds_policy="wrap")


def test_batch_windows_equal_per_sample_windows():
    from sluice.ops.image._geometry import crop_windows_batch

    class Args:
        def __init__(self, values, n):
            self.values, self.n = values, n

        def __getitem__(self, name):
            v = self.values[name]
            return list(v) if name.startswith("crop_pos") else [v] * self.n

        def is_const(self, name):
            return not name.startswith("crop_pos")

    rng = np.random.default_rng(0)
    hw = rng.integers(1, 600, (50, 2))
    for crop in ((224, 224), (100, 0), None):
        py, px = rng.random(50), rng.random(50)
        args = Args(dict(crop=list(crop) if crop else None, crop_h=0.0, crop_w=0.0, crop_pos_y=py, crop_pos_x=px,
                         rounding="round"), 50)
        got = crop_windows_batch(hw, args)
        for i, (h, w) in enumerate(hw):
            ref = crop_window(int(h), int(w), crop[0] if crop else 0, crop[1] if crop else 0, py[i], px[i])
            assert tuple(got[i]) == ref

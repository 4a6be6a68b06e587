"""fn.paste, fn.erase and fn.jitter against NumPy constructions (exact)."""

import numpy as np
import pytest

from sluice.testing import run_op


def _img(h=5, w=6):
    return np.arange(h * w * 3, dtype=np.uint8).reshape(h, w, 3)


def test_paste_matches_numpy(device):
    img = _img()
    out = run_op("paste", [img], layout="HWC", ratio=2.0, paste_x=1.0, paste_y=0.0, fill_value=[1, 2, 3],
                 device=device)[0].cpu().numpy()
    ref = np.empty((10, 12, 3), np.uint8)
    ref[:] = [1, 2, 3]
    ref[0:5, 6:12] = img
    np.testing.assert_array_equal(out, ref)
    out = run_op("paste", [img], layout="HWC", ratio=1.0, min_canvas_size=9, fill_value=[0], device=device)[0]
    assert tuple(out.shape) == (9, 9, 3)
    with pytest.raises(Exception, match="ratio"):
        run_op("paste", [img], layout="HWC", ratio=0.5, fill_value=[0])


def test_erase_matches_numpy(device):
    img = _img(8, 9)
    out = run_op("erase", [img], layout="HWC", anchor=[1, 2, 5, 0], shape=[2, 3, 10, 2], fill_value=[7, 8, 9],
                 device=device)[0].cpu().numpy()
    ref = img.copy()
    ref[1:3, 2:5] = [7, 8, 9]
    ref[5:8, 0:2] = [7, 8, 9]  # clipped at the bottom
    np.testing.assert_array_equal(out, ref)
    norm = run_op("erase", [img], layout="HWC", anchor=[0.5], shape=[0.25], axis_names="W", normalized=True,
                  centered_anchor=True, device=device)[0].cpu().numpy()
    ref = img.copy()
    ref[:, 3:6] = 0  # centre 4.5, width 2.25 -> [3.375, 5.625) rounded to [3, 6)
    np.testing.assert_array_equal(norm, ref)
    with pytest.raises(Exception, match="multiple"):
        run_op("erase", [img], layout="HWC", anchor=[1, 2, 3], shape=[1, 1, 1])


def test_jitter_moves_pixels_within_the_neighbourhood():
    yy, xx = np.mgrid[0:20, 0:30]
    img = np.stack([yy, xx], axis=2).astype(np.uint8)  # each pixel holds its own coordinates
    out = run_op("jitter", [img], layout="HWC", nDegree=2, fill_value=255.0)[0].numpy().astype(int)
    inner = out[1:19, 1:29]
    assert (np.abs(inner[..., 0] - yy[1:19, 1:29]) <= 1).all() and (np.abs(inner[..., 1] - xx[1:19, 1:29]) <= 1).all()
    moved = (inner[..., 0] != yy[1:19, 1:29]) | (inner[..., 1] != xx[1:19, 1:29])
    assert 0.5 < moved.mean() < 1.0  # 8 of 9 offsets move a pixel
    border = np.concatenate([out[0].reshape(-1, 2), out[-1].reshape(-1, 2)])
    assert (border == 255).any()  # sources above the first row / below the last read fill_value
    same = run_op("jitter", [img], layout="HWC", mask=0)[0].numpy()
    np.testing.assert_array_equal(same, img)


@pytest.mark.cuda
def test_jitter_gpu_equals_cpu():
    img = (np.arange(20 * 30 * 3) % 251).astype(np.uint8).reshape(20, 30, 3)
    cpu = run_op("jitter", [img, img], layout="HWC", nDegree=4)
    gpu = run_op("jitter", [img, img], layout="HWC", nDegree=4, device="gpu")
    for a, b in zip(cpu.samples, gpu.samples):
        np.testing.assert_array_equal(a.numpy(), b.cpu().numpy())

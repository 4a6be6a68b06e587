"""pad against ``numpy.pad`` (constant mode, at the end) and slice against NumPy indexing; exact."""

import numpy as np
import pytest
import torch

from sluice.ops.tensor.pad import pad_samples, pad_shapes
from sluice.ops.tensor.slice import slice_axes, slice_bounds, slice_sample


def _ramp(shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def _pad(samples, axes, fill=0.0, shape=None, align=None):
    shapes = pad_shapes([s.shape for s in samples], axes, shape, align)
    return pad_samples([torch.from_numpy(s) for s in samples], shapes, fill)


def test_pad_audio_1d_to_batch_max():
    a, b = _ramp((5,)), _ramp((8,))
    out = _pad([a, b], [0], fill=-1)
    assert out.dense is not None and out.dense.shape == (2, 8)
    np.testing.assert_array_equal(out[0].numpy(), np.pad(a, (0, 3), constant_values=-1))
    np.testing.assert_array_equal(out[1].numpy(), b)


@pytest.mark.parametrize("layout_axis", [0, 1])  # the time axis of "tf" and "ft" spectrograms
def test_pad_one_axis_of_2d_with_align(layout_axis):
    shp_a, shp_b = [4, 4], [4, 4]
    shp_a[layout_axis], shp_b[layout_axis] = 5, 9
    a, b = _ramp(tuple(shp_a)), _ramp(tuple(shp_b))
    out = _pad([a, b], [layout_axis], align=[4])
    want = [(0, 0), (0, 0)]
    want[layout_axis] = (0, 12 - 5)
    np.testing.assert_array_equal(out[0].numpy(), np.pad(a, want))
    assert out[1].shape[layout_axis] == 12


def test_pad_explicit_shape_and_ragged_other_axes():
    a, b = _ramp((2, 3)), _ramp((4, 2))
    out = _pad([a, b], [1], shape=[6])
    assert [tuple(o.shape) for o in out] == [(2, 6), (4, 6)]
    np.testing.assert_array_equal(out[1].numpy(), np.pad(b, ((0, 0), (0, 4))))
    # DALI: a requested extent smaller than a sample leaves that sample as it is (padding never crops)
    out = _pad([a, b], [1], shape=[2])
    assert [tuple(o.shape) for o in out] == [(2, 3), (4, 2)]


def test_pad_per_sample_shape_align_and_fill():
    a, b = _ramp((5,)), _ramp((3,))
    shapes = pad_shapes([a.shape, b.shape], [0], shape=[[8], [4]], align=[[1], [3]], per_sample=True)
    assert shapes == [(8,), (6,)]
    out = pad_samples([torch.from_numpy(a), torch.from_numpy(b)], shapes, [-1.0, 7.0])
    np.testing.assert_array_equal(out[0].numpy(), np.pad(a, (0, 3), constant_values=-1))
    np.testing.assert_array_equal(out[1].numpy(), np.pad(b, (0, 3), constant_values=7))
    dense = pad_samples([torch.from_numpy(a), torch.from_numpy(a[:4])], [(5,), (5,)], [1.0, 2.0])
    assert dense.dense is not None and dense[1].tolist() == [0.0, 1.0, 2.0, 3.0, 2.0]


def test_slice_bounds_default_axes_are_x_then_y():
    assert slice_axes(3, "HWC", None, None) == [1, 0]
    lo, hi = slice_bounds((10, 20, 3), [1, 0], rel_start=[0.25, 0.5], rel_shape=[0.5, 0.5])
    assert (lo, hi) == ([5, 5, 0], [10, 15, 3])  # y: 5..10, x: 5..15


def test_slice_matches_numpy_indexing():
    x = _ramp((10, 20, 3))
    lo, hi = slice_bounds(x.shape, [1, 0], anchor=[0.1, 0.2], sl_shape=[0.5, 0.3])
    out = slice_sample(torch.from_numpy(x), lo, hi).numpy()
    np.testing.assert_array_equal(out, x[2:5, 2:12])


def test_slice_audio_absolute_with_padding_policy():
    x = _ramp((10,))
    lo, hi = slice_bounds(x.shape, [0], start=[6], shape_arg=[8])
    with pytest.raises(ValueError, match="outside"):
        slice_sample(torch.from_numpy(x), lo, hi, "error")
    padded = slice_sample(torch.from_numpy(x), lo, hi, "pad", [-1.0]).numpy()
    np.testing.assert_array_equal(padded, np.concatenate([x[6:], [-1.0] * 4]))
    trimmed = slice_sample(torch.from_numpy(x), lo, hi, "trim_to_shape").numpy()
    np.testing.assert_array_equal(trimmed, x[6:])


def test_slice_negative_start_pads_per_channel():
    x = _ramp((4, 4, 3))
    lo, hi = slice_bounds(x.shape, [1, 0], start=[-1, -2], end=[2, 2])
    out = slice_sample(torch.from_numpy(x), lo, hi, "pad", [7.0, 8.0, 9.0]).numpy()
    assert out.shape == (4, 3, 3)
    np.testing.assert_array_equal(out[2:, 1:], x[:2, :2])
    np.testing.assert_array_equal(out[0, 0], [7.0, 8.0, 9.0])


def test_slice_rel_end_on_named_axis():
    x = _ramp((6, 50))  # "ft"
    axes = slice_axes(2, "ft", None, "t")
    lo, hi = slice_bounds(x.shape, axes, rel_start=[0.1], rel_end=[0.9])
    np.testing.assert_array_equal(slice_sample(torch.from_numpy(x), lo, hi).numpy(), x[:, 5:45])


def test_slice_conflicting_arguments_are_errors():
    with pytest.raises(ValueError, match="only one of"):
        slice_bounds((10,), [0], start=[1], rel_start=[0.1])
    with pytest.raises(ValueError, match="needs axes"):
        slice_axes(1, "", None, None)


@pytest.mark.cuda
def test_cuda_equals_cpu():
    a, b = _ramp((5,)), _ramp((8,))
    cpu = _pad([a, b], [0])
    gpu = pad_samples([torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()], [(8,), (8,)])
    torch.testing.assert_close(cpu.as_tensor(), gpu.as_tensor().cpu())
    x = torch.from_numpy(_ramp((4, 4, 3)))
    torch.testing.assert_close(slice_sample(x.cuda(), [-1, 1, 0], [3, 5, 3], "pad").cpu(),
                               slice_sample(x, [-1, 1, 0], [3, 5, 3], "pad"))


def test_slice_rounds_like_dali():
    """DALI: anchor and end rounded to nearest (halves away from zero), the end of a relative region computed as
    (start + shape) * extent from float32 values; absolute coordinates stay exact."""
    assert slice_bounds((10,), [0], rel_start=[0.25], rel_shape=[0.5]) == ([3], [8])   # 2.5 -> 3, 7.5 -> 8
    assert slice_bounds((10,), [0], anchor=[0.15], sl_shape=[0.3]) == ([2], [5])       # float32: 1.5000001, 4.5000002
    assert slice_bounds((2 ** 25,), [0], start=[2 ** 24 + 1], shape_arg=[3]) == ([2 ** 24 + 1], [2 ** 24 + 4])

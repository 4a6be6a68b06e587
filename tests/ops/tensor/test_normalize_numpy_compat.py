"""normalize against NumPy: ``(x - x.mean(axes)) / x.std(axes, ddof) * scale + shift``. Tolerance 1e-5
(float32 statistics)."""

import numpy as np
import pytest
import torch

from sluice.ops.tensor.normalize import infer_reduced_axes, normalize_samples


def _data(seed, shape):
    return (np.random.default_rng(seed).normal(size=shape) * 3 + 2).astype(np.float32)


def _ref(x, axes, ddof=0, scale=1.0, shift=0.0, eps=0.0):
    m = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    v = x.var(axis=axes, keepdims=True, ddof=ddof, dtype=np.float64)
    return (x - m) / np.sqrt(v + eps) * scale + shift


def _run(samples, **kw):
    return [o.numpy() for o in normalize_samples([torch.from_numpy(s) for s in samples], **kw)]


def test_all_axes_by_default():
    x = _data(0, (6, 7, 3))
    np.testing.assert_allclose(_run([x])[0], _ref(x, None), atol=1e-5)


@pytest.mark.parametrize("layout,names,axis", [("ft", "t", 1), ("tf", "t", 0), ("ft", "f", 0)])
def test_audio_layouts_by_axis_name(layout, names, axis):
    x = _data(1, (5, 40))
    out = _run([x], layout=layout, axis_names=names)[0]
    np.testing.assert_allclose(out, _ref(x, axis), atol=1e-5)


def test_image_per_channel_with_ddof_scale_shift_epsilon():
    x = _data(2, (8, 9, 3))
    out = _run([x], layout="HWC", axes=[0, 1], ddof=1, scale=64, shift=128, epsilon=0.5)[0]
    np.testing.assert_allclose(out, _ref(x, (0, 1), 1, 64, 128, 0.5), atol=1e-3)


def test_batch_statistics_over_ragged_samples():
    a, b = _data(3, (4, 30)), _data(4, (4, 50))
    out = _run([a, b], layout="ft", axis_names="t", batch=True)
    cat = np.concatenate([a, b], 1)
    m = cat.mean(1, keepdims=True)
    s = cat.std(1, keepdims=True)
    np.testing.assert_allclose(out[0], (a - m) / s, atol=1e-5)
    np.testing.assert_allclose(out[1], (b - m) / s, atol=1e-5)


def test_given_mean_and_stddev():
    x = _data(5, (3, 10))
    mean = np.array([[1.0], [2.0], [3.0]], np.float32)
    out = _run([x], mean=[mean], stddev=[2.0])[0]
    np.testing.assert_allclose(out, (x - mean) / 2.0, atol=1e-6)
    assert infer_reduced_axes((3, 10), (3, 1)) == [1]


def test_constant_input_maps_to_shift_and_int_output_saturates():
    out = _run([np.full((3, 3), 7, np.float32)], shift=5.0)[0]
    np.testing.assert_array_equal(out, np.full((3, 3), 5.0))
    x = _data(6, (10, 10))
    q = _run([x], scale=100, shift=128, out_dtype=torch.uint8)[0]
    assert q.dtype == np.uint8 and q.min() == 0 and q.max() == 255


def test_batch_mode_needs_equal_unreduced_extents():
    with pytest.raises(ValueError, match="must agree in the axes that are not reduced"):
        _run([_data(8, (3, 10)), _data(9, (4, 10))], axes=[1], batch=True)


def test_wrong_mean_shape_is_a_clear_error():
    with pytest.raises(ValueError, match="mean has extent"):
        _run([_data(7, (3, 10))], axes=[1], mean=[np.zeros((2, 1), np.float32)])
    with pytest.raises(ValueError, match="axis name 'x'"):
        _run([_data(7, (3, 10))], layout="ft", axis_names="x")


@pytest.mark.cuda
def test_cuda_equals_cpu():
    a, b = _data(8, (4, 30)), _data(9, (4, 50))
    for batch in (False, True):
        cpu = normalize_samples([torch.from_numpy(a), torch.from_numpy(b)], axes=[1], batch=batch)
        gpu = normalize_samples([torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()], axes=[1], batch=batch)
        for c, g in zip(cpu, gpu):
            torch.testing.assert_close(c, g.cpu(), atol=1e-5, rtol=1e-5)


def test_degenerate_statistics_follow_dali():
    x = _data(10, (1, 5))
    # one element per reduced slice and ddof=1: no degrees of freedom left -> output is shift (DALI's rule)
    np.testing.assert_array_equal(_run([x], axes=[0], ddof=1, shift=2.0)[0], np.full((1, 5), 2.0, np.float32))
    # ... unless epsilon is set: (x - mean) / sqrt(0 + eps) = 0 here as well, since x == mean
    np.testing.assert_allclose(_run([x], axes=[0], ddof=1, epsilon=4.0)[0], np.zeros((1, 5)), atol=1e-6)
    # a given negative stddev keeps its sign, a zero stddev gives shift
    np.testing.assert_allclose(_run([x], mean=[0.0], stddev=[-2.0])[0], x / -2.0, atol=1e-6)
    np.testing.assert_allclose(_run([x], mean=[0.0], stddev=[0.0], shift=1.0)[0], np.ones((1, 5)), atol=1e-6)

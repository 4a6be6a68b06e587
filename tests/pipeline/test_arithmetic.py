"""Arithmetic on DataNodes against NumPy, with DALI's type promotion table."""

import numpy as np
import pytest
import torch

import sluice
from sluice import fn, types
from sluice.ops.arithmetic import promote


@pytest.mark.parametrize("a,b,out", [
    (torch.uint8, torch.uint8, torch.uint8),
    (torch.uint8, torch.float16, torch.float16),
    (torch.float16, torch.float32, torch.float32),
    (torch.int8, torch.int32, torch.int32),
    (torch.uint8, torch.uint16, torch.uint16),
    (torch.int8, torch.uint8, torch.int16),     # intX with uintY, X <= Y -> int(2Y)
    (torch.int16, torch.uint8, torch.int16),    # X > Y -> intX
    (torch.int32, torch.uint32, torch.int64),
    (torch.bool, torch.int16, torch.int16),
])
def test_promotion_table(a, b, out):
    assert promote(a, b) == out
    assert promote(b, a) == out


def _run(graph, data, device_id=None, **kw):
    @sluice.pipeline_def(batch_size=len(data[0]), num_threads=2, device_id=device_id, seed=0)
    def pipe():
        nodes = [fn.external_source(source=lambda d=d: d, cycle=True) for d in data]
        if device_id is not None:
            nodes = [n.gpu() for n in nodes]
        out = graph(*nodes)
        return out if isinstance(out, tuple) else (out,)

    return [b.as_cpu() for b in pipe().run()]


def test_binary_ops_match_numpy(device_id):
    rng = np.random.default_rng(0)
    a = [rng.integers(1, 50, (3, 4)).astype(np.int32) for _ in range(2)]
    b = [rng.integers(1, 9, (3, 4)).astype(np.int32) for _ in range(2)]
    outs = _run(lambda x, y: (x + y, x - y, x * y, x / y, x // y, x ** 2, x < y, x == y, x & y, x | y, x ^ y, -x),
                [a, b], device_id)
    refs = [np.add, np.subtract, np.multiply, lambda x, y: (x / y).astype(np.float32), np.floor_divide,
            lambda x, y: x ** 2, np.less, np.equal, np.bitwise_and, np.bitwise_or, np.bitwise_xor,
            lambda x, y: -x]
    for out, ref in zip(outs, refs):
        for i in range(2):
            expected = ref(a[i], b[i])
            np.testing.assert_allclose(out.at(i), expected, rtol=1e-6)
            assert out.at(i).dtype == expected.dtype


def test_constants_follow_dali_literal_types():
    a = [np.array([1, 2, 3], np.uint8)]
    plus_int, plus_float, typed = _run(lambda x: (x + 1, x * 0.5, x + sluice.Constant(1, types.UINT8)), [a])
    assert plus_int[0].dtype == torch.int32  # a Python int counts as int32, as in DALI
    assert plus_float[0].dtype == torch.float32
    assert typed[0].dtype == torch.uint8
    np.testing.assert_array_equal(plus_float.at(0), np.array([0.5, 1.0, 1.5], np.float32))


def test_ragged_batches_and_scalar_broadcast():
    a = [np.ones((2, 3), np.float32), np.ones((4, 1), np.float32)]
    s = [np.float32(2.0), np.float32(3.0)]
    (out,) = _run(lambda x, y: x * y, [a, s])
    assert out.shape() == [(2, 3), (4, 1)]
    np.testing.assert_array_equal(out.at(1), np.full((4, 1), 3.0, np.float32))


def test_subscripts_per_sample():
    a = [np.arange(24).reshape(2, 3, 4), np.arange(24, 48).reshape(2, 3, 4)]

    @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: a, layout="HWC")
        return x[1, 0:2], x[..., 0]

    first, last = pipe().run()
    np.testing.assert_array_equal(first.at(1), a[1][1, 0:2])
    assert first.layout() == "WC"
    np.testing.assert_array_equal(last.at(0), a[0][..., 0])


def test_cast_saturates_and_rounds():
    a = [np.array([-3.6, 0.5, 1.5, 300.2, np.nan], np.float32)]
    (out,) = _run(lambda x: fn.cast(x, dtype=types.UINT8), [a])
    assert out.at(0).tolist() == [0, 0, 2, 255, 0]


def test_datanode_has_no_truth_value():
    with pytest.raises(TypeError, match="no truth value"):
        bool(fn.random.uniform() > 0)


def test_math_functions_match_numpy():
    from sluice import math

    a = [np.array([[1, 4], [9, 16]], np.int32), np.array([[25, 36, 49]], np.int32)]
    outs = _run(lambda x: (math.sqrt(x), math.clamp(x, 4, 20), math.max(x, 10), math.exp(x / 10), math.abs(-x),
                           math.atan2(x, 3.0)), [a])
    refs = [lambda x: np.sqrt(x).astype(np.float32), lambda x: np.clip(x, 4, 20), lambda x: np.maximum(x, 10),
            lambda x: np.exp(x / 10).astype(np.float32), np.abs, lambda x: np.arctan2(x, 3.0).astype(np.float32)]
    for out, ref in zip(outs, refs):
        for i in range(2):
            np.testing.assert_allclose(out.at(i), ref(a[i]), rtol=1e-6)
            assert out.at(i).dtype == ref(a[i]).dtype


def test_datanode_shape_and_bool_for_int_arguments():
    a = [np.zeros((2, 3)), np.zeros((4, 5))]
    (shapes,) = _run(lambda x: x.shape(), [a])
    assert shapes.at(1).tolist() == [4, 5]
    node = fn.random.coin_flip(shape=[2])
    assert fn.cast(node, dtype=types.INT64) is not None
    from sluice import ops

    assert ops.MFCC.__name__ == "MFCC" and ops.RandomBBoxCrop.__name__ == "RandomBBoxCrop"


def test_subscripts_with_datanode_indices(device_id):
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = [np.arange(24).reshape(2, 3, 4) + 100 * i for i in range(4)]

    @sluice.pipeline_def(batch_size=4, num_threads=1, device_id=device_id, seed=3)
    def pipe():
        idx = fn.random.uniform(values=[0, 1, 2], dtype=types.INT32)
        lo = fn.random.uniform(values=[0, 1], dtype=types.INT32)
        rows = fn.constant(value=table, device="gpu" if device_id is not None else "cpu")
        x = fn.external_source(source=lambda: a, layout="HWC")
        return idx, lo, rows[idx], rows[idx, 1], x[:, idx], x[0, lo:3]

    idx, lo, row, elem, col, part = (b.as_cpu() for b in pipe().run())
    for i in range(4):
        k = int(idx.at(i))
        np.testing.assert_array_equal(row.at(i), table[k])
        assert elem.at(i) == table[k, 1]
        np.testing.assert_array_equal(col.at(i), a[i][:, k])
        np.testing.assert_array_equal(part.at(i), a[i][0, int(lo.at(i)):3])  # per-sample bounds: ragged
    assert col.layout() == "HC"

    @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=3)
    def bad():
        return fn.constant(value=table)[fn.random.uniform(values=[3, 4], dtype=types.INT32)]

    with pytest.raises(Exception, match="out of range"):
        bad().run()


def test_ragged_operands_on_the_padded_batch():
    a = [np.arange(6, dtype=np.uint8).reshape(2, 3, 1) * 40, np.full((4, 1, 1), 7, np.uint8)]
    m = [np.uint8(0xF0), np.uint8(0x0F)]
    per_channel = [np.array([[[2.0]]], np.float32), np.array([[[0.5]]], np.float32)]
    (masked, scaled, div) = _run(lambda x, y, z: (x & y, x * z, x // y), [a, m, per_channel])
    for i in range(2):
        np.testing.assert_array_equal(masked.at(i), a[i] & m[i])
        np.testing.assert_array_equal(scaled.at(i), a[i] * per_channel[i])
        np.testing.assert_array_equal(div.at(i), a[i] // m[i])
    assert masked.shape() == [(2, 3, 1), (4, 1, 1)] and masked.at(0).dtype == np.uint8

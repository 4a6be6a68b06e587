"""DALI's multiple input sets: an operator called with a list of DataNodes as an input runs once per element, the
other inputs and the arguments shared, and returns one result per set; a random operator draws the same values for
every set (an image and its mask get the same crop); lists of different lengths are refused, naming the operator.
``types.Constant`` is reachable as ``sluice.types.Constant``, as ``nvidia.dali.types.Constant`` is."""

from __future__ import annotations

import numpy as np
import pytest

import sluice
from sluice import fn, types
from sluice.errors import ArgumentError


def images(n=4, seed=0):
    g = np.random.default_rng(seed)
    return [g.integers(0, 255, (g.integers(20, 40), g.integers(20, 40), 3), dtype=np.uint8) for _ in range(n)]


def test_slice_of_two_sets_equals_two_calls():
    data = images()

    @sluice.pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=3)
    def pipe():
        a = fn.external_source(source=lambda: data, layout="HWC")
        b = a * types.Constant(2, types.UINT8)
        anchor = types.Constant(np.array([2, 3], np.int64))
        both = fn.slice([a, b], anchor, np.array([10, 12]), axes=[0, 1])
        return both[0], both[1], fn.slice(a, anchor, np.array([10, 12]), axes=[0, 1])

    p = pipe()
    p.build()
    first, second, alone = p.run()
    for x, y, z, src in zip(first, second, alone, data):
        assert tuple(x.shape) == (10, 12, 3)
        np.testing.assert_array_equal(x.numpy(), z.numpy())
        np.testing.assert_array_equal(y.numpy(), (src[2:12, 3:15] * 2).astype(np.uint8))


def test_a_random_operator_draws_the_same_for_every_set():
    data = images(seed=1)

    @sluice.pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=5)
    def pipe():
        a = fn.external_source(source=lambda: data, layout="HWC")
        mask = fn.copy(a)
        img, msk = fn.random_resized_crop([a, mask], size=[16, 16])
        return img, msk, fn.random_resized_crop(a, size=[16, 16])

    p = pipe()
    p.build()
    for _ in range(2):
        img, msk, other = p.run()
        assert all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(img, msk))
    # the same program with the same seed draws the same crops again
    q = pipe()
    q.build()
    again = q.run()[0]
    p2 = pipe()
    p2.build()
    np.testing.assert_array_equal(p2.run()[0].as_tensor().numpy(), again.as_tensor().numpy())


def test_sets_of_different_lengths_are_refused():
    @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        a = fn.external_source(source=lambda: images(2), layout="HWC")
        return fn.flip([a, a, a], horizontal=1)[0], fn.cat([a], [a, a])

    with pytest.raises(ArgumentError, match="fn.cat: the input sets"):
        pipe()

"""image_slice's batched windows (``slice_windows``, the decoders' one call per batch) against the per-sample
window function they replace (``WINDOWS["decoders.image_slice"]``), on generated batches of varied image sizes:
anchor/shape inputs (normalised, in pixels, as float32 and int32, ragged Batch storage), the start/end/shape
arguments (one for the batch or per sample), axes, windows reaching outside (trimmed), and errors naming the sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.errors import SampleError
from sluice.ops.decoders.image import IMAGE_SLICE
from sluice.ops.decoders import windows
from sluice.ops.decoders.windows import WINDOWS, slice_windows
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs

N = 23
RNG = np.random.default_rng(41)
HW = np.stack([RNG.integers(1, 481, N), RNG.integers(1, 641, N)], 1)


def _args(per_sample=None, **const):
    full = {a.name: a.default for a in IMAGE_SLICE.args.values()}
    full.update(const)
    return BatchArgs(full, per_sample or {}, N)


def _not_called(*a, **k):
    raise AssertionError("the per-sample window function ran")


def _reference(args, hw, extra=()):
    one = WINDOWS["decoders.image_slice"]
    return [one(args.sample(i), h, w, None, tuple(b[i].numpy() for b in extra)) for i, (h, w) in
            enumerate(hw.tolist())]


def _inputs(dtype=np.float32, pixels=False):
    """Random windows as random_bbox_crop gives them (anchor, shape in [0, 1]), or in pixels."""
    anchor = RNG.uniform(0, 0.7, (N, 2))
    shape = RNG.uniform(0.05, 1.0 - anchor)
    if pixels:
        anchor, shape = anchor * HW[:, ::-1], shape * HW[:, ::-1] + 1
    return Batch.from_dense(torch.from_numpy(anchor.astype(dtype))), Batch.from_dense(
        torch.from_numpy(shape.astype(dtype)))


CASES = {
    "anchor_shape": (dict(), lambda: _inputs()),
    "anchor_shape_halves": (dict(), lambda: (Batch.from_dense(torch.full((N, 2), 0.5)),
                                             Batch.from_dense(torch.full((N, 2), 0.25)))),
    "pixels_float": (dict(normalized_anchor=False, normalized_shape=False), lambda: _inputs(pixels=True)),
    "pixels_int": (dict(normalized_anchor=False, normalized_shape=False), lambda: _inputs(np.int32, pixels=True)),
    "ragged_storage": (dict(), lambda: tuple(Batch(list(b.as_tensor())) for b in _inputs())),
    "hw_order": (dict(axis_names="HW"), lambda: _inputs()),
    "rel_args": (dict(rel_start=[0.1, 0.25], rel_shape=[0.5, 0.6]), lambda: ()),
    "axes_width_only": (dict(rel_start=[0.3], axes=[1]), lambda: ()),
    "trim": (dict(rel_start=[0.6, 0.7], rel_shape=[0.8, 0.9], out_of_bounds_policy="trim_to_shape"), lambda: ()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_slice_windows_equal_per_sample_windows(case, monkeypatch):
    const, make = CASES[case]
    extra = make()
    args = _args(**const)
    ref = _reference(args, HW, extra)
    monkeypatch.setattr(windows, "_window_slice", _not_called)  # the batch path gives every window
    got = slice_windows(args, HW, *extra)
    assert got == ref
    assert all(isinstance(v, int) for roi in got for v in roi)
    assert len({roi[2:] for roi in got}) > 1  # windows differ in size: the sizes were taken per sample


def test_per_sample_arguments(monkeypatch):
    hw = np.maximum(HW, 40)
    start = [np.array([RNG.integers(0, 10), RNG.integers(0, 10)], np.float32) for _ in range(N)]
    end = [s + np.array([RNG.integers(5, 30), RNG.integers(5, 30)], np.float32) for s in start]
    args = _args({"start": start, "end": end})
    ref = _reference(args, hw)
    monkeypatch.setattr(windows, "_window_slice", _not_called)
    got = slice_windows(args, hw)
    assert got == ref
    assert got[3] == (int(start[3][1]), int(start[3][0]), int(end[3][1] - start[3][1]), int(end[3][0] - start[3][0]))


def test_errors_name_the_sample_as_the_per_sample_function():
    hw = np.maximum(HW, 40)
    hw[5] = (10, 10)
    args = _args(start=[12, 0], shape=[20, 10])  # outside sample 5 only (x from 12 in a 10 wide image)
    with pytest.raises(SampleError, match="outside") as info:
        slice_windows(args, hw, sources=[f"f{i}" for i in range(N)])
    assert info.value.index == 5 and info.value.source == "f5"
    with pytest.raises(SampleError, match="empty window"):
        slice_windows(_args(rel_start=[0.5, 0.5], rel_shape=[0.0, 0.5]), HW)

"""slice over whole ragged batches: one plan for the batch (vectorised bounds), views of the input's buffer for cuts
on the first axis, one gather over the padded form on the GPU (run here on CPU tensors too); every region equals
the sample cut on its own by ``slice_sample`` (the per-sample reference, checked against DALI's semantics in
test_pad_slice_numpy_compat.py). Integer anchor and shape inputs are absolute, as DALI takes them (NVIDIA's speech
programs: ``fn.slice(audio, begin, length, axes=[0])`` after ``nonsilent_region``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice import fn, pipeline_def, types
from sluice.ops.tensor import slice as sl
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext
from sluice.testing import run_op


def _args(n, per_sample=None, **kw):
    const = {k: a.default for k, a in sl.SCHEMA.args.items()}
    const.update(kw)
    return BatchArgs(const, per_sample or {}, n)


def _ctx(n, layout=""):
    return BatchContext("slice", n, [""] * n, [layout], torch.device("cpu"), None)


def signals(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g) for n in lengths]


def test_integer_inputs_are_absolute_whatever_the_normalized_flags_say():
    xs = [np.arange(n, dtype=np.float32) for n in (36840, 1000, 5000)]
    begin = [np.int32(100), np.int32(0), np.int32(4000)]
    length = [np.int32(30000), np.int32(1000), np.int32(999)]
    for flags in ({}, {"normalized_anchor": False, "normalized_shape": False}):
        out = run_op("slice", xs, begin, length, axes=[0], **flags)
        assert out.shape() == [(30000,), (1000,), (999,)]
        for o, x, b, n in zip(out, xs, begin, length):
            np.testing.assert_array_equal(o.numpy(), x[b: b + n])
    # float inputs stay normalised by default
    half = run_op("slice", xs[:1], [np.float32(0.25)], [np.float32(0.5)], axes=[0])
    np.testing.assert_array_equal(half[0].numpy(), xs[0][9210:27630])


def test_nonsilent_region_then_slice_is_the_speech_part():
    x = np.zeros(20000, np.float32)
    x[3000:9000] = np.sin(np.arange(6000) / 5.0)

    @pipeline_def(batch_size=2, num_threads=2, device_id=None)
    def pipe():
        audio = fn.external_source(source=lambda: [x, x[::-1].copy()], cycle=True)
        begin, length = fn.nonsilent_region(audio, cutoff_db=-40, window_length=256)
        return fn.slice(audio, begin, length, axes=[0]), begin, length

    with pipe() as p:
        cut, begin, length = p.run()
    for c, b, n, src in zip(cut, begin, length, (x, x[::-1])):
        assert 0 < int(n) < 20000
        np.testing.assert_array_equal(c.numpy(), src[int(b): int(b) + int(n)])


def test_first_axis_cuts_are_views_of_the_input_buffer():
    xs = signals([500, 80, 1200, 0])
    data = Batch.from_packed(torch.cat(xs), np.array([[x.numel()] for x in xs]))
    per = {"start": [[10], [0], [600], [0]], "shape": [[400], [80], [100], [0]]}
    for kernel in (sl.slice_cpu, sl.slice_gpu):
        out = kernel(_ctx(4), data, args=_args(4, per, axes=[0]))
        assert out.storage == "packed" and out.packed_form()[0].data_ptr() == data.packed[0].data_ptr()
        for o, x, s, k in zip(out, xs, per["start"], per["shape"]):
            torch.testing.assert_close(o, x[s[0]: s[0] + k[0]], rtol=0, atol=0)


def reference(samples, lo, hi, policy, fills, ch=-1):
    return [sl.slice_sample(x, lo[i].tolist(), hi[i].tolist(), policy, fills, ch) for i, x in enumerate(samples)]


@pytest.mark.parametrize("policy", ["pad", "trim_to_shape"])
@pytest.mark.parametrize("layout,fills", [("HWC", [7.0]), ("HWC", [1.0, 2.0, 3.0]), ("", [200.0])])
def test_regions_of_images_of_many_sizes_equal_each_sample_cut_alone(policy, layout, fills):
    g = torch.Generator().manual_seed(3)
    imgs = [torch.randint(0, 255, (h, w, 3), generator=g, dtype=torch.uint8) for h, w in
            ((20, 30), (7, 9), (31, 12), (1, 1))]
    per = {"start": [[-3, 2], [4, 0], [10, 25], [0, 0]], "shape": [[12, 40], [5, 5], [30, 10], [2, 3]]}
    args = _args(4, per, out_of_bounds_policy=policy, fill_values=fills, axes=[1, 0])
    data = Batch(imgs, layout)
    lo, hi, outside = sl.slice_plan(data, None, None, args)
    want = reference(imgs, lo, hi, policy, fills, 2 if layout else -1)
    for kernel in (sl.slice_cpu, sl.slice_gpu):
        out = kernel(_ctx(4, layout), data, args=args)
        assert out.shape() == [tuple(w.shape) for w in want]
        for o, w in zip(out, want):
            torch.testing.assert_close(o, w, rtol=0, atol=0)


def test_spectrogram_time_cut_of_a_padded_batch_and_type_cast():
    g = torch.Generator().manual_seed(4)
    specs = [torch.rand(8, t, generator=g) for t in (50, 12, 33)]
    rows, shapes = Batch(specs, "ft").padded(fill=None)
    data = Batch.from_padded(rows, shapes, "ft")
    per = {"start": [[5], [0], [30]], "shape": [[20], [20], [20]]}
    out = sl.slice_gpu(_ctx(3, "ft"), data, args=_args(3, per, axes=[1], out_of_bounds_policy="pad",
                                                       dtype=types.FLOAT64))
    assert out.is_dense_tensor() and out.dtype == torch.float64
    for o, s, st in zip(out, specs, (5, 0, 30)):
        want = torch.zeros(8, 20, dtype=torch.float64)
        part = s[:, st: st + 20]
        want[:, : part.shape[1]] = part
        torch.testing.assert_close(o, want, rtol=0, atol=0)


def test_errors_name_the_sample():
    from sluice.errors import SampleError

    data = Batch(signals([10, 30]))
    with pytest.raises(SampleError, match="outside the sample of shape \\(10,\\)") as e:
        sl.slice_cpu(_ctx(2), data, args=_args(2, start=[5], shape=[20], axes=[0]))
    assert e.value.index == 0
    with pytest.raises(SampleError, match="ends") as e:
        sl.slice_cpu(_ctx(2), data, args=_args(2, {"start": [[1], [9]], "end": [[5], [3]]}, axes=[0]))
    assert e.value.index == 1
    with pytest.raises(ValueError, match="both the anchor and the shape"):
        sl.slice_cpu(_ctx(2), data, Batch([torch.tensor(1), torch.tensor(2)]), args=_args(2, axes=[0]))


@pytest.mark.parametrize("start,extent", [(0, 60), (0, 20), (-5, 30), (3, 50), (-2, 8)])
def test_one_start_for_every_sample_equals_each_sample_cut_alone(start, extent):
    """Audio padded or cut to one length (Whisper's 30 s): the padded form cut once, the outside filled."""
    xs = signals([40, 13, 77, 0, 25])
    rows, shapes = Batch(xs).padded(fill=None)
    data = Batch.from_padded(rows, shapes)
    args = _args(5, start=[start], shape=[extent], axes=[0], out_of_bounds_policy="pad", fill_values=[-3.0])
    out = sl.slice_gpu(_ctx(5), data, args=args)
    lo, hi, _ = sl.slice_plan(data, None, None, args)
    for o, w in zip(out, reference(xs, lo, hi, "pad", [-3.0])):
        torch.testing.assert_close(o, w, rtol=0, atol=0)


def test_slice_feeding_the_gpu_asks_for_a_page_locked_buffer(monkeypatch):
    """A CPU slice whose output a GPU operator takes (the executor sets ``pin_outputs``) cuts into a page-locked
    batch buffer of the pipeline's GPU, so that the copy is one DMA with no staging copy; the regions are the
    per-sample reference's (padding outside included), ragged."""
    asked = []
    real = sl.batch_buffer

    def spy(nbytes, pin, device_id):
        asked.append((pin, device_id))
        return real(nbytes, False, None)

    monkeypatch.setattr(sl, "batch_buffer", spy)
    vols = [torch.randn(1, d, 7, 6, generator=torch.Generator().manual_seed(d)) for d in (5, 9, 4)]
    anchor = [np.array([1, -2, 0], np.int64), np.array([3, 2, 1], np.int64), np.array([0, 0, 0], np.int64)]
    const = {k: a.default for k, a in sl.SCHEMA.args.items()}
    const.update(axis_names="DHW", out_of_bounds_policy="pad")
    op = sl.SCHEMA.kernel_for("cpu")(type("Spec", (), {"device_id": 3})())
    op.pin_outputs = True
    args = BatchArgs(const, {}, 3)
    anchors = Batch([torch.from_numpy(a) for a in anchor])
    shapes = Batch([torch.tensor([4, 5, 6])] * 3)
    out = op.run(_ctx(3, "CDHW"), Batch(vols, "CDHW"), anchors, shapes, args=args)
    assert asked == [(True, 3)]
    for v, a, got in zip(vols, anchor, out):
        ref = sl.slice_sample(v, [0, *a.tolist()], [1, *(a + [4, 5, 6]).tolist()], "pad", [0.0], 0)
        assert torch.equal(got, ref)
    op.pin_outputs = False
    op.run(_ctx(3, "CDHW"), Batch(vols, "CDHW"), anchors, shapes, args=args)
    assert asked[-1] == (False, None)


@pytest.mark.cuda
def test_slice_before_gpu_outputs_page_locked_memory():
    @pipeline_def(batch_size=2, num_threads=2, device_id=0, seed=1)
    def pipe():
        x = fn.external_source(source=lambda: [np.ones((1, 9, 8, 7), np.float32)] * 2, layout="CDHW", cycle=True)
        cut = fn.slice(x, [1, 1, 1], [4, 4, 4], axis_names="DHW", out_of_bounds_policy="pad")
        return cut, cut.gpu()

    cpu, gpu = pipe().run()
    assert cpu.as_tensor().is_pinned() and torch.equal(cpu.as_tensor(), gpu.as_cpu().as_tensor())

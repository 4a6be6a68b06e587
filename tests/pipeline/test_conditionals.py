"""Conditional execution (``pipeline_def(enable_conditionals=True)``), checked against DALI's documented behaviour
(docs/examples/general/conditionals.ipynb, nvidia/dali/_conditionals.py): per-sample ``if``/``elif``/``else``,
``and``/``or``/``not``, branches of different shapes, random operators in branches, and the errors. The expected
values are computed with NumPy on the generated images."""

import numpy as np
import pytest
import torch

import sluice
from sluice import fn, types
from sluice.compat.dali import pipeline_def as dali_pipeline_def
from sluice.errors import ArgumentError, PipelineError
from sluice.ops.conditional import merge as merge_kernel
from sluice.ops.conditional import merge_n as merge_n_kernel
from sluice.ops.conditional import split as split_kernel
from sluice.ops.conditional import split_n as split_n_kernel
from sluice.pipeline import do_not_convert
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext

N = 8


def _images(n=N, seed=0):
    """Images whose first pixel is dark for some samples and bright for others, of varied content."""
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, (6, 8, 3), dtype=np.uint8) for _ in range(n)]
    for i, img in enumerate(images):
        img[0, 0, 0] = 40 if i % 3 else 220
    return images


IMAGES = _images()


def _bright(img):
    return img[0, 0, 0] > 127


def _source(data):
    return fn.external_source(source=lambda: data, layout="HWC")


def _labels(values):
    return fn.external_source(source=lambda: [np.int32(v) for v in values])


def _kw(device="cpu", **extra):
    return dict(batch_size=N, num_threads=2, device_id=0 if device == "gpu" else None, seed=5, **extra)


def _flip_bright(device, decorator=sluice.pipeline_def):
    @decorator(enable_conditionals=True, **_kw(device))
    def pipe():
        images = _source(IMAGES)
        if device == "gpu":  # a Python condition: plain Python
            images = images.gpu()
        if images.cpu()[0, 0, 0] > 127:
            out = fn.flip(images, horizontal=1)
        else:
            out = images
        return out

    return pipe()


@pytest.mark.parametrize("decorator", [sluice.pipeline_def, dali_pipeline_def], ids=["sluice", "compat"])
def test_flip_where_bright(decorator, device):
    out = _flip_bright(device, decorator).run()[0].as_cpu()
    for i, img in enumerate(IMAGES):
        want = img[:, ::-1] if _bright(img) else img
        np.testing.assert_array_equal(out.at(i), want, err_msg=f"sample {i}")
    assert out.layout() == "HWC"


def test_if_elif_else_nested_with_shapes_that_differ(device):
    kinds = [i % 4 for i in range(N)]

    @sluice.pipeline_def(enable_conditionals=True, **_kw(device))
    def pipe():
        images = _source(IMAGES)
        if device == "gpu":
            images = images.gpu()
        kind = _labels(kinds)
        if kind == 0:
            out = images
        elif kind == 1:
            if images.cpu()[0, 0, 0] > 127:  # nested: only the kind-1 samples reach this test
                out = fn.flip(images, vertical=1, horizontal=0)
            else:
                out = fn.flip(images, horizontal=1)
        elif kind == 2:
            out = fn.crop(images, crop=(2, 4))
        else:
            out = fn.resize(images, resize_x=4, resize_y=5)
        return out, kind

    out, kind = pipe().run()
    out = out.as_cpu()
    assert kind.as_tensor().tolist() == kinds
    for i, img in enumerate(IMAGES):
        got = out.at(i)
        if kinds[i] == 0:
            np.testing.assert_array_equal(got, img)
        elif kinds[i] == 1:
            np.testing.assert_array_equal(got, img[::-1] if _bright(img) else img[:, ::-1])
        elif kinds[i] == 2:
            np.testing.assert_array_equal(got, img[2:4, 2:6])  # the centred window
        else:
            assert got.shape == (5, 4, 3)


def test_return_in_branches_and_helper_functions_branching_on_datanodes():
    def augment(images, kind):  # a helper: rewritten too, as DALI's AutoGraph converts called functions
        if kind == 1:
            return fn.flip(images, horizontal=1)
        return images

    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def pipe():
        images = _source(IMAGES)
        kind = _labels([i % 2 for i in range(N)])
        if kind == 0:
            return fn.flip(images, vertical=1, horizontal=0), kind
        return augment(images, kind), kind + 10  # tuples are merged element by element

    out, kind = pipe().run()
    assert kind.as_tensor().tolist() == [0 if i % 2 == 0 else 11 for i in range(N)]
    for i, img in enumerate(IMAGES):
        np.testing.assert_array_equal(out.at(i), img[::-1] if i % 2 == 0 else img[:, ::-1])


def _add_by_index(images, index, lo, hi):
    """A module function that calls itself, splitting the batch by ``index`` (a binary search, as DALI's
    auto_aug select): each sample gets ``lo + index`` added."""
    if lo == hi:
        return images + sluice.Constant(lo, types.UINT8)
    mid = (lo + hi) // 2
    if index <= mid:
        out = _add_by_index(images, index, lo, mid)
    else:
        out = _add_by_index(images, index, mid + 1, hi)
    return out


def test_recursive_helpers_branching_on_datanodes():
    def countdown(images, index, k):  # a nested function calling itself (its own name is a closure variable)
        if k < 0:
            return images
        if index == k:
            images = images * sluice.Constant(0, types.UINT8)
        return countdown(images, index, k - 1)

    values = [i % 5 for i in range(N)]

    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def pipe():
        images, index = _source(IMAGES), _labels(values)
        return _add_by_index(images, index, 0, 4), countdown(images, index, 2)

    added, zeroed = pipe().run()
    for i, img in enumerate(IMAGES):
        np.testing.assert_array_equal(added.at(i), img + np.uint8(values[i]))
        np.testing.assert_array_equal(zeroed.at(i), img * 0 if values[i] <= 2 else img)


def test_functions_defined_inside_are_rewritten_when_traced_not_when_run():
    kept = []

    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def pipe():
        images = _source(IMAGES)
        scale = 2

        def pick(x, kind):  # called while tracing: branches on a DataNode, reads a closure variable
            if kind == 1:
                return fn.flip(x, horizontal=1)
            return x * sluice.Constant(scale, types.UINT8)

        def brighten(x):  # run by the pipeline: as written
            return x if x.max() > 250 else x + 1

        kept.append(brighten)
        return pick(images, _labels([i % 2 for i in range(N)])), fn.python_function(images, function=brighten)

    picked, brightened = pipe().run()
    assert kept[0].__code__.co_freevars == () and "_sluice_ag" not in kept[0].__code__.co_names
    for i, img in enumerate(IMAGES):
        np.testing.assert_array_equal(picked.at(i), img[:, ::-1] if i % 2 else img * np.uint8(2))
        np.testing.assert_array_equal(brightened.at(i), img if img.max() > 250 else img + 1)


def test_logical_operators_per_sample():
    a_vals = [bool(i & 1) for i in range(N)]
    b_vals = [bool(i & 2) for i in range(N)]

    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def pipe():
        a = fn.external_source(source=lambda: [np.bool_(v) for v in a_vals])
        b = fn.external_source(source=lambda: [np.bool_(v) for v in b_vals])
        return a and b, a or b, not a, (a and not b) or (b and not a)

    both, either, neg, xor = (x.as_tensor().tolist() for x in pipe().run())
    assert both == [x and y for x, y in zip(a_vals, b_vals)]
    assert either == [x or y for x, y in zip(a_vals, b_vals)]
    assert neg == [not x for x in a_vals]
    assert xor == [x != y for x, y in zip(a_vals, b_vals)]


def test_right_operand_runs_only_on_the_samples_that_need_it():
    seen = []

    @do_not_convert
    def record(x):
        seen.append(len(x))
        return [np.bool_(True) for _ in x]

    @sluice.pipeline_def(enable_conditionals=True, **_kw(exec_async=False))
    def pipe():
        a = fn.external_source(source=lambda: [np.bool_(i < 3) for i in range(N)])
        return a and fn.python_function(a, function=record, batch_processing=True)

    assert pipe().run()[0].as_tensor().tolist() == [i < 3 for i in range(N)]
    assert seen == [3]  # `a and right`: right only for the 3 samples where a is true


def test_conditional_expression_python_values_and_undefined_variables():
    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def pipe(use_flip=True):
        images = _source(IMAGES)
        bright = images[0, 0, 0] > 127
        scale = 2 if use_flip else 3  # Python condition: Python value
        factor = 1.0 if bright else 0.5  # DataNode condition: numbers become constant batches, merged
        if bright:
            only_here = images
        return factor * scale

    out = pipe().run()[0].as_tensor().tolist()
    assert out == [2.0 if _bright(img) else 1.0 for img in IMAGES]

    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def bad():
        images = _source(IMAGES)
        if images[0, 0, 0] > 127:
            only_here = images
        return only_here

    with pytest.raises(ArgumentError, match="'only_here' is set in only one branch.*`else` branch"):
        bad()


def test_random_operators_in_branches_same_seed_same_result(device):
    def make(seed):
        @sluice.pipeline_def(enable_conditionals=True, batch_size=N, num_threads=2,
                             device_id=0 if device == "gpu" else None, seed=seed)
        def pipe():
            images = _source(IMAGES)
            bright = images[0, 0, 0] > 127
            if device == "gpu":
                images = images.gpu()
            if bright:
                out = fn.rotate(images, angle=fn.random.uniform(range=(10, 30)), fill_value=0, keep_size=True)
            else:
                out = fn.random_resized_crop(images, size=(6, 8))
            return out

        return pipe()

    def take(p):
        return [[s.clone() for s in p.run()[0].as_cpu()] for _ in range(2)]

    a, b, c = take(make(7)), take(make(7)), take(make(8))
    for it_a, it_b in zip(a, b):
        assert all(torch.equal(x, y) for x, y in zip(it_a, it_b))
    assert not all(torch.equal(x, y) for x, y in zip(a[0], c[0]))
    assert not all(torch.equal(x, y) for x, y in zip(a[0], a[1]))  # iterations draw anew
    for i, img in enumerate(IMAGES):
        assert not np.array_equal(a[0][i].numpy(), img)


def test_every_sample_in_one_branch(device):
    @sluice.pipeline_def(enable_conditionals=True, **_kw(device))
    def pipe():
        images = _source(IMAGES)
        if device == "gpu":
            images = images.gpu()
        everything = fn.external_source(source=lambda: [np.bool_(True)] * N)
        if everything:
            out = fn.flip(images)
        else:  # these run on an empty batch
            out = fn.crop_mirror_normalize(fn.resize(images, resize_x=3, resize_y=3), crop=(2, 2),
                                           dtype=types.UINT8, mean=[0.0], std=[1.0])
        return out

    out = pipe().run()[0].as_cpu()
    for i, img in enumerate(IMAGES):
        np.testing.assert_array_equal(out.at(i), img[:, ::-1])


def test_datanode_condition_needs_enable_conditionals():
    @sluice.pipeline_def(**_kw())
    def pipe():
        images = _source(IMAGES)
        if images[0, 0, 0] > 127:
            images = fn.flip(images)
        return images

    with pytest.raises(TypeError, match="enable_conditionals=True"):
        pipe()

    @dali_pipeline_def(**_kw())
    def dali_pipe():
        images = _source(IMAGES)
        return images if images[0, 0, 0] > 127 else fn.flip(images)

    with pytest.raises(TypeError, match="enable_conditionals=True"):
        dali_pipe()


def test_condition_must_be_scalar_booleans_on_the_cpu():
    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def floats():
        images = _source(IMAGES)
        if fn.cast(images[0, 0, 0], dtype=types.FLOAT):
            images = fn.flip(images)
        return images

    with pytest.raises(PipelineError, match="Conditions inside `if` statements are restricted to scalar.*float32"):
        floats().run()

    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def arrays():
        images = _source(IMAGES)
        if images[0, 0] > 127:  # 3 values per sample
            images = fn.flip(images)
        return images

    with pytest.raises(PipelineError, match="restricted to scalar.*shape \\(3,\\)"):
        arrays().run()


def test_datanode_made_in_a_branch_is_refused_outside_it():
    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def pipe():
        images = _source(IMAGES)
        kept = []
        if images[0, 0, 0] > 127:
            kept.append(fn.flip(images))
            out = images
        else:
            out = images
        return kept[0]

    with pytest.raises(ArgumentError, match="made inside a branch"):
        pipe()


def _ctx(device="cpu"):
    return BatchContext("_conditional.split", N, [""] * N, ["HWC"], torch.device(device), None)


def _args():
    return BatchArgs({"expression_name": "if"}, {}, N)


def _kernels_round_trip(device):
    mask = [bool(_bright(img)) for img in IMAGES]
    pred = Batch.from_dense(torch.tensor(mask))
    dense = Batch.from_dense(torch.from_numpy(np.stack(IMAGES)).to(device), "HWC", [f"f{i}" for i in range(N)])
    ragged = Batch([torch.from_numpy(img[: 2 + i % 3]).to(device) for i, img in enumerate(IMAGES)], "HWC")
    results = []
    for batch in (dense, ragged):
        t, f = split_kernel(_ctx(device), batch, pred, args=_args())
        assert len(t) == sum(mask) and len(f) == N - sum(mask)
        assert [s for s, m in zip(batch.source_info, mask) if m] == t.source_info
        merged = merge_kernel(_ctx(device), t, f, pred, args=BatchArgs({}, {}, N))
        assert merged.source_info == batch.source_info and merged.layout() == "HWC"
        for a, b in zip(merged.samples, batch.samples):
            assert torch.equal(a, b)
        results.append((t, f, merged))
    assert results[0][2].dense is not None  # a dense batch stays dense
    return results


def test_split_merge_kernels_keep_order_dense_and_ragged():
    _kernels_round_trip("cpu")


@pytest.mark.cuda
def test_split_merge_gpu_kernels_match_cpu():
    for (tc, fc, mc), (tg, fg, mg) in zip(_kernels_round_trip("cpu"), _kernels_round_trip("cuda")):
        for a, b in ((tc, tg), (fc, fg), (mc, mg)):
            # an empty part holds no buffer, so it names no device (every kernel takes an empty batch as it is)
            assert a.device == "cpu" and (b.device == "gpu" or len(b) == 0)
            assert all(torch.equal(x, y.cpu()) for x, y in zip(a.samples, b.samples))


#: a branch per sample for the many-way split: part 2 empty, -1 and 7 clipped to the first and the last part
PARTS = [3, 0, -1, 1, 7, 0, 3, 1]


def _kernels_round_trip_n(device, k=4):
    index = Batch.from_dense(torch.tensor(PARTS, dtype=torch.int32))
    want = np.clip(PARTS, 0, k - 1)
    dense = Batch.from_dense(torch.from_numpy(np.stack(IMAGES)).to(device), "HWC", [f"f{i}" for i in range(N)])
    ragged = Batch([torch.from_numpy(img[: 2 + i % 3]).to(device) for i, img in enumerate(IMAGES)], "HWC",
                   [f"r{i}" for i in range(N)])
    args = BatchArgs({"num_parts": k}, {}, N)
    results = []
    for batch in (dense, ragged):
        parts = split_n_kernel(_ctx(device), batch, index, args=args)
        assert len(parts) == k
        for j, part in enumerate(parts):  # part j: the samples that chose j, in order (NumPy's selection)
            chosen = np.flatnonzero(want == j)
            assert part.source_info == [batch.source_info[i] for i in chosen]
            assert len(part) == len(chosen) and all(torch.equal(part.samples[m], batch.samples[i])
                                                    for m, i in enumerate(chosen))
        merged = merge_n_kernel(_ctx(device), *parts, index, args=args)
        assert merged.source_info == batch.source_info and merged.layout() == "HWC"
        assert all(torch.equal(a, b) for a, b in zip(merged.samples, batch.samples))
        results.append((parts, merged))
    assert results[0][1].dense is not None and all(p.dense is not None for p in results[0][0])
    return results


def test_split_n_merge_n_kernels_keep_order_dense_and_ragged():
    _kernels_round_trip_n("cpu")
    one = Batch.from_dense(torch.zeros(N, dtype=torch.int64))  # every sample in part 0: the batch itself
    dense = Batch.from_dense(torch.from_numpy(np.stack(IMAGES)), "HWC")
    parts = split_n_kernel(_ctx("cpu"), dense, one, args=BatchArgs({"num_parts": 3}, {}, N))
    assert parts[0].dense.data_ptr() == dense.dense.data_ptr() and [len(p) for p in parts] == [N, 0, 0]
    with pytest.raises(ValueError, match="the parts have"):
        merge_n_kernel(_ctx("cpu"), parts[1], parts[0], parts[2], one, args=BatchArgs({"num_parts": 3}, {}, N))


@pytest.mark.cuda
def test_split_n_merge_n_gpu_kernels_match_cpu():
    for (pc, mc), (pg, mg) in zip(_kernels_round_trip_n("cpu"), _kernels_round_trip_n("cuda")):
        for a, b in [*zip(pc, pg), (mc, mg)]:
            # an empty part holds no buffer, so it names no device (every kernel takes an empty batch as it is)
            assert a.device == "cpu" and (b.device == "gpu" or len(b) == 0)
            assert all(torch.equal(x, y.cpu()) for x, y in zip(a.samples, b.samples))


def test_merge_refuses_branches_of_different_types():
    @sluice.pipeline_def(enable_conditionals=True, **_kw())
    def pipe():
        images = _source(IMAGES)
        if images[0, 0, 0] > 127:
            out = fn.cast(images, dtype=types.FLOAT)
        else:
            out = images
        return out

    with pytest.raises(PipelineError, match="Found distinct types"):
        pipe().run()

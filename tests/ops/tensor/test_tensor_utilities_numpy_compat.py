"""DALI's tensor utilities (expand_dims, squeeze, reshape/reinterpret, element_extract, sequence_rearrange,
per_frame, lookup_table, get_property, zeros/ones/full and their *_like, batch_permutation, permute_batch, cast_like)
against NumPy (``expand_dims``, ``squeeze``, ``ndarray.view``, ``take``, ``full``, ``broadcast_to``) and the
examples of DALI's documentation, on ragged batches; the GPU kernels (the same torch code) equal the CPU ones."""

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.errors import PipelineError
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema
from sluice.testing import run_op, run_pipeline

RNG = np.random.default_rng(7)
HWC = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((4, 6, 3), (5, 2, 3), (1, 3, 3))]
SEQS = [RNG.integers(0, 256, (f, 3, 4), dtype=np.uint8) for f in (3, 5, 2)]
RAGGED_FRAMES = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((3, 2, 2), (4, 3, 1))]


def _same(out, refs):
    assert len(out) == len(refs)
    for o, r in zip(out, refs):
        assert tuple(o.shape) == r.shape and o.cpu().numpy().dtype == np.asarray(r).dtype
        np.testing.assert_array_equal(o.cpu().numpy(), r)


# ---- expand_dims / squeeze -----------------------------------------------------------------------------------
def test_expand_dims_inserts_at_output_positions():
    out = run_op("expand_dims", HWC, layout="HWC", axes=[3, 0], new_axis_names="XN")
    _same(out, [np.expand_dims(x, (0, 3)) for x in HWC])
    assert out.layout() == "NHWXC"
    out = run_op("expand_dims", HWC, layout="HWC", axes=[1])
    _same(out, [np.expand_dims(x, 1) for x in HWC])
    assert out.layout() == ""  # DALI clears the layout without new_axis_names


def test_expand_dims_of_scalars_and_errors():
    out = run_op("expand_dims", [np.float32(1.5), np.float32(2.0)], axes=[0, 1], new_axis_names="HW")
    _same(out, [np.full((1, 1), 1.5, np.float32), np.full((1, 1), 2.0, np.float32)])
    assert out.layout() == "HW"
    with pytest.raises(PipelineError, match="out of range"):
        run_op("expand_dims", HWC, axes=[5])
    with pytest.raises(PipelineError, match="needs an input with a layout"):
        run_op("expand_dims", HWC, axes=[0], new_axis_names="N")
    with pytest.raises(Exception, match="non-negative"):
        run_op("expand_dims", HWC, axes=[-1])


def test_expand_dims_of_a_dense_batch_is_a_view():
    dense = torch.arange(24, dtype=torch.int16).view(2, 3, 4)
    schema = get_schema("expand_dims")
    args = BatchArgs({"axes": [2], "new_axis_names": ""}, {}, 2)
    ctx = BatchContext("expand_dims", 2, ["", ""], [""], torch.device("cpu"), None)
    out = schema.kernels["gpu"].kernel(ctx, Batch.from_dense(dense), args=args)
    assert out.dense is not None and out.dense.shape == (2, 3, 4, 1)
    assert out.dense.data_ptr() == dense.data_ptr()


def test_squeeze_by_axes_and_names():
    data = [np.expand_dims(x, (0, 3)) for x in HWC]
    out = run_op("squeeze", data, layout="NHWXC", axis_names="XN")
    _same(out, HWC)
    assert out.layout() == "HWC"
    out = run_op("squeeze", data, layout="NHWXC", axes=[-2])
    _same(out, [np.squeeze(x, 3) for x in data])
    assert out.layout() == "NHWC"
    empty = [np.zeros((0, 2, 1), np.float32)]
    _same(run_op("squeeze", empty, axes=[2]), [np.zeros((0, 2), np.float32)])


def test_squeeze_refuses_extents_above_one_and_bad_arguments():
    with pytest.raises(PipelineError, match="not all of extent 1"):
        run_op("squeeze", HWC, layout="HWC", axis_names="C")
    with pytest.raises(PipelineError, match="either axes or axis_names"):
        run_op("squeeze", HWC)
    with pytest.raises(PipelineError, match="not in the input layout"):
        run_op("squeeze", HWC, layout="HWC", axis_names="D")


# ---- reshape / reinterpret ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,in_shape,out_shape", [
    (dict(rel_shape=[0.5, -1]), (480, 640, 3), (240, 3840)),        # DALI's rel_shape example
    (dict(shape=[240, -1]), (480, 640, 3), (240, 3840)),            # DALI's shape example
    (dict(src_dims=[-1, 1, 0]), (300, 200, 1), (1, 200, 300)),      # DALI's src_dims example
    (dict(src_dims=[-1, 1, 0], rel_shape=[-1, 0.5, 2]), (300, 200, 1), (1, 100, 600)),
    (dict(rel_shape=[1, 1, 1, -1]), (4, 5, 6), (4, 5, 6, 1)),       # a negative last extent adds a dimension
])
def test_reshape_follows_dalis_documented_examples(kwargs, in_shape, out_shape):
    x = np.arange(int(np.prod(in_shape)), dtype=np.uint8).reshape(in_shape)
    out = run_op("reshape", [x], **kwargs)
    assert out.shape() == [out_shape]
    np.testing.assert_array_equal(out[0].numpy(), x.reshape(out_shape))  # the bytes stay in place


def test_reinterpret_views_bytes_as_another_type():
    data = [RNG.integers(0, 256, (n, 8), dtype=np.uint8) for n in (2, 5, 1)]
    out = run_op("reinterpret", data, layout="HW", dtype=types.INT32)
    _same(out, [x.view(np.int32) for x in data])
    assert out.layout() == "HW"
    out = run_op("reinterpret", data, dtype=types.UINT16, shape=[-1])
    _same(out, [x.view(np.uint16).reshape(-1) for x in data])
    with pytest.raises(PipelineError, match="sample 0.*not a multiple"):
        run_op("reinterpret", [np.zeros((2, 3), np.uint8)], dtype=types.INT32)


def test_reshape_shape_input_and_per_sample_shape():
    data = [np.arange(12, dtype=np.float32), np.arange(6, dtype=np.float32)]
    out = run_op("reshape", data, [np.array([3, 4]), np.array([2, -1])], layout=["", ""])
    _same(out, [data[0].reshape(3, 4), data[1].reshape(2, 3)])
    shapes = [np.array([4, 3]), np.array([6, 1])]
    out = run_pipeline(lambda: fn.reshape(fn.external_source(source=lambda: data, cycle=True),
                                          shape=fn.external_source(source=lambda: shapes, cycle=True)), batch_size=2)[0]
    _same(out, [data[0].reshape(4, 3), data[1].reshape(6, 1)])


def test_reinterpret_keeps_a_packed_batch_packed():
    flat = torch.arange(10, dtype=torch.uint8)
    batch = Batch.from_packed(flat, np.array([[2, 2], [3, 2]]), "HW")
    schema = get_schema("reinterpret")
    const, _ = schema.validate({"dtype": types.INT16}, lambda v: False)
    ctx = BatchContext("reinterpret", 2, ["", ""], ["HW"], torch.device("cpu"), None)
    out = schema.kernels["gpu"].kernel(ctx, batch, args=BatchArgs(const, {}, 2))
    assert out.packed is not None and out.shape() == [(2, 1), (3, 1)]
    assert out.packed[0].data_ptr() == flat.data_ptr()
    np.testing.assert_array_equal(out[1].numpy(), flat.numpy()[4:].view(np.int16).reshape(3, 1))


# ---- frames -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [SEQS, RAGGED_FRAMES], ids=["one-frame-shape", "ragged-frames"])
def test_element_extract_takes_frames_as_samples(data):
    first, second = run_op("element_extract", data, layout="FHW", element_map=[1, 0])
    _same(first, [x[1] for x in data])
    _same(second, [x[0] for x in data])
    assert first.layout() == "HW"
    with pytest.raises(PipelineError, match=r"sample 0.*out of range for a sequence of 3"):
        run_op("element_extract", data, layout="FHW", element_map=[4])


@pytest.mark.parametrize("data", [SEQS, RAGGED_FRAMES], ids=["one-frame-shape", "ragged-frames"])
def test_sequence_rearrange_per_sample_orders(data):
    orders = [np.array([1, 1, 0], np.int64), np.array([3, 0], np.int64), np.array([0], np.int64)][:len(data)]
    out = run_pipeline(lambda: fn.sequence_rearrange(
        fn.external_source(source=lambda: data, layout="FHW", cycle=True),
        new_order=fn.external_source(source=lambda: orders, cycle=True)), batch_size=len(data))[0]
    _same(out, [np.take(x, o, axis=0) for x, o in zip(data, orders)])
    assert out.layout() == "FHW"
    out = run_op("sequence_rearrange", data, layout="FHW", new_order=[1, 0])
    _same(out, [x[[1, 0]] for x in data])
    with pytest.raises(PipelineError, match="does not start with F"):
        run_op("sequence_rearrange", data, layout="HWC", new_order=[0])


def test_per_frame_marks_sequences():
    assert run_op("per_frame", SEQS).layout() == "F**"
    assert run_op("per_frame", SEQS, layout="FHW").layout() == "FHW"
    assert run_op("per_frame", SEQS, layout="XHW", replace=True).layout() == "FHW"
    with pytest.raises(PipelineError, match="replace=True"):
        run_op("per_frame", SEQS, layout="XHW")
    _same(run_op("per_frame", SEQS), SEQS)


def test_per_frame_feeds_one_argument_value_per_frame():
    frames = [np.full((4, 4, 3), 100, np.uint8)] * 2
    clips = [np.stack(frames)] * 2
    factors = [np.array([0.5, 2.0], np.float32)] * 2
    out = run_pipeline(lambda: fn.brightness(
        fn.external_source(source=lambda: clips, layout="FHWC", cycle=True),
        brightness=fn.per_frame(fn.external_source(source=lambda: factors, cycle=True))), batch_size=2)[0]
    assert out[0][0].max().item() == 50 and out[0][1].max().item() == 200


# ---- lookup_table, get_property -----------------------------------------------------------------------------
def test_lookup_table_documented_example():
    x = np.array([1, 4, 1, 0, 100, 2, 3, 4], np.int32)
    out = run_op("lookup_table", [x, x[:3].astype(np.uint8)], keys=[0, 2, 3, 4, 5, 3],
                 values=[0.2, 0.4, 0.5, 0.6, 0.7, 0.10], default_value=0.99)
    ref = np.array([0.99, 0.6, 0.99, 0.2, 0.99, 0.4, 0.10, 0.6], np.float32)
    _same(out, [ref, ref[:3]])
    out = run_op("lookup_table", [np.array([-1, 0, 1, 2], np.int64)], keys=[0, 1], values=[300, -5],
                 dtype=types.UINT8)
    _same(out, [np.array([0, 255, 0, 0], np.uint8)])  # saturated to uint8; -1 and 2 are not keys
    with pytest.raises(PipelineError, match="integers"):
        run_op("lookup_table", [np.zeros(3, np.float32)], keys=[0], values=[1.0])


def test_get_property_source_info_and_layout(tmp_path):
    for name in ("a.bin", "bb.bin"):
        (tmp_path / name).write_bytes(b"xyz")
    out = run_pipeline(lambda: (lambda data: (fn.get_property(data, key="source_info"),
                                              fn.get_property(fn.reshape(data, layout="W"), key="layout")))(
        fn.readers.file(files=["a.bin", "bb.bin"], file_root=str(tmp_path))[0]), batch_size=2)
    paths = [bytes(s.numpy()).decode() for s in out[0]]
    assert paths == [str(tmp_path / "a.bin"), str(tmp_path / "bb.bin")]
    assert [bytes(s.numpy()) for s in out[1]] == [b"W", b"W"] and out[1].dtype == torch.uint8


# ---- constants ----------------------------------------------------------------------------------------------
def test_zeros_ones_with_per_sample_shapes():
    shapes = [np.array([2, 3]), np.array([1, 4]), np.array([0, 2])]
    out = run_pipeline(lambda: (fn.zeros(shape=[2, 2], dtype=types.FLOAT, layout="HW"),
                                fn.ones(shape=fn.external_source(source=lambda: shapes, cycle=True))), batch_size=3)
    _same(out[0], [np.zeros((2, 2), np.float32)] * 3)
    assert out[0].layout() == "HW"
    _same(out[1], [np.ones(tuple(s), np.int32) for s in shapes])  # DALI's default type is INT32


def test_zeros_like_and_ones_like():
    _same(run_op("zeros_like", HWC, layout="HWC"), [np.zeros_like(x) for x in HWC])
    out = run_op("ones_like", HWC, layout="HWC", dtype=types.FLOAT16)
    _same(out, [np.ones(x.shape, np.float16) for x in HWC])
    assert out.layout() == "HWC"


def test_full_broadcasts_like_numpy():
    fills = [np.array([1, 2, 3], np.int16), np.array([4, 5, 6], np.int16), np.array([7, 8, 9], np.int16)]
    out = run_op("full", fills, shape=[2, 2, 3], layout="HWC", input_layout="")
    assert out.layout() == "HWC"
    _same(out, [np.broadcast_to(f, (2, 2, 3)) for f in fills])
    sizes = [np.array([2]), np.array([3]), np.array([0])]  # ragged: one packed buffer
    scalars = [np.float32(2.5), np.float32(-1), np.float32(3)]
    out = run_pipeline(lambda: fn.full(fn.external_source(source=lambda: scalars, cycle=True),
                                       shape=fn.external_source(source=lambda: sizes, cycle=True)), batch_size=3)
    _same(out[0], [np.full(2, 2.5, np.float32), np.full(3, -1, np.float32), np.zeros(0, np.float32)])
    _same(run_op("full", fills), fills)  # without shape: the fill's own shape
    with pytest.raises(PipelineError, match="cannot be broadcast"):
        run_op("full", fills, shape=[3, 2])


def test_full_like_converts_to_the_type_of_data_like():
    fills = [np.array([-3.4, 127.6, 300.0], np.float32)] * 3
    out = run_op("full_like", HWC, fills, layout=["HWC", ""])
    _same(out, [np.broadcast_to(np.array([0, 128, 255], np.uint8), x.shape) for x in HWC])
    assert out.layout() == "HWC"
    out = run_op("full_like", HWC, [np.float32(9)] * 3, layout=["HWC", ""])
    _same(out, [np.full_like(x, 9) for x in HWC])


# ---- batch permutations -------------------------------------------------------------------------------------
def test_batch_permutation_draws_seeded_derangements():
    n = 6
    draws = [run_pipeline(lambda: fn.batch_permutation(no_fixed_points=True), batch_size=n, seed=s)[0]
             for s in (1, 1, 2)]
    perms = [[int(v) for v in d.as_tensor()] for d in draws]
    for p in perms:
        assert sorted(p) == list(range(n)) and all(p[i] != i for i in range(n))
    assert perms[0] == perms[1] and draws[0].dtype == torch.int32
    reps = run_pipeline(lambda: fn.batch_permutation(allow_repetitions=True, no_fixed_points=True), batch_size=n)[0]
    assert all(int(reps[i]) != i and 0 <= int(reps[i]) < n for i in range(n))


def test_permute_batch_dense_ragged_and_from_a_permutation():
    _same(run_op("permute_batch", HWC, indices=[2, 0, 2]), [HWC[2], HWC[0], HWC[2]])
    same = [x[:1, :2] for x in HWC]
    _same(run_op("permute_batch", same, indices=[1, 1, 0]), [same[1], same[1], same[0]])
    data = [np.float32(i) for i in range(5)]
    out = run_pipeline(lambda: (lambda perm: (perm, fn.permute_batch(
        fn.external_source(source=lambda: data, cycle=True), indices=perm)))(fn.batch_permutation()), batch_size=5)
    assert [float(v) for v in out[1].as_tensor()] == [float(i) for i in out[0].as_tensor()]
    with pytest.raises(PipelineError, match="out of range"):
        run_op("permute_batch", HWC, indices=[0, 1, 3])


def test_cast_like_saturates_as_cast():
    data = [np.array([-2.5, 0.4, 254.6, 1000.0], np.float32), np.array([3.5], np.float32)]
    out = run_op("cast_like", data, [np.zeros(1, np.uint8)] * 2)
    _same(out, [np.clip(np.rint(x), 0, 255).astype(np.uint8) for x in data])


# ---- GPU ----------------------------------------------------------------------------------------------------
GPU_CASES = [
    ("expand_dims", [HWC], "HWC", dict(axes=[0], new_axis_names="N")),
    ("squeeze", [[x[:1] for x in HWC]], "HWC", dict(axis_names="H")),
    ("reinterpret", [HWC], "HWC", dict(dtype=types.INT8, shape=[-1])),
    ("element_extract", [RAGGED_FRAMES], "FHW", dict(element_map=[1, 0])),
    ("sequence_rearrange", [SEQS], "FHW", dict(new_order=[1, 0, 1])),
    ("lookup_table", [HWC], "HWC", dict(keys=[0, 1, 200], values=[5.0, 6.0, 7.0])),
    ("get_property", [HWC], "HWC", dict(key="layout")),
    ("zeros_like", [HWC], "HWC", {}),
    ("full", [[np.array([1.0, 2.0, 3.0], np.float32)] * 3], "", dict(shape=[2, 3])),
    ("full_like", [HWC, [np.int32(5)] * 3], ["HWC", ""], {}),
    ("permute_batch", [HWC], "HWC", dict(indices=[1, 2, 0])),
    ("cast_like", [HWC, [np.float32(0)] * 3], "", {}),
]


@pytest.mark.cuda
@pytest.mark.parametrize("op,inputs,layout,kwargs", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_equals_cpu(op, inputs, layout, kwargs):
    cpu = run_op(op, *inputs, layout=layout, **kwargs)
    gpu = run_op(op, *inputs, layout=layout, device="gpu", **kwargs)
    cpu, gpu = (cpu if isinstance(cpu, tuple) else (cpu,)), (gpu if isinstance(gpu, tuple) else (gpu,))
    for c, g in zip(cpu, gpu):
        assert g.device == "gpu" and g.layout() == c.layout() and g.shape() == c.shape()
        for a, b in zip(c, g):
            torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0)

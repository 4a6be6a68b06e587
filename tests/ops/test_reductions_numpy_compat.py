"""fn.reductions.* against NumPy's reductions (``sum``, ``min``, ``max``, ``mean``, ``sqrt(mean(x**2))``, ``var``,
``std`` with ``ddof``) on ragged and dense batches, with DALI's axes rules (``axes`` / ``axis_names``, none: all
axes, an empty list: none), ``keep_dims``, output types and layouts."""

import numpy as np
import pytest
import torch

import sluice
from sluice import fn, types
from sluice.errors import PipelineError
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema
from sluice.testing import run_op

RNG = np.random.default_rng(3)
RAGGED = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((4, 5, 3), (2, 6, 3), (3, 1, 3))]
FLOATS = [RNG.normal(2.0, 3.0, s).astype(np.float32) for s in ((4, 5, 3), (2, 6, 3), (3, 1, 3))]
DENSE = RNG.normal(size=(3, 4, 2, 3)).astype(np.float32)

AXES = [dict(), dict(axis_names="HW"), dict(axes=[0]), dict(axes=[-1], keep_dims=True), dict(axes=[0, 2]),
        dict(axes=[])]


def _np_axes(kw, ndim=3):
    if "axis_names" in kw:
        return tuple("HWC".index(c) for c in kw["axis_names"])
    if "axes" in kw:
        return tuple(a % ndim for a in kw["axes"])
    return tuple(range(ndim))


def _ref(kind, x, axes, keep):
    x64 = x.astype(np.float64)
    if kind == "sum":
        return np.sum(x.astype(np.uint64 if x.dtype == np.uint8 else np.float64), axis=axes, keepdims=keep)
    if kind in ("min", "max"):
        return getattr(np, "a" + kind)(x, axis=axes, keepdims=keep) if axes else x
    if kind == "mean":
        return np.mean(x64, axis=axes, keepdims=keep) if axes else x64
    ms = np.mean(x64 ** 2, axis=axes, keepdims=keep) if axes else x64 ** 2
    return ms if kind == "mean_square" else np.sqrt(ms)


@pytest.mark.parametrize("kw", AXES, ids=lambda kw: str(kw))
@pytest.mark.parametrize("kind", ["sum", "min", "max", "mean", "mean_square", "rms"])
@pytest.mark.parametrize("data", [RAGGED, FLOATS], ids=["uint8", "float32"])
def test_reductions_equal_numpy(kind, kw, data):
    out = run_op(f"reductions.{kind}", data, layout="HWC", **kw)
    axes, keep = _np_axes(kw), kw.get("keep_dims", False)
    want_type = {"sum": np.uint64 if data[0].dtype == np.uint8 else np.float32, "min": data[0].dtype,
                 "max": data[0].dtype}.get(kind, np.float32)
    for x, y in zip(data, out):
        ref = _ref(kind, x, axes, keep)
        assert y.numpy().dtype == want_type and y.shape == ref.shape
        np.testing.assert_allclose(y.numpy().astype(np.float64), ref.astype(np.float64), rtol=2e-6, atol=1e-5)
    kept = "".join(c for d, c in enumerate("HWC") if keep or d not in axes)
    assert out.layout() == kept


@pytest.mark.parametrize("kind", ["variance", "std_dev"])
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("kw", [dict(), dict(axis_names="HW"), dict(axes=[0], keep_dims=True)], ids=str)
def test_variance_and_std_dev_around_given_means(kind, ddof, kw):
    axes, keep = _np_axes(kw), kw.get("keep_dims", False)
    means = [np.mean(x, axis=axes, keepdims=keep).astype(np.float32) for x in FLOATS]
    out = run_op(f"reductions.{kind}", FLOATS, means, layout=["HWC", ""], ddof=ddof, **kw)
    for x, y in zip(FLOATS, out):
        ref = getattr(np, "var" if kind == "variance" else "std")(x.astype(np.float64), axis=axes, keepdims=keep,
                                                                  ddof=ddof)
        assert y.dtype == torch.float32 and y.shape == ref.shape
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5)


def test_variance_with_one_mean_per_sample_and_no_axes():
    out = run_op("reductions.variance", FLOATS, [np.float32(0.0)] * 3, layout=["HWC", ""], axis_names="HW")
    for x, y in zip(FLOATS, out):
        np.testing.assert_allclose(y.numpy(), np.mean(x.astype(np.float64) ** 2, axis=(0, 1)), rtol=1e-5)
    out = run_op("reductions.std_dev", FLOATS, FLOATS, layout=["HWC", ""], axes=[])
    assert all(float(y.abs().max()) == 0 for y in out)  # no axes: each element around itself


def _kernel(kind, batch, layout, **kw):
    schema = get_schema(f"reductions.{kind}")
    const, _ = schema.validate(kw, lambda v: False)
    ctx = BatchContext(kind, len(batch), [""] * len(batch), [layout], torch.device("cpu"), None)
    return schema.kernels["gpu"].kernel(ctx, batch, args=BatchArgs(const, {}, len(batch)))


@pytest.mark.parametrize("kind", ["sum", "max", "mean", "rms"])
def test_dense_and_packed_batches_agree(kind):
    dense = _kernel(kind, Batch.from_dense(torch.from_numpy(DENSE), "HWC"), "HWC", axis_names="HC")
    flat = torch.from_numpy(DENSE.reshape(-1).copy())
    packed = _kernel(kind, Batch.from_packed(flat, np.array([[4, 2, 3]] * 3), "HWC"), "HWC", axis_names="HC")
    assert dense.dense is not None
    for a, b in zip(dense, packed):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dense.as_tensor().numpy(), _ref(kind, DENSE, (1, 3), False), rtol=2e-6)


def test_dtype_overrides_and_integer_sums():
    data = [np.full((300,), 255, np.uint8), np.full((2,), 7, np.uint8)]
    out = run_op("reductions.sum", data)
    assert out.dtype == torch.uint64 and [int(v) for v in out] == [76500, 14]
    out = run_op("reductions.sum", data, dtype=types.FLOAT)
    assert out.dtype == torch.float32 and [float(v) for v in out] == [76500.0, 14.0]
    out = run_op("reductions.mean", [np.array([1, 2], np.int32)], dtype=types.FLOAT64)
    assert out.dtype == torch.float64 and float(out[0]) == 1.5
    out = run_op("reductions.sum", [np.array([-5, 2], np.int16)])
    assert out.dtype == torch.int64 and int(out[0]) == -3


def test_per_sample_means_from_the_pipeline():
    @sluice.pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: FLOATS, layout="HWC", cycle=True)
        return fn.reductions.std_dev(x, fn.reductions.mean(x, axis_names="HW"), axis_names="HW")

    p = pipe()
    out = p.run()[0]
    p.close()
    for x, y in zip(FLOATS, out):
        np.testing.assert_allclose(y.numpy(), x.astype(np.float64).std(axis=(0, 1)), rtol=1e-5)


def test_errors_name_the_problem():
    with pytest.raises(PipelineError, match="either axes or axis_names"):
        run_op("reductions.sum", RAGGED, layout="HWC", axes=[0], axis_names="H")
    with pytest.raises(PipelineError, match="not in the input layout"):
        run_op("reductions.sum", RAGGED, layout="HWC", axis_names="D")
    with pytest.raises(PipelineError, match="out of range"):
        run_op("reductions.max", RAGGED, axes=[3])
    with pytest.raises(PipelineError, match="no elements"):
        run_op("reductions.min", [np.zeros((0, 3), np.float32), np.zeros((1, 3), np.float32)], axes=[0])
    with pytest.raises(PipelineError, match="one mean per output element"):
        run_op("reductions.variance", FLOATS, [np.zeros(2, np.float32)] * 3, layout=["HWC", ""], axis_names="HW")


GPU_CASES = [("sum", dict(axis_names="HW")), ("min", dict(axes=[0])), ("mean", dict()), ("rms", dict(axes=[-1])),
             ("max", dict(axes=[1], keep_dims=True))]


@pytest.mark.cuda
@pytest.mark.parametrize("kind,kw", GPU_CASES, ids=[c[0] for c in GPU_CASES])
@pytest.mark.parametrize("data", [RAGGED, [DENSE[i] for i in range(3)]], ids=["ragged", "dense"])
def test_gpu_equals_cpu(kind, kw, data):
    cpu = run_op(f"reductions.{kind}", data, layout="HWC", **kw)
    gpu = run_op(f"reductions.{kind}", data, layout="HWC", device="gpu", **kw)
    assert gpu.device == "gpu" and gpu.layout() == cpu.layout() and gpu.shape() == cpu.shape()
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.cpu().double(), a.double(), rtol=1e-6, atol=1e-6)


@pytest.mark.cuda
def test_gpu_std_dev_equals_cpu():
    means = [np.mean(x, axis=(0, 1)).astype(np.float32) for x in FLOATS]
    cpu = run_op("reductions.std_dev", FLOATS, means, layout=["HWC", ""], axis_names="HW")
    gpu = run_op("reductions.std_dev", FLOATS, means, layout=["HWC", ""], axis_names="HW", device="gpu")
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-6, atol=1e-6)

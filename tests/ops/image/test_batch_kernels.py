"""The GPU batch kernels' logic run on CPU tensors (resample_batch falls back to the torch path off CUDA), against
the CPU operators: same windows, sizes, per-sample arguments, dense/ragged outputs. Tolerance: 1 grey level
(the CPU resize of uint8 RGB goes through Pillow), exact where no resampling happens."""

import numpy as np
import pytest
import torch

from sluice import types
from sluice.ops.image import crop_mirror_normalize, flip, jitter, random_resized_crop, resize, rotate, warp_affine
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, SampleContext, get_schema
from sluice.testing import run_op


def _imgs():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(30, 40), (45, 28), (32, 32)]]


def _run(op: str, kernel, imgs, per_sample=None, seed=0, **kwargs):
    schema = get_schema(op)
    const, _ = schema.validate(kwargs, lambda v: False)
    n = len(imgs)
    ctx = BatchContext(op, n, [""] * n, ["HWC"], torch.device("cpu"), None, seed, 0)
    args = BatchArgs(const, per_sample or {}, n)
    return kernel(ctx, Batch([torch.from_numpy(i) for i in imgs], "HWC"), args=args)


def _close(a: Batch, b: Batch, tol=1.0):
    assert a.shape() == b.shape()
    for x, y in zip(a.samples, b.samples):
        assert (x.double() - y.double()).abs().max().item() <= tol


@pytest.mark.parametrize("kwargs", [dict(resize_shorter=20), dict(size=[16, 24]), dict(resize_x=-20),
                                    dict(size=[10, 10], roi_start=[2, 3], roi_end=[20, 25])])
def test_resize_batch_kernel(kwargs):
    imgs = _imgs()
    _close(_run("resize", resize.resize_gpu, imgs, **kwargs), run_op("resize", imgs, layout="HWC", **kwargs))


@pytest.mark.parametrize("kwargs", [dict(resize_x=300, resize_y=300, min_filter=types.INTERP_TRIANGULAR),
                                    dict(resize_shorter=20), dict(size=[10, 10], roi_start=[2, 3], roi_end=[20, 25])])
def test_resize_batch_kernel_reads_a_packed_batch_as_its_samples(kwargs):
    """A ragged batch held packed (the mixed decoder's and flip's output), read as one buffer without per-sample
    views, resizes exactly as the same samples given as a list (the reference), ragged outputs included; one of
    the samples is a row."""
    rng = np.random.default_rng(1)
    imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(30, 40), (45, 28), (1, 33), (32, 32)]]
    schema = get_schema("resize")
    const, _ = schema.validate(kwargs, lambda v: False)
    ctx = BatchContext("resize", 4, [""] * 4, ["HWC"], torch.device("cpu"), None, 0, 0)
    packed = Batch.from_packed(torch.from_numpy(np.concatenate([i.ravel() for i in imgs])),
                               np.array([i.shape for i in imgs]), "HWC")
    got = resize.resize_gpu(ctx, packed, args=BatchArgs(const, {}, 4))
    ref = resize.resize_gpu(ctx, Batch([torch.from_numpy(i) for i in imgs], "HWC"), args=BatchArgs(const, {}, 4))
    assert got.shape() == ref.shape()
    assert all(torch.equal(x, y) for x, y in zip(got.samples, ref.samples))
    _close(got, run_op("resize", imgs, layout="HWC", **kwargs))


def test_resize_batch_kernel_per_sample_sizes():
    imgs = _imgs()
    got = _run("resize", resize.resize_gpu, imgs, per_sample={"resize_x": [10.0, 20.0, 30.0]})
    assert [s[1] for s in got.shape()] == [10, 20, 30]


@pytest.mark.parametrize("kwargs", [dict(crop=(24, 24), crop_pos_x=0.3), dict(crop=(40, 20), out_of_bounds_policy="pad",
                                                                              fill_values=[3.0]),
                                    dict(crop=(40, 20), out_of_bounds_policy="trim_to_shape"),
                                    dict(dtype=types.FLOAT16, output_layout="HWC", pad_output=True)])
def test_cmn_batch_kernel(kwargs):
    imgs = _imgs()
    kw = dict(mean=[100.0, 110.0, 120.0], std=[50.0, 60.0, 70.0], **kwargs)
    got = _run("crop_mirror_normalize", crop_mirror_normalize.crop_mirror_normalize_gpu, imgs,
               per_sample={"mirror": [1, 0, 1]}, **kw)
    ref = [run_op("crop_mirror_normalize", [i], layout="HWC", mirror=m, **kw)[0] for i, m in zip(imgs, [1, 0, 1])]
    _close(got, Batch(ref), tol=1e-6 if kw.get("dtype") is None else 1e-2)


def test_cmn_batch_kernel_out_of_bounds_error():
    with pytest.raises(ValueError, match="out of bounds"):
        _run("crop_mirror_normalize", crop_mirror_normalize.crop_mirror_normalize_gpu, _imgs(), crop=(50, 50))


def test_flip_rrc_rotate_warp_jitter_batch_kernels():
    imgs = _imgs()
    got = _run("flip", flip.flip_gpu, imgs, per_sample={"horizontal": [1, 0, 1], "vertical": [0, 1, 1]})
    for g, i, (h, v) in zip(got.samples, imgs, [(1, 0), (0, 1), (1, 1)]):
        np.testing.assert_array_equal(g.numpy(), i[::-1 if v else 1, ::-1 if h else 1])
    rrc = _run("random_resized_crop", random_resized_crop.random_resized_crop_gpu, imgs, seed=5, size=[12, 12])
    const, _ = get_schema("random_resized_crop").validate(dict(size=[12, 12]), lambda v: False)
    ref = [random_resized_crop.random_resized_crop_cpu(SampleContext("random_resized_crop", i, "", "HWC", 5, 0),
                                                       torch.from_numpy(img), **const) for i, img in enumerate(imgs)]
    _close(rrc, Batch(ref))  # the same windows from the same per-sample generators
    _close(_run("rotate", rotate.rotate_gpu, imgs, angle=30.0, fill_value=0.0),
           run_op("rotate", imgs, layout="HWC", angle=30.0, fill_value=0.0))
    m = [1.0, 0.1, -2.0, 0.0, 0.9, 1.0]
    _close(_run("warp_affine", warp_affine.warp_affine_gpu, imgs, matrix=m),
           run_op("warp_affine", imgs, layout="HWC", matrix=m))
    a = _run("jitter", jitter.jitter_gpu, imgs, seed=3)
    b = _run("jitter", jitter.jitter_gpu, imgs, seed=3)
    _close(a, b, tol=0)

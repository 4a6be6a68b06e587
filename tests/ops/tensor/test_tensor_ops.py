"""normalize, pad, slice and one_hot as pipeline operators: layouts of images and audio (1-D, "ft", "tf"),
ragged batches, per-sample arguments, errors, and GPU equal to CPU. References: NumPy (``numpy.pad``, indexing,
``mean``/``std``, ``eye``), exact or 1e-5."""

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.errors import ArgumentError
from sluice.pipeline.pipeline import Pipeline
from sluice.testing import run_op

RNG = np.random.default_rng(0)
AUDIO = [RNG.normal(size=n).astype(np.float32) for n in (100, 160, 130)]
SPECS_FT = [RNG.normal(size=(8, t)).astype(np.float32) * 2 + 1 for t in (20, 33, 27)]
IMAGES = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((10, 20, 3), (12, 8, 3))]


def test_normalize_spectrogram_per_row_over_time():
    out = run_op("normalize", SPECS_FT, layout="ft", axis_names="t")
    for x, y in zip(SPECS_FT, out):
        ref = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
        np.testing.assert_allclose(y.numpy(), ref, atol=1e-5)


def test_normalize_batch_mode_on_tf_layout():
    specs = [x.T.copy() for x in SPECS_FT]
    out = run_op("normalize", specs, layout="tf", axis_names="t", batch=True, ddof=1)
    cat = np.concatenate(specs, 0)
    ref_m, ref_s = cat.mean(0, keepdims=True), cat.std(0, keepdims=True, ddof=1)
    for x, y in zip(specs, out):
        np.testing.assert_allclose(y.numpy(), (x - ref_m) / ref_s, atol=1e-5)


def test_normalize_per_sample_mean_and_stddev_nodes():
    means, stds = [np.float32(1.0), np.float32(-2.0), np.float32(0.5)], [np.float32(2.0)] * 3
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None, exec_async=False)
    with pipe:
        audio = fn.external_source(source=lambda: AUDIO, cycle=True)
        m = fn.external_source(source=lambda: means, cycle=True)
        s = fn.external_source(source=lambda: stds, cycle=True)
        pipe.set_outputs(fn.normalize(audio, mean=m, stddev=s, scale=3.0, shift=1.0))
    out = pipe.run()[0]
    pipe.close()
    for x, mu, y in zip(AUDIO, means, out):
        np.testing.assert_allclose(y.numpy(), (x - mu) / 2.0 * 3.0 + 1.0, atol=1e-5)


def test_normalize_image_to_uint8():
    out = run_op("normalize", IMAGES, layout="HWC", axis_names="HW", scale=40, shift=128, dtype=types.UINT8)
    assert out.dtype == torch.uint8 and out.shape() == [x.shape for x in IMAGES]


def test_pad_audio_and_spectrograms():
    out = run_op("pad", AUDIO, axes=[0], fill_value=-1.0)
    assert out.is_dense_tensor() and out.shape() == [(160,)] * 3
    np.testing.assert_array_equal(out[0].numpy(), np.pad(AUDIO[0], (0, 60), constant_values=-1))
    out = run_op("pad", SPECS_FT, layout="ft", axis_names="t", align=16)
    assert out.shape() == [(8, 48)] * 3 and out.layout() == "ft"
    np.testing.assert_array_equal(out[2].numpy(), np.pad(SPECS_FT[2], ((0, 0), (0, 21))))


def test_pad_per_sample_fill_value_node_and_no_cropping():
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None, exec_async=False)
    with pipe:
        audio = fn.external_source(source=lambda: AUDIO, cycle=True)
        fill = fn.external_source(source=lambda: [np.float32(v) for v in (-1, 0, 1)], cycle=True)
        pipe.set_outputs(fn.pad(audio, axes=[0], fill_value=fill, shape=[120]))
    out = pipe.run()[0]
    pipe.close()
    assert out.shape() == [(120,), (160,), (130,)]  # shape=120 pads the short clip; longer ones stay as they are
    np.testing.assert_array_equal(out[0].numpy(), np.pad(AUDIO[0], (0, 20), constant_values=-1))


def test_pad_images_hw():
    out = run_op("pad", IMAGES, layout="HWC", axis_names="HW", fill_value=7)
    assert out.shape() == [(12, 20, 3)] * 2
    np.testing.assert_array_equal(out[1].numpy(), np.pad(IMAGES[1], ((0, 0), (0, 12), (0, 0)), constant_values=7))


def test_slice_named_arguments_on_audio_and_images():
    out = run_op("slice", AUDIO, axes=[0], start=[10], end=[90])
    np.testing.assert_array_equal(out[1].numpy(), AUDIO[1][10:90])
    out = run_op("slice", SPECS_FT, layout="ft", axis_names="t", rel_start=[0.5], out_of_bounds_policy="pad")
    np.testing.assert_array_equal(out[1].numpy(), SPECS_FT[1][:, 17:])  # 0.5 * 33 = 16.5 rounds half away: 17
    out = run_op("slice", IMAGES, layout="HWC", start=[2, 1], shape=[5, 4])  # x=2, y=1, w=5, h=4
    np.testing.assert_array_equal(out[0].numpy(), IMAGES[0][1:5, 2:7])


def test_slice_positional_anchor_and_shape_inputs():
    anchors = [np.array([0.25, 0.5], np.float32), np.array([0.0, 0.0], np.float32)]
    shapes = [np.array([0.5, 0.5], np.float32), np.array([1.0, 0.25], np.float32)]
    out = run_op("slice", IMAGES, anchors, shapes, layout=["HWC", "", ""])
    np.testing.assert_array_equal(out[0].numpy(), IMAGES[0][5:10, 5:15])
    np.testing.assert_array_equal(out[1].numpy(), IMAGES[1][0:3, 0:8])


def test_slice_absolute_positional_inputs_on_audio():
    begins = [np.array([10]), np.array([0]), np.array([100])]
    lengths = [np.array([50]), np.array([160]), np.array([30])]
    out = run_op("slice", AUDIO, begins, lengths, axes=[0], normalized_anchor=False, normalized_shape=False)
    for x, b, n, y in zip(AUDIO, begins, lengths, out):
        np.testing.assert_array_equal(y.numpy(), x[b[0]:b[0] + n[0]])


def test_slice_errors():
    with pytest.raises(Exception, match="outside the sample"):
        run_op("slice", AUDIO, axes=[0], start=[50], shape=[100])
    with pytest.raises(ArgumentError, match="out_of_bounds_policy"):
        run_op("slice", AUDIO, axes=[0], start=[0], out_of_bounds_policy="wrap")


def test_one_hot_operator():
    out = run_op("one_hot", [np.array(1), np.array([3]), np.array(0)], num_classes=4, dtype=types.INT32)
    np.testing.assert_array_equal(np.stack([o.numpy() for o in out]), np.eye(4, dtype=np.int32)[[1, 3, 0]])
    out = run_op("one_hot", [np.array([0, 2])], num_classes=3, axis=0)
    np.testing.assert_array_equal(out[0].numpy(), np.eye(3)[[0, 2]].T)


@pytest.mark.cuda
@pytest.mark.parametrize("op,data,kw", [
    ("normalize", SPECS_FT, dict(layout="ft", axis_names="t")),
    ("normalize", SPECS_FT, dict(layout="ft", axis_names="t", batch=True)),
    ("normalize", AUDIO, dict()),
    ("pad", AUDIO, dict(axes=[0], fill_value=3.0)),
    ("pad", SPECS_FT, dict(layout="ft", axis_names="t", align=8)),
    ("slice", AUDIO, dict(axes=[0], start=[-5], shape=[50], out_of_bounds_policy="pad")),
    ("slice", IMAGES, dict(layout="HWC", rel_start=[0.1, 0.2], rel_shape=[0.5, 0.5])),
    ("slice", AUDIO, dict(axes=[0], rel_start=[0.1], rel_end=[0.6])),
    ("one_hot", [np.array(1), np.array(2)], dict(num_classes=5)),
])
def test_gpu_equals_cpu(op, data, kw):
    cpu = run_op(op, data, **kw)
    gpu = run_op(op, data, device="gpu", **kw)
    assert gpu.device == "gpu"
    for c, g in zip(cpu, gpu.as_cpu()):
        torch.testing.assert_close(c, g, atol=1e-5, rtol=1e-5)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(Exception, match="align values must be positive"):
        run_op("pad", AUDIO, axes=[0], align=[0])
    with pytest.raises(Exception, match="shape has 2 values for 1 padded axes"):
        run_op("pad", AUDIO, axes=[0], shape=[10, 20])
    with pytest.raises(Exception, match="ddof must be >= 0"):
        run_op("normalize", AUDIO, ddof=-1)
    with pytest.raises(Exception, match="axis 3 is out of range"):
        run_op("normalize", AUDIO, axes=[3])
    with pytest.raises(Exception, match="needs an input with a layout"):
        run_op("pad", AUDIO, axis_names="t")
    with pytest.raises(Exception, match="anchor has 3 values for 2 sliced axes"):
        run_op("slice", IMAGES, [np.zeros(3, np.float32)] * 2, [np.ones(2, np.float32)] * 2, layout=["HWC", "", ""])

"""The colour operators as pipeline operators: ragged batches, per-sample argument inputs (DataNodes, as
``brightness=fn.random.uniform(...)``), argument errors, and GPU equal to CPU. The numerics of each kernel are
checked against OpenCV / scikit-image / NumPy in the other test_color_* files; here each sample must equal that
kernel run on its own with its own argument value."""

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.errors import ArgumentError
from sluice.ops.image.brightness_contrast import brightness_contrast_kernel
from sluice.ops.image.gaussian_blur import blur_axes, gaussian_params
from sluice.pipeline.pipeline import Pipeline
from sluice.testing import run_op

RNG = np.random.default_rng(0)
IMAGES = [RNG.integers(0, 256, shape, dtype=np.uint8) for shape in ((6, 8, 3), (9, 5, 3), (6, 8, 3))]
VALUES = [0.5, 1.0, 1.7]


def _run_with_arg_node(op, device="cpu", arg="brightness", values=VALUES, **kw):
    """Run ``fn.<op>(images, <arg>=<per-sample DataNode>)`` on IMAGES."""
    pipe = Pipeline(batch_size=len(IMAGES), num_threads=2, device_id=0 if device == "gpu" else None, seed=3,
                    exec_async=False)
    with pipe:
        images = fn.external_source(source=lambda: IMAGES, layout="HWC", cycle=True)
        per = fn.external_source(source=lambda: [np.float32(v) for v in values], cycle=True)
        pipe.set_outputs(getattr(fn, op)(images, device=device, **{arg: per}, **kw))
    out = pipe.run()[0]
    pipe.close()
    return out


def test_per_sample_brightness_from_a_data_node():
    out = _run_with_arg_node("brightness")
    assert out.shape() == [x.shape for x in IMAGES] and out.layout() == "HWC"
    for x, v, y in zip(IMAGES, VALUES, out):
        want = brightness_contrast_kernel(torch.from_numpy(x)[None], torch.tensor([v]), torch.tensor([0.0]),
                                          torch.tensor([1.0]), None)[0]
        torch.testing.assert_close(y, want)


def test_per_sample_sigma_from_a_data_node():
    out = _run_with_arg_node("gaussian_blur", arg="sigma")
    for x, v, y in zip(IMAGES, VALUES, out):  # the CPU kernel blurs with OpenCV: within one level of blur_axes
        p = gaussian_params(v, 0)
        assert (y.int() - blur_axes(torch.from_numpy(x)[None], [1, 2], [[p, p]])[0].int()).abs().max() <= 1


def test_random_uniform_argument_runs_and_is_deterministic():
    def once():
        pipe = Pipeline(batch_size=3, num_threads=2, device_id=None, seed=7, exec_async=False)
        with pipe:
            images = fn.external_source(source=lambda: IMAGES, layout="HWC", cycle=True)
            pipe.set_outputs(fn.color_twist(images, hue=fn.random.uniform(range=[-30, 30]),
                                            brightness=fn.random.uniform(range=[0.5, 1.5])))
        out = pipe.run()[0]
        pipe.close()
        return out

    a, b = once(), once()
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    assert any(not torch.equal(x, torch.from_numpy(i)) for x, i in zip(a, IMAGES))


@pytest.mark.parametrize("op,kw", [
    ("brightness_contrast", dict(brightness=1.2, brightness_shift=0.05, contrast=0.8, contrast_center=100.0)),
    ("contrast", dict(contrast=1.5)),
    ("hsv", dict(hue=25.0, saturation=0.7, value=1.1)),
    ("hue", dict(hue=-40.0, image_type=types.BGR)),
    ("saturation", dict(saturation=0.3)),
    ("color_twist", dict(hue=10.0, saturation=1.3, brightness=0.9, contrast=1.1, dtype=types.FLOAT)),
    ("color_space_conversion", dict(image_type=types.RGB, output_type=types.YCbCr)),
    ("gaussian_blur", dict(window_size=5, dtype=types.FLOAT)),
])
def test_ragged_batch_equals_per_sample_runs(op, kw):
    batch = run_op(op, IMAGES, layout="HWC", **kw)
    for x, y in zip(IMAGES, batch):
        torch.testing.assert_close(y, run_op(op, [x], layout="HWC", **kw)[0])


def test_argument_errors_name_the_operator():
    with pytest.raises(ArgumentError, match="fn.hsv: unknown argument 'hues'"):
        run_op("hsv", IMAGES, layout="HWC", hues=3.0)
    with pytest.raises(ArgumentError, match="output_type"):
        run_op("color_space_conversion", IMAGES, layout="HWC", image_type=types.RGB)
    with pytest.raises(Exception, match="3 channels"):
        run_op("hue", [np.zeros((4, 4, 1), np.uint8)], layout="HWC", hue=10.0)
    with pytest.raises(Exception, match="odd"):
        run_op("gaussian_blur", IMAGES, layout="HWC", window_size=4)
    chw = [np.ascontiguousarray(x.transpose(2, 0, 1)) for x in IMAGES]
    for op, kw in (("hsv", dict(hue=3.0)), ("color_space_conversion", dict(image_type=types.RGB,
                                                                           output_type=types.GRAY))):
        with pytest.raises(Exception, match="channels must be the last axis"):
            run_op(op, chw, layout="CHW", **kw)


@pytest.mark.cuda
@pytest.mark.parametrize("op,kw", [
    ("brightness_contrast", dict(brightness=1.2, brightness_shift=0.05, contrast=0.8)),
    ("brightness", dict(brightness=0.7)),
    ("contrast", dict(contrast=1.5, contrast_center=90.0)),
    ("hsv", dict(hue=25.0, saturation=0.7, value=1.1)),
    ("hue", dict(hue=-40.0)),
    ("saturation", dict(saturation=0.3)),
    ("color_twist", dict(hue=10.0, saturation=1.3, brightness=0.9, contrast=1.1)),
    ("color_space_conversion", dict(image_type=types.RGB, output_type=types.GRAY)),
    ("color_space_conversion", dict(image_type=types.YCbCr, output_type=types.BGR)),
    ("gaussian_blur", dict(sigma=[1.5, 0.7])),
])
def test_gpu_equals_cpu(op, kw):
    """Tolerance: 1 level of uint8 (float32 rounding may differ between CPU and GPU math)."""
    cpu = run_op(op, IMAGES, layout="HWC", **kw)
    gpu = run_op(op, IMAGES, layout="HWC", device="gpu", **kw)
    assert gpu.device == "gpu"
    for c, g in zip(cpu, gpu.as_cpu()):
        assert c.shape == g.shape and c.dtype == g.dtype
        assert (c.int() - g.int()).abs().max() <= 1


@pytest.mark.cuda
def test_gpu_per_sample_arguments_equal_cpu():
    for op, arg in (("brightness", "brightness"), ("hsv", "hue"), ("gaussian_blur", "sigma")):
        cpu = _run_with_arg_node(op, arg=arg)
        gpu = _run_with_arg_node(op, "gpu", arg=arg).as_cpu()
        for c, g in zip(cpu, gpu):
            assert (c.int() - g.int()).abs().max() <= 1


def test_cpu_kernels_work_without_opencv(monkeypatch):
    """OpenCV only speeds the CPU kernels up: without it they use the torch path and agree within one level."""
    import sluice.ops.image._color_affine as affine
    import sluice.ops.image.brightness_contrast as bc
    import sluice.ops.image.color_space_conversion as csc
    import sluice.ops.image.gaussian_blur as gb

    cases = [("brightness", dict(brightness=1.3)), ("hsv", dict(hue=30.0, saturation=0.5)),
             ("color_space_conversion", dict(image_type=types.RGB, output_type=types.GRAY)),
             ("gaussian_blur", dict(sigma=1.2))]
    with_cv = [run_op(op, IMAGES, layout="HWC", **kw) for op, kw in cases]
    for module in (affine, bc, csc, gb):
        monkeypatch.setattr(module, "opencv", lambda: None)
    for (op, kw), ref in zip(cases, with_cv):
        out = run_op(op, IMAGES, layout="HWC", **kw)
        for a, b in zip(ref, out):
            assert a.shape == b.shape and (a.int() - b.int()).abs().max() <= 1, op


SEQS = [RNG.integers(0, 256, (3, 5, 6, 3), dtype=np.uint8), RNG.integers(0, 256, (2, 4, 4, 3), dtype=np.uint8)]


def _per_frame_run(op, arg, values, device="cpu"):
    pipe = Pipeline(batch_size=2, num_threads=2, device_id=0 if device == "gpu" else None, exec_async=False)
    with pipe:
        seqs = fn.external_source(source=lambda: SEQS, layout="FHWC", cycle=True)
        per = fn.external_source(source=lambda: [np.asarray(v, np.float32) for v in values], cycle=True)
        pipe.set_outputs(getattr(fn, op)(seqs, device=device, **{arg: per}))
    out = pipe.run()[0]
    pipe.close()
    return out.as_cpu()


@pytest.mark.parametrize("op,arg,values", [("brightness", "brightness", [[0.5, 1.0, 1.5], [2.0]]),
                                           ("hue", "hue", [[0.0, 90.0, -90.0], [45.0, 10.0]])])
def test_per_frame_arguments_on_sequences(op, arg, values):
    """DALI's per-frame arguments: a sequence (FHWC) given one value per frame is processed frame by frame."""
    out = _per_frame_run(op, arg, values)
    for seq, vals, y in zip(SEQS, values, out):
        assert y.shape == seq.shape
        for f in range(seq.shape[0]):
            v = vals[f] if len(vals) > 1 else vals[0]
            want = run_op(op, [seq[f]], layout="HWC", **{arg: v})[0]
            assert (y[f].int() - want.int()).abs().max() <= 1


def test_per_frame_count_must_match_frames():
    with pytest.raises(Exception, match="one per frame"):
        _per_frame_run("brightness", "brightness", [[0.5, 1.0], [1.0]])


@pytest.mark.cuda
def test_per_frame_arguments_gpu_equal_cpu():
    values = [[0.5, 1.0, 1.5], [2.0, 0.7]]
    for c, g in zip(_per_frame_run("brightness", "brightness", values),
                    _per_frame_run("brightness", "brightness", values, "gpu")):
        assert (c.int() - g.int()).abs().max() <= 1

"""Every image operator on frame sequences (FHWC, FCHW), as DALI runs them: the operator applied to a batch of two
clips equals the operator applied frame by frame (reference: the same operator on HWC frames, frame j of every
clip in one batch, so that random operators draw with the same per-sample generators), with per-sample arguments
shared by the frames of their sample and scalar arguments given one value per frame applied per frame."""

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.pipeline.pipeline import Pipeline

F = 3
SIZES = [(12, 16), (10, 14)]  # two clips of different frame sizes: a ragged batch
MEAN, STD = [100.0, 110.0, 120.0], [50.0, 60.0, 70.0]


def _clips(channels=3, frames=F):
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (frames, h, w, channels), dtype=np.uint8) for h, w in SIZES]


# operator -> (constant arguments, per-sample arguments (one value per clip))
CASES = {
    "resize": ({"size": (8, 10)}, {}),
    "crop": ({"crop": (6, 8)}, {"crop_pos_x": [0.2, 0.8]}),
    "crop_mirror_normalize": ({"crop": (6, 8), "mean": MEAN, "std": STD, "dtype": types.FLOAT},
                              {"mirror": [1, 0]}),
    "flip": ({"vertical": 1}, {"horizontal": [1, 0]}),
    "rotate": ({"fill_value": 0.0}, {"angle": [30.0, -45.0]}),
    "warp_affine": ({"matrix": [1.0, 0.2, 0.0, 0.1, 1.0, -1.0], "fill_value": 0.0}, {}),
    "brightness_contrast": ({"contrast": 1.1}, {"brightness": [1.2, 0.8]}),
    "brightness": ({}, {"brightness": [1.3, 0.7]}),
    "contrast": ({"contrast": 0.6}, {}),
    "hsv": ({"hue": 30.0, "saturation": 1.2}, {}),
    "hue": ({}, {"hue": [20.0, -40.0]}),
    "saturation": ({"saturation": 0.5}, {}),
    "color_twist": ({"hue": 10.0, "brightness": 1.1, "contrast": 0.9}, {}),
    "color_space_conversion": ({"image_type": types.RGB, "output_type": types.YCbCr}, {}),
    "gaussian_blur": ({"sigma": 1.0}, {}),
    "paste": ({"ratio": 1.5, "fill_value": [10, 20, 30]}, {"paste_x": [0.0, 1.0]}),
    "erase": ({"anchor": [2, 3], "shape": [3, 4], "fill_value": [0]}, {}),
    "jitter": ({"nDegree": 3}, {}),
    "random_resized_crop": ({"size": (8, 8)}, {}),
}


def _run(op, batch, layout, const, per_sample, device="cpu", seed=42):
    """``fn.<op>`` once on ``batch`` (a list of samples), per-sample arguments fed as inputs."""
    pipe = Pipeline(batch_size=len(batch), num_threads=2, device_id=0 if device == "gpu" else None, seed=seed,
                    exec_async=False)
    with pipe:
        x = fn.external_source(source=lambda: batch, layout=layout, cycle=True)
        if device == "gpu":
            x = x.gpu()
        nodes = {k: fn.external_source(source=lambda v=v: [np.asarray(e, dtype=np.float32 if isinstance(
            e if np.ndim(e) == 0 else e[0], float) else np.int32) for e in v], cycle=True)
            for k, v in per_sample.items()}
        out = getattr(fn, op)(x, **const, **nodes, device=device)
    pipe.set_outputs(out)
    (res,) = pipe.run()
    pipe.close()
    return res


def _frame_by_frame(op, clips, layout, const, per_sample, device="cpu", frame_values=None):
    """Frame j of every clip in one batch of images, for each j."""
    frames = []
    for j in range(F):
        args = dict(per_sample)
        for k, v in (frame_values or {}).items():
            args[k] = [clip_values[j] for clip_values in v]
        out = _run(op, [c[j] for c in clips], layout[1:], const, args, device)
        frames.append([out[i].cpu() for i in range(len(clips))])
    return [torch.stack([frames[j][i] for j in range(F)]) for i in range(len(clips))]


def _same(got, ref, dtype):
    if dtype.is_floating_point:
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    else:
        assert torch.equal(got, ref)


@pytest.mark.parametrize("op", sorted(CASES))
def test_sequence_equals_frame_by_frame(op, device="cpu"):
    const, per_sample = CASES[op]
    clips = _clips()
    out = _run(op, clips, "FHWC", const, per_sample, device)
    assert out.layout().startswith("F"), out.layout()
    ref = _frame_by_frame(op, clips, "FHWC", const, per_sample, device)
    for i in range(len(clips)):
        got = out[i].cpu()
        assert got.shape == ref[i].shape, (op, i, tuple(got.shape), tuple(ref[i].shape))
        _same(got, ref[i], got.dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("op", sorted(CASES))
def test_sequence_equals_frame_by_frame_gpu(op):
    test_sequence_equals_frame_by_frame(op, "gpu")


def test_resize_keeps_frames_and_channels():
    """The issue's case: 16 frames of 224 x 224 resized to 160 stay 16 frames of 160 x 160 x 3."""
    clip = np.zeros((16, 224, 224, 3), np.uint8)
    out = _run("resize", [clip, clip], "FHWC", {"resize_x": 160, "resize_y": 160}, {})
    assert out.layout() == "FHWC" and [tuple(s.shape) for s in out] == [(16, 160, 160, 3)] * 2
    cmn = _run("crop_mirror_normalize", [clip], "FHWC", {"crop": (112, 112), "output_layout": "CHW"}, {})
    assert cmn.layout() == "FCHW" and tuple(cmn[0].shape) == (16, 3, 112, 112)


def test_random_operators_draw_once_per_clip():
    """The frames of a clip get their sample's draw: a clip of identical frames stays identical frame to frame."""
    frame = _clips(frames=1)[0][0]
    clip = np.stack([frame] * 4)
    for op, const in (("random_resized_crop", {"size": (8, 8)}), ("jitter", {"nDegree": 3})):
        out = _run(op, [clip, clip], "FHWC", const, {})
        for s in out:
            assert all(torch.equal(s[0], s[j]) for j in range(1, 4)), op
        assert not torch.equal(out[0], out[1]), op  # but each clip its own draw


@pytest.mark.parametrize("op,arg,values", [
    ("rotate", "angle", [[0.0, 90.0, 180.0], [-90.0, 45.0, 10.0]]),
    ("flip", "horizontal", [[0, 1, 0], [1, 1, 0]]),
    ("crop", "crop_pos_y", [[0.0, 0.5, 1.0], [1.0, 0.0, 0.3]]),
    ("brightness", "brightness", [[0.5, 1.0, 1.5], [2.0, 0.1, 1.0]]),
])
def test_per_frame_arguments(op, arg, values):
    """A scalar argument with one value per frame applies frame by frame (DALI's per-frame arguments)."""
    const = {"rotate": {"fill_value": 0.0, "keep_size": True}, "crop": {"crop": (5, 6)}}.get(op, {})
    clips = _clips()
    out = _run(op, clips, "FHWC", const, {arg: values})
    ref = _frame_by_frame(op, clips, "FHWC", const, {}, frame_values={arg: values})
    for i in range(len(clips)):
        _same(out[i], ref[i], out[i].dtype)


def test_fchw_sequences():
    clips = [np.ascontiguousarray(c.transpose(0, 3, 1, 2)) for c in _clips()]
    for op in ("resize", "crop", "flip", "crop_mirror_normalize", "rotate", "warp_affine", "paste"):
        const, per_sample = CASES[op]
        const = dict(const, fill_value=[10.0]) if op == "paste" else const
        out = _run(op, clips, "FCHW", const, per_sample)
        ref = _frame_by_frame(op, clips, "FCHW", const, per_sample)
        for i in range(len(clips)):
            _same(out[i], ref[i], out[i].dtype)


def test_channel_first_sequences_refused_by_colour_operators():
    clips = [np.ascontiguousarray(c.transpose(0, 3, 1, 2)) for c in _clips()]
    with pytest.raises(Exception, match="hsv.*FCHW|FCHW.*channels must be the last"):
        _run("hsv", clips, "FCHW", {"hue": 10.0}, {})


def test_per_frame_count_must_match():
    with pytest.raises(Exception, match=r"'angle' has 2 values for sample 0.*3 frames"):
        _run("rotate", _clips(), "FHWC", {}, {"angle": [[1.0, 2.0], [3.0]]})


def test_frames_that_disagree_in_shape_are_an_error():
    """rotate's bounding box depends on the angle: per-frame angles giving frames of different sizes fail."""
    with pytest.raises(Exception, match="frames of sample 0 came out in different shapes"):
        _run("rotate", _clips(), "FHWC", {}, {"angle": [[0.0, 30.0, 0.0], [0.0, 0.0, 0.0]]})


def _fused_node():
    from sluice.kernels import fusion
    from sluice.pipeline.executor import topological_order

    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=1, exec_async=False)
    with pipe:
        x = fn.external_source(source=_clips, layout="FHWC").gpu()
        r = fn.resize(x, resize_shorter=9, device="gpu")
        o = fn.crop_mirror_normalize(r, crop=(8, 8), mirror=fn.random.coin_flip(), mean=MEAN, std=STD,
                                     dtype=types.FLOAT, device="gpu")
    return next(n for n in fusion.fuse(topological_order([o]), [o]) if n.schema.name.startswith("_fused"))


def test_fused_resize_crop_mirror_normalize_takes_clips():
    """The fused GPU node (its kernel runs on CPU tensors too): a batch of clips is the batch of their frames."""
    from sluice.kernels import fusion
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext, OpSpec

    node = _fused_node()
    clips = [torch.from_numpy(c) for c in _clips()]
    spec = OpSpec(node.schema, "gpu", node.const_args, "fused", 2, 1, None, 0)
    op = node.schema.kernel_for("gpu")(spec)
    ctx = BatchContext(node.schema.name, 2, ["", ""], ["FHWC"], torch.device("cpu"), None)
    out = op.run(ctx, Batch(clips, "FHWC"), args=BatchArgs(node.const_args, {"c.mirror": [1, 0]}, 2))
    assert out.layout() == "FCHW" and [tuple(s.shape) for s in out] == [(F, 3, 8, 8)] * 2
    frames = Batch([f for c in clips for f in c.unbind(0)], "HWC")
    ctx = BatchContext(node.schema.name, 2 * F, [""] * 2 * F, ["HWC"], torch.device("cpu"), None)
    ref = fusion._fused_gpu(ctx, frames, args=BatchArgs(node.const_args, {"c.mirror": [1] * F + [0] * F}, 2 * F))
    torch.testing.assert_close(out.as_tensor().reshape(2 * F, 3, 8, 8), ref.as_tensor(), rtol=0, atol=0)


@pytest.mark.cuda
def test_fused_gpu_clips_equal_cpu_frames():
    """On the GPU the fused chain over clips equals the CPU operators over clips (test_fusion.py's tolerance: two
    grey levels on single pixels, as the CPU resize of uint8 rounds its passes; the CPU side is checked against the
    frames above)."""
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0, seed=1, exec_async=False)
    with pipe:
        x = fn.external_source(source=_clips, layout="FHWC", cycle=True)
        outs = []
        for dev in ("gpu", "cpu"):
            y = x.gpu() if dev == "gpu" else x
            r = fn.resize(y, resize_shorter=9, device=dev)
            outs.append(fn.crop_mirror_normalize(r, crop=(8, 8), mean=MEAN, std=STD, mirror=1, dtype=types.FLOAT,
                                                 device=dev))
    pipe.set_outputs(*outs)
    gpu, cpu = pipe.run()
    assert gpu.layout() == cpu.layout() == "FCHW"
    std = torch.tensor(STD).reshape(1, 3, 1, 1)
    for i in range(2):
        levels = (gpu[i].cpu() - cpu[i]).abs() * std  # the difference in grey levels before normalising
        assert float(levels.max()) <= 2.0 + 1e-3 and float(levels.mean()) <= 0.3


def _gpu_kernel(op, samples, layout, const, per_sample):
    """The operator's GPU kernel class, run on CPU tensors (its torch code is device-agnostic; Triton only runs on
    CUDA): the sequence handling of the GPU operators checked without a GPU."""
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext, OpSpec, _finish_outputs, get_schema

    schema = get_schema(op)
    args, _ = schema.validate({**const, **{k: v[0] for k, v in per_sample.items()}}, lambda v: False)
    if schema.random:
        args["seed"] = 5
    for name in per_sample:
        args.pop(name, None)
    n = len(samples)
    spec = OpSpec(schema, "gpu", args, op, n, 1, None, 5)
    ctx = BatchContext(op, n, [""] * n, [layout], torch.device("cpu"), None, seed=5)
    batch = Batch([torch.from_numpy(s) for s in samples], layout)
    out = schema.kernel_for("gpu")(spec).run(ctx, batch, args=BatchArgs(args, dict(per_sample), n))
    return _finish_outputs(schema, spec, out, [batch])[0]  # as the executor hands it on


@pytest.mark.parametrize("op", sorted(CASES))
def test_gpu_kernels_take_sequences(op):
    const, per_sample = CASES[op]
    clips = _clips()
    out = _gpu_kernel(op, clips, "FHWC", const, per_sample)
    assert out.layout().startswith("F"), out.layout()
    for j in range(F):
        ref = _gpu_kernel(op, [c[j] for c in clips], "HWC", const, per_sample)
        for i in range(len(clips)):
            _same(out[i][j], ref[i], ref[i].dtype)

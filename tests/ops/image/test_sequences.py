"""Every image operator on frame sequences (FHWC, FCHW), as DALI runs them: the operator applied to a batch of two
clips equals the operator applied frame by frame (reference: the same operator on HWC frames, frame j of every
clip in one batch, so that random operators draw with the same per-sample generators), with per-sample arguments
shared by the frames of their sample and scalar arguments given one value per frame applied per frame."""

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.ops.image import fused_crop_resize_normalize
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
    from sluice.pipeline.passes import fusion
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
    ref = fused_crop_resize_normalize.fused_gpu(ctx, frames,
                                                args=BatchArgs(node.const_args, {"c.mirror": [1] * F + [0] * F}, 2 * F))
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


# --- layouts of clips and volumes (DALI's lists: crop_mirror_normalize and resize take HWC, CHW, FHWC, FCHW, CFHW
# and the volumes DHWC, CDHW, FDHWC, FCDHW, CFDHW; operators without volumes must say so) ----------------
CMN_CLIP = {"crop": (6, 8), "mean": MEAN, "std": STD, "dtype": types.FLOAT}


def _frames_then(op, clips, const, per_sample, perm, device="cpu"):
    """Reference for a clip output: the operator frame by frame (FHWC clips), then transposed by ``perm``."""
    return [r.permute(*perm) for r in _frame_by_frame(op, clips, "FHWC", const, per_sample, device)]


@pytest.mark.parametrize("output_layout,perm", [("FCHW", (0, 1, 2, 3)), ("FHWC", (0, 1, 2, 3)),
                                                ("CFHW", (1, 0, 2, 3)), ("CHW", (0, 1, 2, 3))])
def test_cmn_clip_output_layouts(output_layout, perm, device="cpu"):
    """DALI's video classification form: FHWC clips in, FCHW (or FHWC, or CFHW) out; each frame as the image
    operator gives it, with the clip's mirror flag and crop window."""
    clips = _clips()
    const = dict(CMN_CLIP, output_layout=output_layout)
    per_sample = {"mirror": [1, 0], "crop_pos_x": [0.0, 1.0]}
    out = _run("crop_mirror_normalize", clips, "FHWC", const, per_sample, device)
    frame_layout = output_layout.replace("F", "")
    assert out.layout() == (output_layout if "F" in output_layout else "F" + output_layout)
    ref = _frames_then("crop_mirror_normalize", clips, dict(const, output_layout=frame_layout), per_sample, perm,
                       device)
    for i in range(len(clips)):
        assert tuple(out[i].shape) == tuple(ref[i].shape) and out[i].is_contiguous()
        _same(out[i].cpu(), ref[i], out[i].dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("output_layout,perm", [("FCHW", (0, 1, 2, 3)), ("CFHW", (1, 0, 2, 3))])
def test_cmn_clip_output_layouts_gpu(output_layout, perm):
    test_cmn_clip_output_layouts(output_layout, perm, "gpu")


@pytest.mark.parametrize("op", ["crop_mirror_normalize", "resize", "random_resized_crop", "rotate", "gaussian_blur"])
def test_channels_before_frames(op, device="cpu"):
    """CFHW clips (channels outermost) give what their FCHW transposes give, back in CFHW (crop_mirror_normalize:
    in the output_layout asked for)."""
    const, per_sample = CASES[op]
    clips = _clips()
    fchw = [np.ascontiguousarray(c.transpose(0, 3, 1, 2)) for c in clips]
    cfhw = [np.ascontiguousarray(c.transpose(3, 0, 1, 2)) for c in clips]
    if op == "crop_mirror_normalize":
        const = dict(const, output_layout="CFHW")
    out = _run(op, cfhw, "CFHW", const, per_sample, device)
    assert out.layout() == "CFHW"
    ref = _run(op, fchw, "FCHW", dict(const, output_layout="FCHW") if op == "crop_mirror_normalize" else const,
               per_sample, device)
    for i in range(len(clips)):
        _same(out[i].cpu(), ref[i].cpu().permute(1, 0, 2, 3), out[i].dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["crop_mirror_normalize", "resize", "random_resized_crop"])
def test_channels_before_frames_gpu(op):
    test_channels_before_frames(op, "gpu")


def test_cmn_frame_layout_for_an_image_raises():
    with pytest.raises(Exception, match=r"crop_mirror_normalize.*output_layout \('FCHW'\).*'HWC'"):
        _run("crop_mirror_normalize", [c[0] for c in _clips()], "HWC", {"output_layout": "FCHW"}, {})
    with pytest.raises(Exception, match=r"Invalid output_layout \('FCWH2'\)"):
        _run("crop_mirror_normalize", _clips(), "FHWC", {"output_layout": "FCWH2"}, {})


VOLUME_OPS = {"random_resized_crop": CASES["random_resized_crop"][0], "rotate": {"angle": 10.0},
              "warp_affine": CASES["warp_affine"][0]}


@pytest.mark.parametrize("op", sorted(VOLUME_OPS))
@pytest.mark.parametrize("layout", ["DHWC", "CDHW", "FDHWC", "CFDHW"])
def test_volumes_raise_naming_operator_and_layout(op, layout):
    """Volumetric random_resized_crop, rotate and warp are not implemented: an error that says so (not a 2-D
    result with the depth taken for rows). Volumetric crop, crop_mirror_normalize and resize: tests/ops/image/
    test_volumes_scipy_compat.py."""
    dims = {"F": 2, "D": 3, "H": 8, "W": 10, "C": 3}
    vol = np.zeros([dims[c] for c in layout], np.uint8)
    with pytest.raises(Exception, match=rf"fn\.{op}: volumetric input \(layout '\w*D\w*'\) is not implemented"):
        _run(op, [vol], layout, VOLUME_OPS[op], {})



def test_flip_depthwise_volumes(device="cpu"):
    """DALI's flip mirrors volumes along D with depthwise=1 (it was accepted and ignored)."""
    vols = [np.random.default_rng(3).integers(0, 256, (3, 4, 5, 2), dtype=np.uint8) for _ in range(2)]
    out = _run("flip", vols, "DHWC", {"horizontal": 0}, {"depthwise": [1, 0]}, device)
    np.testing.assert_array_equal(out[0].cpu().numpy(), vols[0][::-1])
    np.testing.assert_array_equal(out[1].cpu().numpy(), vols[1])
    clip = np.stack(vols)  # FDHWC: every frame flipped in depth
    out = _run("flip", [clip], "FDHWC", {"horizontal": 1, "depthwise": 1}, {}, device)
    np.testing.assert_array_equal(out[0].cpu().numpy(), clip[:, ::-1, :, ::-1])


@pytest.mark.cuda
def test_flip_depthwise_volumes_gpu():
    test_flip_depthwise_volumes("gpu")


def test_flip_gpu_kernel_depthwise_on_cpu_tensors():
    from sluice.ops.image.flip import flip_gpu
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext

    vols = torch.from_numpy(np.random.default_rng(4).integers(0, 256, (3, 3, 4, 5, 2), dtype=np.uint8))
    ctx = BatchContext("flip", 3, [""] * 3, ["DHWC"], torch.device("cpu"), None)
    args = BatchArgs({}, {"horizontal": [0, 1, 0], "vertical": [0, 0, 1], "depthwise": [1, 1, 0]}, 3)
    out = flip_gpu(ctx, Batch.from_dense(vols, "DHWC"), args=args)
    torch.testing.assert_close(out.dense, torch.stack([vols[0].flip(0), vols[1].flip([2, 0]), vols[2].flip(1)]))


def _resize_cmn(clips, output_layout, device_id=None, mirror=False):
    """A pipeline of GPU resize -> crop_mirror_normalize on FHWC clips (fused when it builds) and its output."""
    pipe = Pipeline(batch_size=len(clips), num_threads=1, device_id=device_id, seed=7, exec_async=False)
    with pipe:
        g = fn.external_source(source=lambda: clips, layout="FHWC", cycle=True).gpu()
        r = fn.resize(g, size=(8, 9), device="gpu")
        o = fn.crop_mirror_normalize(r, crop=(6, 6), mean=MEAN, std=STD, output_layout=output_layout, device="gpu",
                                     **({"mirror": fn.random.coin_flip()} if mirror else {}))
    pipe.set_outputs(o)
    return pipe, o


def test_fused_node_takes_clips_in_every_output_layout():
    """The fused GPU resize -> crop_mirror_normalize node (sequences='frames') on FHWC clips, run through its
    sequence wrapper on CPU tensors, equals the unfused CPU operators frame by frame (float resize vs Pillow:
    within two grey levels before normalising)."""
    from sluice.pipeline.passes import fusion
    from sluice.pipeline.batch import Batch
    from sluice.pipeline.executor import topological_order
    from sluice.schema import BatchArgs, BatchContext, OpSpec

    clips = [c[:, :, :12] for c in _clips()]  # ragged heights
    for output_layout, perm in (("FCHW", (0, 1, 2, 3)), ("CFHW", (1, 0, 2, 3)), ("FHWC", (0, 1, 2, 3))):
        _, o = _resize_cmn(clips, output_layout)
        node = next(n for n in fusion.fuse(topological_order([o]), [o]) if n.schema.name.startswith("_fused"))
        spec = OpSpec(node.schema, "gpu", node.const_args, "fused", 2, 1, None, 1)
        op = node.schema.kernel_for("gpu")(spec)
        ctx = BatchContext(node.schema.name, 2, [""] * 2, ["FHWC"], torch.device("cpu"), None)
        got = op.run(ctx, Batch([torch.from_numpy(c) for c in clips], "FHWC"), args=BatchArgs(node.const_args, {}, 2))
        assert got.layout() == output_layout
        x = [s.numpy() for s in _run("resize", clips, "FHWC", {"size": (8, 9)}, {}).samples]
        ref = _frames_then("crop_mirror_normalize", x, {"crop": (6, 6), "mean": MEAN, "std": STD,
                                                         "output_layout": output_layout.replace("F", "")}, {}, perm)
        for a, b in zip(got.samples, ref):
            assert a.shape == b.shape
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2.01 / min(STD))


@pytest.mark.cuda
@pytest.mark.parametrize("output_layout", ["FCHW", "CFHW"])
def test_gpu_pipeline_fused_clips_equal_unfused(output_layout, monkeypatch):
    outs = []
    for enabled in (True, False):
        monkeypatch.setattr("sluice.pipeline.passes.fusion.ENABLED", enabled)
        pipe, _ = _resize_cmn(_clips(), output_layout, device_id=0, mirror=True)
        outs.append(pipe.run()[0])
        pipe.close()
    fused, plain = outs
    assert fused.layout() == plain.layout() == output_layout
    for a, b in zip(fused.samples, plain.samples):
        assert a.shape == b.shape and (a.float() - b.float()).abs().max().item() < 1e-3

"""Volumetric fn.crop, fn.crop_mirror_normalize and fn.resize (layouts DHWC, CDHW, DHW) on ragged batches of
generated volumes: crops and normalisation against NumPy slicing with DALI's window arithmetic
(``anchor = round(pos * (in - crop))``); trilinear upscaling against ``scipy.ndimage.zoom(order=1,
grid_mode=True, mode="nearest")`` (half-pixel centres, as DALI) within 1e-4; nearest neighbour against
``torch.nn.functional.interpolate(mode="nearest-exact")`` exactly; antialiased downscaling against sluice's 2-D
resize (itself checked against Pillow) applied axis pair by axis pair, within 1 grey level."""

import numpy as np
import pytest
import torch
from scipy import ndimage

from sluice import types
from sluice.ops.image._geometry import round_half_away
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema
from sluice.testing import run_op

RNG = np.random.default_rng(5)
VOLS = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((6, 10, 12, 3), (9, 8, 14, 3), (7, 12, 9, 3))]


def _window(shape, crop, pos):
    return [round_half_away(p * (s - c)) for s, c, p in zip(shape, crop, pos)]


@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
def test_volumetric_crop_equals_numpy_slices(layout):
    vols = VOLS if layout == "DHWC" else [np.ascontiguousarray(v.transpose(3, 0, 1, 2)) for v in VOLS]
    pos_z = [0.0, 0.5, 1.0]
    from sluice import fn
    from sluice.testing import run_pipeline

    def build():
        x = fn.external_source(source=lambda: vols, layout=layout, cycle=True)
        z = fn.external_source(source=lambda: [np.float32(p) for p in pos_z], cycle=True)
        return fn.crop(x, crop=(4, 6, 8), crop_pos_z=z, crop_pos_x=0.25)

    (out,) = run_pipeline(build, batch_size=3)
    assert out.layout() == layout
    for v, p, got in zip(VOLS, pos_z, out):
        d0, h0, w0 = _window(v.shape[:3], (4, 6, 8), (p, 0.5, 0.25))
        ref = v[d0:d0 + 4, h0:h0 + 6, w0:w0 + 8]
        if layout == "CDHW":
            ref = ref.transpose(3, 0, 1, 2)
        np.testing.assert_array_equal(got.numpy(), ref)


def test_volumetric_crop_d_policies_and_dtype():
    v = VOLS[0]  # 6 x 10 x 12
    out = run_op("crop", [v], layout="DHWC", crop_d=8, crop_h=4, crop_w=4, crop_pos_z=0.0,
                 out_of_bounds_policy="pad", fill_values=[1, 2, 3])[0].numpy()
    assert out.shape == (8, 4, 4, 3)
    h0, w0 = _window((10, 12), (4, 4), (0.5, 0.5))
    np.testing.assert_array_equal(out[:6], v[:, h0:h0 + 4, w0:w0 + 4])
    assert (out[6:] == np.array([1, 2, 3], np.uint8)).all()
    trim = run_op("crop", [v], layout="DHWC", crop=(8, 4, 4), out_of_bounds_policy="trim_to_shape")[0]
    assert tuple(trim.shape) == (6, 4, 4, 3)
    with pytest.raises(Exception, match="out of bounds"):
        run_op("crop", [v], layout="DHWC", crop=(8, 4, 4))
    f = run_op("crop", [v], layout="DHWC", crop=(2, 2, 2), dtype=types.FLOAT)[0]
    assert f.dtype == torch.float32
    # two values: depth kept whole
    assert tuple(run_op("crop", [v], layout="DHWC", crop=(4, 4))[0].shape) == (6, 4, 4, 3)


def test_crop_mirror_normalize_volumes_channels_first():
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 8.0]
    out = run_op("crop_mirror_normalize", VOLS, layout="DHWC", crop=(4, 6, 8), mean=mean, std=std,
                 mirror=1, crop_pos_z=0.0)
    assert out.layout() == "CDHW"
    for v, got in zip(VOLS, out):
        h0, w0 = _window(v.shape[1:3], (6, 8), (0.5, 0.5))
        ref = v[0:4, h0:h0 + 6, w0:w0 + 8].astype(np.float32)[:, :, ::-1]
        ref = ((ref - np.array(mean, np.float32)) * (np.float32(1) / np.array(std, np.float32)))
        np.testing.assert_allclose(got.numpy(), ref.transpose(3, 0, 1, 2), rtol=1e-6, atol=1e-5)
    same = run_op("crop_mirror_normalize", VOLS, layout="DHWC", output_layout="DHWC", crop=(4, 6, 8),
                  dtype=types.FLOAT16, pad_output=True, fill_values=[7.0])
    assert same.layout() == "DHWC" and same[0].dtype == torch.float16 and same[0].shape[-1] == 4
    assert float(same[0][..., 3].float().min()) == 7.0
    with pytest.raises(Exception, match="output_layout"):
        run_op("crop_mirror_normalize", VOLS, layout="DHWC", output_layout="FCHW")


def test_crop_mirror_normalize_volume_padding_writes_fill_values():
    v = VOLS[1]
    out = run_op("crop_mirror_normalize", [v], layout="DHWC", crop=(12, 8, 14), crop_pos_z=0.0, mean=[100.0],
                 std=[2.0], out_of_bounds_policy="pad", fill_values=[-1.0, -2.0, -3.0], output_layout="DHWC")[0]
    np.testing.assert_allclose(out[:9].numpy(), (v.astype(np.float32) - 100) / 2, atol=1e-5)
    np.testing.assert_array_equal(out[9:].numpy(), np.broadcast_to(np.float32([-1, -2, -3]), (3, 8, 14, 3)))


def _float_vols():
    return [RNG.normal(size=s).astype(np.float32) for s in ((5, 6, 7, 2), (4, 8, 5, 2))]


def test_trilinear_upscale_equals_scipy_zoom():
    vols = _float_vols()
    out = run_op("resize", vols, layout="DHWC", size=(10, 12, 14), interp_type=types.INTERP_LINEAR)
    for v, got in zip(vols, out):
        assert tuple(got.shape) == (10, 12, 14, 2)
        zoom = (10 / v.shape[0], 12 / v.shape[1], 14 / v.shape[2], 1)
        ref = ndimage.zoom(v, zoom, order=1, grid_mode=True, mode="nearest")
        np.testing.assert_allclose(got.numpy(), ref, atol=1e-4)


def test_nearest_equals_torch_nearest_exact_on_cdhw():
    vols = [np.ascontiguousarray(v.transpose(3, 0, 1, 2)) for v in VOLS]
    out = run_op("resize", vols, layout="CDHW", resize_z=9, resize_y=5, resize_x=20, interp_type=types.INTERP_NN)
    for v, got in zip(vols, out):
        ref = torch.nn.functional.interpolate(torch.from_numpy(v)[None].float(), size=(9, 5, 20),
                                              mode="nearest-exact")[0]
        assert got.dtype == torch.uint8
        np.testing.assert_array_equal(got.numpy(), ref.to(torch.uint8).numpy())


def test_antialiased_downscale_equals_2d_resize_axis_pairs():
    """Separable filters: resizing H and W of every depth slice with the 2-D operator, then D (as the height of
    D x (H*W) images) gives the volumetric result."""
    vols = [RNG.integers(0, 256, (12, 16, 20, 1), dtype=np.uint8)]
    kw = dict(interp_type=types.INTERP_LINEAR, antialias=True, dtype=types.FLOAT)
    out = run_op("resize", vols, layout="DHWC", size=(5, 7, 9), **kw)[0].numpy()
    slices = run_op("resize", list(vols[0]), layout="HWC", size=(7, 9), **kw)
    hw = np.stack([s.numpy() for s in slices])  # (12, 7, 9, 1)
    dz = run_op("resize", [hw.reshape(12, 63, 1)], layout="HWC", size=(5, 63), **kw)[0].numpy()
    np.testing.assert_allclose(out, dz.reshape(5, 7, 9, 1), atol=1e-3)


def test_resize_z_keeps_the_aspect_ratio_and_saves_attrs():
    out, attrs = run_op("resize", VOLS[:2], layout="DHWC", resize_z=12, save_attrs=True)
    assert tuple(out[0].shape) == (12, 20, 24, 3) and tuple(out[1].shape) == (12, 11, 19, 3)
    assert attrs.as_tensor().tolist() == [[12, 20, 24], [12, 11, 19]]
    assert out.layout() == "DHWC"
    with pytest.raises(Exception, match="Exactly one method"):
        run_op("resize", VOLS[:1], layout="DHWC", resize_z=12, size=[4, 4, 4])


def test_volume_kernels_on_cpu_tensors_are_the_gpu_kernels():
    """The GPU kernels of the three operators are whole-batch torch code: run on CPU tensors they give the CPU
    operators' results."""
    batch = Batch([torch.from_numpy(v) for v in VOLS], "DHWC")
    for name, kw in (("crop", dict(crop=(4, 6, 8))), ("crop_mirror_normalize", dict(crop=(4, 6, 8), mirror=1)),
                     ("resize", dict(size=(5, 9, 4)))):
        schema = get_schema(name)
        args = BatchArgs(schema.validate(kw, lambda v: False)[0], {}, 3)
        ctx = BatchContext(name, 3, [""] * 3, ["DHWC"], torch.device("cpu"), None)
        got = schema.kernels["gpu"].kernel(ctx, batch, args=args)
        ref = run_op(name, VOLS, layout="DHWC", **kw)
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b)


def _per_sample_pipe(op, vols, per_sample, layout="CDHW", **kw):
    """``op`` on ``vols`` with per-sample argument values (``per_sample``: name -> one value a sample)."""
    from sluice import fn
    from sluice.testing import run_pipeline

    def build():
        x = fn.external_source(source=lambda: vols, layout=layout, cycle=True)
        args = {k: fn.external_source(source=lambda v=v: [np.float32(a) for a in v], cycle=True)
                for k, v in per_sample.items()}
        return getattr(fn, op)(x, **args, **kw)

    return run_pipeline(build, batch_size=len(vols))[0]


def test_whole_window_crop_is_the_input_and_mixed_windows_still_cut():
    """nnU-Net's zoom crops each volume to ``scale * patch`` with scale 1 in most samples: a batch whose windows
    are all whole comes back as it is; a batch where one is not is cut, the whole ones equal to their input."""
    vols = [RNG.normal(size=(1, 8, 10, 12)).astype(np.float32) for _ in range(3)]
    whole = _per_sample_pipe("crop", vols, {"crop_d": [8.0] * 3, "crop_h": [10.0] * 3, "crop_w": [12.0] * 3})
    for v, got in zip(vols, whole):
        np.testing.assert_array_equal(got.numpy(), v)
    assert whole.layout() == "CDHW"
    mixed = _per_sample_pipe("crop", vols, {"crop_d": [8.0, 6.0, 8.0], "crop_h": [10.0, 7.0, 10.0],
                                            "crop_w": [12.0, 9.0, 12.0]})
    assert [tuple(t.shape) for t in mixed] == [(1, 8, 10, 12), (1, 6, 7, 9), (1, 8, 10, 12)]
    d, h, w = _window((8, 10, 12), (6, 7, 9), (0.5, 0.5, 0.5))
    np.testing.assert_array_equal(mixed[1].numpy(), vols[1][:, d:d + 6, h:h + 7, w:w + 9])
    np.testing.assert_array_equal(mixed[0].numpy(), vols[0])


@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR, types.INTERP_CUBIC])
def test_resize_to_the_same_size_skips_exact_axes(interp, monkeypatch):
    """A resize to the input's own size with a filter exact at the pixels is the input (the axes are not
    filtered), equal to the filtered result; in a ragged batch only the axes every sample keeps are skipped."""
    from sluice.ops.image import _volume

    vols = [RNG.normal(size=(1, 6, 9, 7)).astype(np.float32), RNG.normal(size=(1, 6, 5, 7)).astype(np.float32)]
    lbls = [RNG.integers(0, 3, (1, 6, 9, 7), dtype=np.uint8) for _ in range(2)]
    kw = dict(interp_type=interp)
    same = _per_sample_pipe("resize", vols, {"resize_z": [6, 6], "resize_y": [9, 5], "resize_x": [7, 7]}, **kw)
    same_lbl = run_op("resize", lbls, layout="CDHW", size=(6, 9, 7), **kw)
    partly = _per_sample_pipe("resize", vols, {"resize_z": [6, 6], "resize_y": [4, 5], "resize_x": [7, 11]}, **kw)
    for v, got in zip(vols, same):
        np.testing.assert_array_equal(got.numpy(), v)
    for v, got in zip(lbls, same_lbl):
        assert got.dtype == torch.uint8
        np.testing.assert_array_equal(got.numpy(), v)
    monkeypatch.setattr(_volume, "_is_identity", lambda *a: False)  # the reference: every axis filtered
    ref = _per_sample_pipe("resize", vols, {"resize_z": [6, 6], "resize_y": [9, 5], "resize_x": [7, 7]}, **kw)
    ref_partly = _per_sample_pipe("resize", vols, {"resize_z": [6, 6], "resize_y": [4, 5], "resize_x": [7, 11]},
                                  **kw)
    for a, b in zip(same, ref):
        assert torch.equal(a, b)
    for a, b in zip(partly, ref_partly):
        assert a.shape == b.shape and torch.equal(a, b)


def test_gaussian_resize_to_the_same_size_still_filters():
    vols = [RNG.normal(size=(1, 6, 9, 7)).astype(np.float32)]
    out = run_op("resize", vols, layout="CDHW", size=(6, 9, 7), interp_type=types.INTERP_GAUSSIAN)
    assert not np.array_equal(out[0].numpy(), vols[0])


@pytest.mark.cuda
@pytest.mark.parametrize("name,kw", [("crop", dict(crop=(4, 6, 8), crop_pos_z=0.2)),
                                     ("crop_mirror_normalize", dict(crop=(4, 6, 8), mirror=1, mean=[5.0])),
                                     ("resize", dict(size=(5, 9, 4))),
                                     ("resize", dict(size=(11, 13, 17), interp_type=types.INTERP_CUBIC))])
def test_volumes_gpu_equal_cpu(name, kw):
    c = run_op(name, VOLS, layout="DHWC", **kw)
    g = run_op(name, VOLS, layout="DHWC", device="gpu", **kw).as_cpu()
    for a, b in zip(c, g):
        if a.dtype.is_floating_point:
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-4)
        else:
            assert (b.int() - a.int()).abs().max() <= 1


@pytest.mark.cuda
def test_fused_crop_resize_cmn_chain_takes_volumes_on_gpu():
    """The GPU fusion of crop -> resize -> crop_mirror_normalize hands volumes to the operators' own kernels."""
    from sluice import fn
    from sluice.testing import run_pipeline

    def build(device):
        def chain():
            x = fn.external_source(source=lambda: VOLS, layout="DHWC", cycle=True)
            x = x.gpu() if device == "gpu" else x
            x = fn.crop(x, crop=(4, 6, 8), device=device)
            x = fn.resize(x, size=(8, 8, 8), device=device)
            return fn.crop_mirror_normalize(x, mean=[3.0], std=[2.0], device=device)
        return chain

    (c,) = run_pipeline(build("cpu"), batch_size=3)
    (g,) = run_pipeline(build("gpu"), batch_size=3, device_id=0)
    assert g.layout() == c.layout() == "CDHW"
    for a, b in zip(c, g.as_cpu()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-3)

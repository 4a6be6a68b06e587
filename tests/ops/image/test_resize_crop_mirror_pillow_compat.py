"""resize_crop_mirror against Pillow (``Image.resize`` of the crop's source region with ``box=``, then
``ImageOps.mirror`` / ``flip``; within 1 grey level, as resize is) and against sluice's own resize -> crop -> flip
chain (the same filter: equal within 1); tensor_resize against Pillow (2-D, antialiased linear) and scikit-image's
``transform.resize`` (3-D upscaling, linear, edge mode); ``fn.experimental.resize`` is resize under DALI's name."""

import numpy as np
import pytest
from PIL import Image, ImageOps
from skimage.transform import resize as sk_resize

from _image_effects_data import noise_images, run_kernel, samples_of
from sluice import types
from sluice.ops.image.resize_crop_mirror import resize_crop_mirror
from sluice.ops.tensor.tensor_resize import tensor_resize
from sluice.testing import run_op

IMGS = [(40, 60), (35, 28), (50, 50)]


@pytest.mark.parametrize("mirror", [0, 1, 2, 3])
def test_equals_resize_crop_flip_chain_and_pillow(mirror):
    imgs = noise_images(IMGS)
    kw = dict(resize_shorter=30, crop=(20, 24), crop_pos_x=0.2, crop_pos_y=0.7)
    got = run_op("resize_crop_mirror", imgs, layout="HWC", mirror=mirror, **kw)
    resized = run_op("resize", imgs, layout="HWC", resize_shorter=30)
    cropped = run_op("crop", list(resized.samples), layout="HWC", crop=(20, 24), crop_pos_x=0.2, crop_pos_y=0.7)
    chain = run_op("flip", list(cropped.samples), layout="HWC", horizontal=mirror & 1, vertical=mirror >> 1)
    for img, g, c in zip(imgs, got, chain):
        assert g.shape == (20, 24, 3)
        assert np.abs(g.numpy().astype(int) - c.numpy().astype(int)).max() <= 1
        h, w = img.shape[:2]
        s = 30 / min(h, w)  # the exact scale: resize keeps it, its source region centred (subpixel_scale)
        oh, ow = int(np.floor(h * s + 0.5)), int(np.floor(w * s + 0.5))
        y0, x0 = int(np.floor(0.7 * (oh - 20) + 0.5)), int(np.floor(0.2 * (ow - 24) + 0.5))
        top, left = h / 2 - oh / s / 2, w / 2 - ow / s / 2
        box = (left + x0 / s, top + y0 / s, left + (x0 + 24) / s, top + (y0 + 20) / s)
        ref = Image.fromarray(img).resize((24, 20), Image.BILINEAR, box=box)
        ref = ImageOps.mirror(ref) if mirror & 1 else ref
        ref = ImageOps.flip(ref) if mirror & 2 else ref
        assert np.abs(g.numpy().astype(int) - np.asarray(ref).astype(int)).max() <= 1


def test_per_sample_mirror_ragged_outputs_and_chw():
    imgs = noise_images(IMGS)
    got = run_kernel("resize_crop_mirror", resize_crop_mirror, imgs, "HWC", per_sample={"mirror": [1, 0, 2],
                     "resize_x": [30.0, 20.0, 25.0]}, crop_h=10)
    plain = run_kernel("resize_crop_mirror", resize_crop_mirror, imgs, "HWC",
                       per_sample={"resize_x": [30.0, 20.0, 25.0]}, crop_h=10)
    outs, refs = samples_of(got), samples_of(plain)
    assert [o.shape[:2] for o in outs] == [(10, 30), (10, 20), (10, 25)]
    np.testing.assert_array_equal(outs[0], refs[0][:, ::-1])
    np.testing.assert_array_equal(outs[1], refs[1])
    np.testing.assert_array_equal(outs[2], refs[2][::-1])
    chw = run_op("resize_crop_mirror", [i.transpose(2, 0, 1).copy() for i in imgs], layout="CHW", size=(16, 16),
                 mirror=1)
    hwc = run_op("resize_crop_mirror", imgs, layout="HWC", size=(16, 16), mirror=1)
    for a, b in zip(chw, hwc):
        assert np.abs(a.numpy().transpose(1, 2, 0).astype(int) - b.numpy().astype(int)).max() <= 1


def test_tensor_resize_2d_matches_pillow():
    imgs = noise_images(IMGS, channels=None)
    got = run_kernel("tensor_resize", tensor_resize, imgs, "HW", sizes=[20, 25])
    for img, g in zip(imgs, samples_of(got)):
        ref = np.asarray(Image.fromarray(img).resize((25, 20), Image.BILINEAR))
        assert np.abs(g.astype(int) - ref.astype(int)).max() <= 1


def test_tensor_resize_3d_matches_skimage():
    vols = [np.random.default_rng(s).random(shape).astype(np.float32) for s, shape in ((1, (6, 7, 8)), (2, (5, 8, 4)))]
    got = run_op("tensor_resize", vols, scales=[2.0, 1.5, 2.5], subpixel_scale=False)
    for v, g in zip(vols, got):
        ref = sk_resize(v, g.shape, order=1, mode="edge", anti_aliasing=False)
        np.testing.assert_allclose(g.numpy(), ref, atol=1e-5)


def test_tensor_resize_axes_rounding_roi_and_errors():
    imgs = noise_images(IMGS, channels=None)
    got = run_op("tensor_resize", imgs, layout="HW", scales=[0.5], axes=[1], size_rounding="ceil")
    assert [tuple(g.shape) for g in got] == [(40, 30), (35, 14), (50, 25)]
    got = run_op("tensor_resize", imgs, layout="HW", sizes=[30], axis_names="H", interp_type=types.INTERP_NN)
    assert [tuple(g.shape) for g in got] == [(30, 60), (30, 28), (30, 50)]
    flipped = run_op("tensor_resize", imgs, layout="HW", scales=[1.0], axes=[0], roi_start=[1.0], roi_end=[0.0],
                     roi_relative=True, interp_type=types.INTERP_NN)
    for img, f in zip(imgs, flipped):
        np.testing.assert_array_equal(f.numpy(), img[::-1])
    with pytest.raises(Exception, match="exactly one of sizes and scales"):
        run_op("tensor_resize", imgs, layout="HW")


def test_experimental_resize_is_resize():
    import sluice.compat.dali.fn as dfn

    assert dfn.experimental.resize is not None
    from sluice.compat.dali import pipeline_def

    imgs = noise_images(IMGS)

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        x = dfn.external_source(source=lambda: imgs, layout="HWC")
        return dfn.experimental.resize(x, resize_x=20), dfn.resize(x, resize_x=20)

    p = pipe()
    p.build()
    a, b = p.run()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.cuda
def test_gpu_equals_cpu():
    imgs = noise_images(IMGS)
    for op, kw in (("resize_crop_mirror", dict(resize_shorter=30, crop=(20, 24), mirror=3)),
                   ("tensor_resize", dict(sizes=[20, 25], axes=[0, 1]))):
        cpu = run_op(op, imgs, layout="HWC", **kw)
        gpu = run_op(op, imgs, layout="HWC", device="gpu", **kw).as_cpu()
        for a, b in zip(cpu, gpu):
            assert np.abs(a.numpy().astype(int) - b.numpy().astype(int)).max() <= 1

"""sluice.native.resize: the compiled core and its NumPy twin give identical bytes; both agree with the torch float
path of sluice.kernels.resample.resample within 1 grey level, and with Pillow within the tolerances of
tests/ops/image/test_resize.py (linear <= 1; cubic / lanczos <= 4, > 1 on under 0.5 % of the pixels)."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
import torch
from PIL import Image

from sluice import native
from sluice.kernels.resample import FILTER_IDS, resample
from sluice.native import resize as nr

needs_core = pytest.mark.skipif(not native.available(), reason="core not built")


def _image(h: int, w: int, c: int, rng: np.random.Generator, smooth: bool = True) -> np.ndarray:
    """Smooth gradients with noise (``smooth``) or pure noise (the worst case for rounding differences)."""
    if not smooth:
        return rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, 128 + 100 * np.sin(xx / 5.0 + yy / 7.0), xx * 0 + 60], 2)[:, :, :c]
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def _run(images, rois, sizes, fmin, fmag, antialias, *, twin: bool, threads: int = 1) -> list[np.ndarray]:
    """Resize a batch into one buffer, as fn.resize does; ``threads`` calls share a counter."""
    chans = [im.shape[2] if im.ndim == 3 else 1 for im in images]
    nbytes = [int(s[0] * s[1] * c) for s, c in zip(sizes, chans)]
    offsets = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.int64)
    out = np.full(sum(nbytes), 3, np.uint8)
    counter = np.zeros(1, np.int64) if threads > 1 else None

    def call():
        nr.resize(images, np.asarray(rois, np.float64), np.asarray(sizes, np.int64), fmin, fmag, antialias, out,
                  offsets, counter)

    with native.fallback() if twin else contextlib.nullcontext():
        workers = [threading.Thread(target=call) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    return [out[o: o + b].reshape(int(s[0]), int(s[1]), c) for o, b, s, c in zip(offsets, nbytes, sizes, chans)]


def _random_case(rng: np.random.Generator, k: int):
    h, w, c = int(rng.integers(1, 70)), int(rng.integers(1, 70)), int(rng.choice([1, 3, 4]))
    oh, ow = int(rng.integers(1, 100)), int(rng.integers(1, 100))
    roi = [(0.0, 0.0, h, w),                                                         # whole image
           tuple(rng.uniform(0.3, 0.5, 2) * (h, w)) + tuple(rng.uniform(0.6, 1.0, 2) * (h, w)),  # fractional
           (float(h), float(w), 0.0, 0.0),                                           # flipped
           tuple(rng.uniform(-8, max(h, w) + 8, 4))][k % 4]                          # partly or wholly outside
    image = _image(h, w, c, rng, smooth=k % 3 != 0)
    return (image if c > 1 or k % 2 else image[:, :, 0]), roi, (oh, ow)


@needs_core
@pytest.mark.parametrize("fmin,fmag", [(f, f) for f in FILTER_IDS.values()] + [(5, 2), (0, 3)])
@pytest.mark.parametrize("antialias", [True, False])
def test_core_equals_twin_and_torch_within_one(fmin, fmag, antialias):
    rng = np.random.default_rng(fmin * 10 + fmag + antialias)
    cases = [_random_case(rng, k) for k in range(12)]
    images, rois, sizes = zip(*cases)
    core = _run(list(images), rois, sizes, fmin, fmag, antialias, twin=False)
    twin = _run(list(images), rois, sizes, fmin, fmag, antialias, twin=True)
    for k, (a, b) in enumerate(zip(core, twin)):
        np.testing.assert_array_equal(a, b, err_msg=f"case {k}: {images[k].shape} {rois[k]} -> {sizes[k]}")
        src = torch.from_numpy(images[k].astype(np.float32))  # float input: resample's float path, not Pillow's
        ref = resample(src if src.dim() == 3 else src[:, :, None], rois[k], sizes[k], fmin, fmag, antialias,
                       dtype=torch.uint8).numpy()
        assert np.abs(ref.astype(int) - a.astype(int)).max() <= 1, f"case {k}"


@pytest.mark.parametrize("twin", [True, pytest.param(False, marks=needs_core)])
@pytest.mark.parametrize("interp,pil,tol", [("linear", Image.BILINEAR, 1), ("cubic", Image.BICUBIC, 4),
                                            ("lanczos3", Image.LANCZOS, 4), ("triangular", Image.BILINEAR, 1)])
def test_pillow_tolerances(twin, interp, pil, tol):
    image = _image(45, 60, 3, np.random.default_rng(0))  # test_resize.py's image (its tolerances hold for it)
    sizes = [(20, 31), (90, 140), (13, 97)]
    fid = FILTER_IDS[interp]
    outs = _run([image] * 3, [(0.0, 0.0, 45.0, 60.0)] * 3, sizes, fid, fid, True, twin=twin)
    for (oh, ow), got in zip(sizes, outs):
        ref = np.asarray(Image.fromarray(image).resize((ow, oh), pil))
        diff = np.abs(got.astype(int) - ref.astype(int))
        assert diff.max() <= tol and (diff > 1).mean() < 0.005 and diff.mean() < 0.3, (interp, oh, ow)


@pytest.mark.parametrize("twin", [True, pytest.param(False, marks=needs_core)])
def test_threads_sharing_a_counter_give_the_same_bytes(twin):
    rng = np.random.default_rng(2)
    images = [_image(int(rng.integers(20, 80)), int(rng.integers(20, 80)), 3, rng) for _ in range(9)]
    rois = [(0.0, 0.0, *im.shape[:2]) for im in images]
    sizes = [(24, 24)] * 9
    alone = _run(images, rois, sizes, 5, 5, True, twin=twin)
    shared = _run(images, rois, sizes, 5, 5, True, twin=twin, threads=3)
    for a, b in zip(alone, shared):
        np.testing.assert_array_equal(a, b)


def test_axis_table_rows_sum_to_one_and_stay_inside():
    for fid in FILTER_IDS.values():
        for lo, hi, size, out in [(0, 40, 40, 13), (40, 0, 40, 70), (-5.5, 12.25, 10, 9), (50, 60, 10, 4)]:
            first, count, w = nr.axis_table(lo, hi, size, out, fid, True)
            assert (first >= 0).all() and (first + count <= size).all()
            np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-5)


@needs_core
def test_bad_arguments_are_value_errors():
    image = np.zeros((8, 8, 3), np.uint8)
    out = np.zeros(4 * 4 * 3, np.uint8)
    with pytest.raises(ValueError, match="C-contiguous"):
        nr.resize([image[:, ::2]], np.array([[0, 0, 8, 4]]), np.array([[4, 4]]), 1, 1, True, out, np.zeros(1))
    with pytest.raises(ValueError, match="outside"):
        nr.resize([image], np.array([[0, 0, 8, 8]]), np.array([[4, 4]]), 1, 1, True, out, np.array([1]))

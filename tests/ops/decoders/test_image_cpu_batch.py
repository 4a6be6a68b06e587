"""The batch CPU kernels of the image decoders (compiled core, one buffer, threads sharing the batch) against the
per-sample kernel they replace (sluice.ops.decoders.image._make_cpu_kernel): the same windows for the same seed
and the same pixels, for 1, 2 and 4 threads, with the core and with its pure-Python twin, for batches of separate
samples and for batches back to back in one buffer (readers.file's, planned from the core's header rows)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import simplejpeg
import torch

from image_fixtures import cmyk_jpeg, corrupt_jpeg, encode, pattern, run_decoder, with_orientation
from sluice import native, types
from sluice.errors import SampleError
from sluice.ops.decoders.image import _make_cpu_kernel
from sluice.schema import SampleContext, get_schema

IMPLS = ["twin", pytest.param("core", marks=pytest.mark.skipif(not native.available(), reason="core not built"))]


def _batch() -> list[bytes]:
    """JPEGs of several subsamplings and sizes, progressive, gray, rotated by EXIF, CMYK, and a PNG."""
    out = []
    for k, (h, w) in enumerate([(48, 64), (61, 47), (90, 120), (33, 95), (70, 70), (57, 83)]):
        img = pattern(h, w, seed=k)
        ss = ("444", "422", "420", "440", "411", "420")[k]
        out.append(simplejpeg.encode_jpeg(img, quality=88, colorsubsampling=ss))
    out.append(encode(pattern(50, 66, seed=7), "JPEG", quality=85, progressive=True))
    out.append(encode(pattern(45, 52, c=1, seed=8), "JPEG", quality=90))
    out.append(with_orientation(pattern(40, 56, seed=9), 6, quality=90))
    out.append(cmyk_jpeg(pattern(36, 44, seed=10)))
    out.append(encode(pattern(30, 40, seed=11), "PNG"))
    return out


def _old(name: str, samples: list[bytes], seed: int, extra=(), **kwargs) -> list[np.ndarray]:
    """The per-sample kernel the batch kernel replaced, run sample by sample."""
    const, _ = get_schema(name).validate(kwargs, lambda v: False)
    kernel = _make_cpu_kernel(name)
    out = []
    for i, s in enumerate(samples):
        ctx = SampleContext(name, i, "", "", seed, 0)
        more = tuple(torch.as_tensor(np.asarray(b[i], np.float32)) for b in extra)
        out.append(kernel(ctx, torch.frombuffer(bytearray(s), dtype=torch.uint8), *more, **const).numpy())
    return out


def _new(impl: str, name: str, samples, **kwargs):
    with native.fallback() if impl == "twin" else contextlib.nullcontext():
        return run_decoder(name, samples, **kwargs)


def _assert_same(batch, expected: list[np.ndarray]):
    assert batch.layout() == "HWC" and len(batch) == len(expected)
    for i, ref in enumerate(expected):
        got = batch.at(i)
        assert got.shape == ref.shape and got.dtype == ref.dtype, i
        np.testing.assert_array_equal(got, ref, err_msg=f"sample {i}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("threads,packed", [(1, False), (2, False), (4, False), (2, True), (4, True)])
def test_random_crop_same_windows_and_pixels_as_the_sample_kernel(impl, threads, packed):
    samples = _batch()
    args = dict(random_area=[0.1, 1.0], random_aspect_ratio=[0.8, 1.25], num_attempts=100)
    for seed in (3, 4):
        new = _new(impl, "decoders.image_random_crop", samples, seed=seed, threads=threads, packed=packed, **args)
        _assert_same(new, _old("decoders.image_random_crop", samples, seed, **args))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("kwargs", [
    dict(), dict(output_type=types.BGR), dict(output_type=types.GRAY), dict(output_type=types.YCbCr),
    dict(output_type=types.ANY_DATA), dict(dtype=types.FLOAT), dict(use_fast_idct=True),
    dict(adjust_orientation=False)])
def test_image_same_as_the_sample_kernel(impl, kwargs, packed):
    samples = _batch()
    _assert_same(_new(impl, "decoders.image", samples, threads=2, packed=packed, **kwargs),
                 _old("decoders.image", samples, 0, **kwargs))


@pytest.mark.parametrize("impl", IMPLS)
def test_crop_and_slice_same_as_the_sample_kernel(impl):
    samples = _batch()
    crop = dict(crop=(20, 25), crop_pos_x=0.8, crop_pos_y=0.3)
    _assert_same(_new(impl, "decoders.image_crop", samples, **crop), _old("decoders.image_crop", samples, 0, **crop))
    extra = ([[0.1, 0.2]] * len(samples), [[0.5, 0.7]] * len(samples))
    _assert_same(_new(impl, "decoders.image_slice", samples, extra=extra),
                 _old("decoders.image_slice", samples, 0, extra=extra))


@pytest.fixture
def per_sample_decodes(monkeypatch):
    """The samples the batch kernel decodes the per-sample way (the rest went to sluice.native.jpeg)."""
    import sluice.ops.decoders._image_cpu as kernel

    seen = []

    def spy(data, **kwargs):
        seen.append(kwargs["source"])
        return decode(data, **kwargs)

    decode = kernel.decode
    monkeypatch.setattr(kernel, "decode", spy)
    return seen


@pytest.mark.parametrize("impl", IMPLS)
def test_uniform_jpegs_come_back_as_one_dense_tensor(impl, per_sample_decodes):
    samples = [simplejpeg.encode_jpeg(pattern(32, 48, seed=k), quality=90) for k in range(3)]
    batch = _new(impl, "decoders.image_crop", samples, crop=(16, 24))
    assert batch.dense is not None and tuple(batch.dense.shape) == (3, 16, 24, 3)
    assert per_sample_decodes == []
    _assert_same(batch, _old("decoders.image_crop", samples, 0, crop=(16, 24)))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("packed", [False, True])
def test_only_what_the_core_does_not_take_decodes_per_sample(impl, per_sample_decodes, packed, monkeypatch):
    import sluice.backends.image.batch_plan as batch_plan

    probed = []
    probe = batch_plan.probe
    monkeypatch.setattr(batch_plan, "probe", lambda data, source: probed.append(source) or probe(data, source=source))
    samples = _batch()
    sources = [f"{i}.img" for i in range(len(samples))]
    _new(impl, "decoders.image_random_crop", samples, sources=sources, packed=packed)
    assert per_sample_decodes == sources[-3:]  # EXIF-rotated, CMYK, PNG
    # a batch in one buffer: only the EXIF-rotated JPEG and the PNG are probed in Python
    assert probed == ([sources[-3], sources[-1]] if packed else [])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", ["decoders.image", "decoders.image_random_crop"])
def test_bad_jpeg_names_the_sample_file_and_decoder(impl, op):
    good = simplejpeg.encode_jpeg(pattern(64, 64), quality=90)
    for bad, reason in ((corrupt_jpeg(good), "corrupt"), (good[: len(good) // 2], "truncated")):
        with pytest.raises(SampleError) as err:
            _new(impl, op, [good, good, bad, bad], sources=["a.jpg", "b.jpg", "bad.jpg", "worse.jpg"],
                 packed=reason == "truncated")
        assert err.value.index == 2 and err.value.source == "bad.jpg"
        message = str(err.value)
        assert "'bad.jpg'" in message and reason in message and "libjpeg-turbo" in message

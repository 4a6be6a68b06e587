"""fn.resize's batch CPU kernel (compiled core, threads sharing the batch, one output buffer) against the torch
float path of sluice.kernels.resample (within 1 grey level), core against its NumPy twin (identical), and the
train_cpu pipeline (readers.file -> image_random_crop -> resize) giving the same pixels for 1, 2 and 4 threads,
with the core and with the twin."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import simplejpeg
import torch

from sluice import fn, native, pipeline_def, types
from sluice.kernels.resample import resample
from sluice.ops.image._geometry import resize_params
from sluice.testing import run_op

IMPLS = ["twin", pytest.param("core", marks=pytest.mark.skipif(not native.available(), reason="core not built"))]


def _image(h: int, w: int, c: int | None, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, 128 + 100 * np.sin(xx / 5.0 + yy / 7.0), 0 * xx + 90], 2)
    img = np.clip(base[:, :, : c or 1] + rng.normal(0, 12, (h, w, c or 1)), 0, 255).astype(np.uint8)
    return img if c else img[:, :, 0]


def _run(impl: str, images, threads: int = 2, **kwargs):
    with native.fallback() if impl == "twin" else contextlib.nullcontext():
        return run_op("resize", images, layout="HWC" if images[0].ndim == 3 else "HW", num_threads=threads,
                      **kwargs)


def _torch_reference(image: np.ndarray, interp, **kwargs) -> np.ndarray:
    roi, out = resize_params(image.shape[0], image.shape[1], **kwargs)
    src = torch.from_numpy(image.astype(np.float32))
    src = src if src.dim() == 3 else src[:, :, None]
    ref = resample(src, roi, out, interp, interp, True, dtype=torch.uint8).numpy()
    return ref if image.ndim == 3 else ref[:, :, 0]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("channels", [None, 1, 3, 4])
@pytest.mark.parametrize("interp", [types.INTERP_LINEAR, types.INTERP_TRIANGULAR, types.INTERP_CUBIC])
def test_ragged_batch_within_one_of_the_torch_path(impl, channels, interp):
    images = [_image(45, 60, channels, 0), _image(31, 20, channels, 1), _image(70, 90, channels, 2)]
    out = _run(impl, images, resize_shorter=24, interp_type=interp)
    assert out.dense is None and out.layout() == ("HWC" if channels else "HW")
    for image, got in zip(images, out.samples):
        ref = _torch_reference(image, interp, resize_shorter=24)
        assert got.shape == ref.shape
        assert np.abs(got.numpy().astype(int) - ref.astype(int)).max() <= 1


@pytest.mark.skipif(not native.available(), reason="core not built")
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_core_equals_twin_dense_for_any_threads(threads):
    images = [_image(40 + 7 * k, 50 + 11 * k, 3, k) for k in range(6)]
    core = _run("core", images, threads=threads, size=[24, 32], interp_type=types.INTERP_TRIANGULAR, save_attrs=True)
    twin = _run("twin", images, threads=threads, size=[24, 32], interp_type=types.INTERP_TRIANGULAR, save_attrs=True)
    assert core[0].dense is not None and tuple(core[0].dense.shape) == (6, 24, 32, 3)
    np.testing.assert_array_equal(core[0].dense.numpy(), twin[0].dense.numpy())
    assert [tuple(a.tolist()) for a in core[1].samples] == [(24, 32)] * 6


def test_other_dtypes_and_layouts_take_the_torch_path():
    image = _image(45, 60, 3, 0)
    as_float = run_op("resize", [image.astype(np.float32)], layout="HWC", size=[20, 30])[0]
    assert as_float.dtype == torch.float32
    ref = resample(torch.from_numpy(image.astype(np.float32)), (0, 0, 45, 60), (20, 30), "linear", "linear")
    torch.testing.assert_close(as_float, ref)
    chw = run_op("resize", [np.ascontiguousarray(image.transpose(2, 0, 1))], layout="CHW", size=[20, 30])[0]
    hwc = run_op("resize", [image], layout="HWC", size=[20, 30])[0]
    assert np.abs(chw.permute(1, 2, 0).numpy().astype(int) - hwc.numpy().astype(int)).max() <= 1


def _train_cpu_pipeline(file_root: str, threads: int):
    @pipeline_def(batch_size=6, num_threads=threads, device_id=None, seed=11)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=file_root, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_aspect_ratio=[0.8, 1.25], random_area=[0.1, 1.0],
                                               num_attempts=100)
        images = fn.resize(images, device="cpu", resize_x=40, resize_y=40, interp_type=types.INTERP_TRIANGULAR)
        return images, labels

    p = pipe()
    p.build()
    return p


def test_train_cpu_pipeline_same_pixels_for_1_2_4_threads_core_and_twin(tmp_path):
    for c in range(2):
        (tmp_path / f"class{c}").mkdir()
        for k in range(5):
            img = _image(50 + 9 * k, 64 + 5 * c, 3, 10 * c + k)
            data = simplejpeg.encode_jpeg(img, quality=90, colorsubsampling=("420", "444")[k % 2])
            (tmp_path / f"class{c}" / f"{k}.jpg").write_bytes(data)
    runs = []
    for impl in ("twin", "core") if native.available() else ("twin",):
        with native.fallback() if impl == "twin" else contextlib.nullcontext():
            for threads in (1, 2, 4):
                p = _train_cpu_pipeline(str(tmp_path), threads)
                runs.append([p.run() for _ in range(2)])
                p.close()
    for other in runs[1:]:
        for (images, labels), (images0, labels0) in zip(other, runs[0]):
            assert images.dense is not None and tuple(images.dense.shape) == (6, 40, 40, 3)
            np.testing.assert_array_equal(images.dense.numpy(), images0.dense.numpy())
            assert [int(x) for x in labels.samples] == [int(x) for x in labels0.samples]


def test_samples_of_different_channel_counts():
    images = [_image(30, 40, 3, 0), _image(20, 24, 1, 1)]
    out = run_op("resize", images, layout="HWC", size=[10, 12])
    assert out.shape() == [(10, 12, 3), (10, 12, 1)]
    for image, got in zip(images, out.samples):
        ref = _torch_reference(image, types.INTERP_LINEAR, size=[10, 12])
        assert np.abs(got.numpy().astype(int) - ref.astype(int)).max() <= 1

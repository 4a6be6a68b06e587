"""The mixed image decoders' batch lane: a batch read back to back by readers.file has its GPU's JPEGs decoded in
one batched call, their windows cut out by one kernel, while the CPU decodes the rest (progressive, CMYK, PNG ...).
It must give what the general path gives (the same windows, the same pixels, the same decoder per kind of file),
and a bad file is still named. Run on a CUDA machine (tests/ops/decoders/test_image_mixed_batch.py runs the same
logic on the CPU)."""

from __future__ import annotations

import pytest
import torch

from image_fixtures import cmyk_jpeg, encode, pattern, with_orientation
from sluice import fn, pipeline_def, types
from sluice.backends.image.gpu import GpuImageDecoder

pytestmark = pytest.mark.cuda


def _folder(tmp_path, count=12, mixed=False):
    """JPEGs of the kinds the GPU takes; with ``mixed`` also progressive, CMYK, PNG and EXIF-rotated files."""
    for i in range(count):
        img = pattern(60 + 7 * i, 90 + 5 * (i % 4), seed=i)
        sub = tmp_path / f"c{i % 2}"
        sub.mkdir(exist_ok=True)
        kind = i % 4 if not mixed else i % 8
        data = (encode(img[:, :, :1], "JPEG", quality=90) if kind == 3 else
                encode(img, "JPEG", quality=90, subsampling=kind) if kind < 3 else
                encode(img, "JPEG", quality=85, progressive=True) if kind == 4 else
                cmyk_jpeg(img) if kind == 5 else
                encode(img, "PNG") if kind == 6 else with_orientation(img, 6, quality=90))
        (sub / f"{i:02d}.jpg").write_bytes(data)
    return tmp_path


def _run(root, op, gray=False, whole=True, monkeypatch=None, **kw):
    """Three batches of ``op``; with ``monkeypatch``, either the general path (``whole=False``) or the batch lane
    with every GPU JPEG on the GPU (no CPU share: exactly comparable to the general path)."""
    if monkeypatch is not None and not whole:
        monkeypatch.setattr(GpuImageDecoder, "takes_whole_jpeg_batches", property(lambda self: False))
    elif monkeypatch is not None:
        monkeypatch.setattr("sluice.backends.image.gpu.DEFAULT_CPU_LOAD", 0.0)

    @pipeline_def(batch_size=6, num_threads=3, device_id=0, seed=5)
    def pipe():
        files, labels = fn.readers.file(file_root=str(root), random_shuffle=True)
        dec = getattr(fn.decoders, op)
        return dec(files, device="mixed", output_type=types.GRAY if gray else types.RGB, **kw), labels

    p = pipe()
    p.build()
    outs = [p.run() for _ in range(3)]
    if monkeypatch is not None:
        monkeypatch.undo()
    return [[t.cpu() for t in images] for images, _ in outs], [lab.as_cpu().as_array().tolist() for _, lab in outs]


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("op,kw", [("image", {}), ("image_random_crop", {"random_area": [0.2, 1.0]})])
@pytest.mark.parametrize("gray", [False, True])
def test_whole_batches_equal_the_general_path(tmp_path, monkeypatch, op, kw, gray, mixed):
    root = _folder(tmp_path, 24 if mixed else 12, mixed=mixed)
    started = []
    start = GpuImageDecoder.start_batch

    def spy(self, *a, **k):
        out = start(self, *a, **k)
        started.append(dict(self.last_split))
        return out
    monkeypatch.setattr(GpuImageDecoder, "start_batch", spy)
    fast, labels_fast = _run(root, op, gray, monkeypatch=monkeypatch, **kw)
    assert len(started) >= 3, "the batch lane was not taken"   # the pipeline may decode a batch ahead
    assert all(sum(s.values()) == 6 for s in started)
    cpu = sum(s["cpu_core"] + s["cpu_codec"] for s in started)
    assert (cpu > 0) == mixed  # a quarter of the mixed files are no GPU work, yet no batch drops off the lane
    slow, labels_slow = _run(root, op, gray, whole=False, monkeypatch=monkeypatch, **kw)
    assert labels_fast == labels_slow
    for a, b in zip(fast, slow):
        for x, y in zip(a, b):
            assert x.shape == y.shape and x.dtype == y.dtype == torch.uint8
            assert torch.equal(x, y)


def test_an_exif_orientation_takes_the_general_path(tmp_path):
    img = pattern(40, 64)
    (tmp_path / "a.jpg").write_bytes(with_orientation(img, 6, quality=95))
    (tmp_path / "b.jpg").write_bytes(encode(img, "JPEG", quality=95))

    @pipeline_def(batch_size=2, num_threads=2, device_id=0, seed=1)
    def pipe():
        files, _ = fn.readers.file(file_root=str(tmp_path))
        return fn.decoders.image(files, device="mixed")

    p = pipe()
    p.build()
    (images,) = p.run()
    assert tuple(images[0].shape) == (64, 40, 3) and tuple(images[1].shape) == (40, 64, 3)


@pytest.mark.parametrize("share", [0.5, None])
def test_the_cpu_share_decodes_the_same_windows(tmp_path, monkeypatch, share):
    """With part of each batch decoded by libjpeg-turbo in the compiled core, the crops are the same windows and
    the pixels within the nvJPEG / libjpeg-turbo tolerance of the module test_image_gpu.py."""
    root = _folder(tmp_path)
    if share is not None:
        monkeypatch.setattr("sluice.backends.image.gpu.DEFAULT_CPU_LOAD", share)
    mixed, labels = _run(root, "image_random_crop", random_area=[0.2, 1.0])
    monkeypatch.undo()

    @pipeline_def(batch_size=6, num_threads=3, device_id=None, seed=5)
    def cpu_pipe():
        files, lab = fn.readers.file(file_root=str(root), random_shuffle=True)
        return fn.decoders.image_random_crop(files, random_area=[0.2, 1.0]), lab

    p = cpu_pipe()
    p.build()
    for got, want_labels in zip(mixed, labels):
        images, lab = p.run()
        assert lab.as_array().tolist() == want_labels
        for x, y in zip(got, images):
            assert x.shape == y.shape
            d = (x.int() - y.int()).abs()
            assert d.float().mean() <= 2.0 and d.max() <= 40

"""The mixed image decoders' fast lane: a batch of plain JPEGs read back to back by readers.file goes to the GPU's
batched decoder in one call, its windows cut out by one kernel. It must give what the general path gives (the same
windows, the same pixels), and leave to the general path every batch it does not fully qualify for, so that a
bad file is still named. Run on a CUDA machine."""

from __future__ import annotations

import pytest
import torch

from image_fixtures import encode, pattern, with_orientation
from sluice import fn, pipeline_def, types
from sluice.backends.image.gpu import GpuImageDecoder

pytestmark = pytest.mark.cuda


def _folder(tmp_path, count=12):
    for i in range(count):
        img = pattern(60 + 7 * i, 90 + 5 * (i % 4), seed=i)
        sub = tmp_path / f"c{i % 2}"
        sub.mkdir(exist_ok=True)
        kind = i % 4
        data = encode(img[:, :, :1], "JPEG", quality=90) if kind == 3 else \
            encode(img, "JPEG", quality=90, subsampling=kind)
        (sub / f"{i:02d}.jpg").write_bytes(data)
    return tmp_path


def _run(root, op, gray=False, whole=True, monkeypatch=None, **kw):
    """Three batches of ``op``; with ``monkeypatch``, either the general path (``whole=False``) or the fast lane
    with every image on the GPU (exactly comparable to the general path)."""
    if monkeypatch is not None and not whole:
        monkeypatch.setattr(GpuImageDecoder, "takes_whole_jpeg_batches", property(lambda self: False))
    elif monkeypatch is not None:
        monkeypatch.setenv("SLUICE_IMAGE_CPU_LOAD", "0")

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


@pytest.mark.parametrize("op,kw", [("image", {}), ("image_random_crop", {"random_area": [0.2, 1.0]})])
@pytest.mark.parametrize("gray", [False, True])
def test_whole_batches_equal_the_general_path(tmp_path, monkeypatch, op, kw, gray):
    root = _folder(tmp_path)
    started = []
    start = GpuImageDecoder.start_jpegs

    def spy(self, *a, **k):
        started.append(1)
        return start(self, *a, **k)
    monkeypatch.setattr(GpuImageDecoder, "start_jpegs", spy)
    fast, labels_fast = _run(root, op, gray, monkeypatch=monkeypatch, **kw)
    assert started, "the fast lane was not taken"
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


@pytest.mark.parametrize("share", ["0.5", None])
def test_the_cpu_share_decodes_the_same_windows(tmp_path, monkeypatch, share):
    """With part of each batch decoded by libjpeg-turbo in the compiled core, the crops are the same windows and
    the pixels within the nvJPEG / libjpeg-turbo tolerance of the module test_image_gpu.py."""
    root = _folder(tmp_path)
    if share is not None:
        monkeypatch.setenv("SLUICE_IMAGE_CPU_LOAD", share)
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

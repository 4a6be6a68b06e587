"""Small generated images for the decoder tests: smooth NumPy patterns encoded with Pillow (the reference).

Example::

    data = encode(pattern(24, 32), "PNG")
"""

from __future__ import annotations

import contextlib
import io
import types as pytypes

import numpy as np
from PIL import Image

__all__ = ["pattern", "encode", "with_orientation", "FORMATS_LOSSLESS", "cmyk_jpeg", "reference_rgb",
           "corrupt_jpeg", "bad_inputs", "run_decoder", "FakeCuda"]

#: (Pillow format name, save options) of the lossless formats, each with the reader sluice must match exactly.
FORMATS_LOSSLESS = {
    "png": ("PNG", {}),
    "bmp": ("BMP", {}),
    "tiff": ("TIFF", {}),
    "ppm": ("PPM", {}),
    "webp": ("WEBP", {"lossless": True}),
    "jpeg2000": ("JPEG2000", {"irreversible": False}),
}


def pattern(h: int, w: int, c: int = 3, seed: int = 0, dtype=np.uint8) -> np.ndarray:
    """A smooth gradient plus a little noise: JPEG-friendly, yet every pixel differs from its neighbours.
    The top-left quarter is brighter, so flips and rotations are visible."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    top = 255.0 if dtype == np.uint8 else 65535.0
    chans = [(xx / max(w - 1, 1)), (yy / max(h - 1, 1)), ((xx + yy) / max(h + w - 2, 1))][:c]
    while len(chans) < c:
        chans.append(np.full_like(xx, 0.5))
    img = np.stack(chans, axis=2) * 0.7
    img[: h // 2, : w // 2] += 0.25
    noise = np.random.default_rng(seed).normal(0, 0.01, img.shape)
    return (np.clip(img + noise, 0, 1) * top).round().astype(dtype)


def encode(image: np.ndarray | Image.Image, fmt: str, **options) -> bytes:
    """Encode with Pillow."""
    img = image if isinstance(image, Image.Image) else Image.fromarray(image.squeeze(-1) if image.ndim == 3 and
                                                                       image.shape[2] == 1 else image)
    buf = io.BytesIO()
    img.save(buf, fmt, **options)
    return buf.getvalue()


def with_orientation(image: np.ndarray, orientation: int, fmt: str = "JPEG", **options) -> bytes:
    """Encode with an EXIF orientation tag (the pixels are stored as given)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(Image.fromarray(image), fmt, exif=exif, **options)


def cmyk_jpeg(image: np.ndarray, quality: int = 95) -> bytes:
    """A CMYK JPEG (4 components, Adobe marker) made by Pillow from an RGB image."""
    return encode(Image.fromarray(image).convert("CMYK"), "JPEG", quality=quality)


def corrupt_jpeg(data: bytes) -> bytes:
    """The JPEG with restart markers written over the start of its entropy-coded data (header and EOI intact)."""
    bad = bytearray(data)
    sos = bad.find(b"\xff\xda")
    bad[sos + 20: sos + 60] = b"\xff\xd0" * 20
    return bytes(bad)


def bad_inputs(good_jpeg: bytes) -> dict[str, bytes]:
    """Broken samples keyed by a word the error message must contain."""
    return {"empty": b"", "truncated": good_jpeg[: len(good_jpeg) // 2], "unknown image format": b"\x01" * 100,
            "corrupt": corrupt_jpeg(good_jpeg)}


def reference_rgb(data: bytes, mode: str = "RGB") -> np.ndarray:
    """Pillow's decoding (EXIF orientation applied), as HWC."""
    from PIL import ImageOps

    img = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    arr = np.asarray(img.convert(mode))
    return arr[:, :, None] if arr.ndim == 2 else arr


def run_decoder(name: str, samples, *, device: str = "cpu", sources=None, extra=(), seed: int = 1234,
                ctx_device=None, threads: int = 2, packed: bool = False, iteration: int = 0, **kwargs):
    """Run one decoder operator's kernel on one batch, the way the executor does (validated arguments, a
    thread pool of ``threads`` (none for 1), per-sample seeded generators), without building a pipeline.
    ``ctx_device`` overrides the context's device (cuda:0 for mixed) for tests that stand in for the GPU.
    ``extra`` are the further input batches (image_slice's anchor and shape) as lists of arrays. ``packed``: the
    samples back to back in one buffer, as readers.file reads them. Returns the output Batch."""
    from sluice.pipeline.pool import ThreadPool

    import torch

    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext, OpSpec, _finish_outputs, get_schema

    schema = get_schema(name)
    const, _ = schema.validate(kwargs, lambda v: False)
    n = len(samples)
    spec = OpSpec(schema, device, const, name, n, threads, 0 if device == "mixed" else None, seed)
    op = schema.kernel_for(device)(spec)
    if packed:
        sizes = np.array([len(s) for s in samples], np.int64)
        flat = torch.frombuffer(bytearray(b"".join(samples)), dtype=torch.uint8)
        data = Batch.from_packed(flat, sizes[:, None], "", sources)
    else:
        data = Batch([torch.frombuffer(bytearray(s), dtype=torch.uint8) if len(s) else
                      torch.empty(0, dtype=torch.uint8) for s in samples], source_info=sources)
    more = [Batch([torch.as_tensor(np.asarray(v, np.float32)) for v in b]) for b in extra]
    dev = ctx_device or (torch.device("cuda", 0) if device == "mixed" else torch.device("cpu"))
    with ThreadPool(threads) as pool:
        ctx = BatchContext(name, n, list(sources or [""] * n), [""] * (1 + len(more)), dev,
                           pool if threads > 1 else None, seed=seed, iteration=iteration)
        out = op.run(ctx, data, *more, args=BatchArgs(const, {}, n))
    op.close()
    return _finish_outputs(schema, spec, out, [data, *more])[0]


class FakeCuda:
    """The parts of ``torch.cuda`` the GPU image decoder uses, as no-ops, so that its batch logic runs on the CPU
    (set as ``sluice.backends.image.gpu._cuda``)."""

    class Event:
        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

    class Stream:
        def __init__(self, device=None):
            self.cuda_stream = 0

        def wait_event(self, event):
            pass

    @staticmethod
    def current_stream(device=None):
        return FakeCuda.Stream()

    @staticmethod
    def stream(s):
        return contextlib.nullcontext()

    @staticmethod
    def device(d):
        return contextlib.nullcontext()


def fake_cuda(monkeypatch) -> None:
    """Stand :class:`FakeCuda` in for ``torch.cuda`` in the GPU image decoder, and for the CUDA streams its runtime
    makes it (``Runtime.stream``)."""
    from sluice.backends.image import gpu
    from sluice.runtime import Runtime

    monkeypatch.setattr(gpu, "_cuda", FakeCuda)
    monkeypatch.setattr(Runtime, "stream", lambda self, purpose, **kwargs: FakeCuda.Stream())

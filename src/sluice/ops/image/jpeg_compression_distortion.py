"""``fn.jpeg_compression_distortion``: JPEG artefacts, made by encoding each RGB image as a JPEG of the sample's
``quality`` (1 to 100, clamped) and decoding it again, as DALI's operator does.

On the CPU each sample goes through libjpeg-turbo by Pillow (GIL released) with the settings of DALI's CPU
operator (OpenCV's ``imencode`` / ``imdecode``): 4:2:0 chroma subsampling, the accurate integer DCT both ways and
smooth chroma upsampling; the pixels are OpenCV's. (simplejpeg's TurboJPEG encoder converts and subsamples colour
its own way and gives other pixels.) On the GPU the batch is encoded and decoded by nvJPEG through ``torchvision.io.
encode_jpeg`` / ``decode_jpeg`` on CUDA tensors (one call per distinct quality in the batch), where torchvision
has them; otherwise (torchvision missing, or without CUDA JPEG support) the GPU operator copies the batch to the
host, runs the CPU path and copies the result back, which the pipeline's stats show as host work. nvJPEG's encoder
and libjpeg-turbo choose their own quantisation rounding and chroma filters, so the two devices' outputs differ by a
few levels.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from sluice.ops.image._padded import image_layout
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "distort"]

logger = logging.getLogger(__name__)

SCHEMA = OpSchema(
    "jpeg_compression_distortion",
    doc="""Introduces JPEG compression artefacts into RGB images: each image is JPEG-encoded at ``quality`` and
    decoded. uint8 HWC images with 3 channels. Example::

        out = fn.jpeg_compression_distortion(images, quality=fn.random.uniform(range=(20, 60), dtype=types.INT32))
    """,
    devices=("cpu", "gpu"),
    requires={"cpu": ("PIL",), "gpu": ("PIL",)},
    args=[Arg("quality", int, 95, "JPEG quality from 1 (lowest) to 100 (highest); values outside are clamped.",
              per_sample=True)],
)


def _check(image: torch.Tensor, layout: str) -> None:
    image_layout(layout, image.dim(), "jpeg_compression_distortion", ("HWC",))
    if image.dtype != torch.uint8 or image.shape[-1] != 3:
        raise ValueError(f"jpeg_compression_distortion: takes uint8 RGB images (HWC, 3 channels), got {image.dtype} "
                         f"of shape {tuple(image.shape)}")


def _quality(value) -> int:
    return int(min(max(int(np.asarray(value).reshape(-1)[0]), 1), 100))


def distort(image: np.ndarray, quality: int) -> np.ndarray:
    """One HWC uint8 RGB image through a JPEG of ``quality`` and back (libjpeg-turbo, OpenCV's settings)."""
    import io

    from PIL import Image

    if image.shape[0] == 0 or image.shape[1] == 0:
        return image.copy()
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image), "RGB").save(buffer, format="JPEG", quality=_quality(quality),
                                                             subsampling=2)
    buffer.seek(0)
    with Image.open(buffer) as decoded:
        return np.array(decoded.convert("RGB"))  # a writable copy


@SCHEMA.sample_kernel("cpu")
def jpeg_compression_distortion_cpu(ctx, image: torch.Tensor, *, quality=95, **_) -> torch.Tensor:
    """One sample through libjpeg-turbo (Pillow)."""
    _check(image, ctx.layout)
    return torch.from_numpy(distort(image.numpy(), quality))


def _torchvision_jpeg():
    """torchvision's ``encode_jpeg`` / ``decode_jpeg`` when they import, else None."""
    try:
        from torchvision.io import decode_jpeg, encode_jpeg
    except Exception:  # noqa: BLE001 - no torchvision (or a broken one): the host path runs
        return None
    return encode_jpeg, decode_jpeg


_CUDA_STATE: dict[str, bool] = {}


@SCHEMA.batch_kernel("gpu")
def jpeg_compression_distortion_gpu(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """nvJPEG through torchvision, one encode and one decode call per distinct quality; else the host path."""
    n = len(images)
    if not n:
        return images
    layout = ctx.layout_of(images)
    samples = images.samples
    for s in samples:
        _check(s, layout)
    qualities = [_quality(q) for q in args["quality"]]
    codec = _torchvision_jpeg() if samples[0].is_cuda and not _CUDA_STATE.get("broken") else None
    if codec is not None:
        encode_jpeg, decode_jpeg = codec
        out: list[torch.Tensor | None] = [None] * n
        try:
            for q in sorted(set(qualities)):
                idx = [i for i in range(n) if qualities[i] == q]
                encoded = encode_jpeg([samples[i].permute(2, 0, 1).contiguous() for i in idx], quality=q)
                if encoded and encoded[0].is_cuda:  # decode_jpeg reads its input from host memory: one copy
                    sizes = [e.numel() for e in encoded]
                    encoded = list(torch.cat(encoded).cpu().split(sizes))
                decoded = decode_jpeg(encoded, device=samples[0].device)
                for i, d in zip(idx, decoded):
                    out[i] = d.permute(1, 2, 0)
            return Batch(out, "HWC")
        except (RuntimeError, TypeError) as exc:  # e.g. torchvision built without nvJPEG
            _CUDA_STATE["broken"] = True
            logger.info("jpeg_compression_distortion: torchvision's CUDA JPEG codec is unavailable (%s); the GPU "
                        "operator runs libjpeg-turbo on the host from now on", exc)
    host = images.as_cpu()
    done = map_all(ctx.thread_pool, lambda i: torch.from_numpy(distort(host[i].numpy(), qualities[i])),
                   list(range(n)))
    return Batch(done, "HWC").to(images.torch_device)

"""Generated data and reference decodes shared by the DALI-example tests (imported by conftest and the tests)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

CLASSES = ("cats", "dogs")  # labels 0 and 1 (sorted folder names, as DALI's file reader assigns them)
SIZES = [(40, 32), (48, 36), (36, 44)]  # (width, height) per image index: batches are ragged


def pattern_image(width: int, height: int, seed: int) -> np.ndarray:
    """A smooth RGB pattern (gradients and a disc) that survives JPEG well."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 255 * x / max(width - 1, 1)
    g = 255 * y / max(height - 1, 1)
    b = np.where((x - width / 2) ** 2 + (y - height / 2) ** 2 < (min(width, height) / 3) ** 2, 200.0, 40.0)
    img = np.stack([r, g, (b + 10 * seed) % 256], axis=-1)
    return img.clip(0, 255).astype(np.uint8)


def jpeg_bytes(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def psnr(actual, reference) -> float:
    """Peak signal-to-noise ratio in dB between two uint8 images: how GPU (nvJPEG) decodes are compared with
    Pillow's libjpeg-turbo, since the two upsample chroma differently and differ most at sharp colour edges."""
    err = np.mean((np.asarray(actual, np.float64) - np.asarray(reference, np.float64)) ** 2)
    return float("inf") if err == 0 else float(10 * np.log10(255.0 ** 2 / err))


def pil_decode(path) -> np.ndarray:
    """The reference decode (Pillow, RGB)."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))

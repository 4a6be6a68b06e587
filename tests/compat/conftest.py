"""Data for the DALI-example tests, generated here: a small JPEG folder tree, a WAV sweep, barcode videos.

The DALI import hook is installed by the example modules themselves (that is the one changed line of a ported
program) and removed at the end of the session.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import sluice.compat

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


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory):
    """root/cats/*.jpg, root/dogs/*.jpg: 3 images each, 3 different sizes."""
    root = tmp_path_factory.mktemp("jpegs")
    for label, cls in enumerate(CLASSES):
        (root / cls).mkdir()
        for i, (w, h) in enumerate(SIZES):
            (root / cls / f"img{i}.jpg").write_bytes(jpeg_bytes(pattern_image(w, h, 3 * label + i)))
    return root


@pytest.fixture(scope="session")
def image_files(image_dir):
    """[(path, label)] in the order DALI's file reader lists them (sorted folders, sorted files)."""
    return [(image_dir / cls / f"img{i}.jpg", label) for label, cls in enumerate(CLASSES) for i in range(3)]


def pil_decode(path) -> np.ndarray:
    """The reference decode (Pillow, RGB)."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


@pytest.fixture(scope="session", autouse=True)
def _remove_dali_hook():
    yield
    sluice.compat.uninstall()

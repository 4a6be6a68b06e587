"""Make JPEGs with ImageNet's spread of sizes and kinds, for the ``train_real`` benchmark.

ImageNet's training set is not one kind of file: most images are about 500 x 375, but sides run from under 100 to
several thousand pixels; quality varies; about 8 % are progressive, about 3 % greyscale, a few CMYK, and about 1 %
are PNG files named ``.JPEG``. A loader tuned on uniform baseline JPEGs meets all of that at once. This script
makes such a set (default 8192 files in 10 class folders):

* sides: 80 % around 500 x 375 (aspect ratios 4:3, 3:4, 1:1, 3:2, 16:9), 15 % with the long side 800-1,600 px,
  5 % 1,600-2,600 px; never below 160 px;
* quality 70-95, 4:2:0 chroma (a tenth 4:4:4);
* 8 % progressive, 3 % greyscale, 0.5 % CMYK, 1 % PNG named ``.JPEG``.

The pictures are cut from scikit-image's sample photographs when it is installed (as gen.py's), else drawn:
smooth colour fields with edges and sensor-like noise, so that the entropy coder has real work. Each file's
randomness comes from its index.

    python benchmarks/make_imagenet_real.py OUT [--count 8192]
"""

from __future__ import annotations

import argparse
import io
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

ASPECTS = (4 / 3, 3 / 4, 1.0, 3 / 2, 16 / 9)
_PHOTOS: list | None = None


def _photos() -> list:
    global _PHOTOS
    if _PHOTOS is None:
        try:
            import skimage.data as d

            _PHOTOS = [getattr(d, n)() for n in ("astronaut", "coffee", "chelsea", "rocket", "retina")]
            _PHOTOS = [p if p.ndim == 3 else np.stack([p] * 3, -1) for p in _PHOTOS]
        except Exception:  # noqa: BLE001 - no scikit-image: drawn pictures
            _PHOTOS = []
    return _PHOTOS


def size_of(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) with ImageNet's spread."""
    r = rng.random()
    if r < 0.80:
        long_side = rng.normal(500, 60)
    elif r < 0.95:
        long_side = rng.uniform(800, 1600)
    else:
        long_side = rng.uniform(1600, 2600)
    aspect = ASPECTS[rng.integers(len(ASPECTS))]
    w, h = (long_side, long_side / aspect) if aspect >= 1 else (long_side * aspect, long_side)
    return max(160, int(w)), max(160, int(h))


def picture(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """An RGB uint8 picture of (h, w): a photo crop, or a drawn scene."""
    import cv2

    photos = _photos()
    if photos and rng.random() < 0.7:
        p = photos[rng.integers(len(photos))]
        ph, pw = p.shape[:2]
        ch, cw = int(ph * rng.uniform(0.4, 1.0)), int(pw * rng.uniform(0.4, 1.0))
        y, x = rng.integers(0, ph - ch + 1), rng.integers(0, pw - cw + 1)
        img = cv2.resize(np.ascontiguousarray(p[y:y + ch, x:x + cw]), (w, h), interpolation=cv2.INTER_LINEAR)
    else:
        field = rng.uniform(0, 255, (max(2, h // 64), max(2, w // 64), 3)).astype(np.float32)
        img = cv2.resize(field, (w, h), interpolation=cv2.INTER_CUBIC)
        for _ in range(int(rng.integers(5, 25))):
            colour = tuple(float(c) for c in rng.uniform(0, 255, 3))
            x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
            if rng.random() < 0.5:
                cv2.rectangle(img, (x0, y0), (x0 + int(rng.integers(10, w // 2 + 11)),
                                              y0 + int(rng.integers(10, h // 2 + 11))), colour, -1)
            else:
                cv2.circle(img, (x0, y0), int(rng.integers(5, min(w, h) // 3 + 6)), colour, -1)
        img = cv2.GaussianBlur(img, (0, 0), float(rng.uniform(0.5, 2.0)))
    noise = rng.normal(0, rng.uniform(2, 9), (h, w, 3))
    return np.clip(img.astype(np.float32) + noise, 0, 255).astype(np.uint8)


def encode(index: int) -> tuple[bytes, str]:
    """One file's bytes and its kind."""
    from PIL import Image

    rng = np.random.default_rng(index)
    w, h = size_of(rng)
    img = Image.fromarray(picture(rng, w, h))
    kind = rng.random()
    buf = io.BytesIO()
    quality = int(rng.integers(70, 96))
    subsampling = 0 if rng.random() < 0.1 else 2            # 4:4:4 or 4:2:0
    if kind < 0.01:
        img.save(buf, "PNG", compress_level=int(rng.integers(1, 7)))
        return buf.getvalue(), "png"
    if kind < 0.015:
        img.convert("CMYK").save(buf, "JPEG", quality=quality)
        return buf.getvalue(), "cmyk"
    if kind < 0.045:
        img.convert("L").save(buf, "JPEG", quality=quality)
        return buf.getvalue(), "grey"
    progressive = kind < 0.125
    img.save(buf, "JPEG", quality=quality, progressive=progressive, subsampling=subsampling)
    return buf.getvalue(), "progressive" if progressive else "baseline"


def _write(job) -> str:
    index, path = job
    if not os.path.exists(path):
        data, _ = encode(index)
        with open(path, "wb") as f:
            f.write(data)
    return path


def make(out: str, count: int = 8192, classes: int = 10) -> list[str]:
    for c in range(classes):
        os.makedirs(os.path.join(out, f"n{c:08d}"), exist_ok=True)
    jobs = [(i, os.path.join(out, f"n{i % classes:08d}", f"img_{i:07d}.JPEG")) for i in range(count)]
    with ProcessPoolExecutor() as pool:
        return list(pool.map(_write, jobs, chunksize=16))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=8192)
    a = ap.parse_args(argv)
    paths = make(a.out, a.count)
    size = sum(os.path.getsize(p) for p in paths)
    print(f"{len(paths)} files, {size / 1e6:.0f} MB, in {a.out}")


if __name__ == "__main__":
    main()

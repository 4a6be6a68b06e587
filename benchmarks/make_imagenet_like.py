"""Write ImageNet-like JPEGs for the decode benchmark: 8192 files of 400-640 x 300-500 px, quality 90 (4:2:0),
about 70 KB each, in class sub-folders (so fn.readers.file gives labels).

They are cut from real photographs (scikit-image's bundled sample photos, or any folder of photos given with
``--photos``) with random crops, scaling, flips, colour jitter and sensor-like noise. Work is spread over all
cores with multiprocessing; each file's randomness comes from its own seed, so the set is reproducible.

Usage::

    python benchmarks/make_imagenet_like.py /tmp/imagenet_like                      # 8192 files
    python benchmarks/make_imagenet_like.py /tmp/small --count 512 --classes 8
    python benchmarks/make_imagenet_like.py OUT --photos .venv/lib/python3.11/site-packages/skimage/data

On a machine without scikit-image, pass ``--photos`` a folder of photographs (the skimage data folder can be
copied as it is).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

# Colour photographs bundled with scikit-image (no download needed).
SKIMAGE_PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "ihc.png",
                  "motorcycle_left.png", "motorcycle_right.png", "retina.jpg", "rocket.jpg")

_PHOTOS: list[np.ndarray] = []


def skimage_data_dir() -> Path | None:
    """scikit-image's data folder, found without importing scikit-image (which needs SciPy)."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "data"
    return path if path.is_dir() else None


def load_photos(folder: Path) -> list[np.ndarray]:
    """RGB photographs of at least 256 px a side from ``folder`` (skimage's colour photos when it is that one)."""
    names = [folder / n for n in SKIMAGE_PHOTOS if (folder / n).exists()]
    if not names:
        names = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp", ".tif"))
    photos = []
    for p in names:
        img = Image.open(p)
        if img.mode not in ("RGB", "RGBA", "P", "CMYK"):
            continue
        arr = np.asarray(img.convert("RGB"))
        if min(arr.shape[:2]) >= 256:
            photos.append(arr)
    return photos


def _init(photos: list[np.ndarray]) -> None:
    global _PHOTOS
    _PHOTOS = photos


def make_one(job: tuple[int, str, int, int]) -> int:
    """Make file number ``index`` at ``path``; returns its size in bytes."""
    index, path, seed, quality = job
    rng = np.random.default_rng([seed, index])
    photo = _PHOTOS[int(rng.integers(len(_PHOTOS)))]
    out_w = int(rng.integers(400, 641))
    out_h = int(rng.integers(300, 501))
    ph, pw = photo.shape[:2]
    # Crop a window of random size and position, then scale it to the output size (zooming in or out).
    zoom = rng.uniform(0.35, 1.0)
    cw = int(min(pw, max(64, zoom * pw)))
    ch = int(min(ph, max(64, cw * out_h / out_w)))
    cw = int(min(pw, ch * out_w / out_h))
    y = int(rng.integers(0, ph - ch + 1))
    x = int(rng.integers(0, pw - cw + 1))
    crop = photo[y:y + ch, x:x + cw]
    interp = cv2.INTER_AREA if cw > out_w else cv2.INTER_CUBIC
    img = cv2.resize(crop, (out_w, out_h), interpolation=interp).astype(np.float32)
    if rng.random() < 0.5:
        img = img[:, ::-1]
    img = img * rng.uniform(0.8, 1.2, size=3) + rng.uniform(-20, 20)  # colour and brightness jitter
    img += rng.normal(0.0, rng.uniform(4.0, 11.0), size=img.shape)  # sensor-like noise (sets the file size)
    img = np.clip(img, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality, subsampling=2)
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="output folder (class sub-folders are made inside)")
    ap.add_argument("--count", type=int, default=8192)
    ap.add_argument("--classes", type=int, default=64)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--photos", type=Path, default=None, help="folder of source photographs (default: skimage's)")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    args = ap.parse_args(argv)

    folder = args.photos or skimage_data_dir()
    if folder is None or not folder.is_dir():
        sys.exit("no source photographs: install scikit-image or pass --photos FOLDER")
    photos = load_photos(folder)
    if not photos:
        sys.exit(f"no colour photographs of at least 256 px in {folder}")
    jobs = []
    for i in range(args.count):
        cls = args.out / f"class_{i % args.classes:04d}"
        cls.mkdir(parents=True, exist_ok=True)
        jobs.append((i, str(cls / f"img_{i:06d}.jpg"), args.seed, args.quality))
    start = time.perf_counter()
    with Pool(args.workers, initializer=_init, initargs=(photos,)) as pool:
        sizes = pool.map(make_one, jobs, chunksize=32)
    sizes = np.array(sizes)
    print(f"wrote {len(sizes)} JPEGs from {len(photos)} photos to {args.out} in {time.perf_counter() - start:.1f} s; "
          f"size mean {sizes.mean() / 1024:.1f} KiB, min {sizes.min() / 1024:.1f}, max {sizes.max() / 1024:.1f}")


if __name__ == "__main__":
    main()

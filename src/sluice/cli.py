"""The ``sluice`` command: ``sluice demo``, ``sluice bench``, ``sluice probe VIDEO``, ``sluice index PATH...``,
``sluice tfrecord-index FILE [INDEX]``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import sluice

log = logging.getLogger(__name__)

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def cache_dir() -> Path:
    from sluice.backends.storage import cache_dir as where  # the readers' index caches live there too

    return where()


# ------------------------------------------------------------------------------------------------------------
# Demo data: JPEGs drawn from NumPy patterns, one folder per class
# ------------------------------------------------------------------------------------------------------------
def make_demo_images(root: Path, count: int = 320, classes: int = 4, seed: int = 0) -> Path:
    """Write ``count`` JPEGs of varied sizes (gradients, rings, stripes, checkers, with noise) under
    ``root/class_k/`` once; later calls reuse them."""
    marker = root / f".complete-{count}-{classes}"
    if marker.exists():
        return root
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k in range(classes):
        (root / f"class_{k}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        k = i % classes
        h, w = int(rng.integers(240, 480)), int(rng.integers(320, 640))
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        r = np.hypot(y - cy, x - cx)
        patterns = [
            np.stack([x / w, y / h, 1 - x / w], -1),
            np.stack([np.sin(r / rng.uniform(5, 20)), np.cos(r / 9), np.sin(r / 13)], -1) * 0.5 + 0.5,
            np.stack([(np.sin(x / rng.uniform(4, 12)) > 0), (np.sin(y / 7) > 0), np.full_like(x, 0.5)], -1),
            np.stack([((x // 32 + y // 32) % 2), (x / w), (y // 48 % 2)], -1),
        ]
        img = patterns[k] * rng.uniform(0.6, 1.0, 3) + rng.normal(0, 0.04, (h, w, 3))
        img = (np.clip(img, 0, 1) * 255).astype(np.uint8)
        Image.fromarray(img).save(root / f"class_{k}" / f"img_{i:05d}.jpg", quality=90)
    marker.touch()
    return root


def _progress(iterable: Any, total: int, desc: str) -> Any:
    try:
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit="batch", file=sys.stdout)
    except ImportError:  # tqdm is in the cli extra; work without it
        return iterable


def demo_pipeline(root: str, batch_size: int, device_id: int | None, size: int = 224) -> sluice.Pipeline:
    """The ImageNet-style training pipeline of the demo (and of `sluice bench`)."""
    from sluice import fn, types

    decoder_device = "mixed" if device_id is not None else "cpu"

    @sluice.pipeline_def(batch_size=batch_size, num_threads=min(8, os.cpu_count() or 1), device_id=device_id,
                         seed=2026, prefetch_queue_depth=2)
    def train():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device=decoder_device, output_type=types.RGB)
        images = fn.resize(images, resize_x=size, resize_y=size)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                          mirror=fn.random.coin_flip(probability=0.5), mean=MEAN, std=STD)
        return images, labels

    return train()


def contact_sheet(images: Any, labels: Any, path: Path, columns: int = 8) -> Path:
    """Save a grid of normalised CHW images (undoing the normalisation) as a PNG."""
    import torch
    from PIL import Image

    x = images.float().cpu()
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    x = (x * std + mean).clamp(0, 255).to(torch.uint8)
    n, _, h, w = x.shape
    rows = -(-n // columns)
    sheet = torch.zeros(3, rows * (h + 4), columns * (w + 4), dtype=torch.uint8)
    for i in range(n):
        r, c = divmod(i, columns)
        sheet[:, r * (h + 4):r * (h + 4) + h, c * (w + 4):c * (w + 4) + w] = x[i]
    Image.fromarray(sheet.permute(1, 2, 0).numpy()).save(path)
    return path


def cmd_demo(args: argparse.Namespace) -> int:
    import torch

    from sluice.torch import DALIClassificationIterator, LastBatchPolicy

    root = make_demo_images(cache_dir() / "demo_images", count=args.images)
    device_id = None if args.cpu or not torch.cuda.is_available() else 0
    where = f"GPU {torch.cuda.get_device_name(0)}" if device_id is not None else f"CPU ({os.cpu_count()} cores)"
    print(f"sluice {sluice.__version__} demo: {args.images} JPEGs in {root}")
    print(f"pipeline: readers.file -> decoders.image_random_crop({'mixed' if device_id is not None else 'cpu'}) -> "
          f"resize 224 -> crop_mirror_normalize(FLOAT16, CHW, mirror=coin_flip) on {where}")
    pipe = demo_pipeline(str(root), args.batch_size, device_id)
    loader = DALIClassificationIterator(pipe, reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL,
                                        auto_reset=True)
    first = None
    images_seen = 0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        for batch in _progress(loader, len(loader), f"epoch {epoch + 1}/{args.epochs}"):
            data = batch[0]["data"]
            if first is None:
                first = (data, batch[0]["label"])
                start = time.perf_counter()  # time the steady state, after the first batch
            else:
                images_seen += data.shape[0]
    if device_id is not None:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    assert first is not None
    out = Path(args.output)
    contact_sheet(first[0][:32], first[1], out)
    print(f"batch: {tuple(first[0].shape)} {first[0].dtype} on {first[0].device}, labels {first[1][:8].flatten().tolist()}")
    if images_seen:
        print(f"throughput: {images_seen / seconds:,.0f} images/s ({images_seen} images in {seconds:.2f} s)")
    print(f"contact sheet of the first augmented batch: {out.resolve()}")
    pipe.close()
    return 0


# ------------------------------------------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    from sluice import bench

    return bench.main(args)


def cmd_tfrecord_index(args: argparse.Namespace) -> int:
    """Write the index of a TFRecord file (DALI's tfrecord2idx format) for ``fn.readers.tfrecord(index_path=)``."""
    from sluice.backends import storage
    from sluice.backends.tfrecord import build_index

    index = args.index or storage.basename(args.tfrecord) + ".idx"
    with storage.open_file(args.tfrecord, buffer_size=8 << 20) as f:
        text = build_index(f, args.tfrecord, storage.size(args.tfrecord))
    Path(index).write_text(text)
    print(f"indexed {text.count(chr(10))} records of {args.tfrecord} into {index}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description="GPU data loading for PyTorch with DALI's operators.")
    parser.add_argument("--version", action="version", version=f"sluice {sluice.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what sluice does")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the image training pipeline on data it makes itself")
    demo.add_argument("--images", type=int, default=320, help="number of demo JPEGs (default 320)")
    demo.add_argument("--batch-size", type=int, default=32)
    demo.add_argument("--epochs", type=int, default=2)
    demo.add_argument("--cpu", action="store_true", help="stay on the CPU even if a GPU exists")
    demo.add_argument("--output", default="sluice_demo.png", help="where the contact sheet goes")
    demo.set_defaults(func=cmd_demo)
    bench = sub.add_parser("bench", help="measure sluice against the PyTorch DataLoader on this machine")
    bench.add_argument("--images", type=int, default=320)
    bench.add_argument("--batch-size", type=int, default=32)
    bench.add_argument("--iterations", type=int, default=20)
    bench.set_defaults(func=cmd_bench)
    tfr = sub.add_parser("tfrecord-index", help="index a TFRecord file for fn.readers.tfrecord (as DALI's "
                         "tfrecord2idx)")
    tfr.add_argument("tfrecord", help="the TFRecord file (a path or an s3:// URL)")
    tfr.add_argument("index", nargs="?", help="the index to write (default: the file's name + .idx, here)")
    tfr.set_defaults(func=cmd_tfrecord_index)
    try:
        from sluice.video_cli import add_subcommands  # `sluice probe VIDEO`, `sluice index PATH...`
    except ImportError as e:  # the video extra (PyAV) is not installed
        missing = str(e)

        def unavailable(args: argparse.Namespace) -> int:
            print(f"sluice {args.command} needs the video extra (pip install 'sluice[video]'): {missing}",
                  file=sys.stderr)
            return 1

        for name in ("probe", "index"):
            stub = sub.add_parser(name, help="needs the video extra")
            stub.add_argument("paths", nargs="*")
            stub.set_defaults(func=unavailable)
    else:
        add_subcommands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except (sluice.SluiceError, OSError, ValueError) as e:
        print(f"sluice {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

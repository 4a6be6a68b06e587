"""The ImageNet training pipeline of benchmarks/train_pipeline.py (issue 4) fed from WebDataset tar shards against
the same pipeline fed by ``readers.file`` from the same JPEGs as loose files, in one run (issue 23's target: the
shards within 10 % of the loose files on the H200)::

    reader -> decoders.image_random_crop (mixed) -> resize 224x224 (gpu)
           -> crop_mirror_normalize(FLOAT16, CHW, mirror=coin_flip, ImageNet mean/std) -> DALIGenericIterator

Usage (the shards are written next to the folder, once)::

    python benchmarks/make_imagenet_like.py /tmp/imagenet_like
    python benchmarks/readers_gpu.py /tmp/imagenet_like --shards 32
    python benchmarks/readers_gpu.py /tmp/small --cpu --batch-size 8 --iters 2     # smoke test without a GPU

Rows go through benchmarks/common.py's ``report``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import images_per_second, report  # noqa: E402
from readers_cpu import best_of, jpeg_set  # noqa: E402
from train_pipeline import MEAN, STD  # noqa: E402

from sluice import fn, pipeline_def, types  # noqa: E402
from sluice.torch import DALIGenericIterator, LastBatchPolicy  # noqa: E402


@pipeline_def
def train_pipe(shards, files, labels, decoder, dev, size):
    if shards:
        jpegs, labels = fn.readers.webdataset(paths=shards, ext=["jpg", "cls"], random_shuffle=True, name="Reader")
    else:
        jpegs, labels = fn.readers.file(files=files, labels=labels, random_shuffle=True, name="Reader")
    images = fn.decoders.image_random_crop(jpegs, device=decoder, output_type=types.RGB)
    images = fn.resize(images, resize_x=size, resize_y=size, device=dev)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                      mirror=fn.random.coin_flip(), mean=MEAN, std=STD, device=dev)
    return images, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--cpu", action="store_true", help="decode on the CPU (a smoke test without a GPU)")
    args = ap.parse_args()
    files, labels, shards = jpeg_set(args.folder, args.shards)
    gpu = torch.cuda.is_available() and not args.cpu
    decoder, dev, device_id = ("mixed", "gpu", 0) if gpu else ("cpu", "cpu", None)

    def rate(from_shards: bool) -> float:
        pipe = train_pipe(shards if from_shards else None, files, labels, decoder, dev, args.size,
                          batch_size=args.batch_size, num_threads=args.threads, device_id=device_id, seed=1,
                          prefetch_queue_depth=2)
        it = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader", auto_reset=True,
                                 last_batch_policy=LastBatchPolicy.DROP)

        def endless():
            while True:
                yield from it

        ips = images_per_second(endless(), args.warmup, args.iters, lambda b: b[0]["images"].shape[0])
        pipe.close()
        return ips

    best = best_of({"shards": lambda: rate(True), "files": lambda: rate(False)}, args.repeat)
    where = "GPU" if gpu else "CPU"
    report(f"ImageNet training pipeline from {args.shards} tar shards ({where}, batch {args.batch_size}, "
           f"{len(files)} JPEGs)", "images/s", best["shards"], {"the same pipeline with readers.file": best["files"]})


if __name__ == "__main__":
    main()

"""Training input for PyTorch, ImageNet-style: JPEG files -> decode -> resize 224x224 -> random flip -> normalise
-> CHW float batches on the GPU. sluice's iterator and sluice's DataLoader proxy beside a plain torch DataLoader
decoding with Pillow (+ torchvision transforms when present) in worker processes.

Make the files first, then run (rows go through benchmarks/common.py's ``report``)::

    python benchmarks/make_imagenet_like.py /tmp/imagenet_like
    python benchmarks/torch_loaders.py /tmp/imagenet_like --workers 16 --batch-size 256

On a machine without a GPU everything runs on the CPU (``--cpu``), which only checks that the script works.
Each figure is images/s over ``--batches`` batches after ``--warmup`` batches.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import images_per_second, loader_warmup, report  # noqa: E402

import sluice.torch.proxy as sp  # noqa: E402
from sluice import fn, pipeline_def, types  # noqa: E402
from sluice.torch import DALIGenericIterator, LastBatchPolicy  # noqa: E402

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def augment(images, size):
    images = fn.resize(images, resize_x=size, resize_y=size)
    return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
                                    mean=MEAN, std=STD)


@pipeline_def
def reader_pipe(files, decoder_device, size):
    jpegs, labels = fn.readers.file(files=files, random_shuffle=True, name="Reader")
    return augment(fn.decoders.image(jpegs, device=decoder_device), size), labels


@pipeline_def
def proxy_pipe(decoder_device, size):
    jpegs = fn.external_source(name="jpeg")
    return augment(fn.decoders.image(jpegs, device=decoder_device), size)


class ProxyFiles(torch.utils.data.Dataset):
    def __init__(self, files, proxy):
        self.files, self.proxy = files, proxy

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return self.proxy(jpeg=np.fromfile(self.files[i], np.uint8)), i % 1000


class PillowFiles(torch.utils.data.Dataset):
    """The usual torchvision recipe; NumPy stands in for torchvision where it is not installed."""

    def __init__(self, files, size):
        self.files, self.size = files, size
        try:
            import torchvision.transforms as T

            self.transform = T.Compose([T.Resize((size, size)), T.RandomHorizontalFlip(), T.ToTensor(),
                                        T.Normalize([m / 255 for m in MEAN], [s / 255 for s in STD])])
        except ImportError:
            self.transform = None

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image

        with open(self.files[i], "rb") as f:
            image = Image.open(io.BytesIO(f.read())).convert("RGB")
        if self.transform is not None:
            return self.transform(image), i % 1000
        image = image.resize((self.size, self.size), Image.BILINEAR)
        arr = np.asarray(image, np.float32)
        if np.random.rand() < 0.5:
            arr = arr[:, ::-1]
        arr = (arr - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
        return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1))), i % 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--cpu", action="store_true", help="run everything on the CPU (a smoke test)")
    args = parser.parse_args()
    files = sorted(str(p) for p in Path(args.folder).rglob("*.jpg"))
    if not files:
        sys.exit(f"no .jpg files under {args.folder}; run benchmarks/make_imagenet_like.py first")
    gpu = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    decoder, device_id = ("mixed", 0) if gpu else ("cpu", None)
    bs, total = args.batch_size, args.warmup + args.batches
    common = dict(batch_size=bs, num_threads=args.threads, device_id=device_id, seed=1)

    it = DALIGenericIterator(reader_pipe(files, decoder, args.size, **common), ["images", "labels"],
                             reader_name="Reader", auto_reset=True, last_batch_policy=LastBatchPolicy.DROP)

    def endless(loader):
        while True:
            yield from loader

    def count_sluice(batch):
        return batch[0]["images"].shape[0]

    sluice_ips = images_per_second(endless(it), args.warmup, args.batches, count_sluice)

    with sp.DALIServer(proxy_pipe(decoder, args.size, **common)) as server:
        loader = sp.DataLoader(server, ProxyFiles(files, server.proxy), batch_size=bs, num_workers=args.workers,
                               shuffle=True, drop_last=True, persistent_workers=args.workers > 0,
                               prefetch_factor=4 if args.workers else None)
        proxy_ips = images_per_second(endless(loader), loader_warmup(args.warmup, args.workers), args.batches,
                                      lambda b: b[0].shape[0])

    plain = torch.utils.data.DataLoader(PillowFiles(files, args.size), batch_size=bs, num_workers=args.workers,
                                        shuffle=True, drop_last=True, pin_memory=gpu,
                                        persistent_workers=args.workers > 0,
                                        prefetch_factor=4 if args.workers else None)

    def to_device(batch):
        images = batch[0].to(device, non_blocking=True)
        return images.shape[0]

    plain_ips = images_per_second(endless(plain), loader_warmup(args.warmup, args.workers), args.batches, to_device)
    where = "GPU" if gpu else "CPU"
    report(f"ImageNet-style training input ({where}, batch {bs}, {total} batches)", "images/s", sluice_ips,
           {f"torch DataLoader + Pillow ({args.workers} workers)": plain_ips})
    report(f"DataLoader proxy, own Dataset ({where}, batch {bs}, {args.workers} workers)", "images/s", proxy_ips,
           {f"torch DataLoader + Pillow ({args.workers} workers)": plain_ips})


if __name__ == "__main__":
    main()

"""A LightningDataModule whose train loader is a sluice pipeline: files are read, decoded and augmented on the GPU
(on the CPU without one), and each DDP rank reads its own shard.

Run on one GPU, or on all of them with Lightning's DDP (shard_id / num_shards follow the global rank and the GPU
follows LOCAL_RANK, so nothing here names a rank)::

    python examples/lightning_datamodule.py --root /data/imagenet/train --devices 2 --epochs 1

Without ``--root`` it makes a small folder of coloured JPEGs (two classes) and trains on that; ``--cpu`` trains
on the CPU (``--cpu --per-class 8 --epochs 1`` is a quick run).

Lightning calls ``len(train_dataloader())`` and iterates it once per epoch; the sluice iterator gives both, and
``auto_reset=True`` starts the next epoch by itself. Lightning's sampler injection does not apply: sharding is
the reader's job, so ``use_distributed_sampler=False``.
"""

from __future__ import annotations

import argparse
import os

import torch

try:
    import lightning.pytorch as pl
except ImportError:  # the older package name
    import pytorch_lightning as pl

import sluice
from sluice import fn, pipeline_def, types
from sluice.torch import DALIClassificationIterator, LastBatchPolicy


@pipeline_def
def train_pipe(root: str, size: int, use_gpu: bool):
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, pad_last_batch=True, name="Reader")
    images = fn.decoders.image(jpegs, device="mixed" if use_gpu else "cpu")
    images = fn.resize(images, resize_x=size, resize_y=size)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                      mirror=fn.random.coin_flip(),
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
    return images, labels.gpu() if use_gpu else labels


class _Batches:
    """Adapts the iterator's ``[{"data": ..., "label": ...}]`` to Lightning's ``(images, labels)``."""

    def __init__(self, iterator: DALIClassificationIterator):
        self.iterator = iterator

    def __len__(self) -> int:
        return len(self.iterator)

    def __iter__(self):
        for batch in self.iterator:
            yield batch[0]["data"], batch[0]["label"].squeeze(-1).long()


class SluiceDataModule(pl.LightningDataModule):
    """Example::

        dm = SluiceDataModule("/data/train", batch_size=64)
        pl.Trainer(devices=2, strategy="ddp", use_distributed_sampler=False).fit(model, dm)
    """

    def __init__(self, root: str, batch_size: int = 64, size: int = 64, num_threads: int = 4,
                 use_gpu: bool | None = None):
        super().__init__()
        self.root, self.batch_size, self.size, self.num_threads = root, batch_size, size, num_threads
        self.use_gpu = torch.cuda.is_available() if use_gpu is None else use_gpu
        self.loader: _Batches | None = None

    def setup(self, stage: str | None = None) -> None:
        # Runs in every DDP process after torch.distributed is initialised: the reader's shard defaults to the
        # global rank and the pipeline's GPU to LOCAL_RANK.
        use_gpu = self.use_gpu
        pipe = train_pipe(self.root, self.size, use_gpu, batch_size=self.batch_size, num_threads=self.num_threads,
                          device_id=None if not use_gpu else int(os.environ.get("LOCAL_RANK", 0)), seed=42)
        self.loader = _Batches(DALIClassificationIterator(pipe, reader_name="Reader", auto_reset=True,
                                                          last_batch_policy=LastBatchPolicy.PARTIAL))

    def train_dataloader(self) -> _Batches:
        assert self.loader is not None
        return self.loader


class TinyNet(pl.LightningModule):
    def __init__(self, classes: int = 2):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
                                       torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, classes))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(self.net(images), labels)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def make_demo_data(root: str, per_class: int = 16) -> None:
    """Two classes of small JPEGs: reddish and bluish."""
    from PIL import Image

    rng = torch.Generator().manual_seed(0)
    for label, colour in enumerate(((200, 40, 40), (40, 40, 200))):
        folder = os.path.join(root, f"class{label}")
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            noise = torch.randint(-30, 30, (48, 48, 3), generator=rng)
            pixels = (torch.tensor(colour) + noise).clamp(0, 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(os.path.join(folder, f"{i}.jpg"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=None)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--cpu", action="store_true", help="train and decode on the CPU even if a GPU exists")
    parser.add_argument("--per-class", type=int, default=16, help="JPEGs per class to make without --root")
    args = parser.parse_args()
    root = args.root
    if root is None:  # made once, in sluice's cache folder ($SLUICE_CACHE)
        root = str(sluice.cache_dir("examples", f"lightning_jpegs_{args.per_class}"))
        make_demo_data(root, per_class=args.per_class)
    use_gpu = torch.cuda.is_available() and not args.cpu
    trainer = pl.Trainer(max_epochs=args.epochs, accelerator="gpu" if use_gpu else "cpu", devices=args.devices,
                         strategy="ddp" if args.devices > 1 else "auto", use_distributed_sampler=False,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(TinyNet(), SluiceDataModule(root, batch_size=args.batch_size, size=32, use_gpu=use_gpu))
    print(f"trained {args.epochs} epochs on {'GPU' if use_gpu else 'CPU'}: loss {trainer.callback_metrics['loss']:.4f}")


if __name__ == "__main__":
    main()

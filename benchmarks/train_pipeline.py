"""ImageNet training and validation input, end to end, sluice beside the usual PyTorch recipes (issue 4).

sluice training pipeline (what the iterator hands to PyTorch)::

    readers.file -> decoders.image_random_crop (mixed) -> resize 224x224 (gpu)
                 -> crop_mirror_normalize(FLOAT16, CHW, mirror=coin_flip, ImageNet mean/std) -> DALIGenericIterator

(the executor fuses resize + crop_mirror_normalize into one Triton kernel pair). Peers in the same run:

  (a) torch DataLoader, ``--workers`` processes: Pillow decode + torchvision RandomResizedCrop(224) +
      RandomHorizontalFlip, uint8 batches pinned, moved to the GPU and normalised there (FLOAT16);
  (b) torchvision GPU decode (``torchvision.io.decode_jpeg(device='cuda')`` on the batch) + per-sample
      torchvision v2 RandomResizedCrop / RandomHorizontalFlip on the GPU, stacked and normalised.

Also: sluice decode-only throughput (readers.file -> decoders.image_random_crop, same decode work) and the ratio of
the whole pipeline to it; a GPU memory check (allocated memory sampled while the training iterator runs for
``--memory-iters`` iterations, peak allocated reported); the validation pipeline (decode -> resize_shorter 256 ->
centre crop 224 -> normalise) beside a DataLoader with Pillow Resize(256) + CenterCrop(224).

Usage (files from the decoder issue's generator)::

    python benchmarks/make_imagenet_like.py /tmp/imagenet_like
    python benchmarks/train_pipeline.py /tmp/imagenet_like                  # ~4 minutes on an H200
    python benchmarks/train_pipeline.py /tmp/imagenet_like --memory-only --memory-iters 10000 \
        --memory-seconds 480 --memory-batch-size 64      # 10,000 iterations inside one device call
    python benchmarks/train_pipeline.py /tmp/small --cpu --batch-size 8 --iters 2 --memory-iters 4   # smoke test

Rows go through benchmarks/common.py's ``report`` (and to $SLUICE_BENCH_OUT as JSON lines).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import images_per_second as rate  # noqa: E402
from common import loader_warmup, machine, report  # noqa: E402

from sluice import fn, pipeline_def, types  # noqa: E402
from sluice.torch import DALIGenericIterator, LastBatchPolicy  # noqa: E402

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


# ---- sluice pipelines ------------------------------------------------------------------------------------
@pipeline_def
def train_pipe(files, decoder, dev, size):
    jpegs, labels = fn.readers.file(files=files, random_shuffle=True, name="Reader")
    images = fn.decoders.image_random_crop(jpegs, device=decoder, output_type=types.RGB)
    images = fn.resize(images, resize_x=size, resize_y=size, device=dev)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                      mirror=fn.random.coin_flip(), mean=MEAN, std=STD, device=dev)
    return images, labels


@pipeline_def
def decode_pipe(files, decoder):
    jpegs, labels = fn.readers.file(files=files, random_shuffle=True, name="Reader")
    return fn.decoders.image_random_crop(jpegs, device=decoder, output_type=types.RGB), labels


@pipeline_def
def val_pipe(files, decoder, dev, size):
    jpegs, labels = fn.readers.file(files=files, random_shuffle=False, name="Reader")
    images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB)
    images = fn.resize(images, resize_shorter=256, device=dev)
    images = fn.crop_mirror_normalize(images, crop=(size, size), dtype=types.FLOAT16, output_layout="CHW",
                                      mean=MEAN, std=STD, device=dev)
    return images, labels


def endless(loader):
    while True:
        yield from loader


def pipe_runs(pipe):
    while True:
        try:
            yield pipe.run()
        except StopIteration:
            pipe.reset()


# ---- peer (a): torch DataLoader + Pillow + torchvision CPU transforms -------------------------------------
class PillowTrain(torch.utils.data.Dataset):
    def __init__(self, files, size, train=True):
        import torchvision.transforms as T

        self.files = files
        if train:
            self.t = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])
        else:
            self.t = T.Compose([T.Resize(256), T.CenterCrop(size), T.PILToTensor()])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image

        with open(self.files[i], "rb") as f:
            image = Image.open(io.BytesIO(f.read())).convert("RGB")
        return self.t(image), i % 1000


def gpu_normalize(x: torch.Tensor, device) -> torch.Tensor:
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    return ((x.to(device, non_blocking=True).float() - mean) / std).half()


# ---- peer (b): torchvision GPU decode + per-sample GPU transforms -----------------------------------------
def torchvision_gpu_batches(files, bs, size, device):
    import torchvision.transforms.v2 as T2
    from torchvision.io import ImageReadMode, decode_jpeg, read_file

    t = T2.Compose([T2.RandomResizedCrop(size, antialias=True), T2.RandomHorizontalFlip()])
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    order = np.random.default_rng(0).permutation(len(files))
    pool = ThreadPoolExecutor(8)
    while True:
        for b in range(0, len(files) - bs + 1, bs):
            data = list(pool.map(read_file, [files[i] for i in order[b:b + bs]]))
            images = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
            out = torch.stack([t(im) for im in images])
            yield ((out.float() - mean) / std).half()


def memory_check(it, iters: int, seconds: float, bs: int) -> None:
    """Run the training iterator for ``iters`` iterations (or ``seconds``), sampling allocated GPU memory every
    100; print the curve's ends, its growth and the peak, and report the peak."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    samples, start, done = [], time.perf_counter(), 0
    gen = endless(it)
    while done < iters and time.perf_counter() - start < seconds:
        next(gen)
        done += 1
        if done % 100 == 0:
            samples.append(torch.cuda.memory_allocated())
        if done % 2000 == 0:
            print(f"# memory: {done} iterations, allocated {samples[-1] / 2**20:.0f} MiB, reserved "
                  f"{torch.cuda.memory_reserved() / 2**20:.0f} MiB, {time.perf_counter() - start:.0f} s", flush=True)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**20
    first_mb = samples[0] / 2**20 if samples else float("nan")
    last_mb = samples[-1] / 2**20 if samples else float("nan")
    growth = (max(samples[len(samples) // 2:]) - max(samples[:len(samples) // 2])) / 2**20 \
        if len(samples) >= 4 else float("nan")
    print(f"# memory: {done} iterations of batch {bs}, allocated at 100 its {first_mb:.0f} MiB, at the end "
          f"{last_mb:.0f} MiB, growth of the max (2nd half - 1st half) {growth:.1f} MiB, peak allocated "
          f"{peak:.0f} MiB, reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB", flush=True)
    report(f"training pipeline peak GPU memory allocated over {done} iterations (batch {bs})", "MiB", peak, {},
           higher_is_better=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=8, help="sluice CPU threads")
    p.add_argument("--workers", type=int, default=16, help="DataLoader worker processes (peer a)")
    p.add_argument("--iters", type=int, default=28,
                   help="measured batches per figure (with --warmup, below one epoch: 8192 files = 32 batches)")
    p.add_argument("--peer-iters", type=int, default=24, help="measured batches for the slower peers")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--memory-iters", type=int, default=10000, help="training iterations of the memory check")
    p.add_argument("--memory-seconds", type=float, default=120.0, help="time cap of the memory check")
    p.add_argument("--memory-only", action="store_true",
                   help="only the memory check (with --memory-batch-size), nothing else")
    p.add_argument("--memory-batch-size", type=int, default=None,
                   help="batch size of a --memory-only check (default --batch-size)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--files", type=int, default=8192)
    p.add_argument("--skip-peers", action="store_true")
    p.add_argument("--cpu", action="store_true", help="everything on the CPU (smoke test only)")
    a = p.parse_args()
    files = sorted(str(x) for x in Path(a.folder).rglob("*.jpg"))[:a.files]
    if not files:
        sys.exit(f"no .jpg files under {a.folder}; run benchmarks/make_imagenet_like.py first")
    gpu = torch.cuda.is_available() and not a.cpu
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    decoder, dev, device_id = ("mixed", "gpu", 0) if gpu else ("cpu", "cpu", None)
    bs = a.batch_size
    common = dict(batch_size=bs, num_threads=a.threads, device_id=device_id, seed=1)
    where = f"{'GPU' if gpu else 'CPU'}, batch {bs}, {len(files)} files"
    print(f"# {machine()}", flush=True)
    if a.memory_only:
        mbs = a.memory_batch_size or bs
        mpipe = train_pipe(files, decoder, dev, a.size, **{**common, "batch_size": mbs})
        mit = DALIGenericIterator(mpipe, ["data", "label"], reader_name="Reader", auto_reset=True,
                                  last_batch_policy=LastBatchPolicy.DROP)
        if gpu:
            memory_check(mit, a.memory_iters, a.memory_seconds, mbs)
        mpipe.close()
        return

    # sluice: decode only, then the whole training pipeline (pipe.run and through the PyTorch iterator)
    dpipe = decode_pipe(files, decoder, **common)
    decode_ips = rate(pipe_runs(dpipe), a.warmup, a.iters, lambda out: len(out[0]))
    if gpu:  # the fused kernel alone, on one decoded batch: resize 224 -> mirror -> normalise -> fp16 NCHW
        from sluice.kernels.batched import resample_batch, triton_available

        decoded = [s.contiguous() for s in dpipe.run()[0].samples]
        hw = np.array([s.shape[:2] for s in decoded], dtype=np.float64)
        rois = np.concatenate([np.zeros_like(hw), hw], axis=1)
        norm = np.broadcast_to(np.array([[m, 1 / sd, 0.0] for m, sd in zip(MEAN, STD)], np.float32), (bs, 3, 3))
        mirror = np.arange(bs) % 2 == 0

        def kernel_only(_=None):
            resample_batch(decoded, rois, np.full((bs, 2), a.size), "linear", "linear", dtype=torch.float16,
                           mirror=mirror, norm=norm, output_layout="CHW", dense=True)
            return bs

        kernel_ips = rate(iter(kernel_only, None), a.warmup, a.iters, lambda x: x)
        report(f"fused resize-mirror-normalize kernel alone (Triton: {triton_available(device)}, {where})",
               "images/s", kernel_ips, {})
    dpipe.close()
    tpipe = train_pipe(files, decoder, dev, a.size, **common)
    train_run_ips = rate(pipe_runs(tpipe), a.warmup, a.iters, lambda out: len(out[0]))
    tpipe.close()
    tpipe = train_pipe(files, decoder, dev, a.size, **common)
    it = DALIGenericIterator(tpipe, ["data", "label"], reader_name="Reader", auto_reset=True,
                             last_batch_policy=LastBatchPolicy.DROP)
    train_ips = rate(endless(it), a.warmup, a.iters, lambda b: b[0]["data"].shape[0])
    first = next(iter(it))[0]["data"]
    assert first.dtype == torch.float16 and tuple(first.shape) == (bs, 3, a.size, a.size), first.shape

    peers = {}
    if not a.skip_peers:
        loader = torch.utils.data.DataLoader(PillowTrain(files, a.size), batch_size=bs, num_workers=a.workers,
                                             shuffle=True, drop_last=True, pin_memory=gpu,
                                             persistent_workers=a.workers > 0,
                                             prefetch_factor=4 if a.workers else None)

        def consume_a(batch):
            return gpu_normalize(batch[0], device).shape[0]

        peers[f"(a) torch DataLoader + Pillow + torchvision RRC/flip ({a.workers} workers)"] = \
            rate(endless(loader), loader_warmup(a.warmup, a.workers), a.peer_iters, consume_a)
        del loader
        if gpu:
            peers["(b) torchvision GPU decode + per-sample GPU transforms"] = \
                rate(torchvision_gpu_batches(files, bs, a.size, device), a.warmup, a.peer_iters,
                     lambda x: x.shape[0])
    report(f"ImageNet training input -> PyTorch ({where})", "images/s", train_ips, peers)
    report(f"training pipeline vs sluice decode-only (pipe.run, {where})", "images/s", train_run_ips,
           {"sluice decode-only (decoders.image_random_crop)": decode_ips})
    print(f"# whole pipeline / decode-only = {train_run_ips / decode_ips:.1%} (pipe.run), "
          f"{train_ips / decode_ips:.1%} (through the iterator)", flush=True)

    if gpu:
        memory_check(it, a.memory_iters, a.memory_seconds, bs)
    tpipe.close()

    # validation
    vpipe = val_pipe(files, decoder, dev, a.size, **common)
    vit = DALIGenericIterator(vpipe, ["data", "label"], reader_name="Reader", auto_reset=True,
                              last_batch_policy=LastBatchPolicy.DROP)
    val_ips = rate(endless(vit), a.warmup, a.iters, lambda b: b[0]["data"].shape[0])
    vpeers = {}
    if not a.skip_peers:
        vloader = torch.utils.data.DataLoader(PillowTrain(files, a.size, train=False), batch_size=bs,
                                              num_workers=a.workers, drop_last=True, pin_memory=gpu,
                                              persistent_workers=a.workers > 0,
                                              prefetch_factor=4 if a.workers else None)
        vpeers[f"torch DataLoader + Pillow Resize(256)/CenterCrop ({a.workers} workers)"] = \
            rate(endless(vloader), loader_warmup(a.warmup, a.workers), a.peer_iters,
                 lambda b: gpu_normalize(b[0], device).shape[0])
    report(f"ImageNet validation input -> PyTorch ({where})", "images/s", val_ips, vpeers)
    vpipe.close()


if __name__ == "__main__":
    main()

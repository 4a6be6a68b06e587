"""A user's own video-clip Dataset and DataLoader, decoding on the GPU through sluice's DataLoader proxy.

Each sample is a video file's encoded bytes plus an explicit list of frames, sampled at different rates per
segment (every frame around the start of the action, then every 4th, then every 8th). The DataLoader's workers
only read bytes and choose frames; the pipeline, in the main process, decodes the chosen frames with NVDEC
(``--device mixed``) or FFmpeg (``--device cpu``) and optionally resizes them (``--size``), and the training loop
receives CUDA tensors. Without resizing, every decoded frame of the first epoch is checked against the barcode it
carries. Example::

    python examples/proxy_video_clips.py --device mixed --workers 4
    python benchmarks/make_videos.py --out /tmp/bench_videos        # longer 720p videos, then:
    python examples/proxy_video_clips.py --videos /tmp/bench_videos --device mixed --workers 8

Without ``--videos`` it writes a few small barcode videos with PyAV (``--cpu --count 2 --epochs 1`` is a quick
run on the CPU).
"""

from __future__ import annotations

import argparse
import glob
import os
import time

import numpy as np
import torch
from torch.utils.data import Dataset

import sluice
import sluice.torch.proxy as sp
from sluice import fn, pipeline_def
from sluice.backends.video import get_index
from sluice.backends.video.barcode import read_barcodes, write_barcode_video


def clip_frames(num_frames: int, rng: np.random.Generator, length: int = 16) -> list[int]:
    """6 consecutive frames, then 5 at stride 4, then 5 at stride 8, from a random start that fits."""
    offsets = [0, 1, 2, 3, 4, 5] + [5 + 4 * k for k in range(1, 6)] + [25 + 8 * k for k in range(1, 6)]
    assert len(offsets) == length
    start = int(rng.integers(0, max(1, num_frames - offsets[-1])))
    return [min(start + o, num_frames - 1) for o in offsets]


class VideoClips(Dataset):
    """Sample i: (proxy(video=bytes, frames=[...]), video index). The frames depend only on i and the epoch."""

    def __init__(self, paths: list[str], proxy, clips_per_video: int = 8, seed: int = 0):
        self.paths, self.proxy, self.clips_per_video, self.seed = paths, proxy, clips_per_video, seed
        self.num_frames = [get_index(p).num_frames for p in paths]

    def __len__(self) -> int:
        return len(self.paths) * self.clips_per_video

    def frames_of(self, i: int) -> list[int]:
        v = i % len(self.paths)
        return clip_frames(self.num_frames[v], np.random.default_rng([self.seed, i]))

    def __getitem__(self, i: int):
        v = i % len(self.paths)
        data = np.fromfile(self.paths[v], dtype=np.uint8)
        return {"clip": self.proxy(video=data, frames=np.asarray(self.frames_of(i), np.int64)), "index": i}


@pipeline_def
def decode_clips(device: str, size: int):
    video = fn.external_source(name="video")
    frames = fn.external_source(name="frames")
    clips = fn.decoders.video(video, frames=frames, device=device)
    return fn.resize(clips, resize_x=size, resize_y=size) if size > 0 else clips


def make_demo_videos(root: str, count: int = 3) -> list[str]:
    os.makedirs(root, exist_ok=True)
    paths = []
    for k in range(count):
        path = os.path.join(root, f"clip{k}.mp4")
        if not os.path.exists(path):
            write_barcode_video(path + ".part.mp4", num_frames=120, width=160, height=96)
            os.replace(path + ".part.mp4", path)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--videos", default=None, help="folder of .mp4 files with barcoded frames")
    parser.add_argument("--device", choices=("mixed", "cpu"), default="mixed" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--size", type=int, default=0, help="resize frames to size x size (0: keep)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--cpu", action="store_true", help="decode on the CPU even if a GPU exists (--device cpu)")
    parser.add_argument("--count", type=int, default=3, help="how many barcode videos to make without --videos")
    args = parser.parse_args()
    if args.cpu:
        args.device = "cpu"

    # Without --videos: small barcode videos, made once in sluice's cache folder ($SLUICE_CACHE)
    paths = sorted(glob.glob(os.path.join(args.videos, "*.mp4"))) if args.videos else \
        make_demo_videos(str(sluice.cache_dir("examples", "barcode_videos")), args.count)
    device_id = 0 if args.device == "mixed" else None
    pipe = decode_clips(args.device, args.size, batch_size=args.batch_size, num_threads=4, device_id=device_id, seed=1)
    with sp.DALIServer(pipe) as server:
        dataset = VideoClips(paths, server.proxy)
        loader = sp.DataLoader(server, dataset, batch_size=args.batch_size, num_workers=args.workers,
                               shuffle=True, deterministic=True, persistent_workers=args.workers > 0)
        for epoch in range(args.epochs):
            start, clips, wrong = time.perf_counter(), 0, 0
            for batch in loader:
                frames = batch["clip"]  # N F H W C uint8, on the GPU with --device mixed
                clips += frames.shape[0]
                if epoch == 0 and args.size <= 0:
                    for clip, i in zip(frames.cpu().numpy(), batch["index"].tolist()):
                        wrong += sum(g != w for g, w in zip(read_barcodes(clip), dataset.frames_of(i)))
            seconds = time.perf_counter() - start
            checked = epoch == 0 and args.size <= 0
            print(f"epoch {epoch}: {clips} clips of 16 frames on {frames.device} in {seconds:.2f} s "
                  f"({clips / seconds:.1f} clips/s)" + (f", {wrong} wrong frames" if checked else ""))
            if checked and wrong:
                raise SystemExit(f"{wrong} decoded frames were not the requested ones")


if __name__ == "__main__":
    main()

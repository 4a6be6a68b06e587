"""Make the benchmark videos: H.264 (libx264) mp4 files whose every frame shows its own index as a barcode.

Long videos are encoded in parallel: the frame range is cut into chunks, each chunk is encoded by its own
libx264 process (one thread each, identical settings, so identical SPS/PPS), and the chunks' packets are
concatenated into one mp4 by stream copy with shifted timestamps. Every chunk starts with a keyframe; inside a
chunk the GOP is libx264's default (keyint 250, scene cuts); chunks are 1200 frames in every video, so
videos of any length have the same pattern of groups of pictures. Example::

    python benchmarks/make_videos.py --out /tmp/bench_videos --durations 60 300 3000 --fps 60 --size 1280x720

prints each file with its frame count and the seconds it took.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction

import numpy as np

# Chunks of 1200 frames (20 s at 60 fps) whatever the video's length: every chunk starts with a forced keyframe,
# so a chunk size that grew with the video (as it once did, 1200 frames for 60 s, 6000 for 3000 s) gave longer
# videos longer groups of pictures (mean 189 vs 209 frames) and so dearer clips for a reason that is not their
# length. SLUICE_CHUNK_FRAMES sets another size (for quick tests).
CHUNK_FRAMES = 1200


def _background(width: int, height: int) -> np.ndarray:
    """A smooth texture twice as wide as the frame; frames are windows into it that pan with time."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:height, 0:2 * width].astype(np.float32)
    img = np.zeros((height, 2 * width, 3), np.float32)
    for c in range(3):
        for _ in range(4):
            fx, fy, ph = rng.uniform(0.002, 0.03), rng.uniform(0.002, 0.03), rng.uniform(0, 6.28)
            img[..., c] += 30 * np.sin(xx * fx + yy * fy + ph)
    img += rng.normal(0, 4, img.shape)
    return np.clip(img + 128, 0, 255).astype(np.uint8)


def _frame(background: np.ndarray, index: int, width: int, height: int) -> np.ndarray:
    from sluice.backends.video.barcode import draw_barcode

    off = (index * 3) % width
    return draw_barcode(np.ascontiguousarray(background[:, off:off + width]), index)


def encode_chunk(path: str, first: int, count: int, width: int, height: int, fps: int, preset: str) -> str:
    """Encode frames ``first .. first+count-1`` into ``path`` (pts = frame index, time base 1/fps)."""
    import av

    background = _background(width, height)
    with av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": preset, "threads": "1"}
        for i in range(first, first + count):
            frame = av.VideoFrame.from_ndarray(_frame(background, i, width, height), format="rgb24")
            frame.pts = i - first
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def concat(chunks: list[tuple[str, int]], path: str, fps: int) -> None:
    """Stream-copy the chunks (path, first frame) into one mp4, shifting their timestamps."""
    import av

    with av.open(chunks[0][0]) as first:
        template = first.streams.video[0]
        with av.open(path, "w") as out:
            ost = out.add_stream_from_template(template)
            ost.time_base = Fraction(1, fps * 256)
            for chunk, first_frame in chunks:
                with av.open(chunk) as inp:
                    ist = inp.streams.video[0]
                    shift = int(round(first_frame / fps / ist.time_base))
                    for packet in inp.demux(ist):
                        if packet.size == 0:
                            continue
                        packet.pts += shift
                        packet.dts += shift
                        packet.stream = ost
                        out.mux(packet)


def make_video(path: str, seconds: float, fps: int, width: int, height: int, preset: str, workers: int) -> int:
    total = int(round(seconds * fps))
    chunk = int(os.environ.get("SLUICE_CHUNK_FRAMES", 0)) or CHUNK_FRAMES
    starts = list(range(0, total, chunk))
    tmp = tempfile.mkdtemp(prefix="sluice_chunks_", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with ProcessPoolExecutor(workers) as pool:
            futures = [pool.submit(encode_chunk, os.path.join(tmp, f"{k:05d}.mp4"), s, min(chunk, total - s),
                                   width, height, fps, preset) for k, s in enumerate(starts)]
            chunks = [(f.result(), s) for f, s in zip(futures, starts)]
        concat(chunks, path, fps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/sluice_bench_videos")
    ap.add_argument("--durations", type=float, nargs="+", default=[60, 300, 3000])
    ap.add_argument("--fps", type=int, default=60)
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--preset", default="superfast", help="libx264 preset (superfast keeps B-frames)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    args = ap.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    os.makedirs(args.out, exist_ok=True)
    for seconds in args.durations:
        path = os.path.join(args.out, f"h264_{width}x{height}_{args.fps}fps_{int(seconds)}s.mp4")
        if os.path.exists(path):
            print(f"{path}: exists, kept", flush=True)
            continue
        t0 = time.perf_counter()
        frames = make_video(path + ".part.mp4", seconds, args.fps, width, height, args.preset, args.workers)
        os.replace(path + ".part.mp4", path)
        print(f"{path}: {frames} frames, {os.path.getsize(path) / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s",
              flush=True)


if __name__ == "__main__":
    main()

"""Barcoded H.264 videos as ``peers/gen.py video`` makes them, encoded in parallel segments.

``gen.py video`` encodes in one process: a 600 s 720p60 file takes about 6 minutes on the GPU machine. Here each
of ``--jobs`` processes encodes a run of frames (the same ``gen.barcode_frame`` pictures, the same libx264
``veryfast`` settings; every segment starts with a keyframe) and the segments' packets are joined into one MP4,
their timestamps shifted by the segment's start. Frame ``i`` carries ``i`` in its barcode, as with ``gen.py``::

    python benchmarks/gen_video.py /tmp/sbs/video600.mp4 600 [FPS [W H]] [--jobs N]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from gen import barcode_frame  # noqa: E402

SEGMENT = 1500  # frames per segment: a multiple of x264's default keyframe interval (250)


def _segment(args) -> str:
    path, first, count, fps, w, h = args
    import av

    with av.open(path, "w") as out:
        s = out.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"preset": "veryfast"}
        s.codec_context.thread_count = 1  # the segments are the parallelism
        for i in range(first, first + count):
            for p in s.encode(av.VideoFrame.from_ndarray(barcode_frame(i, w, h), format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return path


def video(path: str, seconds: float, fps: int = 60, w: int = 1280, h: int = 720, jobs: int = 0) -> None:
    import av

    n = int(seconds * fps)
    tmp = tempfile.mkdtemp(prefix="gen_video_", dir=os.path.dirname(os.path.abspath(path)))
    parts = [(os.path.join(tmp, f"{k:05d}.mp4"), a, min(SEGMENT, n - a), fps, w, h)
             for k, a in enumerate(range(0, n, SEGMENT))]
    with ProcessPoolExecutor(jobs or os.cpu_count()) as ex:
        segments = list(ex.map(_segment, parts))
    with av.open(path, "w") as out:
        stream = None
        for seg, (_, first, *_rest) in zip(segments, parts):
            with av.open(seg) as src:
                vs = src.streams.video[0]
                if stream is None:
                    stream = out.add_stream_from_template(vs)
                shift = int(round(first / fps / vs.time_base))  # this segment's start on its stream's clock
                for p in src.demux(vs):
                    if p.size == 0:
                        continue
                    p.pts, p.dts = p.pts + shift, p.dts + shift
                    p.stream = stream
                    out.mux(p)
            os.remove(seg)
    os.rmdir(tmp)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("seconds", type=float)
    ap.add_argument("size", type=int, nargs="*", help="FPS [W H]")
    ap.add_argument("--jobs", type=int, default=0)
    a = ap.parse_args()
    fps = a.size[0] if a.size else 60
    w, h = (a.size[1], a.size[2]) if len(a.size) >= 3 else (1280, 720)
    video(a.path, a.seconds, fps, w, h, a.jobs)

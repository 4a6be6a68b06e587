"""Clips of chosen frames from long videos: sluice (NVDEC and PyAV, packet index) beside OpenCV and PyAV seeking.

Workload (issue 6): 64 clips of 16 frames, stride 60, random starts, from the 1280x720 60 fps H.264 videos made by
``make_videos.py`` (60 s, 300 s, 3000 s). Peers: OpenCV ``VideoCapture`` with a seek per frame and PyAV with a seek
per frame, each in 16 threads. Every returned frame is checked by its barcode (a wrong frame fails the run).
sluice rows: ``sluice-nvdec-N`` (N NVDEC sessions, a clip per client thread), ``sluice-cpu`` (PyAV, a clip per
thread), ``sluice-hybrid-N`` (the 64 clips as one batch whose groups of pictures N NVDEC sessions and 16 PyAV
worker processes share, the default; no group decoded for two clips: the work of 64 independent clips),
``sluice-hybrid-threads-N`` (the same with the PyAV work in threads, which share the GIL with the NVDEC threads)
and ``sluice-hybrid-shared-N`` (the default with a group of pictures wanted by several clips decoded once: what a
reader batch gets when clips overlap; on a short video they overlap a lot, so it is no length comparison). Also:
sequential decode of the whole 60 s video, frames/s, sluice NVDEC against OpenCV. Example::

    python benchmarks/make_videos.py --out /tmp/bench_videos
    python benchmarks/video_clips.py --videos /tmp/bench_videos

Targets: >= 4x OpenCV in clips/s on the 60 s video; the 3000 s video at most 10% slower per clip than the 60 s one.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import report, timed  # noqa: E402

from sluice.backends.video import get_index, prepare_clip, read_clips, read_frames  # noqa: E402
from sluice.backends.video.barcode import read_barcodes  # noqa: E402
from sluice.backends.video.pyav import PyAVBackend  # noqa: E402

CLIPS, LENGTH, STRIDE, THREADS = 64, 16, 60, 16


def make_requests(num_frames: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    span = (LENGTH - 1) * STRIDE
    starts = rng.integers(0, num_frames - span, CLIPS)
    return [[int(s) + STRIDE * k for k in range(LENGTH)] for s in starts]


def check(name: str, requests: list[list[int]], results: list) -> int:
    """How many returned frames are not the requested ones (read from their barcodes); printed when any."""
    bad = 0
    for req, frames in zip(requests, results):
        got = read_barcodes(frames)
        bad += sum(g != r for g, r in zip(got, req)) + abs(len(got) - len(req))
    if bad:
        print(f"WRONG FRAMES: {name} returned {bad} of {len(requests) * LENGTH} frames that were not requested",
              flush=True)
    return bad


# ------------------------------------------------------------------------------------------------- the peers
def opencv_clip(path: str, frames: list[int]) -> np.ndarray:
    import cv2

    cap = cv2.VideoCapture(path)
    out = []
    for f in frames:
        cap.set(cv2.CAP_PROP_POS_FRAMES, f)
        ok, img = cap.read()
        if not ok:
            raise RuntimeError(f"OpenCV could not read frame {f} of {path}")
        out.append(img[..., ::-1])
    cap.release()
    return np.stack(out)


def pyav_seek_clip(path: str, frames: list[int]) -> np.ndarray:
    """PyAV with a seek per frame (to the keyframe before it), decoding forward to the frame: the usual way."""
    import av
    from av.video.reformatter import VideoReformatter

    rgb = VideoReformatter()  # one swscale context for the clip (PyAV's to_ndarray makes one per frame)
    out = []
    with av.open(path) as c:
        st = c.streams.video[0]
        tb, rate = st.time_base, st.average_rate
        for f in frames:
            target = int(round(f / rate / tb))
            c.seek(target, stream=st, backward=True, any_frame=False)
            for frame in c.decode(st):
                if frame.pts >= target:
                    out.append(rgb.reformat(frame, format="rgb24", threads=1).to_ndarray())
                    break
    return np.stack(out)


def run_clips(fn, path: str, requests: list[list[int]], threads: int) -> tuple[float, list]:
    with ThreadPoolExecutor(threads) as pool, timed() as t:
        results = list(pool.map(lambda r: fn(path, r), requests))
    return t["seconds"], results


def _show_decoder_notes(limit: int) -> None:
    """Print the NVDEC backend's first ``limit`` notes (file decoder reopened or refused, with the stamps)."""
    import logging

    seen = []

    def first(record) -> bool:
        seen.append(1)
        return len(seen) <= limit

    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(first)
    handler.setFormatter(logging.Formatter("NVDEC note: %(message)s"))
    log = logging.getLogger("sluice.backends.video.nvdec")
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)


# ----------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--videos", default="/tmp/sluice_bench_videos")
    ap.add_argument("--peers", nargs="*", default=["opencv", "pyav-seek"])
    ap.add_argument("--no-gpu", action="store_true", help="skip NVDEC (CPU-only machines)")
    ap.add_argument("--sessions", type=int, nargs="+", default=[7],
                    help="NVDEC decoder sessions (= client threads) to try; the H200 has 7 NVDEC engines")
    ap.add_argument("--only", type=int, nargs="*", help="durations (s) to run, e.g. --only 60 3000")
    ap.add_argument("--no-sequential", action="store_true", help="skip the sequential decode comparison")
    ap.add_argument("--no-hybrid", action="store_true", help="skip the hybrid (NVDEC + CPU) batch rows")
    ap.add_argument("--hybrid-sessions", type=int, nargs="+", default=[7],
                    help="NVDEC sessions of the hybrid rows (beside 16 CPU workers); variants with the first")
    ap.add_argument("--cpu-workers", type=int, nargs="+", default=[],
                    help="extra hybrid rows with this many CPU worker processes (default rows: 16)")
    ap.add_argument("--no-variants", action="store_true",
                    help="skip the shared-GOP, threads and single-path diagnostic hybrid rows")
    args = ap.parse_args(argv)
    import torch

    _show_decoder_notes(limit=6)

    gpu = torch.cuda.is_available() and not args.no_gpu
    videos = sorted(glob.glob(os.path.join(args.videos, "h264_*s.mp4")),
                    key=lambda p: int(p.rsplit("_", 1)[1][:-5]))
    if args.only:
        videos = [v for v in videos if int(v.rsplit("_", 1)[1][:-5]) in args.only]
    if not videos:
        raise SystemExit(f"no videos in {args.videos}: run benchmarks/make_videos.py first")
    backends = {"sluice-cpu": PyAVBackend(threads=1)}
    if gpu:
        from sluice.backends.video.nvdec import NvdecBackend

        backends = {**{f"sluice-nvdec-{n}": NvdecBackend(device_id=0, sessions=n) for n in args.sessions}, **backends}
    batched, diagnostic = {}, {}
    if not args.no_hybrid:
        from sluice.backends.video.hybrid import HybridBackend
        from sluice.backends.video.nvdec import NvdecBackend

        for k, n in enumerate(args.hybrid_sessions if gpu else [0]):
            nvdec = backends.get(f"sluice-nvdec-{n}") or (NvdecBackend(device_id=0, sessions=n) if n else None)
            suffix = f"-{n}" if gpu else ""
            variants = [("", False, True, THREADS)]
            if k == 0 and not args.no_variants:
                variants += [("-shared", True, True, THREADS), ("-threads", False, False, THREADS)]
            if k == 0:
                variants += [(f"-w{w}", False, True, w) for w in args.cpu_workers]
            for name, share, procs, workers in variants:
                label = f"sluice-hybrid{suffix}{name}" if name.startswith("-w") else f"sluice-hybrid{name}{suffix}"
                batched[label] = HybridBackend(device_id=0, sessions=n, cpu_workers=workers, share_gops=share,
                                               cpu_processes=procs, nvdec=nvdec)
        if gpu and not args.no_variants:  # each path alone through the same batch machinery (shortest video only): is the hybrid additive?
            n = args.hybrid_sessions[0]
            nvdec = backends.get(f"sluice-nvdec-{n}") or NvdecBackend(device_id=0, sessions=n)
            diagnostic = {f"sluice-batch-nvdec-{n}": HybridBackend(device_id=0, sessions=n, cpu_workers=0,
                                                                   share_gops=False, nvdec=nvdec),
                          "sluice-batch-cpu": HybridBackend(device_id=0, sessions=0, cpu_workers=THREADS,
                                                            share_gops=False)}
    per_clip: dict[str, dict[str, float]] = {}
    failures = 0
    for path in videos:
        name = os.path.basename(path)
        with timed(sync_cuda=False) as t:
            idx = get_index(path)
        print(f"{name}: {idx.num_frames} frames, {len(idx.key_frames)} keyframes (mean GOP "
              f"{idx.gop_lengths().mean():.0f}), index ready in {t['seconds']:.2f} s", flush=True)
        requests = make_requests(idx.num_frames, seed=6)
        peers = {}
        for peer in args.peers:
            fn = {"opencv": opencv_clip, "pyav-seek": pyav_seek_clip}[peer]
            seconds, results = run_clips(fn, path, requests, THREADS)
            label = peer if not check(f"{peer} on {name}", requests, results) else f"{peer} (wrong frames)"
            peers[label] = CLIPS / seconds
        for label, backend in backends.items():
            threads = backend.sessions if label.startswith("sluice-nvdec") else THREADS

            def clip(p, r, backend=backend):
                return read_frames(p, frames=r, backend=backend, index=idx).frames

            run_clips(clip, path, requests[:threads], threads)  # warm-up: decoder sessions, CUDA context
            seconds, results = run_clips(clip, path, requests, threads)
            failures += check(f"{label} on {name}", requests, results)
            per_clip.setdefault(label, {})[name] = seconds / CLIPS
            report(f"clips 16x stride 60, {name}, {label}", "clips/s", CLIPS / seconds, peers)
            if getattr(backend, "stats", None):
                print(f"{label} runs: {backend.stats}", flush=True)
        for label, backend in {**batched, **(diagnostic if path == videos[0] else {})}.items():
            def batch(reqs, backend=backend):
                with timed() as t:
                    clips = read_clips([prepare_clip(path, frames=r, index=idx) for r in reqs], backend)
                return t["seconds"], [c.frames for c in clips]

            batch(requests[:THREADS])  # warm-up: decoder sessions, CUDA context, first speed estimates
            seconds, results = batch(requests)
            failures += check(f"{label} on {name}", requests, results)
            per_clip.setdefault(label, {})[name] = seconds / CLIPS
            stats = backend.last_stats
            total = sum(s["frames"] for s in stats.values()) or 1
            workers = {"nvdec": backend.nvdec_workers, "cpu": backend.cpu_workers}
            print(f"{label}: " + "; ".join(
                f"{p} {s['jobs']} groups of pictures, {s['frames'] / total:.0%} of the frames, workers busy "
                f"{s['seconds'] / (seconds * max(workers[p], 1)):.0%} of the batch" for p, s in stats.items()),
                flush=True)
            report(f"clips 16x stride 60, {name}, {label}", "clips/s", CLIPS / seconds, peers)
            if getattr(backend, "nvdec", None) is not None:
                print(f"{label} NVDEC runs so far: {backend.nvdec.stats}", flush=True)
    if diagnostic:  # does each path scale with its workers? one worker on 4 clips against the full rows above
        path = videos[0]
        name, idx = os.path.basename(path), get_index(path)
        requests = make_requests(idx.num_frames, seed=6)[:4]
        n = args.hybrid_sessions[0]
        for label, backend, full in (
                ("sluice-batch-nvdec-1", HybridBackend(device_id=0, sessions=1, cpu_workers=0, share_gops=False),
                 f"sluice-batch-nvdec-{n}"),
                ("sluice-batch-cpu-1", HybridBackend(device_id=0, sessions=0, cpu_workers=1, share_gops=False),
                 "sluice-batch-cpu")):
            read_clips([prepare_clip(path, frames=r, index=idx) for r in requests[:1]], backend)  # warm-up
            with timed() as t:
                clips = read_clips([prepare_clip(path, frames=r, index=idx) for r in requests], backend)
            failures += check(f"{label} on {name}", requests, [c.frames for c in clips])
            workers = n if "nvdec" in label else THREADS
            scaling = (t["seconds"] / len(requests)) / per_clip[full][name]
            print(f"{label}: {len(requests) / t['seconds']:.2f} clips/s with one worker; {full} is {scaling:.1f}x "
                  f"that with {workers} workers (perfect: {workers}x)", flush=True)
    for label, times in per_clip.items():
        names = list(times)
        if len(names) > 1:
            slow = times[names[-1]] / times[names[0]]
            note = "clips of a short video overlap: not a length comparison" if "-shared" in label else \
                "target <= 1.10"
            print(f"{label}: per-clip time of {names[-1]} / {names[0]} = {slow:.3f} ({note})", flush=True)

    if args.no_sequential:
        if failures:
            raise SystemExit(f"sluice returned {failures} wrong frames")
        return
    # sequential decode of the shortest video: frames/s
    path = videos[0]
    idx = get_index(path)
    everything = list(range(idx.num_frames))
    peers = {}
    if "opencv" in args.peers:
        import cv2

        with timed(sync_cuda=False) as t:
            cap = cv2.VideoCapture(path)
            n = 0
            while cap.read()[0]:
                n += 1
        peers["opencv"] = n / t["seconds"]
    # requests cut at keyframes, >= 300 frames each, so nothing is decoded twice and memory stays small
    keys = idx.key_frames.tolist() + [idx.num_frames]
    cuts = [0]
    for k in keys[1:]:
        if k - cuts[-1] >= 300 or k == idx.num_frames:
            cuts.append(k)
    for label, backend in backends.items():
        threads = backend.sessions if label.startswith("sluice-nvdec") else THREADS

        def run(ab, backend=backend):
            a, b = ab
            frames = read_frames(path, frames=everything[a:b], backend=backend, index=idx).frames
            return sum(g != w for g, w in zip(read_barcodes(frames[::50]), everything[a:b:50]))

        # groups of pictures decoded concurrently, one per decoder session (NVDEC) or thread (CPU)
        with ThreadPoolExecutor(threads) as pool, timed() as t:
            bad = sum(pool.map(run, zip(cuts[:-1], cuts[1:])))
        if bad:
            print(f"WRONG FRAMES: {label} sequential decode returned {bad} wrong frames", flush=True)
            failures += bad
        report(f"sequential decode, {os.path.basename(path)}, {label}", "frames/s", idx.num_frames / t["seconds"],
               peers)
    if failures:
        raise SystemExit(f"sluice returned {failures} wrong frames")

if __name__ == "__main__":
    main()

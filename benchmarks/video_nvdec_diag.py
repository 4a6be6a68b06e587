"""Where the NVDEC path's time goes, on one video (diagnostic for issue 6; needs a GPU and PyNvVideoCodec).

Sections (each prints its own lines, a failure in one does not stop the others):

- ``api``: the decoder object's methods (PyNvVideoCodec changes between versions).
- ``gil``: how much a busy Python thread still runs while NVDEC decodes clips in another thread (1.0: the decode
  call gives the GIL up; near 0: it holds it).
- ``breakdown``: clips through ``NvdecBackend`` with 1 session (one thread) and N sessions (N threads): clips/s,
  packets fed and frames NVDEC returned per clip, and the share of the time spent inside PyNvVideoCodec's
  ``Decode`` against the Python around it.
- ``seekpts``: one group of pictures fed whole, with and without ``SetSeekPTS`` (which frames come back, and how
  long it takes): whether NVDEC can be told not to hand back the frames before a wanted one.
- ``simple``: PyNvVideoCodec's own ``SimpleDecoder.get_batch_frames_by_index`` on the same clips in N threads,
  every frame checked by its barcode: how fast NVDEC goes with no Python per packet.
- ``stamps`` (not by default): a fresh SimpleDecoder per clip, each clip's stamps against the index and its
  frames' barcodes: which requests get stamps that do not prove their frames. Example::

    python benchmarks/video_nvdec_diag.py --video /tmp/video_bench/h264_1280x720_60fps_60s.mp4
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from video_clips import CLIPS, check, make_requests  # noqa: E402

from sluice.backends.video import get_index  # noqa: E402
from sluice.backends.video.barcode import read_barcodes  # noqa: E402
from sluice.backends.video.index import reusable_container, video_stream  # noqa: E402
from sluice.backends.video.nvdec import NvdecBackend, _Session, frame_pts  # noqa: E402


def section(name):
    def wrap(fn):
        def run(*a, **k):
            print(f"--- {name}", flush=True)
            t0 = time.perf_counter()
            try:
                fn(*a, **k)
            except Exception:  # noqa: BLE001 - a diagnostic: report and go on
                traceback.print_exc()
            print(f"--- {name} took {time.perf_counter() - t0:.1f} s", flush=True)
        return run
    return wrap


class FeedTimer:
    """Wraps ``_Session.feed`` to count packets, returned frames and the seconds spent inside it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()
        self._orig = _Session.feed

    def reset(self):
        self.packets = self.frames = 0
        self.seconds = 0.0

    def __enter__(self):
        orig, timer = self._orig, self

        def feed(session, data, pts):
            t0 = time.perf_counter()
            out = orig(session, data, pts)
            dt = time.perf_counter() - t0
            with timer.lock:
                timer.packets += 1
                timer.frames += len(out)
                timer.seconds += dt
            return out

        _Session.feed = feed
        return self

    def __exit__(self, *exc):
        _Session.feed = self._orig


@section("api")
def api(path, idx):
    backend = NvdecBackend(sessions=1)
    key, session = backend._acquire("H264", idx.width, idx.height, idx.name)
    print("decoder methods:", [m for m in dir(session.decoder) if not m.startswith("_")], flush=True)
    import PyNvVideoCodec as nvc
    print("module:", [m for m in dir(nvc) if not m.startswith("_")], flush=True)
    backend._release(key, session, False)


@section("gil")
def gil(path, idx, requests):
    backend = NvdecBackend(sessions=1)
    backend.decode(path, idx, requests[0])  # warm-up

    def spin(seconds, stop=None):
        n, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end and not (stop and stop.is_set()):
            n += 1
        return n

    t0 = time.perf_counter()
    base = spin(0.5) / (time.perf_counter() - t0)
    stop = threading.Event()
    counts = []
    th = threading.Thread(target=lambda: counts.append(spin(60, stop)))
    t0 = time.perf_counter()
    th.start()
    for r in requests[:8]:
        backend.decode(path, idx, r)
    stop.set()
    th.join()
    busy = counts[0] / (time.perf_counter() - t0)
    print(f"spinner alone {base:,.0f}/s; beside NVDEC decoding (1 thread) {busy:,.0f}/s: {busy / base:.2f} of it",
          flush=True)


@section("breakdown")
def breakdown(path, idx, requests, sessions):
    for n in (1, sessions):
        backend = NvdecBackend(sessions=n)
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lambda r: backend.decode(path, idx, r), requests[:n]))  # sessions made, warm
        reqs = requests[: 16 if n == 1 else len(requests)]
        with FeedTimer() as timer, ThreadPoolExecutor(n) as pool:
            t0 = time.perf_counter()
            results = list(pool.map(lambda r: backend.decode(path, idx, r), reqs))
            wall = time.perf_counter() - t0
        bad = check(f"nvdec-{n}", reqs, [np.stack([d[f].cpu().numpy() for f in r]) for r, d in zip(reqs, results)])
        print(f"sessions {n}: {len(reqs) / wall:.2f} clips/s; per clip {timer.packets / len(reqs):.0f} packets fed, "
              f"{timer.frames / len(reqs):.0f} frames returned; inside feed {timer.seconds:.2f} s of "
              f"{wall * n:.2f} thread-s ({timer.seconds / (wall * n):.0%}); "
              f"{timer.packets / wall:,.0f} packets/s; wrong frames {bad}", flush=True)


def _gop_packets(backend, container, stream, idx, key, nxt):
    out = []
    for data, pts in backend._packets(container, stream, idx, key, set(range(key, nxt))):
        if idx.frame_of_pts(int(pts)) >= nxt:
            break
        out.append((bytes(data), pts))
    return out


@section("seekpts")
def seekpts(path, idx):
    backend = NvdecBackend(sessions=1)
    keys = idx.key_frames
    k = 3 if len(keys) > 4 else 0
    key, nxt = int(keys[k]), int(keys[k + 1]) if k + 1 < len(keys) else idx.num_frames
    target = key + (nxt - key) * 2 // 3
    with reusable_container(path, "diag") as container:
        stream = video_stream(container, idx.name)
        packets = _gop_packets(backend, container, stream, idx, key, nxt)
    ck, session = backend._acquire("H264", idx.width, idx.height, idx.name)
    dec = session.decoder
    print(f"GOP of keyframe {key}: {nxt - key} frames, {len(packets)} packets; target frame {target}", flush=True)

    def run(seek):
        if seek is not None:
            dec.SetSeekPTS(int(seek))
        got = []
        t0 = time.perf_counter()
        for data, pts in packets:
            got += session.feed(data, pts)
        got += session.feed(None, 0)
        torch_sync()
        dt = time.perf_counter() - t0
        numbers = [idx.frame_of_pts(frame_pts(f)) for f in got]
        return dt, numbers, got

    for label, seek in (("plain", None), ("SetSeekPTS(target)", int(idx.pts[target])), ("plain again", None),
                        ("SetSeekPTS(0)", 0)):
        try:
            times, numbers = [], []
            for _ in range(3):
                dt, numbers, got = run(seek)
                times.append(dt)
            first = numbers[:3] + ["..."] + numbers[-2:] if len(numbers) > 6 else numbers
            tail = ""
            if seek and numbers and target in numbers:
                frame = got[numbers.index(target)]
                tail = f"; barcode of the target frame {read_barcodes(session.to_rgb(frame)[None])[0]}"
            print(f"{label}: {len(numbers)} frames back {first}, {min(times) * 1e3:.1f} ms "
                  f"({(nxt - key) / min(times):,.0f} frames/s){tail}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{label}: {type(e).__name__}: {e}", flush=True)
    backend._release(ck, session, True)


def torch_sync():
    import torch
    torch.cuda.synchronize()


@section("simple")
def simple(path, idx, requests, sessions):
    import PyNvVideoCodec as nvc
    import torch

    local = threading.local()

    def clip(req):
        dec = getattr(local, "dec", None)
        if dec is None:
            dec = local.dec = nvc.SimpleDecoder(path, gpu_id=0, use_device_memory=True,
                                                output_color_type=nvc.OutputColorType.RGB)
        frames = dec.get_batch_frames_by_index(req)
        return torch.stack([torch.from_dlpack(f) for f in frames])

    for n in (1, sessions):
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(clip, requests[:n]))
            reqs = requests[: 16 if n == 1 else len(requests)]
            t0 = time.perf_counter()
            results = list(pool.map(clip, reqs))
            torch_sync()
            wall = time.perf_counter() - t0
        shapes = {tuple(r.shape) for r in results}
        fixed = [r if r.shape[-1] == 3 else r.permute(0, 2, 3, 1) for r in results]
        bad = check(f"simple-{n}", reqs, fixed)
        print(f"SimpleDecoder, {n} threads: {len(reqs) / wall:.2f} clips/s, shapes {shapes}, wrong frames {bad}",
              flush=True)


@section("stamps")
def stamps(path, idx, requests, sessions):
    """Per request, a fresh SimpleDecoder: its frames' barcodes and stamps against the index (which frames
    SimpleDecoder returns, and whether its stamps say so), with the request's keyframe and its place in the GOP."""
    import PyNvVideoCodec as nvc
    import torch

    def one(req):
        dec = nvc.SimpleDecoder(path, gpu_id=0, use_device_memory=True, output_color_type=nvc.OutputColorType.RGB)
        frames = dec.get_batch_frames_by_index(req)
        got = [frame_pts(f) for f in frames]
        pix = torch.stack([torch.from_dlpack(f) for f in frames])
        pix = pix if pix.shape[-1] == 3 else pix.permute(0, 2, 3, 1)
        codes = read_barcodes(pix)
        return req, got, codes

    step = int(np.median(np.diff(idx.pts[np.argsort(idx.pts)])))
    with ThreadPoolExecutor(sessions) as pool:
        for req, got, codes in pool.map(one, requests):
            key = int(idx.key_frames[np.searchsorted(idx.key_frames, req[0], side="right") - 1])
            offs = sorted({(g - int(idx.pts[f])) / step for g, f in zip(got, req)})
            wrong = sum(c != f for c, f in zip(codes, req))
            print(f"STAMPS req {req[0]}..{req[-1]} key {key} (+{req[0] - key}): stamp - pts in frames {offs}; "
                  f"wrong pixels {wrong}; first barcodes {list(codes[:3])}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--video", required=True)
    ap.add_argument("--sessions", type=int, default=7)
    ap.add_argument("--sections", nargs="*", default=["api", "gil", "breakdown", "seekpts", "simple"])
    args = ap.parse_args(argv)
    idx = get_index(args.video)
    requests = make_requests(idx.num_frames, seed=1)[:CLIPS]
    print(f"{args.video}: {idx.num_frames} frames, mean GOP {np.mean(idx.gop_lengths()):.0f}", flush=True)
    for name in args.sections:
        fn = globals()[name]
        if name in ("api", "seekpts"):
            fn(args.video, idx)
        elif name == "gil":
            fn(args.video, idx, requests)
        else:
            fn(args.video, idx, requests, args.sessions)


if __name__ == "__main__":
    main()

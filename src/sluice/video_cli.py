"""``sluice probe VIDEO`` and ``sluice index PATH...``: what a video holds, and its frame index built ahead of time.

``probe`` reports codec, size, frame count, duration, constant or variable frame rate and GOP lengths, from the
packet index (no decoding). ``index`` builds the indexes of every video under the given files or folders into
the on-disk cache (``video_index`` in ``$SLUICE_CACHE``, or ``$SLUICE_VIDEO_INDEX_DIR``), so that training starts
without demuxing its videos. The lead's ``cli.py`` calls :func:`add_subcommands`. Example::

    $ sluice probe clip.mp4
    $ sluice index /data/videos --workers 16
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

import numpy as np

from sluice.backends.video.index import VideoError, cache_dir, get_index

logger = logging.getLogger(__name__)

VIDEO_EXTENSIONS = (".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v")


def probe(path: str) -> dict:
    """Facts about a video from its packet index: codec, size, frames, duration, CFR/VFR, GOP lengths."""
    idx = get_index(path)
    gops = idx.gop_lengths()
    intervals = idx.frame_intervals * float(idx.time_base)
    return {
        "path": os.fspath(path),
        "container": idx.container,
        "codec": idx.codec,
        "pix_fmt": idx.pix_fmt,
        "width": idx.width,
        "height": idx.height,
        "frames": idx.num_frames,
        "duration_s": round(idx.end_time - (idx.times[0] if idx.num_frames else 0.0), 6),
        "fps": round(idx.fps, 6),
        "frame_rate": "VFR" if idx.is_vfr else "CFR",
        "frame_interval_s": {"min": float(intervals.min()), "max": float(intervals.max())} if len(intervals)
        else None,
        "keyframes": int(len(idx.key_frames)),
        "gop_lengths": {"min": int(gops.min()), "max": int(gops.max()), "mean": round(float(gops.mean()), 3)}
        if len(gops) else None,
        "b_frames": bool(not np.array_equal(idx.decode_order, np.arange(idx.num_frames))),
    }


def find_videos(paths: Iterable[str]) -> list[str]:
    """The video files among ``paths`` and below the folders among them, sorted."""
    found = []
    for p in paths:
        if os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames.sort()
                found.extend(os.path.join(dirpath, f) for f in sorted(filenames)
                             if f.lower().endswith(VIDEO_EXTENSIONS))
        else:
            found.append(p)
    return found


def index(paths: Iterable[str], workers: int = 4) -> dict[str, str]:
    """Build (or find cached) the frame index of every video; returns {path: 'ok' | error message}."""
    files = find_videos(paths)

    def one(path: str) -> tuple[str, str]:
        try:
            idx = get_index(path)
            return path, f"ok ({idx.num_frames} frames)"
        except (VideoError, OSError, ValueError) as e:
            return path, f"error: {e}"

    with ThreadPoolExecutor(max(1, workers)) as pool:
        return dict(pool.map(one, files))


def _probe_command(args: argparse.Namespace) -> int:
    status = 0
    for path in args.videos:
        try:
            info = probe(path)
        except (VideoError, OSError, ValueError) as e:
            print(f"{path}: {e}")
            status = 1
            continue
        if args.json:
            print(json.dumps(info))
        else:
            print(f"{path}:")
            for key, value in info.items():
                if key != "path":
                    print(f"  {key}: {value}")
    return status


def _index_command(args: argparse.Namespace) -> int:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - progress bars are optional
        tqdm = None
    files = find_videos(args.paths)
    results = {}
    with ThreadPoolExecutor(max(1, args.workers)) as pool:
        it = pool.map(lambda p: (p, index([p], workers=1).get(p, "error: not found")), files)
        if tqdm is not None:
            it = tqdm(it, total=len(files), unit="video")
        for path, result in it:
            results[path] = result
    bad = {p: r for p, r in results.items() if r.startswith("error")}
    for path, result in bad.items():
        print(f"{path}: {result}")
    print(f"indexed {len(results) - len(bad)} of {len(results)} videos into {cache_dir()}")
    return 1 if bad else 0


def at_least(low: int) -> Any:
    """An argparse type: a whole number >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {value}")
        return value

    parse.__name__ = f"whole number >= {low}"
    return parse


def add_subcommands(subparsers) -> None:
    """Add ``probe`` and ``index`` to the ``sluice`` command's subparsers."""
    p = subparsers.add_parser("probe", help="codec, size, frames, duration, CFR/VFR and GOP lengths of videos")
    p.add_argument("videos", nargs="+", help="video files")
    p.add_argument("--json", action="store_true", help="one JSON object per video")
    p.set_defaults(func=_probe_command)
    q = subparsers.add_parser("index", help="build the frame indexes of videos ahead of training")
    q.add_argument("paths", nargs="+", help="video files or folders (searched recursively)")
    q.add_argument("--workers", type=at_least(1), default=os.cpu_count() or 4, help="videos indexed at once")
    q.set_defaults(func=_index_command)


def main(argv: list[str] | None = None) -> int:
    """Run ``probe`` / ``index`` standalone (``python -m sluice.video_cli probe clip.mp4``)."""
    parser = argparse.ArgumentParser(prog="sluice")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

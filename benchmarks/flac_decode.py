"""FLAC decoding (issue 19, ``audio_flac``): sluice's own FLAC decoder (the compiled core's flac.cpp) beside
libsndfile, the core's path before it (the same AudioFiles calls with ``sluice._core.native_flac(False)``: libsndfile
fed from memory through C callbacks, the GIL released), and beside soundfile.read.

Workload: N clips of 10 s, 44.1 kHz, 16-bit mono chirps + noise made as benchmarks/peers/gen.py makes them
(``gen.py audio DIR N 10`` then ``gen.py flac WAV_DIR FLAC_DIR``: they barely compress), read into memory first;
each is decoded whole to float32, downmixed (what ``decoders.audio(dtype=FLOAT, downmix=True)`` asks), into one
preallocated buffer. One thread decodes all clips in one call; two threads each decode half (the CPU decoder's
chunks). soundfile.read is one thread. One thread's figures are clips per second of that thread's CPU time
(time.thread_time: steady on a shared machine), the others' per second of wall time. Every figure is the best of
``--rounds`` rounds. Example::

    python benchmarks/flac_decode.py --files 64 --rounds 5
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from common import report  # noqa: E402
import gen  # noqa: E402


def make_clips(root: str, files: int) -> list[bytes]:
    """The FLACs of gen.py's clips (written under root once), as bytes."""
    wav, flac = os.path.join(root, "wav"), os.path.join(root, "flac")
    if len(glob.glob(os.path.join(flac, "*.flac"))) < files:
        gen.audio(wav, files, 10.0)
        gen.flac(wav, flac)
    paths = sorted(glob.glob(os.path.join(flac, "*.flac")))[:files]
    return [open(p, "rb").read() for p in paths]


def core_clips_per_second(clips: list[bytes], threads: int, native_flac: bool) -> float:
    """clips/s of the core's AudioFiles (open: headers; decode: float32 downmix) over all clips."""
    from sluice import native
    from sluice.backends.audio import plan_windows
    from sluice.native.audio import open_files

    core = native.core()
    before = core.native_flac(native_flac)
    try:
        n = len(clips)
        data = [np.frombuffer(c, np.uint8) for c in clips]
        clock = time.thread_time if threads == 1 else time.perf_counter
        start = clock()
        with open_files(data, [f"clip{i}.flac" for i in range(n)]) as fl:
            st, nr, no, errors = plan_windows(fl.rate, fl.frames, [0.0] * n, [0.0] * n)
            assert not errors and not fl.failures
            out = _buffer(int(no.sum()))
            offsets = (np.cumsum(no) - no) * 4
            bounds = np.linspace(0, n, threads + 1).astype(int)
            if threads == 1:
                failed = fl.decode(0, n, out, offsets, st, nr, no, "float32", True)
            else:
                with ThreadPoolExecutor(threads) as pool:
                    parts = pool.map(lambda lh: fl.decode(lh[0], lh[1], out, offsets, st, nr, no, "float32", True),
                                     zip(bounds[:-1], bounds[1:]))
                    failed = {k: v for part in parts for k, v in part.items()}
            assert not failed, failed
        return n / (clock() - start)
    finally:
        core.native_flac(before)


_buffers: dict[int, np.ndarray] = {}


def _buffer(n: int) -> np.ndarray:
    """One output buffer per size, touched once (no page faults inside the timing)."""
    if n not in _buffers:
        _buffers[n] = np.zeros(n, np.float32)
    return _buffers[n]


def soundfile_clips_per_second(clips: list[bytes]) -> float:
    import soundfile

    start = time.thread_time()
    for c in clips:
        soundfile.read(io.BytesIO(c), dtype="float32")
    return len(clips) / (time.thread_time() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=64, help="clips of 10 s")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of measurements; each figure is the best")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--root", default="", help="folder for the clips (default: a temporary one, removed after)")
    args = ap.parse_args()
    from sluice import native

    if not native.available() or not hasattr(native.core(), "native_flac"):
        raise SystemExit("sluice's compiled core is not built: python setup.py build_ext --inplace")
    with tempfile.TemporaryDirectory(prefix="sluice_flac_") as tmp:
        clips = make_clips(args.root or tmp, args.files)
    mb = sum(map(len, clips)) / 1e6
    print(f"{len(clips)} FLACs of 10 s at 44100 Hz, 16-bit mono (gen.py), {mb:.1f} MB; float32 downmix; best of "
          f"{args.rounds} rounds", flush=True)
    counts = [int(t) for t in args.threads.split(",")]
    measures = {("soundfile.read", 1): lambda: soundfile_clips_per_second(clips)}
    for t in counts:
        measures[("sluice", t)] = lambda t=t: core_clips_per_second(clips, t, True)
        measures[("libsndfile", t)] = lambda t=t: core_clips_per_second(clips, t, False)
    for measure in measures.values():                                # warm-up: libsndfile opened, buffers made
        measure()
    best = dict.fromkeys(measures, 0.0)
    for _ in range(args.rounds):                                      # interleaved: noise hits every row alike
        for key, measure in measures.items():
            best[key] = max(best[key], measure())
    for threads in counts:
        peers = {f"libsndfile (the core's path before), {threads} thread(s)": best[("libsndfile", threads)]}
        if threads == 1:
            peers["soundfile.read, 1 thread"] = best[("soundfile.read", 1)]
        unit = "clips per CPU-s" if threads == 1 else "clips/s"
        report(f"FLAC s16 mono 10 s -> float32 downmix, sluice's flac.cpp, {threads} thread(s)", unit,
               best[("sluice", threads)], peers)


if __name__ == "__main__":
    main()

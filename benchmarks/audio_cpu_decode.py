"""CPU audio decoding (issue 19): sluice's ``readers.file -> decoders.audio(dtype=FLOAT, downmix=True)`` on the CPU
beside the least a decoder must do.

Workload: N clips of 10 s, 44.1 kHz, 16-bit mono (``make_audio.clip``), written once as WAV and as FLAC in a
temporary folder; batches of 64; sluice pipelines on the CPU (``device_id=None``) with ``--threads`` threads.

* WAV: the pipeline's clips/s beside a one-thread NumPy conversion of the same bytes, read into memory beforehand
  (``np.frombuffer(payload, '<i2').astype(np.float32) / 32768``, clip after clip: its buffers are recycled by the
  C heap and stay in cache). Target (issue 19): >= 0.7x. The pipeline runs with the compiled core and with its
  pure-Python twin (soundfile reading through Python callbacks: the path before the core). Two stage rows say
  where the time goes: readers.file alone, and decoders.audio's work alone on batches already in memory.
* FLAC: the pipeline with the core beside the same pipeline on the twin.

Every figure is the best of ``--rounds`` rounds (this machine may be shared); each pipeline runs one warm-up
batch, then ``--epochs`` epochs. The process first frees one 8 MiB array: glibc then serves blocks of that size
from its heap instead of mapping fresh pages for each (its dynamic mmap threshold), which every long-running
process reaches soon; without it the NumPy row swings 20-fold with the allocator's state. Example::

    python benchmarks/audio_cpu_decode.py --files 256
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import report, timed  # noqa: E402
from make_audio import clip  # noqa: E402

RATE, SECONDS, BATCH = 44100, 10.0, 64


def write_clips(root: str, files: int, fmt: str) -> list[str]:
    """Write ``files`` clips as ``fmt`` ("WAV" or "FLAC", 16-bit) under ``root/<fmt>/c``; returns their paths."""
    import soundfile

    folder = os.path.join(root, fmt.lower(), "c")
    os.makedirs(folder, exist_ok=True)
    for i in range(files):
        path = os.path.join(folder, f"clip_{i:05d}.{fmt.lower()}")
        if not os.path.exists(path):
            soundfile.write(path, clip(i, SECONDS, RATE), RATE, format=fmt, subtype="PCM_16")
    return sorted(glob.glob(os.path.join(folder, "*")))


def _native(use_core: bool):
    from sluice import native

    if use_core and not native.available():
        raise SystemExit("sluice's compiled core is not built: python setup.py build_ext --inplace")
    return contextlib.nullcontext() if use_core else native.fallback()


def pipeline_clips_per_second(root: str, files: int, threads: int, epochs: int, use_core: bool,
                              decode: bool = True) -> float:
    """clips/s of readers.file -> decoders.audio(FLOAT, downmix) on the CPU (only readers.file without
    ``decode``) over ``epochs`` epochs."""
    from sluice import fn, pipeline_def, types

    @pipeline_def(batch_size=BATCH, num_threads=threads, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(file_root=root)
        if not decode:
            return data
        audio, _ = fn.decoders.audio(data, dtype=types.FLOAT, downmix=True)
        return audio

    def run(p, batches: int) -> None:
        for _ in range(batches):
            try:
                p.run()
            except StopIteration:
                p.reset()
                p.run()

    with _native(use_core):
        p = pipe()
        run(p, 1)                                                      # warm-up: imports, first allocations
        batches = max(1, epochs * files // BATCH)
        with timed(sync_cuda=False) as t:
            run(p, batches)
        p.close()
    return batches * BATCH / t["seconds"]


def decoder_alone_clips_per_second(paths: list[str], threads: int, epochs: int) -> float:
    """clips/s of decoders.audio's work (sluice.ops.audio.decoder.decode_files, the core) on batches already read
    into memory, in a pool of ``threads``: the decoder without readers.file."""
    import torch

    from sluice.ops.audio.decoder import decode_files
    from sluice.pipeline.batch import Batch

    batches = [Batch([torch.from_numpy(np.fromfile(p, np.uint8)) for p in paths[i: i + BATCH]])
               for i in range(0, len(paths) - BATCH + 1, BATCH)]
    zeros = [0.0] * BATCH
    with ThreadPoolExecutor(threads) if threads > 1 else contextlib.nullcontext() as pool, _native(True):
        def step(batch) -> None:
            decode_files(batch, paths[:BATCH], dtype="float32", downmix=True, start_time=zeros, duration=zeros,
                         pool=pool)

        step(batches[0])
        with timed(sync_cuda=False) as t:
            for _ in range(epochs):
                for batch in batches:
                    step(batch)
    return epochs * len(batches) * BATCH / t["seconds"]


def numpy_clips_per_second(paths: list[str], repeats: int) -> float:
    """clips/s of a one-thread NumPy conversion of the WAVs' payloads (read into memory first; 44-byte headers)."""
    payloads = []
    for path in paths:
        with open(path, "rb") as f:
            payloads.append(f.read()[44:])
    np.frombuffer(payloads[0], "<i2").astype(np.float32) / 32768     # warm-up
    with timed(sync_cuda=False) as t:
        for _ in range(repeats):
            for payload in payloads:
                np.frombuffer(payload, "<i2").astype(np.float32) / 32768
    return repeats * len(payloads) / t["seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=256, help="clips per format (a multiple of 64)")
    ap.add_argument("--threads", type=int, default=2, help="the pipeline's num_threads")
    ap.add_argument("--epochs", type=int, default=2, help="epochs timed per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of measurements; each figure is the best")
    ap.add_argument("--root", default="", help="folder for the clips (default: a temporary one, removed after)")
    args = ap.parse_args()
    np.ones(8 << 20, np.uint8)                   # freed at once: the C heap's steady state (module docstring)

    with tempfile.TemporaryDirectory(prefix="sluice_audio_cpu_") as tmp:
        root = args.root or tmp
        start = time.perf_counter()
        wavs = write_clips(root, args.files, "WAV")
        flacs = write_clips(root, args.files, "FLAC")
        print(f"{args.files} clips of {SECONDS:g} s at {RATE} Hz, 16-bit mono, as WAV and FLAC in {root} "
              f"({time.perf_counter() - start:.1f} s to write); batches of {BATCH}, {args.threads} threads, best of "
              f"{args.rounds} rounds", flush=True)
        for path in wavs + flacs:                                      # page cache warm for everyone
            with open(path, "rb") as f:
                f.read()
        wav_root, flac_root = os.path.join(root, "wav"), os.path.join(root, "flac")
        measures = {
            "numpy": lambda: numpy_clips_per_second(wavs, args.epochs),
            "wav core": lambda: pipeline_clips_per_second(wav_root, args.files, args.threads, args.epochs, True),
            "wav twin": lambda: pipeline_clips_per_second(wav_root, args.files, args.threads, args.epochs, False),
            "reader": lambda: pipeline_clips_per_second(wav_root, args.files, args.threads, args.epochs, True,
                                                        decode=False),
            "decoder": lambda: decoder_alone_clips_per_second(wavs, args.threads, args.epochs),
            "flac core": lambda: pipeline_clips_per_second(flac_root, args.files, args.threads, args.epochs, True),
            "flac twin": lambda: pipeline_clips_per_second(flac_root, args.files, args.threads, args.epochs, False),
        }
        best = dict.fromkeys(measures, 0.0)
        for _ in range(args.rounds):                                  # interleaved: noise hits every row alike
            for name, measure in measures.items():
                best[name] = max(best[name], measure())
        peer = {"numpy one-thread conversion": best["numpy"]}
        report("WAV s16 mono 10 s -> float32 downmix, readers.file + decoders.audio, core", "clips/s",
               best["wav core"], peer)
        report("WAV ... the same pipeline on the soundfile twin (the path before the core)", "clips/s",
               best["wav twin"], peer)
        report("WAV stage: readers.file alone", "clips/s", best["reader"], peer)
        report("WAV stage: decoders.audio alone (core, batches in memory)", "clips/s", best["decoder"], peer)
        report("FLAC s16 mono 10 s -> float32 downmix, readers.file + decoders.audio, core", "clips/s",
               best["flac core"], {"sluice on the soundfile twin": best["flac twin"]})


if __name__ == "__main__":
    main()

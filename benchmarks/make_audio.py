"""Make the audio benchmark's data set: WAV files of tone sweeps with noise, 16-bit mono (soundfile).

Default (issue 5): 1024 files of 10 s at 44.1 kHz in 8 class folders, about 900 MB. Example::

    python benchmarks/make_audio.py --out /tmp/sluice_bench_audio --files 1024 --seconds 10 --rate 44100
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def clip(index: int, seconds: float, rate: int) -> np.ndarray:
    """A deterministic clip: a tone sweep whose range depends on ``index``, a second tone and a little noise."""
    rng = np.random.default_rng(index)
    n = int(round(seconds * rate))
    t = np.arange(n) / rate
    f0, f1 = rng.uniform(80, 400), rng.uniform(1000, 7000)
    sweep = np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * seconds)))
    tone = np.sin(2 * np.pi * rng.uniform(200, 3000) * t)
    x = 0.5 * sweep + 0.2 * tone + 0.02 * rng.standard_normal(n)
    return (np.clip(x, -1, 1) * 32767).astype(np.int16)


def make(out: str, files: int = 1024, seconds: float = 10.0, rate: int = 44100, classes: int = 8,
         threads: int = 8) -> list[str]:
    """Write the files (skipping those already there) and return their paths."""
    import soundfile

    paths = [os.path.join(out, f"class_{i % classes}", f"clip_{i:05d}.wav") for i in range(files)]
    for c in range(min(classes, files)):
        os.makedirs(os.path.join(out, f"class_{c}"), exist_ok=True)

    def write(i: int) -> None:
        if not os.path.exists(paths[i]):
            soundfile.write(paths[i], clip(i, seconds, rate), rate, subtype="PCM_16")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(files)))
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/sluice_bench_audio")
    ap.add_argument("--files", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=44100)
    args = ap.parse_args(argv)
    paths = make(args.out, args.files, args.seconds, args.rate)
    print(f"{len(paths)} WAV files of {args.seconds:g} s at {args.rate} Hz in {args.out}")


if __name__ == "__main__":
    main()

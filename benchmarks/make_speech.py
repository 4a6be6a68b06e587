"""Make speech-shaped audio for the speech benchmarks: utterances of LibriSpeech's spread of lengths, with silence
at both ends, as WAV or FLAC; or a mixed-rate set (8, 16, 22.05, 44.1 and 48 kHz, mono and stereo).

The lengths follow LibriSpeech's training sets (about 1-35 s, most between 10 and 17 s): a mixture of a short tail
(1-6 s) and a bulk around 14 s, clipped to [1, 35] s. Each file is a "speech" part (syllable-like bursts of
band-limited noise and voiced harmonics, 45-65 dB above the floor) between 0.1-1.5 s of near-silence (-75 dB noise)
at each end, so that ``fn.nonsilent_region(cutoff_db=-60)`` has work to do. Each file's randomness comes from its
index: the set is the same on every machine.

    python benchmarks/make_speech.py OUT                       # 1536 WAVs, 16 kHz mono 16-bit
    python benchmarks/make_speech.py OUT --format flac
    python benchmarks/make_speech.py OUT --lengths 1.5 16       # uniform lengths in [1.5, 16] s instead
    python benchmarks/make_speech.py OUT --mixed-rates          # rates 8-48 kHz, a third stereo
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

MIXED_RATES = (8000, 16000, 22050, 44100, 48000)


def utterance_seconds(rng: np.random.Generator, lengths: tuple[float, float] | None) -> float:
    """One utterance's length: LibriSpeech's spread, or uniform in ``lengths``."""
    if lengths is not None:
        return float(rng.uniform(*lengths))
    if rng.random() < 0.15:
        return float(rng.uniform(1.0, 6.0))
    return float(np.clip(rng.normal(14.0, 3.5), 1.0, 35.0))


def utterance(index: int, rate: int, lengths: tuple[float, float] | None, channels: int = 1) -> np.ndarray:
    """A deterministic speech-like signal (float in [-1, 1], ``(n,)`` or ``(n, channels)``)."""
    rng = np.random.default_rng(index)
    total = utterance_seconds(rng, lengths)
    lead, tail = rng.uniform(0.1, 1.5, size=2)
    speech = max(0.3, total - lead - tail)
    n_lead, n_speech, n_tail = (int(round(s * rate)) for s in (lead, speech, tail))
    n = n_lead + n_speech + n_tail
    x = rng.standard_normal(n) * 10 ** (-75 / 20)                     # the floor: -75 dB
    t = np.arange(n_speech) / rate
    voiced = np.zeros(n_speech)
    f0 = rng.uniform(90, 220)
    for h in range(1, 12):                                           # a harmonic voice with a gliding pitch
        voiced += np.sin(2 * np.pi * h * f0 * (t + 0.02 * np.sin(2 * np.pi * 0.7 * t))) / h
    noise = np.convolve(rng.standard_normal(n_speech), np.ones(8) / 8, mode="same")
    syllables = rng.uniform(3.0, 6.0)                                # bursts per second, with short gaps
    envelope = np.clip(np.sin(np.pi * syllables * t + rng.uniform(0, np.pi)), 0, None) ** 0.5
    level = 10 ** (rng.uniform(-30, -10) / 20)
    x[n_lead: n_lead + n_speech] += level * envelope * (0.6 * voiced / 3 + 0.4 * noise)
    x = np.clip(x, -1, 1)
    if channels > 1:
        x = np.stack([x * (1 - 0.1 * c) for c in range(channels)], axis=1)
    return x


def _write(job) -> str:
    import soundfile

    index, path, rate, lengths, channels, fmt = job
    if not os.path.exists(path):
        x = utterance(index, rate, lengths, channels)
        soundfile.write(path, x, rate, subtype="PCM_16", format=fmt.upper())
    return path


def make(out: str, files: int = 1536, fmt: str = "wav", lengths: tuple[float, float] | None = None,
         mixed_rates: bool = False, speakers: int = 16) -> list[str]:
    """Write the set (skipping files already there) into ``speakers`` sub-folders; returns the paths."""
    jobs = []
    for i in range(files):
        rate = MIXED_RATES[i % len(MIXED_RATES)] if mixed_rates else 16000
        channels = 2 if mixed_rates and i % 3 == 2 else 1
        folder = os.path.join(out, f"speaker_{i % speakers:02d}")
        jobs.append((i, os.path.join(folder, f"utt_{i:05d}.{fmt}"), rate, lengths, channels, fmt))
    for s in range(min(speakers, files)):
        os.makedirs(os.path.join(out, f"speaker_{s:02d}"), exist_ok=True)
    with ProcessPoolExecutor() as pool:
        return list(pool.map(_write, jobs, chunksize=8))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--files", type=int, default=1536)
    ap.add_argument("--format", choices=("wav", "flac"), default="wav")
    ap.add_argument("--lengths", type=float, nargs=2, default=None, metavar=("MIN_S", "MAX_S"))
    ap.add_argument("--mixed-rates", action="store_true")
    a = ap.parse_args(argv)
    paths = make(a.out, a.files, a.format, tuple(a.lengths) if a.lengths else None, a.mixed_rates)
    size = sum(os.path.getsize(p) for p in paths)
    print(f"{len(paths)} {a.format.upper()} files, {size / 1e6:.0f} MB, in {a.out}")


if __name__ == "__main__":
    main()

"""Host memory of side_by_side.py's audio programs over many iterations (issue 19: RSS stays flat).

    python benchmarks/diag/audio_rss.py /tmp/sbs/wav [--iterations 2000] [--mixed] [--every 250]

Runs the `audio` program (readers.file -> decoders.audio on the CPU -> .gpu() -> audio_resample -> spectrogram ->
mel_filter_bank -> to_decibels; ``--mixed``: the decoder on 'mixed') for ``--iterations`` batches of 64, the
reader going round its epochs, and prints the process's resident set size (VmRSS) and CUDA's
allocated memory every ``--every`` iterations, then the growth from the first sample (taken after a warm-up
of ``--every`` iterations, once every cache has its size) to the last.
"""
from __future__ import annotations

import argparse
import glob
import os
import time


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def audio_program(files: list[str], decoder: str):
    """side_by_side.py's audio program, built: ``decoder`` "cpu" (then ``.gpu()``), "mixed", or "none" (the
    reader alone)."""
    from sluice import fn, pipeline_def, types

    @pipeline_def(batch_size=64, num_threads=16, device_id=0)
    def pipe():
        enc, _ = fn.readers.file(files=files, name="r")
        if decoder == "none":
            return enc
        if decoder == "mixed":
            x, _ = fn.decoders.audio(enc, device="mixed", dtype=types.FLOAT, downmix=True)
        else:
            x, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True)
            x = x.gpu()
        x = fn.audio_resample(x, in_rate=44100.0, out_rate=16000.0)
        s = fn.spectrogram(x, nfft=512, window_length=400, window_step=160, power=2)
        m = fn.mel_filter_bank(s, sample_rate=16000, nfilter=80, freq_high=8000)
        return fn.to_decibels(m, multiplier=10.0, cutoff_db=-80)

    p = pipe()
    p.build()
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--mixed", action="store_true")
    a = ap.parse_args()
    import torch

    p = audio_program(sorted(glob.glob(os.path.join(a.data, "*.wav"))), "mixed" if a.mixed else "cpu")
    samples = []
    t = time.perf_counter()
    for i in range(1, a.iterations + 1):
        out, = p.run()
        if i % a.every == 0:
            torch.cuda.synchronize()
            samples.append((i, rss_mib(), torch.cuda.memory_allocated() / 2**20))
            print(f"iteration {i}: RSS {samples[-1][1]:.0f} MiB, CUDA allocated {samples[-1][2]:.0f} MiB, "
                  f"{i * 64 / (time.perf_counter() - t):.0f} clips/s so far", flush=True)
    p.close()
    first, last = samples[0], samples[-1]
    print(f"{'mixed' if a.mixed else 'audio'}: RSS {first[1]:.0f} MiB at iteration {first[0]} -> {last[1]:.0f} MiB "
          f"at {last[0]} ({last[1] - first[1]:+.0f} MiB, {100 * (last[1] - first[1]) / first[1]:+.1f} %); CUDA "
          f"allocated {first[2]:.0f} -> {last[2]:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()

"""The speech program's CPU stage alone, on the CPU (no GPU needed): where its time goes, cut after each operator.

    python benchmarks/diag/speech_cpu_stage.py ROOT [--threads 2] [--batch 64] [--batches 24]

Prints one line per cut: ``read``, ``decode`` (decoders.audio without sample_rate), ``decode_sr`` (with
sample_rate=16000), ``nonsilent``, ``slice``.
"""
import argparse
import glob
import os
import time

import sluice
from sluice import fn, types


def build(files, cut, batch, threads):
    @sluice.pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1)
    def pipe():
        enc, label = fn.readers.file(files=files, name="Reader")
        if cut == "read":
            return enc
        sr = 0.0 if cut == "decode" else 16000.0
        audio, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True, sample_rate=sr)
        if cut in ("decode", "decode_sr"):
            return audio
        begin, length = fn.nonsilent_region(audio, cutoff_db=-60)
        if cut == "nonsilent":
            return begin, length
        return fn.slice(audio, begin, length, axes=[0])
    return pipe()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--cuts", nargs="*", default=["read", "decode", "decode_sr", "nonsilent", "slice"])
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.root, "**", "*.*"), recursive=True))
    for cut in a.cuts:
        p = build(files, cut, a.batch, a.threads)
        p.build()
        for _ in range(2):
            p.run()
        t = time.perf_counter()
        for _ in range(a.batches):
            p.run()
        dt = time.perf_counter() - t
        print(f"{cut:10s} {a.batches * a.batch / dt:9.1f} utt/s  ({dt / a.batches * 1e3:.1f} ms a batch)", flush=True)


if __name__ == "__main__":
    main()

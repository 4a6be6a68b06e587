"""Which batches of a pipeline are slow, and why: each ``run()``'s host time beside what happened during it (garbage
collection, new CUDA memory segments, new page-locked blocks from torch's host allocator). The Whisper program's
batches took 3 ms at their median and 30-95 ms at each new page-locked block (benchmarks/RESULTS.md, "Now").

    python benchmarks/diag/batch_spikes.py whisper /tmp/sbs/whisper [--batches 96]
    python benchmarks/diag/batch_spikes.py audio /tmp/sbs/wav          (side_by_side.py's audio program)

Prints the rate over the batches after three, and one line per batch slower than ``--slow`` ms.
"""
import argparse
import gc
import glob
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def audio_pipeline(root: str, bs: int = 64):
    """side_by_side.py's ``audio`` program: 10 s WAVs -> log-mel on the GPU."""
    import sluice
    import sluice.fn as fn
    import sluice.types as types
    files = sorted(glob.glob(os.path.join(root, "*.wav")))

    @sluice.pipeline_def(batch_size=bs, num_threads=16, device_id=0)
    def pipe():
        enc, _ = fn.readers.file(files=files, name="r")
        a, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True)
        a = fn.audio_resample(a.gpu(), in_rate=44100.0, out_rate=16000.0)
        s = fn.spectrogram(a, nfft=512, window_length=400, window_step=160, power=2)
        m = fn.mel_filter_bank(s, sample_rate=16000, nfilter=80, freq_high=8000)
        return fn.to_decibels(m, multiplier=10.0, cutoff_db=-80)
    return pipe(), bs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program", choices=("whisper", "audio"))
    ap.add_argument("root")
    ap.add_argument("--batches", type=int, default=96)
    ap.add_argument("--slow", type=float, default=8.0, help="ms: batches slower than this are listed")
    a = ap.parse_args()
    gc_seconds, gen2, started = [0.0], [0], [0.0]

    def on_gc(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            gc_seconds[0] += time.perf_counter() - started[0]
            gen2[0] += info["generation"] == 2
    gc.callbacks.append(on_gc)
    if a.program == "whisper":
        from whisper_side_by_side import build
        p, bs = build("sluice", sorted(glob.glob(os.path.join(a.root, "*", "*.wav"))), 80)(), 32
    else:
        p, bs = audio_pipeline(a.root)
    p.build()

    def counters():
        device = torch.cuda.memory_stats()
        host = torch.cuda.host_memory_stats()
        return gc_seconds[0] * 1e3, gen2[0], device.get("segment.all.allocated", 0), host.get("num_host_alloc", 0)

    rows = []
    for _ in range(a.batches + 3):
        before = counters()
        t = time.perf_counter()
        p.run()
        ms = 1e3 * (time.perf_counter() - t)
        rows.append((ms,) + tuple(y - x for x, y in zip(before, counters())))
    torch.cuda.synchronize()
    steady = rows[3:]
    print(f"{a.program}: {bs * len(steady) / sum(r[0] for r in steady) * 1e3:,.0f} a second over {len(steady)} "
          f"batches; median {sorted(r[0] for r in steady)[len(steady) // 2]:.2f} ms; GC {sum(r[1] for r in steady):.1f}"
          f" ms; new device segments {sum(r[3] for r in steady)}, new page-locked blocks {sum(r[4] for r in steady)}")
    print("batch    ms  gc_ms gen2 new_segments new_page_locked")
    for i, r in enumerate(rows):
        if r[0] > a.slow:
            print(f"{i:5d} {r[0]:6.1f} {r[1]:6.1f} {r[2]:4d} {r[3]:12d} {r[4]:15d}")


if __name__ == "__main__":
    main()

"""Which stage of side_by_side.py's `audio` program bounds it: the program cut after each stage, timed over more
iterations than the peer's 16, plus libsndfile's own decode speed through the core on one and on all threads.

    python benchmarks/diag/audio_stages.py /tmp/sbs/wav [--iterations 48] [--threads 16]
    python benchmarks/diag/audio_stages.py /tmp/sbs/flac

Each row: clips/s of the pipeline ending at that stage (readers.file; + decoders.audio on the CPU then .gpu();
+ audio_resample; + spectrogram, mel_filter_bank, to_decibels: the whole program).
"""
from __future__ import annotations

import argparse
import glob
import os
import time

import numpy as np
import torch

from sluice import fn, pipeline_def, types

STAGES = ("read", "decode", "resample", "full")


def build(files, stage, threads=16, batch=64, mixed=False):
    """side_by_side.py's audio program ending at ``stage`` (``mixed``: the decoder on 'mixed', as `audio_mixed`)."""
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0)
    def pipe():
        enc, _ = fn.readers.file(files=files, name="r")
        if stage == "read":
            return enc
        if mixed:
            a, _ = fn.decoders.audio(enc, device="mixed", dtype=types.FLOAT, downmix=True)
        else:
            a, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True)
            a = a.gpu()
        if stage == "decode":
            return a
        a = fn.audio_resample(a, in_rate=44100.0, out_rate=16000.0)
        if stage == "resample":
            return a
        s = fn.spectrogram(a, nfft=512, window_length=400, window_step=160, power=2)
        m = fn.mel_filter_bank(s, sample_rate=16000, nfilter=80, freq_high=8000)
        return fn.to_decibels(m, multiplier=10.0, cutoff_db=-80)
    p = pipe()
    p.build()
    return p


STAGE_SECONDS = {}


def time_stages():
    """Wrap the executor's stage runner: host seconds spent in each stage (cpu, gpu), summed; and in each node's
    run and prepare step (keys ``run <name>``, ``prepare <name>``)."""
    from sluice.pipeline.executor import Executor

    inner = Executor._run_stage
    for method, label in ((Executor.run_node, "run"), (Executor.prepare_node, "prepare")):
        def node_timed(self, node, iteration, values, _inner=method, _label=label):
            t = time.perf_counter()
            try:
                return _inner(self, node, iteration, values)
            finally:
                key = f"{_label} {node.schema.name}"
                STAGE_SECONDS[key] = STAGE_SECONDS.get(key, 0.0) + time.perf_counter() - t
        setattr(Executor, method.__name__, node_timed)

    def timed(self, stage, iteration, values, stoppable=False):
        t = time.perf_counter()
        try:
            return inner(self, stage, iteration, values, stoppable)
        finally:
            key = "gpu" if stage.on_gpu else "cpu"
            STAGE_SECONDS[key] = STAGE_SECONDS.get(key, 0.0) + time.perf_counter() - t
    Executor._run_stage = timed


def rate(p, iterations, batch):
    for _ in range(3):
        p.run()
    torch.cuda.synchronize()
    STAGE_SECONDS.clear()
    t = time.perf_counter()
    for _ in range(iterations):
        p.run()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t
    stages = {k: v for k, v in STAGE_SECONDS.items() if k in ("cpu", "gpu")}
    nodes = {k: v for k, v in STAGE_SECONDS.items() if k not in stages}
    ex = p._executor
    print("    per batch: wall %.2f ms, " % (1e3 * wall / iterations) + ", ".join(
        f"{k} stage {1e3 * v / iterations:.2f} ms" for k, v in stages.items())
        + f"; prepare moved to the device stage: {ex.balance.moved}", flush=True)
    print("      " + ", ".join(f"{k} {1e3 * v / iterations:.2f}" for k, v in nodes.items()), flush=True)
    return iterations * batch / wall


def core_decode(files, threads, batch):
    """libsndfile through the core: one batch decoded on one thread, then on ``threads`` threads (clips/s)."""
    from sluice.pipeline.pool import ThreadPool  # says its threads, by which decode_files shares its work

    from sluice.ops.audio.decoder import decode_files
    from sluice.pipeline.batch import Batch

    data = Batch([torch.from_numpy(np.fromfile(f, np.uint8)) for f in files[:batch]])
    kw = dict(dtype="float32", downmix=True, start_time=np.zeros(batch), duration=np.zeros(batch))
    out = {}
    for k in (1, threads):
        pool = ThreadPool(k) if k > 1 else None
        decode_files(data, files[:batch], pool=pool, **kw)
        t = time.perf_counter()
        for _ in range(3):
            decode_files(data, files[:batch], pool=pool, **kw)
        out[k] = 3 * batch / (time.perf_counter() - t)
        t = time.perf_counter()
        from sluice.native.audio import open_files
        for _ in range(3):
            with open_files([d.numpy() for d in data], sources=files[:batch]):
                pass
        out[f"open{k}"] = 3 * batch / (time.perf_counter() - t)
    try:
        import soundfile
        t = time.perf_counter()
        for f in files[:16]:
            soundfile.read(f, dtype="float32")
        out["soundfile 1 thread"] = 16 / (time.perf_counter() - t)
    except ImportError:
        pass
    return out


def torch_profile(p, iterations=10):
    """The GPU's own time per batch: the kernels and copies of ``iterations`` runs (torch.profiler), top rows."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        p.run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            p.run()
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60)
    print(table, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--iterations", type=int, default=48)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--no-core", action="store_true")
    ap.add_argument("--torch-profile", action="store_true", help="the GPU time of the whole program's kernels")
    a = ap.parse_args()
    time_stages()
    files = sorted(glob.glob(os.path.join(a.folder, "*.wav")) + glob.glob(os.path.join(a.folder, "*.flac")))
    print(f"{len(files)} files in {a.folder}, batch {a.batch}, {a.threads} threads", flush=True)
    if not a.no_core:
        for k, v in core_decode(files, a.threads, a.batch).items():
            print(f"  core decode_files, {k}: {v:,.0f} clips/s", flush=True)
    for stage in a.stages.split(","):
        p = build(files, stage, a.threads, a.batch)
        r = rate(p, a.iterations, a.batch)
        peer = rate(p, 16, a.batch)
        print(f"  stage {stage:9s} {r:9,.0f} clips/s ({a.iterations} it)  {peer:9,.0f} (16 it, as the peer)",
              flush=True)
        if a.torch_profile and stage == "full":
            torch_profile(p)
        del p


if __name__ == "__main__":
    main()

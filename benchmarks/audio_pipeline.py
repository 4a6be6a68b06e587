"""Log-mel front end over WAV files: sluice (mixed WAV decode, GPU resample + spectra) beside torchaudio.

Workload (issue 5): 1024 WAV files, 10 s, 44.1 kHz mono 16-bit (``make_audio.py``); per clip: decode ->
resample to 16 kHz -> power spectrogram (nfft 512, window 400, step 160) -> 80 mel filters -> decibels; batches
of 64. Peers, in the same run:

* ``torchaudio-gpu``: files loaded in 16 threads, stacked, moved to the GPU, then torchaudio's ``Resample``,
  ``MelSpectrogram`` and ``AmplitudeToDB`` on the whole batch.
* ``torchaudio-cpu-16proc``: 16 worker processes (one torch thread each), each loading and transforming clips
  with the same torchaudio transforms on the CPU, features returned to the parent (as a DataLoader does).

torchaudio >= 2.9 no longer decodes files itself (that moved to torchcodec), so both peers load WAVs with
soundfile, which was torchaudio's own backend for WAV. Files are read once before timing (page cache warm for
everyone). Every path computes the same features; sluice's are checked against torchaudio's on one batch.
Example::

    python benchmarks/make_audio.py --out /tmp/sluice_bench_audio
    python benchmarks/audio_pipeline.py --root /tmp/sluice_bench_audio

sluice runs twice: with ``decoders.audio(device="mixed")`` (WAV headers parsed on the CPU, payloads gathered into
one pinned buffer, one copy to the GPU, conversion there) and with the CPU decoder (libsndfile per file, then
``.gpu()``). Stage rows show where the time goes: readers.file alone, readers.file + the mixed decoder (no GPU
kernels after it), and the GPU kernels alone on a batch already on the GPU.

Target: sluice >= 12x torchaudio-cpu-16proc in clips/s.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import report, timed  # noqa: E402

IN_RATE, OUT_RATE, NFFT, WIN, STEP, NMEL = 44100, 16000, 512, 400, 160, 80


# ------------------------------------------------------------------------------------------------- the peers
def _load(path: str) -> np.ndarray:
    import soundfile

    x, _ = soundfile.read(path, dtype="float32")
    return x


def _transforms(device: str):
    import torch
    import torchaudio

    resample = torchaudio.transforms.Resample(IN_RATE, OUT_RATE).to(device)
    mel = torchaudio.transforms.MelSpectrogram(sample_rate=OUT_RATE, n_fft=NFFT, win_length=WIN, hop_length=STEP,
                                               n_mels=NMEL, power=2.0, norm="slaney", mel_scale="slaney",
                                               pad_mode="reflect", center=True).to(device)
    to_db = torchaudio.transforms.AmplitudeToDB(stype="power").to(device)
    return lambda x: to_db(mel(resample(x))), torch


def torchaudio_gpu(paths: list[str], batch: int, threads: int = 16):
    import torch

    fn, _ = _transforms("cuda")
    out = None
    with ThreadPoolExecutor(threads) as pool:
        for s in range(0, len(paths), batch):
            x = torch.from_numpy(np.stack(list(pool.map(_load, paths[s: s + batch])))).cuda()
            with torch.no_grad():
                out = fn(x)
    torch.cuda.synchronize()
    return out


_WORKER_FN = None


def _worker_init() -> None:
    global _WORKER_FN
    import torch

    torch.set_num_threads(1)
    _WORKER_FN, _ = _transforms("cpu")


def _worker_clip(path: str) -> np.ndarray:
    import torch

    with torch.no_grad():
        return _WORKER_FN(torch.from_numpy(_load(path))).numpy()


def torchaudio_cpu_procs(paths: list[str], procs: int = 16) -> tuple[float, np.ndarray]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(procs, initializer=_worker_init) as pool:
        pool.map(_worker_clip, paths[:procs], chunksize=1)           # warm-up: imports, transforms
        with timed(sync_cuda=False) as t:
            feats = pool.map(_worker_clip, paths, chunksize=4)
    return t["seconds"], feats[0]


# ------------------------------------------------------------------------------------------------------ sluice
def sluice_pipeline(root: str, batch: int, threads: int, device: str, decoder: str = "mixed", stop: str = "",
                    prefetch: int = 2):
    """The log-mel pipeline; ``decoder`` "mixed" or "cpu" (forced to "cpu" when ``device`` is "cpu"); ``stop``
    "reader" or "decoder" ends it after that stage (stage timings)."""
    from sluice import fn, pipeline_def, types

    decoder = decoder if device == "gpu" else "cpu"

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if device == "gpu" else None, seed=1,
                  prefetch_queue_depth=prefetch)
    def logmel():
        data, _ = fn.readers.file(file_root=root, name="Reader")
        if stop == "reader":
            return data
        audio, rate = fn.decoders.audio(data, dtype=types.INT16, downmix=True, device=decoder)
        if stop == "decoder":
            return audio
        if decoder == "mixed":
            rate = rate.cpu()               # the host copy the mixed decoder keeps: no GPU synchronisation
        else:
            audio = audio.gpu() if device == "gpu" else audio
        audio = fn.audio_resample(audio, in_rate=rate, out_rate=float(OUT_RATE), dtype=types.FLOAT, device=device)
        spec = fn.spectrogram(audio, nfft=NFFT, window_length=WIN, window_step=STEP, power=2, device=device)
        mel = fn.mel_filter_bank(spec, sample_rate=float(OUT_RATE), nfilter=NMEL, device=device)
        return fn.to_decibels(mel, multiplier=10.0, reference=1.0, cutoff_db=-100.0, device=device)

    return logmel()


def gpu_front_end_only(paths: list[str], batch: int, iterations: int = 20) -> float:
    """clips/s of sluice's GPU kernels alone (resample, spectrogram, mel, dB) on one decoded batch already on the
    GPU: the headroom above the CPU decode, which bounds the full pipeline."""
    import torch

    from sluice import types
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext, get_schema

    audio = torch.from_numpy(np.stack([(_load(p) * 32767).astype(np.int16) for p in paths[:batch]])).cuda()
    rate = float(IN_RATE)

    def call(op, data, **const):
        schema = get_schema(op)
        args = {name: a.default for name, a in schema.args.items()}
        args.update(const)
        ctx = BatchContext(op, len(data), [""] * len(data), [data.layout()], torch.device("cuda"), None)
        return schema.kernels["gpu"].kernel(ctx, data, args=BatchArgs(args, {}, len(data)))

    def step():
        x = call("audio_resample", Batch.from_dense(audio, "t"), in_rate=rate, out_rate=float(OUT_RATE),
                 dtype=types.FLOAT)
        x = call("spectrogram", x, nfft=NFFT, window_length=WIN, window_step=STEP)
        x = call("mel_filter_bank", x.with_layout("ft"), sample_rate=float(OUT_RATE), nfilter=NMEL)
        return call("to_decibels", x, multiplier=10.0, reference=1.0, cutoff_db=-100.0)

    step()
    with timed() as t:
        for _ in range(iterations):
            step()
    return iterations * batch / t["seconds"]


def _read_once(path: str):
    """One copy from the page cache into a buffer the tensor owns (what readers.file's read_file could do instead of
    ``bytearray(f.read())``, whose second copy holds the GIL)."""
    import torch

    with open(path, "rb", buffering=0) as f:
        out = torch.empty(os.fstat(f.fileno()).st_size, dtype=torch.uint8)
        got = f.readinto(out.numpy()) if out.numel() else 0
    return out[:got]


def file_reading(paths: list[str], batch: int, threads: int) -> dict[str, float]:
    """clips/s of reading the files in batches in ``threads`` threads: readers.file's read_file, and one copy."""
    from sluice.ops.readers.file import read_file

    out = {}
    with ThreadPoolExecutor(threads) as pool:
        for label, fn in (("read_file (f.read + bytearray copy)", read_file), ("one-copy readinto", _read_once)):
            list(pool.map(fn, paths[:batch]))
            with timed(sync_cuda=False) as t:
                for s in range(0, len(paths), batch):
                    list(pool.map(fn, paths[s: s + batch]))
            out[label] = len(paths) / t["seconds"]
    return out


def run_sluice(pipe, iterations: int):
    out = None
    for _ in range(iterations):
        try:
            (out,) = pipe.run()
        except StopIteration:
            pipe.reset()
            (out,) = pipe.run()
    if out is not None and out.device == "gpu":
        import torch

        torch.cuda.synchronize()
    return out


def time_sluice(root: str, n: int, args, device: str, decoder: str = "mixed", stop: str = "",
                epochs: int | None = None) -> tuple[float, object]:
    """clips/s of one sluice pipeline over ``epochs`` epochs (after a two-batch warm-up) and its first batch."""
    threads = args.sluice_threads if decoder == "mixed" else args.threads  # libsndfile decodes in the threads
    pipe = sluice_pipeline(root, args.batch, threads, device, decoder, stop, args.prefetch)
    first = run_sluice(pipe, 1)                                       # warm-up: CUDA context, cuFFT plans
    first = first.as_tensor().clone() if stop == "" else None
    run_sluice(pipe, 1)
    iterations = max(1, (args.epochs if epochs is None else epochs) * n // args.batch)
    with timed(sync_cuda=device == "gpu") as t:
        run_sluice(pipe, iterations)
    pipe.close()                                                      # its threads stop prefetching
    return iterations * args.batch / t["seconds"], first


def profile_sluice(root: str, args, device: str, stop: str = "") -> None:
    """Run the mixed-decoder pipeline for ``args.profile`` seconds under benchmarks/stack_profile.py's sampler and
    print where each thread group spends its time."""
    import time

    from stack_profile import StackSampler

    pipe = sluice_pipeline(root, args.batch, args.sluice_threads, device, "mixed", stop, args.prefetch)
    run_sluice(pipe, 4)
    n = 0
    with StackSampler(0.001) as sampler:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.profile:
            run_sluice(pipe, 1)
            n += 1
        dt = time.perf_counter() - t0
    print(f"PROFILE audio{' up to ' + stop if stop else ''}: {n * args.batch / dt:,.0f} clips/s over {n} batches "
          f"(prefetch {args.prefetch}, {args.sluice_threads} threads)", flush=True)
    sampler.report(12)
    pipe.close()


# ----------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="/tmp/sluice_bench_audio")
    ap.add_argument("--files", type=int, default=1024, help="made with make_audio.py when missing")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=16, help="threads of the torchaudio-gpu peer's file loading")
    ap.add_argument("--sluice-threads", type=int, default=4,
                    help="sluice's num_threads. Measured on the H200 (mixed decoder): 4 threads 7,074 clips/s, 8: "
                         "5,806, 16: 5,913. The reader's threads need the GIL between reads, and the GPU stage's "
                         "thread waits for it after every CUDA call; fewer of them contend less, and 4 still read "
                         "the batch's 56 MB in time")
    ap.add_argument("--epochs", type=int, default=3, help="sluice epochs timed (after one warm-up batch pair)")
    ap.add_argument("--device", default=None, help="sluice device: gpu (default with CUDA) or cpu")
    ap.add_argument("--peers", nargs="*", default=["torchaudio-gpu", "torchaudio-cpu-16proc"])
    ap.add_argument("--sluice-cpu", action="store_true", help="also time sluice on the CPU only (one epoch)")
    ap.add_argument("--prefetch", type=int, default=2, help="sluice's prefetch_queue_depth")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval (seconds) for this process: how long a thread waiting for the GIL "
                         "waits before it asks the holder to let go (Python's default 0.005)")
    ap.add_argument("--profile", type=float, default=0.0,
                    help="only profile sluice's threads for this many seconds (full pipeline, then up to the decoder)")
    ap.add_argument("--no-stages", dest="stages", action="store_false",
                    help="skip the per-stage rows (readers.file alone, + decoder)")
    args = ap.parse_args(argv)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    import torch

    device = args.device or ("gpu" if torch.cuda.is_available() else "cpu")
    paths = sorted(glob.glob(os.path.join(args.root, "*", "*.wav")))
    if len(paths) < args.files:
        from make_audio import make

        paths = sorted(make(args.root, args.files))
    paths = paths[: args.files]
    with ThreadPoolExecutor(args.threads) as pool:                   # warm the page cache for everyone
        list(pool.map(lambda p: open(p, "rb").read(), paths))
    n = len(paths)
    if args.profile:
        for stop in ("", "decoder"):
            profile_sluice(args.root, args, device, stop)
        return
    workload = (f"log-mel {n} WAV 10 s 44.1 kHz -> 16 kHz, nfft 512, 80 mel, dB, batch {args.batch}, "
                f"{args.sluice_threads} sluice threads")

    peers: dict[str, float] = {}
    if "torchaudio-gpu" in args.peers and torch.cuda.is_available():
        torchaudio_gpu(paths[: args.batch], args.batch, args.threads)  # warm-up
        with timed() as t:
            torchaudio_gpu(paths, args.batch, args.threads)
        peers["torchaudio-gpu (16 threads)"] = n / t["seconds"]
        print(f"torchaudio-gpu: {n / t['seconds']:,.1f} clips/s", flush=True)
    if "torchaudio-cpu-16proc" in args.peers:
        seconds, _ = torchaudio_cpu_procs(paths, 16)
        peers["torchaudio-cpu (16 processes)"] = n / seconds
        print(f"torchaudio-cpu-16proc: {n / seconds:,.1f} clips/s", flush=True)

    # sluice is built after the peers ran, so that its prefetching cannot work ahead during their runs.
    decoders = ["mixed", "cpu"] if device == "gpu" else ["cpu"]
    first = None
    for decoder in decoders:
        rate, out = time_sluice(args.root, n, args, device, decoder)
        first = out if first is None else first
        how = "mixed WAV decoder" if decoder == "mixed" else \
            f"CPU decoder ({args.threads} threads) + .gpu()"
        report(workload + f", sluice {device}, {how}", "clips/s", rate, peers)
    if device == "gpu" and args.stages:
        # Where the time goes: each stage alone (one epoch each). The pipeline runs its CPU stage (readers.file)
        # and its device stage (mixed decoder + GPU kernels) concurrently, so it approaches the slower of them.
        stages = {"readers.file alone": ("mixed", "reader"),
                  "readers.file + mixed decoder (no GPU kernels after it)": ("mixed", "decoder"),
                  "readers.file + CPU decoder (no .gpu())": ("cpu", "decoder")}
        for label, (decoder, stop) in stages.items():
            rate, _ = time_sluice(args.root, n, args, device, decoder, stop, epochs=1)
            report(workload + f", stage: {label}", "clips/s", rate, {})
        for label, rate in file_reading(paths, args.batch, args.threads).items():
            report(workload + f", file reading alone ({args.threads} threads): {label}", "clips/s", rate, {})
    if device == "gpu":
        report(workload + ", sluice GPU kernels only (decoded batch already on the GPU)", "clips/s",
               gpu_front_end_only(paths, args.batch), {})
    if args.sluice_cpu and device == "gpu":
        rate, _ = time_sluice(args.root, n, args, "cpu", "cpu", epochs=1)
        report(workload + ", sluice cpu (soxr + torch, pipeline threads)", "clips/s", rate, peers)

    if torch.cuda.is_available() and "torchaudio-gpu" in args.peers:
        # The reader's first batch holds the first files in sorted order: compare with torchaudio on them. The
        # resamplers differ (16-lobe Hann sinc vs torchaudio's 6-lobe), so dB values differ slightly.
        ref = torchaudio_gpu(paths[: args.batch], args.batch, args.threads)
        ours = first.float().to(ref.device)
        t_common = min(ours.shape[-1], ref.shape[-1])
        err = (ours[..., :t_common] - ref[..., :t_common]).abs().flatten()
        print(f"sluice vs torchaudio log-mel on the first batch: median |diff| {err.median().item():.3g} dB, "
              f"99th percentile {err.quantile(0.99).item():.3g} dB (shapes {tuple(ours.shape)} / "
              f"{tuple(ref.shape)})", flush=True)


if __name__ == "__main__":
    main()

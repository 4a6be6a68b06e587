"""Whisper's log-mel features (examples/whisper_logmel.py) as a DALI user writes them, run with DALI and with sluice:
only the import differs (issue 19).

    python benchmarks/whisper_side_by_side.py IMPL ROOT [N_MELS]     IMPL: dali | sluice
    python benchmarks/whisper_side_by_side.py make ROOT [CLIPS]       the clips, once (examples' make_clips)

The program: readers.file -> decoders.audio(INT16, downmix) on the CPU -> .gpu() -> audio_resample to 16 kHz (the
file's rate as an argument input) -> slice/pad to 30 s -> spectrogram (400-point, hop 160, Whisper's periodic Hann
window given as window_fn) -> drop the last frame -> mel_filter_bank -> to_decibels (log10, floor 1e-10); batch 32,
16 threads. Prints ``RESULT whisper IMPL RATE clips/s``. The clips (5-45 s, 44.1 kHz) are made by
examples/whisper_logmel.py's ``make_clips``.
"""
import glob
import importlib
import os
import sys
import time

N_FFT, HOP, RATE, N_SAMPLES = 400, 160, 16000, 480000


def build(base: str, files: list, n_mels: int, bs: int = 32):
    """The pipeline function, written against ``base`` (``nvidia.dali`` or ``sluice``)."""
    import numpy as np
    pipeline_def = importlib.import_module(base).pipeline_def
    fn = importlib.import_module(base + ".fn")
    types = importlib.import_module(base + ".types")
    periodic_hann = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).tolist()

    @pipeline_def(batch_size=bs, num_threads=16, device_id=0)
    def pipe():
        data, _ = fn.readers.file(files=files, name="Reader")
        audio, rate = fn.decoders.audio(data, dtype=types.INT16, downmix=True)
        audio = fn.audio_resample(audio.gpu(), in_rate=rate, out_rate=float(RATE), dtype=types.FLOAT)
        audio = fn.slice(audio, start=[0], shape=[N_SAMPLES], axes=[0], out_of_bounds_policy="pad")
        spec = fn.spectrogram(audio, nfft=N_FFT, window_length=N_FFT, window_step=HOP, power=2,
                              window_fn=periodic_hann)
        spec = fn.slice(spec, start=[0], shape=[N_SAMPLES // HOP], axes=[1])
        mel = fn.mel_filter_bank(spec, sample_rate=float(RATE), nfilter=n_mels)
        return fn.to_decibels(mel, multiplier=1.0, reference=1.0, cutoff_db=-10.0)

    return pipe


def main():
    impl, root = sys.argv[1], sys.argv[2]
    if impl == "make":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
        from whisper_logmel import make_clips
        make_clips(root, count=int(sys.argv[3]) if len(sys.argv) > 3 else 128)
        return
    n_mels = int(sys.argv[3]) if len(sys.argv) > 3 else 80
    import torch
    files = sorted(glob.glob(os.path.join(root, "*", "*.wav")))
    bs = 32
    pipe = build("nvidia.dali" if impl == "dali" else "sluice", files, n_mels, bs)
    p = pipe()
    p.build()
    for _ in range(3):
        p.run()
    torch.cuda.synchronize()
    n = 3 * len(files) // bs
    t = time.perf_counter()
    for _ in range(n):
        out, = p.run()
    torch.cuda.synchronize()
    rate = n * bs / (time.perf_counter() - t)
    shape = out.as_tensor().shape
    shape = shape() if callable(shape) else shape  # DALI's TensorGPU.shape is a method
    print(f"RESULT whisper{n_mels} {impl:7s} {rate:10.1f} clips/s shape={tuple(shape)}", flush=True)


if __name__ == "__main__":
    main()

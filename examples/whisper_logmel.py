"""Whisper-style log-mel features with sluice: decode, resample to 16 kHz, pad/trim to 30 s, 80 or 128 mel bands.

On a GPU the files are decoded with ``decoders.audio(device="mixed")``: WAV samples go to the GPU as they are in
the file and are converted there.

The pipeline reproduces ``whisper.audio.log_mel_spectrogram``: a 400-point STFT (Hann window, hop 160, centred,
reflect padding) of exactly 30 s of 16 kHz audio, the last frame dropped (3000 frames), Slaney mel filters,
``log10(max(mel, 1e-10))``; then Whisper's normalisation ``(max(x, max(x) - 8) + 4) / 4`` per clip, done on the
pipeline's CUDA output with two torch operations (sluice has no per-sample reduction operator yet).
``--norm per_feature`` instead normalises every mel band to zero mean and unit variance over time
(``fn.normalize``, as NeMo's ``normalize="per_feature"``). Example::

    python examples/whisper_logmel.py --root /data/speech --n-mels 128 --batch 32
    python examples/whisper_logmel.py            # makes 256 synthetic clips (5-45 s, 44.1 kHz) first
    python examples/whisper_logmel.py --cpu --clips 8 --batch 4 --iterations 2    # small, on the CPU

With ``--check`` the first batch is compared with Whisper's formula computed in float64 from soundfile + soxr.
"""

from __future__ import annotations

import argparse
import glob
import os
import time

import numpy as np
import torch

import sluice
from sluice import fn, pipeline_def, types

SAMPLE_RATE, N_FFT, HOP, CHUNK_SECONDS = 16000, 400, 160, 30
N_SAMPLES = SAMPLE_RATE * CHUNK_SECONDS          # 480000 samples
N_FRAMES = N_SAMPLES // HOP                      # 3000 frames


def make_clips(root: str, count: int = 256, rate: int = 44100) -> None:
    """Synthetic speech-like clips of 5 to 45 s (so that both padding and trimming happen)."""
    import soundfile

    os.makedirs(os.path.join(root, "speaker"), exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        n = int(rng.uniform(5, 45) * rate)
        t = np.arange(n) / rate
        pitch = rng.uniform(100, 250) * (1 + 0.1 * np.sin(2 * np.pi * 0.5 * t))
        voice = sum(np.sin(2 * np.pi * k * np.cumsum(pitch) / rate) / k for k in range(1, 6))
        envelope = (np.sin(2 * np.pi * rng.uniform(2, 5) * t) > -0.3).astype(np.float64)
        x = 0.2 * voice * envelope + 0.01 * rng.standard_normal(n)
        soundfile.write(os.path.join(root, "speaker", f"utt_{i:04d}.wav"), x, rate, subtype="PCM_16")


@pipeline_def
def whisper_features(root: str, n_mels: int, norm: str, device: str):
    data, _ = fn.readers.file(file_root=root, name="Reader")
    if device == "gpu":
        # The mixed decoder parses WAV headers on the CPU and converts the samples on the GPU (one copy per
        # batch); other formats are decoded on the CPU inside it. Its rate output keeps a host copy, so rate.cpu()
        # costs no GPU synchronisation.
        audio, rate = fn.decoders.audio(data, dtype=types.INT16, downmix=True, device="mixed")
        rate = rate.cpu()
    else:
        audio, rate = fn.decoders.audio(data, dtype=types.INT16, downmix=True)
    audio = fn.audio_resample(audio, in_rate=rate, out_rate=float(SAMPLE_RATE), dtype=types.FLOAT, device=device)
    audio = fn.slice(audio, start=[0], shape=[N_SAMPLES], axes=[0], out_of_bounds_policy="pad")   # 30 s
    # Whisper's STFT window is torch's periodic Hann, not DALI's (sluice's default): pass it
    spec = fn.spectrogram(audio, nfft=N_FFT, window_length=N_FFT, window_step=HOP, power=2, device=device,
                          window_fn=torch.hann_window(N_FFT, dtype=torch.float64).tolist())
    spec = fn.slice(spec, start=[0], shape=[N_FRAMES], axes=[1])                  # drop the last frame
    mel = fn.mel_filter_bank(spec, sample_rate=float(SAMPLE_RATE), nfilter=n_mels, device=device)
    log_mel = fn.to_decibels(mel, multiplier=1.0, reference=1.0, cutoff_db=-10.0, device=device)  # log10
    if norm == "per_feature":
        log_mel = fn.normalize(log_mel, axes=[1], epsilon=1e-5)
    return log_mel


def whisper_normalize(log_mel: torch.Tensor) -> torch.Tensor:
    """Whisper's per-clip dynamic-range clamp and scaling of a (batch, mel, frames) log10-mel tensor."""
    peak = log_mel.amax(dim=(1, 2), keepdim=True)
    return (torch.maximum(log_mel, peak - 8.0) + 4.0) / 4.0


def reference_features(paths: list[str], n_mels: int) -> torch.Tensor:
    """Whisper's formula in float64: soundfile + soxr (HQ) to 16 kHz, pad/trim, torch.stft, librosa filters."""
    import librosa
    import soundfile
    import soxr

    out = []
    filters = torch.from_numpy(librosa.filters.mel(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=n_mels, dtype=np.float64))
    for p in paths:
        x, rate = soundfile.read(p, dtype="float64")
        x = soxr.resample(x, rate, SAMPLE_RATE, quality="HQ")[:N_SAMPLES]
        x = torch.from_numpy(np.pad(x, (0, N_SAMPLES - x.size)))
        stft = torch.stft(x, N_FFT, HOP, window=torch.hann_window(N_FFT, dtype=torch.float64), return_complex=True)
        mel = filters @ stft[..., :-1].abs() ** 2
        out.append(torch.clamp(mel, min=1e-10).log10())
    return whisper_normalize(torch.stack(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=None, help="folder of audio files (in sub-folders); default: synthetic")
    ap.add_argument("--n-mels", type=int, default=80, choices=(80, 128))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=24)
    ap.add_argument("--norm", default="whisper", choices=("whisper", "per_feature"))
    ap.add_argument("--device", default="gpu" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU exists (--device cpu)")
    ap.add_argument("--clips", type=int, default=256, help="how many synthetic clips to make without --root")
    ap.add_argument("--check", action="store_true", help="compare the first batch with Whisper's formula")
    args = ap.parse_args()

    if args.cpu:
        args.device = "cpu"
    root = args.root
    if root is None:  # made once, in sluice's cache folder ($SLUICE_CACHE)
        root = str(sluice.cache_dir("examples", f"whisper_clips_{args.clips}"))
        if not glob.glob(os.path.join(root, "*", "*.wav")):
            make_clips(root, count=args.clips)
    pipe = whisper_features(root, args.n_mels, args.norm, args.device, batch_size=args.batch,
                            num_threads=args.threads, device_id=0 if args.device == "gpu" else None, seed=1)
    (first,) = pipe.run()                       # warm-up (CUDA context, cuFFT plans); checked at the end
    first_feats = first.as_tensor().clone()
    pipe.run()

    clips = 0
    start = time.perf_counter()
    for _ in range(args.iterations):
        try:
            (out,) = pipe.run()
        except StopIteration:
            pipe.reset()
            (out,) = pipe.run()
        feats = out.as_tensor()
        if args.norm == "whisper":
            feats = whisper_normalize(feats)
        clips += len(out)
    if feats.is_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"whisper log-mel ({args.n_mels} mel, 30 s windows, {args.device}): {clips / seconds:,.1f} clips/s, "
          f"{clips * CHUNK_SECONDS / seconds:,.0f} s of audio per second")

    feats = whisper_normalize(first_feats) if args.norm == "whisper" else first_feats
    print(f"features: {tuple(feats.shape)} {feats.dtype} on {feats.device}, layout {first.layout()!r}")
    if args.check and args.norm == "whisper":
        paths = sorted(glob.glob(os.path.join(root, "*", "*")))[: args.batch]
        try:
            ref = reference_features(paths, args.n_mels)
        except ImportError as exc:
            print(f"--check skipped: {exc} (the reference needs librosa, soundfile and soxr)")
        else:
            diff = (feats.double().cpu() - ref).abs()
            print(f"vs Whisper's formula (float64, soxr resampling): max |diff| {diff.max().item():.3g}, "
                  f"mean {diff.mean().item():.3g} (normalised log-mel units)")


if __name__ == "__main__":
    main()

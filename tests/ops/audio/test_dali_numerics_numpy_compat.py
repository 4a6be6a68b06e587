"""DALI's numerical definitions, written in NumPy from DALI's sources, against sluice's operators.

* Hann window (``dali/kernels/signal/window/window_functions.h``, ``HannWindow``):
  ``w[n] = 0.5 (1 - cos(2 pi (n + 0.5) / N))`` in float64, stored as float32: ``fn.spectrogram``'s default.
* Spectrogram (``dali/operators/audio/fft/spectrogram.cc``): windows of ``window_length`` centred on multiples of
  ``window_step`` (the signal reflected at its ends), times the window, ``nfft``-point real FFT, ``|X|^power``.
* Resampled length (``resampled_length`` of ``dali/kernels/signal/resampling.h``, called by
  ``dali/operators/audio/resample.h`` and ``dali/operators/decoder/audio/audio_decoder_impl.cc``):
  ``ceil(length * out_rate / in_rate)``, the rates float32, the arithmetic float64.

Tolerances: the spectrogram pipelines run in float32; relative error (max |a - b| / max |b|) <= 2e-5 against the
float64 reference, while the periodic Hann window (librosa's, sluice's old default) is 1e-3 away.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sluice import types
from sluice.backends.audio import resample_length
from sluice.kernels.audio.spectral import hann_window
from sluice.testing import run_op

from _audio_signals import encode, rel_err, sweep, tones


def dali_hann(n: int) -> np.ndarray:
    t = np.arange(n, dtype=np.float64)
    return (0.5 * (1.0 - np.cos((2 * np.pi / n) * (t + 0.5)))).astype(np.float32)


def dali_spectrogram(x: np.ndarray, nfft: int, window_length: int, step: int, power: int = 2) -> np.ndarray:
    """(nfft // 2 + 1, windows), centred windows, reflect padding."""
    half = window_length // 2
    padded = np.pad(x.astype(np.float64), half, mode="reflect")
    w = dali_hann(window_length).astype(np.float64)
    starts = np.arange(x.size // step + 1) * step
    frames = np.stack([padded[s:s + window_length] * w for s in starts])
    return (np.abs(np.fft.rfft(frames, n=nfft, axis=1)) ** power).T


@pytest.mark.parametrize("n", [1, 2, 7, 256, 400, 512])
def test_hann_window_is_dalis(n):
    w = hann_window(n).numpy()
    np.testing.assert_array_equal(w, dali_hann(n))
    assert w.min() > 0 and np.allclose(w, w[::-1])  # symmetric, never 0 (the periodic window starts at 0)


@pytest.mark.parametrize("nfft,window_length,step", [(512, 400, 160), (256, 256, 128), (400, 400, 160)])
def test_default_spectrogram_is_dalis(device, nfft, window_length, step):
    xs = [sweep(4000, seed=1).astype(np.float32), sweep(2501, f1=6000, seed=2).astype(np.float32)]
    out = run_op("spectrogram", xs, device=device, nfft=nfft, window_length=window_length, window_step=step)
    periodic = torch.hann_window(window_length, periodic=True, dtype=torch.float64).tolist()
    old = run_op("spectrogram", xs, device=device, nfft=nfft, window_length=window_length, window_step=step,
                 window_fn=periodic)
    for i, x in enumerate(xs):
        ref = dali_spectrogram(x, nfft, window_length, step)
        assert rel_err(out[i].cpu().numpy(), ref) <= 2e-5
        assert rel_err(old[i].cpu().numpy(), ref) > 1e-3  # the check tells the two windows apart


# (length, in_rate, out_rate): ceil differs from round in the first, third and fourth
LENGTHS = [(3000, 44100.0, 16000.0), (4410, 44100.0, 16000.0), (16003, 48000.0, 16000.0), (1005, 22050.0, 16001.0),
           (777, 16000.0, 8000.5)]


def dali_resampled_length(n: int, in_rate: float, out_rate: float) -> int:
    return math.ceil(n * float(np.float32(out_rate)) / float(np.float32(in_rate)))


def test_resampled_length_is_dalis():
    for n, a, b in LENGTHS:
        assert resample_length(n, a, b) == dali_resampled_length(n, a, b)
    assert [resample_length(n, a, b) - round(n * b / a) for n, a, b in LENGTHS[:4]] == [1, 0, 1, 1]


def test_audio_resample_output_length(device):
    for n, a, b in LENGTHS:
        x = tones(n, int(a)).astype(np.float32)
        out = run_op("audio_resample", [x], device=device, in_rate=a, out_rate=b)
        assert out[0].shape == (dali_resampled_length(n, a, b),), (n, a, b)
    by_scale = run_op("audio_resample", [tones(1001, 8000).astype(np.float32)], device=device, scale=0.3)
    assert by_scale[0].shape == (dali_resampled_length(1001, 1.0, 0.3),)


def test_resampled_tail_is_signal_not_padding():
    """The sample soxr leaves out (DALI's length is one more) is resampled from the signal, not a zero."""
    x = np.full(3000, 0.5, np.float32)  # a constant: every output sample but the filter's edges is 0.5
    y = run_op("audio_resample", [x], in_rate=44100.0, out_rate=16000.0)[0].numpy()
    assert y.size == 1089 and abs(y[-1]) > 0.1


def test_decoder_resamples_to_dalis_length():
    data = np.frombuffer(encode(tones(3000, 44100) * 0.5, 44100), np.uint8)
    audio, rate = run_op("decoders.audio", [data], sample_rate=16000.0, dtype=types.FLOAT)
    assert audio[0].shape == (dali_resampled_length(3000, 44100, 16000), 1) == (1089, 1)
    assert float(rate[0]) == 16000.0

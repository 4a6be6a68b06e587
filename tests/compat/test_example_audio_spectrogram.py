# ruff: noqa: I001, PLR0402
"""DALI's "Audio spectrogram" tutorial (spectrogram, decibels, mel spectrogram, MFCC of a signal handed in as a
constant) written afresh on a generated sine sweep, plus the legacy class form fed by ``feed_input``. The DALI
code is unchanged but for the first import line.

Reference: librosa, as in DALI's tutorial, with DALI's default (Hann) window (the GPU variant is compared with the CPU variant, which is compared with
librosa: the device machine has no librosa). Tolerances: power spectra and mel spectra within 1e-3 of the
reference's largest value (float32 against float64); decibels within 0.05 dB; MFCCs within 0.1 (their scale is
~100s).
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import numpy as np
import pytest
from nvidia.dali import pipeline_def, Pipeline
import nvidia.dali.fn as fn
import nvidia.dali.ops as ops
import nvidia.dali.types as types

try:
    import librosa
except ImportError:  # the CPU variants need it; the GPU variant compares with the CPU variant
    librosa = None
needs_librosa = pytest.mark.skipif(librosa is None, reason="needs librosa")

SR = 16000
NFFT, WINDOW_LENGTH, WINDOW_STEP = 512, 400, 160


def sweep(n, f0=100.0, f1=6000.0):
    t = np.arange(n) / SR
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * n / SR)))).astype(np.float32)


def rel_err(actual, expected):
    return float(np.abs(np.asarray(actual, np.float64) - expected).max() / np.abs(expected).max())


def dali_hann(n):
    """DALI's default window (HannWindow, dali/kernels/signal/window/window_functions.h), which real DALI's
    spectrogram uses here: librosa's "hann" is the periodic window, 0.5 - 0.5 cos(2 pi n / N)."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * (np.arange(n) + 0.5) / n)


def librosa_reference(y):
    power = np.abs(librosa.stft(y.astype(np.float64), n_fft=NFFT, hop_length=WINDOW_STEP, win_length=WINDOW_LENGTH,
                                window=dali_hann(WINDOW_LENGTH), center=True, pad_mode="reflect")) ** 2
    power_db = librosa.power_to_db(power, ref=np.max, top_db=80)
    mel = librosa.feature.melspectrogram(S=power, sr=SR, n_mels=128, fmax=8000)
    mel_db = librosa.power_to_db(mel, ref=np.max, top_db=80)
    mfcc = librosa.feature.mfcc(S=mel_db, n_mfcc=40)
    return power, power_db, mel, mfcc


@pipeline_def
def spectrogram_pipe(y, device):
    audio = types.Constant(device=device, value=y)
    spectrogram = fn.spectrogram(audio, device=device, nfft=NFFT, window_length=WINDOW_LENGTH,
                                 window_step=WINDOW_STEP)
    spectrogram_db = fn.to_decibels(spectrogram, multiplier=10.0, cutoff_db=-80)
    mel = fn.mel_filter_bank(spectrogram, sample_rate=SR, nfilter=128, freq_high=8000)
    mel_db = fn.to_decibels(mel, multiplier=10.0, cutoff_db=-80)
    mfcc = fn.mfcc(mel_db, axis=0, dct_type=2, n_mfcc=40, normalize=True)
    return spectrogram, spectrogram_db, mel, mfcc


def run_tutorial(y, device):
    pipe = spectrogram_pipe(y, device, batch_size=1, num_threads=1, device_id=0 if device == "gpu" else None)
    pipe.build()
    return tuple(out.as_cpu().at(0) for out in pipe.run())


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=needs_librosa),
                                    pytest.param("gpu", marks=pytest.mark.cuda)])
def test_spectrogram_tutorial(device):
    y = sweep(SR // 2)
    spectrogram, spectrogram_db, mel, mfcc = run_tutorial(y, device)
    if device == "cpu":
        power, power_db, mel_ref, mfcc_ref = librosa_reference(y)
    else:
        power, power_db, mel_ref, mfcc_ref = (np.asarray(a, np.float64) for a in run_tutorial(y, "cpu"))
    assert spectrogram.shape == power.shape  # frequency x time, as DALI's default layout "ft"
    assert rel_err(spectrogram, power) <= 1e-3
    assert np.abs(spectrogram_db - power_db).max() <= 0.05
    assert rel_err(mel, mel_ref) <= 1e-3
    assert np.abs(mfcc - mfcc_ref).max() <= 0.1


class LegacySpectrogramPipeline(Pipeline):
    def __init__(self, batch_size, num_threads, device_id):
        super().__init__(batch_size, num_threads, device_id, seed=12)
        self.input = ops.ExternalSource()
        self.spectrogram = ops.Spectrogram(device="cpu", nfft=NFFT, window_length=WINDOW_LENGTH,
                                           window_step=WINDOW_STEP)
        self.to_db = ops.ToDecibels(device="cpu", multiplier=10.0, cutoff_db=-80)

    def define_graph(self):
        self.audio = self.input()
        return self.to_db(self.spectrogram(self.audio))

    def iter_setup(self):
        self.feed_input(self.audio, [sweep(SR // 4), sweep(SR // 2, f0=300.0)])


@needs_librosa
def test_legacy_spectrogram_with_feed_input():
    pipe = LegacySpectrogramPipeline(2, 1, None)
    pipe.build()
    (spectrogram_db,) = pipe.run()
    for j, y in enumerate([sweep(SR // 4), sweep(SR // 2, f0=300.0)]):
        _, power_db, _, _ = librosa_reference(y)
        assert spectrogram_db.at(j).shape == power_db.shape
        assert np.abs(spectrogram_db.at(j) - power_db).max() <= 0.05

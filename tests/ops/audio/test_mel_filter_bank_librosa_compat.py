"""Mel filter banks and mel spectrograms against librosa (filters.mel, feature.melspectrogram).

Tolerances: relative error (max |a - b| / max |b|) <= 1e-4 in float64, <= 1e-3 in float32.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.kernels.audio.spectral import apply_matrix, hz_to_mel, mel_matrix, mel_to_hz, stft_power

from _audio_signals import rel_err, sweep

librosa = pytest.importorskip("librosa")


@pytest.mark.parametrize("formula", ["slaney", "htk"])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("nfilter,rate,nfft,low,high", [(80, 16000, 512, 0.0, 0.0), (128, 44100, 2048, 20.0, 8000.0),
                                                         (40, 8000, 256, 300.0, 3800.0)])
def test_filters_match_librosa(formula, normalize, nfilter, rate, nfft, low, high):
    m = mel_matrix(nfilter, rate, nfft, low, high, normalize, formula, dtype=torch.float64)
    ref = librosa.filters.mel(sr=rate, n_fft=nfft, n_mels=nfilter, fmin=low, fmax=high or None,
                              htk=formula == "htk", norm="slaney" if normalize else None, dtype=np.float64)
    assert m.shape == ref.shape
    assert rel_err(m.numpy(), ref) <= 1e-10


def test_mel_scale_round_trip_and_librosa():
    f = np.array([0.0, 500.0, 1000.0, 4000.0, 11025.0])
    for formula in ("slaney", "htk"):
        np.testing.assert_allclose(hz_to_mel(f, formula), librosa.hz_to_mel(f, htk=formula == "htk"), rtol=1e-12)
        np.testing.assert_allclose(mel_to_hz(hz_to_mel(f, formula), formula), f, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_mel_spectrogram_matches_librosa(dtype):
    x = sweep(8000, rate=16000)
    window = torch.tensor(librosa.filters.get_window("hann", 400, fftbins=True), dtype=dtype)  # librosa's own
    spec, _ = stft_power(torch.tensor(x, dtype=dtype)[None], torch.tensor([x.size]), nfft=512, window_length=400,
                         window_step=160, window=window)
    mel = apply_matrix(spec[0], mel_matrix(80, 16000, 512, dtype=dtype), axis=1)   # (time, mel)
    ref = librosa.feature.melspectrogram(y=x, sr=16000, n_fft=512, hop_length=160, win_length=400, n_mels=80,
                                         pad_mode="reflect", power=2.0)
    assert mel.dtype == dtype
    assert rel_err(mel.T.numpy(), ref) <= (1e-4 if dtype == torch.float64 else 1e-3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="mel_formula"):
        mel_matrix(10, 16000, 256, mel_formula="foo")
    with pytest.raises(ValueError, match="freq_low"):
        mel_matrix(10, 16000, 256, freq_low=9000.0)
    with pytest.raises(ValueError, match="nfilter"):
        mel_matrix(0, 16000, 256)

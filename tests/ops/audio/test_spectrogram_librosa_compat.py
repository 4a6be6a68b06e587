"""The spectrogram kernel against librosa.stft: power and magnitude, centred or not, reflect or zero padding,
with librosa's periodic Hann window passed explicitly (the default window is DALI's, checked in
test_dali_numerics_numpy_compat.py).

Tolerances: relative error (max |a - b| / max |b|) <= 1e-4 in float64, <= 1e-3 in float32, against librosa's
float64 result.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.kernels.audio.spectral import num_windows, pad_batch, stft_power

from _audio_signals import rel_err, sweep

librosa = pytest.importorskip("librosa")

TOL = {torch.float64: 1e-4, torch.float32: 1e-3}


def hann(n, dtype=torch.float64):
    """librosa's own (periodic) Hann window."""
    return torch.tensor(librosa.filters.get_window("hann", n, fftbins=True), dtype=dtype)


def librosa_spec(x, nfft, win, step, power, center, reflect):
    s = np.abs(librosa.stft(x, n_fft=nfft, hop_length=step, win_length=win, window="hann", center=center,
                            pad_mode="reflect" if reflect else "constant")) ** power
    return s  # (freq, time)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("nfft,win,step", [(512, 400, 160), (256, 256, 128), (400, 400, 100)])
@pytest.mark.parametrize("power", [1, 2])
@pytest.mark.parametrize("reflect", [True, False])
def test_centered_matches_librosa(dtype, nfft, win, step, power, reflect):
    x = sweep(3001)
    spec, frames = stft_power(torch.tensor(x, dtype=dtype)[None], torch.tensor([x.size]), nfft=nfft,
                              window_length=win, window_step=step, power=power, center_windows=True,
                              reflect_padding=reflect, window=hann(win, dtype))
    ref = librosa_spec(x, nfft, win, step, power, True, reflect)
    assert spec.dtype == dtype
    assert int(frames[0]) == ref.shape[1] == num_windows(x.size, win, step, True)
    assert rel_err(spec[0].T.numpy(), ref) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_not_centered_matches_librosa(dtype):
    # Without centring, DALI takes whole windows starting at multiples of the step; librosa does the same when
    # nfft == window_length.
    x = sweep(2000)
    spec, frames = stft_power(torch.tensor(x, dtype=dtype)[None], torch.tensor([x.size]), nfft=256,
                              window_length=256, window_step=100, center_windows=False, window=hann(256, dtype))
    ref = librosa_spec(x, 256, 256, 100, 2, False, True)
    assert int(frames[0]) == ref.shape[1] == (2000 - 256) // 100 + 1
    assert rel_err(spec[0].T.numpy(), ref) <= TOL[dtype]


def test_ragged_batch_equals_per_sample():
    lengths = [1600, 3001, 7, 0, 500]
    signals = [torch.tensor(sweep(n, seed=n)) for n in lengths]
    padded, lens = pad_batch(signals)
    spec, frames = stft_power(padded, lens, nfft=128, window_length=100, window_step=40)
    for i, s in enumerate(signals):
        one, f1 = stft_power(s[None], torch.tensor([s.shape[0]]), nfft=128, window_length=100, window_step=40)
        assert int(frames[i]) == int(f1[0]) == (lengths[i] // 40 + 1 if lengths[i] else 0)
        np.testing.assert_allclose(spec[i, : frames[i]].numpy(), one[0].numpy(), rtol=1e-10, atol=1e-12)
        assert torch.all(spec[i, frames[i]:] == 0)


def test_short_signal_reflects_like_numpy():
    # 7 samples, window 100: the reflection wraps many times; np.pad(mode="reflect") is the reference.
    x = sweep(7)
    spec, _ = stft_power(torch.tensor(x)[None], torch.tensor([7]), nfft=100, window_length=100, window_step=40,
                         window=hann(100))
    padded = np.pad(x, 50, mode="reflect")
    ref = np.abs(np.fft.rfft(padded[:100] * hann(100).numpy())) ** 2
    assert rel_err(spec[0, 0].numpy(), ref) <= 1e-10


def test_custom_window_and_errors():
    x = torch.tensor(sweep(1000))
    w = torch.ones(200, dtype=torch.float64)
    spec, _ = stft_power(x[None], torch.tensor([1000]), nfft=256, window_length=200, window_step=100, window=w)
    ref = np.abs(librosa.stft(x.numpy(), n_fft=256, hop_length=100, win_length=200, window="boxcar",
                              pad_mode="reflect")) ** 2
    assert rel_err(spec[0].T.numpy(), ref) <= 1e-4
    with pytest.raises(ValueError, match="nfft"):
        stft_power(x[None], torch.tensor([1000]), nfft=100, window_length=200, window_step=100)
    with pytest.raises(ValueError, match="power"):
        stft_power(x[None], torch.tensor([1000]), nfft=256, window_length=200, window_step=100, power=3)
    with pytest.raises(ValueError, match="window_fn"):
        stft_power(x[None], torch.tensor([1000]), nfft=256, window_length=200, window_step=100, window=w[:10])


@pytest.mark.parametrize("center", [True, False])
def test_strided_and_gathered_framing_agree(center):
    # Uniform batches go through torch.stft; a batch with one shorter signal goes through the gather path.
    long, short = sweep(2000, seed=5), sweep(1000, seed=6)
    padded, lens = pad_batch([torch.tensor(long), torch.tensor(short)])
    kw = dict(nfft=256, window_length=256, window_step=100, center_windows=center)
    ragged, frames = stft_power(padded, lens, **kw)
    uniform, _ = stft_power(torch.tensor(long)[None], torch.tensor([2000]), **kw)
    np.testing.assert_allclose(ragged[0].numpy(), uniform[0].numpy(), rtol=1e-9, atol=1e-9)
    tiny, f = stft_power(torch.tensor(short[:200])[None], torch.tensor([200]), **kw)
    assert int(f[0]) == (3 if center else 0) and tiny.shape[1] == int(f[0])

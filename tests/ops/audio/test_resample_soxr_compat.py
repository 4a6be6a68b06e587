"""Resampling against libsoxr (python-soxr, quality "VHQ").

The torch windowed-sinc kernel (the GPU path) is checked against soxr on tone mixtures whose components lie
below 0.8 x the lower Nyquist frequency. Stated tolerance: max absolute error <= 1e-3 (signal peak 0.8) away
from the first and last 10% of the signal; <= 2e-2 over the whole signal (the two filters start and stop
differently at the edges). The CPU path (soxr itself) must match soxr exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import soxr
import torch

from sluice.backends.audio import resample_length, resample_soxr, soxr_quality
from sluice.kernels.audio.resample import quality_to_lobes, resample_batch

from _audio_signals import tones


@pytest.mark.parametrize("in_rate,out_rate", [(44100, 16000), (16000, 44100), (48000, 16000), (22050, 16001),
                                              (8000, 8000)])
def test_kernel_matches_soxr(in_rate, out_rate):
    low = min(in_rate, out_rate)
    x = tones(in_rate // 2, in_rate, freqs=(440.0, 0.2 * low, 0.38 * low), amps=(0.4, 0.3, 0.1))
    ref = soxr.resample(x, in_rate, out_rate, quality="VHQ")
    y, lens = resample_batch(torch.tensor(x)[None], torch.tensor([x.size]), in_rate, out_rate)
    y = y[0].numpy()
    assert lens == [y.size] == [resample_length(x.size, in_rate, out_rate)] == [-(-x.size * out_rate // in_rate)]
    y = y[: ref.size]  # soxr's length is round(), DALI's ceil(): one more for some lengths
    m = ref.size // 10
    assert np.abs(y[m:-m] - ref[m:-m]).max() <= 1e-3
    assert np.abs(y - ref).max() <= 2e-2


def test_ragged_and_multichannel_batch_equals_single():
    rate = 44100
    a = tones(4410, rate)
    b = tones(3000, rate, freqs=(1000.0,), amps=(0.5,))
    padded = torch.zeros(2, 4410, dtype=torch.float64)
    padded[0], padded[1, :3000] = torch.tensor(a), torch.tensor(b)
    y, lens = resample_batch(padded, torch.tensor([4410, 3000]), rate, 16000)
    for i, s in enumerate((a, b)):
        one, l1 = resample_batch(torch.tensor(s)[None], torch.tensor([s.size]), rate, 16000)
        assert lens[i] == l1[0]
        np.testing.assert_allclose(y[i, : lens[i]].numpy(), one[0].numpy(), atol=1e-12)
    stereo = torch.stack([torch.tensor(a), -torch.tensor(a)], dim=1)[None]             # (1, n, 2)
    ys, _ = resample_batch(stereo, torch.tensor([4410]), rate, 16000)
    mono, _ = resample_batch(torch.tensor(a)[None], torch.tensor([4410]), rate, 16000)
    np.testing.assert_allclose(ys[0, :, 0].numpy(), mono[0].numpy(), atol=1e-12)
    np.testing.assert_allclose(ys[0, :, 1].numpy(), -mono[0].numpy(), atol=1e-12)


def test_polyphase_and_direct_schedules_agree(monkeypatch):
    import sluice.kernels.audio.resample as rs

    x = torch.tensor(tones(4410, 44100))[None]
    poly, _ = resample_batch(x, torch.tensor([4410]), 44100, 16000)
    monkeypatch.setattr(rs, "_MAX_PHASE_MATRIX", 0)
    direct, _ = resample_batch(x, torch.tensor([4410]), 44100, 16000)
    np.testing.assert_allclose(poly.numpy(), direct.numpy(), atol=1e-10)


def test_cpu_backend_is_soxr():
    x = tones(8000, 16000).astype(np.float32)
    y = resample_soxr(x, 16000, 44100, quality=50)
    ref = soxr.resample(x, 16000, 44100, quality=soxr_quality(50))
    assert y.dtype == np.float32 and y.shape == (resample_length(8000, 16000, 44100),)
    np.testing.assert_array_equal(y, ref[: y.size])
    assert resample_soxr(np.zeros(0, np.float32), 16000, 8000).shape == (0,)


def test_quality_mapping_and_errors():
    assert [quality_to_lobes(q) for q in (0, 50, 100)] == [3, 16, 64]
    assert soxr_quality(0) == "QQ" and soxr_quality(50) == "HQ" and soxr_quality(100) == "VHQ"
    with pytest.raises(ValueError, match="quality"):
        quality_to_lobes(101)
    with pytest.raises(ValueError, match="rates"):
        resample_batch(torch.zeros(1, 10), torch.tensor([10]), 0, 16000)

"""Decibel conversion against librosa.power_to_db / amplitude_to_db (absolute error <= 1e-4 dB in float64,
<= 1e-3 dB in float32)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.kernels.audio.spectral import to_decibels

librosa = pytest.importorskip("librosa")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_power_to_db_with_max_reference(dtype):
    s = np.random.default_rng(0).gamma(0.5, 1.0, (64, 50)) + 1e-6
    out = to_decibels(torch.tensor(s, dtype=dtype), multiplier=10.0, reference=None, cutoff_db=-200.0)
    ref = librosa.power_to_db(s, ref=np.max, amin=1e-30, top_db=None)
    assert np.abs(out.numpy() - ref).max() <= (1e-4 if dtype == torch.float64 else 1e-3)


def test_amplitude_to_db_fixed_reference_and_cutoff():
    s = np.abs(np.random.default_rng(1).normal(0, 1, (20, 30)))
    s[0, :5] = 0.0
    out = to_decibels(torch.tensor(s), multiplier=20.0, reference=2.0, cutoff_db=-80.0)
    ref = librosa.amplitude_to_db(s / 2.0, ref=1.0, amin=1e-4, top_db=None)  # 20 log10(1e-4) = -80
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-9)
    assert out.min().item() == pytest.approx(-80.0)


def test_all_zero_input_gives_cutoff():
    out = to_decibels(torch.zeros(3, 4), cutoff_db=-120.0)
    assert torch.all(out == -120.0)


def test_per_sample_reference_broadcasts():
    x = torch.tensor([[1.0, 10.0], [100.0, 1000.0]], dtype=torch.float64)
    out = to_decibels(x, reference=x.amax(dim=1, keepdim=True))
    np.testing.assert_allclose(out.numpy(), [[-10.0, 0.0], [-10.0, 0.0]], atol=1e-12)
    with pytest.raises(ValueError, match="multiplier"):
        to_decibels(x, multiplier=0.0)

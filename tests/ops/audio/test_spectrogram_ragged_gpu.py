"""``stft_power`` of a ragged padded batch on a GPU (one Triton framing kernel, the batched FFT, one power kernel
where Triton is present) against the same function on the host (torch's gather, unfold and FFT): centred and not,
reflected and zero-extended ends, DALI's Hann window and a given one, power and magnitude, signals of one and two
samples and an empty one among long ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.kernels.audio import spectral

pytestmark = pytest.mark.cuda

CASES = [  # nfft, window_length, window_step, center_windows, reflect_padding, power, given window
    (512, 320, 160, True, True, 2, False),
    (400, 400, 160, True, True, 2, True),
    (64, 48, 16, False, False, 1, False),
    (512, 400, 160, True, False, 2, True),
]


@pytest.mark.parametrize("nfft, length, step, center, reflect, power, given", CASES)
def test_ragged_gpu_spectra_equal_the_host_path(nfft, length, step, center, reflect, power, given):
    g = np.random.default_rng(1)
    lengths = torch.tensor([16000, 3100, 1, 0, 801, 2], dtype=torch.int64)
    x = torch.from_numpy(g.normal(0, 1, (len(lengths), int(lengths.max()))).astype(np.float32))
    window = torch.from_numpy(g.random(length).astype(np.float32)) if given else None
    kw = dict(nfft=nfft, window_length=length, window_step=step, power=power, center_windows=center,
              reflect_padding=reflect, zero_padding=False)
    want, frames = spectral.stft_power(x, lengths, window=window, **kw)
    got, got_frames = spectral.stft_power(x.cuda(), lengths, window=None if window is None else window.cuda(), **kw)
    assert torch.equal(got_frames, frames) and got.shape == want.shape
    for i, f in enumerate(frames.tolist()):
        torch.testing.assert_close(got[i, :f].cpu(), want[i, :f], rtol=1e-4, atol=1e-4)

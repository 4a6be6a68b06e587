"""MFCC (DCT over the mel axis, liftering) against librosa.feature.mfcc and scipy.fft.dct.

Tolerance: relative error (max |a - b| / max |b|) <= 1e-4 in float64, <= 1e-3 in float32.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.kernels.audio.spectral import apply_matrix, dct_matrix, lifter_weights

from _audio_signals import rel_err

librosa = pytest.importorskip("librosa")
scipy_fft = pytest.importorskip("scipy.fft")


def log_mel(seed=0, n_mels=40, frames=30):
    return np.log(np.random.default_rng(seed).gamma(1.0, 1.0, (n_mels, frames)) + 1e-3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("dct_type,normalize", [(2, True), (2, False), (3, True), (3, False), (1, False)])
@pytest.mark.parametrize("lifter", [0.0, 22.0])
def test_mfcc_matches_librosa(dtype, dct_type, normalize, lifter):
    s = log_mel()
    d = dct_matrix(13, s.shape[0], dct_type, normalize, dtype=dtype)
    out = apply_matrix(torch.tensor(s, dtype=dtype), d, axis=0) * lifter_weights(13, lifter, dtype)[:, None]
    ref = librosa.feature.mfcc(S=s, n_mfcc=13, dct_type=dct_type, norm="ortho" if normalize else None,
                               lifter=lifter)
    assert rel_err(out.numpy(), ref) <= (1e-4 if dtype == torch.float64 else 1e-3)


@pytest.mark.parametrize("normalize", [True, False])
def test_dct4_matches_scipy(normalize):
    s = log_mel(1)
    out = apply_matrix(torch.tensor(s), dct_matrix(40, 40, 4, normalize, dtype=torch.float64), axis=0)
    ref = scipy_fft.dct(s, type=4, axis=0, norm="ortho" if normalize else None)
    assert rel_err(out.numpy(), ref) <= 1e-10


def test_time_major_axis():
    s = log_mel(2)
    d = dct_matrix(20, 40, 2, True, dtype=torch.float64)
    a = apply_matrix(torch.tensor(s), d, axis=0)
    b = apply_matrix(torch.tensor(s.T.copy()), d, axis=1)
    np.testing.assert_allclose(a.numpy(), b.T.numpy(), rtol=1e-12)


def test_bad_arguments():
    with pytest.raises(ValueError, match="dct_type"):
        dct_matrix(10, 20, 5)
    with pytest.raises(ValueError, match="normalize"):
        dct_matrix(10, 20, 1, True)

"""Every audio operator on the GPU equals its CPU kernel (float32; tolerances per operator below)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.testing import run_op

from _audio_signals import sweep, tones

pytestmark = pytest.mark.cuda


def both(op, inputs, rtol, atol, **args):
    cpu = run_op(op, inputs, device="cpu", **args)
    gpu = run_op(op, inputs, device="gpu", **args)
    cpu, gpu = (cpu if isinstance(cpu, tuple) else (cpu,)), (gpu if isinstance(gpu, tuple) else (gpu,))
    for c, g in zip(cpu, gpu):
        assert g.device == "gpu" and c.shape() == g.shape() and c.layout() == g.layout()
        for i in range(len(c)):
            assert c[i].dtype == g[i].dtype
            np.testing.assert_allclose(g[i].cpu().double().numpy(), c[i].double().numpy(), rtol=rtol, atol=atol)
    return cpu, gpu


def signals():
    return [sweep(n, seed=n).astype(np.float32) for n in (16000, 9000, 16000, 0)]


def test_spectrogram():
    both("spectrogram", signals(), 1e-4, 1e-4, nfft=512, window_length=400, window_step=160)
    both("spectrogram", signals(), 1e-4, 1e-4, window_length=256, window_step=100, center_windows=False,
         reflect_padding=False, power=1)


def test_mel_db_mfcc_power_spectrum():
    specs = [s.numpy() for s in run_op("spectrogram", signals()[:3], nfft=512, window_length=400, window_step=160)]
    both("mel_filter_bank", specs, 1e-4, 1e-5, layout="ft", sample_rate=16000, nfilter=80)
    both("to_decibels", specs, 1e-4, 1e-3, layout="ft", cutoff_db=-80.0)
    both("mfcc", specs, 1e-3, 1e-3, layout="ft", n_mfcc=13, normalize=True, lifter=22.0)
    both("power_spectrum", [s.T.copy() for s in specs], 1e-4, 1e-3, nfft=64)


def test_resample_preemphasis_nonsilent():
    xs = [tones(44100, 44100).astype(np.float32), tones(30000, 44100).astype(np.float32)]
    cpu = run_op("audio_resample", xs, in_rate=44100.0, out_rate=16000.0)
    gpu = run_op("audio_resample", xs, device="gpu", in_rate=44100.0, out_rate=16000.0)
    for c, g in zip(cpu, gpu):   # soxr vs windowed sinc: see test_resample_soxr_compat.py
        m = c.shape[0] // 10
        assert c.shape == g.shape
        assert (g.cpu()[m:-m] - c[m:-m]).abs().max() <= 1e-3
    both("preemphasis_filter", signals(), 1e-5, 1e-6, preemph_coeff=0.97, border="reflect")
    both("nonsilent_region", signals(), 0, 0, cutoff_db=-30.0, window_length=512)


def test_benchmark_chain_dense_on_gpu():
    """The benchmark's chain keeps uniform batches dense (one tensor) on the GPU."""
    xs = [tones(44100, 44100).astype(np.float32)] * 4
    res = run_op("audio_resample", xs, device="gpu", in_rate=44100.0, out_rate=16000.0)
    assert res.is_dense_tensor()
    spec = run_op("spectrogram", [r.cpu().numpy() for r in res], device="gpu", nfft=512, window_length=400,
                  window_step=160)
    assert spec.is_dense_tensor() and spec.shape()[0] == (257, 101)
    assert torch.isfinite(spec.as_tensor()).all()

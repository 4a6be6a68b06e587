"""The GPU batch kernels are device-agnostic torch code: run them here on CPU tensors and check them against
the per-sample CPU kernels (so CI covers the batched code paths; test_audio_gpu_equals_cpu.py runs them on CUDA).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice import types
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema
from sluice.testing import run_op

from _audio_signals import sweep, tones


def batch_kernel(op, samples, layout="", per_sample=None, **const):
    schema = get_schema(op)
    args = {name: a.default for name, a in schema.args.items()}
    args.update(const)
    ctx = BatchContext(op, len(samples), [""] * len(samples), [layout], torch.device("cpu"), None)
    batch = Batch([torch.as_tensor(s) for s in samples], layout)
    return schema.kernels["gpu"].kernel(ctx, batch, args=BatchArgs(args, per_sample or {}, len(samples)))


def check(op, samples, rtol, atol, layout="", **args):
    got = batch_kernel(op, samples, layout, **args)
    want = run_op(op, samples, layout=layout, **args)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, w in zip(got, want):
        assert g.shape() == w.shape()
        for i in range(len(w)):
            assert g[i].dtype == w[i].dtype
            np.testing.assert_allclose(g[i].double().numpy(), w[i].double().numpy(), rtol=rtol, atol=atol)
    return got


SIGNALS = [sweep(n, seed=n).astype(np.float32) for n in (3000, 1700, 3000, 0)]


def test_spectrogram_batch():
    out = check("spectrogram", SIGNALS, 1e-5, 1e-5, nfft=256, window_length=200, window_step=80)
    assert out[0].layout() == "ft"
    check("spectrogram", SIGNALS, 1e-5, 1e-5, window_length=128, window_step=64, center_windows=False, power=1)
    dense = check("spectrogram", SIGNALS[:1] * 3, 1e-5, 1e-5, window_length=128, window_step=64)[0]
    assert dense.is_dense_tensor()


def test_spectral_ops_batch():
    specs = [s.numpy() for s in run_op("spectrogram", SIGNALS, nfft=256, window_length=200, window_step=80)]
    check("mel_filter_bank", specs, 1e-5, 1e-6, layout="ft", sample_rate=16000.0, nfilter=20)
    check("to_decibels", specs, 1e-5, 1e-4, layout="ft", cutoff_db=-80.0)
    check("to_decibels", specs, 1e-5, 1e-4, layout="ft", reference=2.0, multiplier=20.0)
    check("mfcc", specs[:3], 1e-4, 1e-4, layout="ft", n_mfcc=10, normalize=True, lifter=10.0)
    check("power_spectrum", [s.T.copy() for s in specs[:3]], 1e-5, 1e-4, nfft=32)
    check("power_spectrum", [s.T.copy() for s in specs[:3]], 1e-5, 1e-4)


def test_preemphasis_nonsilent_batch():
    check("preemphasis_filter", SIGNALS, 1e-6, 1e-6, border="zero")
    check("preemphasis_filter", [(s * 20000).astype(np.int16) for s in SIGNALS], 0, 1, dtype=types.INT16)
    per = batch_kernel("preemphasis_filter", SIGNALS[:2], per_sample={"preemph_coeff": [0.5, 0.9]})
    for s, c, y in zip(SIGNALS[:2], (0.5, 0.9), per):
        np.testing.assert_allclose(y.numpy()[1:], s[1:] - c * s[:-1], atol=1e-6)
    x = np.zeros(5000, np.float32)
    x[1000:2000] = 0.5
    check("nonsilent_region", [x, SIGNALS[0], SIGNALS[3]], 0, 0, window_length=100)


def test_resample_batch_groups():
    per = {"in_rate": [44100.0, 44100.0, 8000.0], "out_rate": [16000.0, 16000.0, 16000.0]}
    for dtype, scale in ((np.float32, 1.0), (np.int16, 30000.0)):   # one type per batch, as in DALI
        xs = [(tones(4410, 44100) * scale).astype(dtype), (tones(2000, 44100) * scale).astype(dtype),
              (tones(800, 8000) * scale).astype(dtype)]
        out = batch_kernel("audio_resample", xs, per_sample=per)
        ref = [run_op("audio_resample", [x], in_rate=a, out_rate=b)[0]
               for x, a, b in zip(xs, per["in_rate"], per["out_rate"])]
        for o, r in zip(out, ref):
            assert o.shape == r.shape and o.dtype == r.dtype
            m = r.shape[0] // 10
            full = 32767.0 if r.dtype == torch.int16 else 1.0
            assert ((o[m:-m].double() - r[m:-m].double()).abs().max() / full) <= 2e-3
    xs = [tones(4410, 44100).astype(np.float32)]
    dense = batch_kernel("audio_resample", xs[:1] * 2, in_rate=44100.0, out_rate=16000.0)
    assert dense.is_dense_tensor() and dense.shape() == [(1600,), (1600,)]
    with pytest.raises(ValueError, match="exactly one"):
        batch_kernel("audio_resample", xs[:1])


def test_nonsilent_region_against_brute_force():
    from sluice.kernels.audio.spectral import pad_batch
    from sluice.ops.audio.nonsilent_region import nonsilent_region

    rng = np.random.default_rng(7)
    signals = []
    for n in (5000, 3000, 50, 0, 4000):
        x = np.zeros(n)
        if n > 100:
            a, b = sorted(rng.integers(0, n, 2))
            x[a:b] = rng.normal(0, 1, b - a)
        signals.append(x)
    padded, lengths = pad_batch([torch.tensor(s) for s in signals])
    begin, length = nonsilent_region(padded, lengths, -30.0, 0.0, 128)
    for s, b, n in zip(signals, begin.tolist(), length.tolist()):
        w = min(128, s.size)
        if s.size == 0 or not s.any():
            assert (b, n) == (0, 0)
            continue
        power = np.array([np.mean(s[i:i + w] ** 2) for i in range(s.size - w + 1)])
        loud = np.nonzero(power >= power.max() * 1e-3)[0]
        assert (b, n) == (loud[0], loud[-1] + w - loud[0])

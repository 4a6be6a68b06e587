"""The speech preprocessing chain of NVIDIA's Jasper / QuartzNet programs (preemphasis -> spectrogram -> mel ->
dB -> normalize over time -> pad) on a ragged batch, run by the GPU batch kernels (device-agnostic torch, here on
CPU tensors, and on a GPU where there is one) over the batch's packed and padded forms: every sample equals the
same chain run on that sample alone (the per-sample reference), and the kernels hand padded batches along without
making per-sample tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema

from _audio_signals import sweep

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

CHAIN = [
    ("preemphasis_filter", dict(preemph_coeff=0.97), ""),
    ("spectrogram", dict(nfft=512, window_length=320, window_step=160), ""),
    ("mel_filter_bank", dict(sample_rate=16000.0, nfilter=64), "ft"),
    ("to_decibels", dict(multiplier=math.log(10), reference=1.0, cutoff_db=math.log(1e-20)), "ft"),
    ("normalize", dict(axes=[1]), "ft"),
    ("pad", dict(axes=[1], fill_value=0.0, align=16), "ft"),
]


def run_chain(batch: Batch, device: str) -> Batch:
    for op, const, _ in CHAIN:
        batch = run_chain_one(batch, op, const, device)
    return batch


@pytest.mark.parametrize("device", DEVICES)
def test_ragged_batch_equals_each_sample_alone(device):
    lengths = [16000, 3100, 24007, 800, 9999]
    signals = [torch.from_numpy(sweep(n, seed=n).astype(np.float32)) for n in lengths]
    flat = torch.cat(signals).to(device)
    packed = Batch.from_packed(flat, np.array([[n] for n in lengths]))
    out = run_chain(packed, device)
    frames = [n // 160 + 1 for n in lengths]
    width = -(-max(frames) // 16) * 16
    assert out.is_dense_tensor() and out.shape() == [(64, width)] * len(lengths)
    for i, (s, f) in enumerate(zip(signals, frames)):
        alone = run_chain(Batch([s.to(device)]), device)[0]
        # the single sample takes torch.stft, the batch one gather + rfft: float32 FFTs of two algorithms
        torch.testing.assert_close(out[i][:, :f], alone[:, :f], rtol=1e-3, atol=2e-3)
        assert out[i][:, f:].abs().max().item() == 0 if f < width else True


def test_each_kernel_hands_a_padded_batch_on():
    lengths = [4000, 1500, 7000]
    signals = [torch.from_numpy(sweep(n, seed=n).astype(np.float32)) for n in lengths]
    batch = Batch.from_packed(torch.cat(signals), np.array([[n] for n in lengths]))
    for op, const, _ in CHAIN[:-1]:
        batch = run_chain_one(batch, op, const)
        assert batch.storage == "padded", op


def run_chain_one(batch, op, const, device="cpu"):
    schema = get_schema(op)
    args = {name: a.default for name, a in schema.args.items()}
    args.update(const)
    ctx = BatchContext(op, len(batch), [""] * len(batch), [batch.layout()], torch.device(device), None)
    return schema.kernels["gpu"].kernel(ctx, batch, args=BatchArgs(args, {}, len(batch)))


@pytest.mark.parametrize("device", DEVICES)
def test_normalize_of_ragged_rows_equals_numpy_per_sample(device):
    """On a GPU a padded batch of float32 rows normalised over its ragged last axis takes one Triton launch
    (sluice.kernels._triton_ragged) where Triton is present: the same values, an empty row included."""
    g = np.random.default_rng(0)
    specs = [g.normal(3, 2, (4, t)).astype(np.float32) for t in (30, 7, 1, 0, 1300)]
    longest = max(s.shape[1] for s in specs)
    rows = np.zeros((len(specs), 4, longest), np.float32)
    for i, s in enumerate(specs):
        rows[i, :, : s.shape[1]] = s
    shapes = np.array([s.shape for s in specs])
    for ddof, eps in ((0, 0.0), (1, 1e-5)):
        batch = Batch.from_padded(torch.from_numpy(rows).to(device), shapes, "ft")
        out = run_chain_one(batch, "normalize", dict(axes=[1], ddof=ddof, epsilon=eps, shift=0.25), device)
        assert out.padding_fill == 0.25 and out.padded(fill=None)[0][3].eq(0.25).all()
        for o, s in zip(out, specs):
            o = o.cpu() - 0.25
            mean = s.mean(axis=1, keepdims=True)
            var = ((s - mean) ** 2).sum(axis=1, keepdims=True) / (s.shape[1] - ddof) if s.shape[1] > ddof else \
                np.zeros_like(mean)
            want = np.where(var + eps > 0, (s - mean) / np.sqrt(np.maximum(var + eps, 1e-38)), 0.0)
            np.testing.assert_allclose(o.numpy(), want, rtol=1e-4, atol=1e-4)

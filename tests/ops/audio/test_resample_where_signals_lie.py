"""``audio_resample`` on a GPU over signals where they lie (one Triton launch per rate pair, only the filter's
nonzero taps, integers converted as read) equals the padded torch schedule (:func:`resample_batch`'s matrix product
over the zero-padded, converted batch, itself checked against soxr in test_resample_soxr_compat.py): packed
signals at offsets with gaps, padded rows, empty and one-sample signals, down- and upsampling, per-sample rates of
several pairs. Without a GPU the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``, in a subprocess
because the flag is read when kernels are defined). Tolerance: float32 sums in another order, 1e-5 of full
scale."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

SCRIPT = textwrap.dedent("""
    import numpy as np, torch
    from sluice.kernels.audio.resample import resample_batch, resample_rows
    from sluice.backends.audio import resample_length

    g = np.random.default_rng(3)
    for dtype, scale in ((torch.int16, 32767.0), (torch.float32, 1.0)):
        for a, b in ((44100.0, 16000.0), (48000.0, 16000.0), (8000.0, 16000.0), (22050.0, 16000.0)):
            lengths = np.array([3001, 0, 1, 2, 1777, 441], np.int64)
            gaps = g.integers(0, 50, len(lengths))
            starts = np.cumsum(gaps + np.concatenate([[0], lengths[:-1]]))
            values = g.normal(0, 3000 if dtype == torch.int16 else 0.3, int(starts[-1] + lengths[-1]))
            flat = torch.from_numpy(values).to(dtype)
            rows = torch.zeros((len(lengths), int(lengths.max())), dtype=torch.float32)
            for i, (s, k) in enumerate(zip(starts, lengths)):
                rows[i, :k] = flat[s: s + k].float() / scale
            want, want_lengths = resample_batch(rows, torch.from_numpy(lengths), a, b)
            out_lengths = resample_length(lengths, a, b)
            assert list(out_lengths) == list(want_lengths)
            order = np.array([3, 0, 5, 1, 4, 2])                # output rows in another order than the table's
            table = np.stack([starts, lengths, out_lengths, order], 1)
            got = torch.full((len(lengths), int(out_lengths.max())), 7.0)
            assert resample_rows(flat, table, got, a, b, 50.0, scale)
            for i, k in enumerate(out_lengths):
                diff = (got[order[i], :k] - want[i, :k]).abs().max().item() if k else 0.0
                assert diff <= 1e-5, (dtype, a, b, i, diff)
                assert (got[order[i], k:] == 0).all()
    assert not resample_rows(flat, table, got, 16000.0, 16000.0, 50.0, 1.0)   # equal rates: the caller's path
    print("ok")
""")


def test_kernel_equals_the_padded_schedule_in_interpreter(triton_interpreter):
    triton_interpreter(SCRIPT)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.int16, torch.float32])
def test_operator_where_signals_lie_equals_the_padded_path(dtype, monkeypatch):
    from sluice import types
    from sluice.ops.audio import resample as op
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext, get_schema

    g = np.random.default_rng(5)
    lengths = np.array([44100 * 3 + 17, 0, 1, 9000, 44100 * 7], np.int64)
    starts = np.cumsum(g.integers(0, 300, len(lengths)) + np.concatenate([[0], lengths[:-1]]))
    flat = torch.from_numpy(g.normal(0, 3000 if dtype == torch.int16 else 0.3, int(starts[-1] + lengths[-1])))
    flat = flat.to(dtype).cuda()
    rates = [44100.0, 44100.0, 48000.0, 22050.0, 44100.0]
    schema = get_schema("audio_resample")
    const = {name: a.default for name, a in schema.args.items()}
    const.update(out_rate=16000.0, dtype=types.FLOAT)
    args = BatchArgs(const, {"in_rate": rates}, len(lengths))
    ctx = BatchContext("audio_resample", len(lengths), [""] * len(lengths), [""], torch.device("cuda"), None)
    packed = Batch.from_packed(flat, lengths[:, None], offsets=starts)
    fast = schema.kernels["gpu"].kernel(ctx, packed, args=args)
    monkeypatch.setattr(op, "_resample_where_they_lie", lambda *a: None)
    slow = schema.kernels["gpu"].kernel(ctx, Batch.from_packed(flat, lengths[:, None], offsets=starts), args=args)
    assert fast.shape() == slow.shape()
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype == torch.float32
        assert (a - b).abs().max().item() <= 1e-5 if a.numel() else True

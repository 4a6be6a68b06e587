"""nonsilent_region over whole ragged batches: the compiled core, its NumPy twin and the torch function the GPU
kernel runs (the reference: each signal alone, as the per-sample kernel did) give the same begin and length on
signals of many lengths and sample types, read where they lie in a packed buffer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice import native
from sluice.native.signal import nonsilent_region as core_nonsilent
from sluice.ops.audio.nonsilent_region import nonsilent_region as torch_nonsilent
from sluice.pipeline.batch import Batch
from sluice.testing import run_op


def speech_like(n: int, seed: int) -> np.ndarray:
    """Noise at -70 dB with a louder burst somewhere inside (sometimes none, sometimes all zeros)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 10 ** (-70 / 20), n)
    if n > 50 and seed % 5:
        a, b = sorted(rng.integers(0, n, 2))
        x[a:b] += rng.normal(0, 0.3, b - a)
    if seed % 7 == 3:
        x[:] = 0
    return x.astype(np.float32)


def reference(signals, cutoff_db, window, reference_power=0.0):
    out = []
    for s in signals:
        b, n = torch_nonsilent(torch.from_numpy(s.astype(np.float64) if s.dtype == np.float64 else s)[None].float()
                               if s.dtype not in (np.float64,) else torch.from_numpy(s)[None],
                               torch.tensor([s.size]), cutoff_db, reference_power, window)
        out.append((int(b), int(n)))
    return out


@pytest.mark.parametrize("twin", [False, True])
def test_core_and_twin_equal_the_torch_function_on_a_packed_batch_at_offsets(twin):
    signals = [speech_like(n, seed) for seed, n in enumerate([5000, 0, 37, 2048, 9000, 1, 4000, 3000, 12000])]
    buffer = np.zeros(sum(s.size for s in signals) + 100, np.float32)
    offsets, at = [], 100
    for s in signals[::-1]:                        # laid out in reverse order, with a gap in front
        offsets.insert(0, at)
        buffer[at: at + s.size] = s
        at += s.size
    lengths = np.array([s.size for s in signals])
    for cutoff, window, ref in ((-60.0, 2048, 0.0), (-30.0, 128, 0.0), (-20.0, 500, 1e-3)):
        if twin:
            with native.fallback():
                got = core_nonsilent(buffer, np.array(offsets), lengths, window=window, factor=10 ** (cutoff / 10),
                                     reference=ref)
        else:
            assert native.available()
            got = core_nonsilent(buffer, np.array(offsets), lengths, window=window, factor=10 ** (cutoff / 10),
                                 reference=ref)
        assert got[0].dtype == np.int32 and got[1].dtype == np.int32
        assert list(zip(got[0].tolist(), got[1].tolist())) == reference(signals, cutoff, window, ref)


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.float64, np.uint8])
def test_integer_and_double_signals(dtype):
    signals = [speech_like(n, seed) for seed, n in enumerate([3000, 500, 7000])]
    scale = {np.int16: 30000, np.int32: 2e9, np.float64: 1.0, np.uint8: 100}[dtype]
    typed = [np.clip(s * scale + (128 if dtype == np.uint8 else 0), -2e9, 2e9).astype(dtype) for s in signals]
    flat = np.concatenate(typed)
    offsets = np.concatenate([[0], np.cumsum([t.size for t in typed])[:-1]])
    got = core_nonsilent(flat, offsets, np.array([t.size for t in typed]), window=256, factor=1e-3)
    want = [torch_nonsilent(torch.from_numpy(t.astype(np.float64))[None], torch.tensor([t.size]), -30.0, 0.0, 256)
            for t in typed]
    assert list(zip(got[0].tolist(), got[1].tolist())) == [(int(b), int(n)) for b, n in want]


def test_nan_signal_is_all_silent_as_the_torch_function_finds():
    x = speech_like(3000, 1)
    x[10] = np.nan
    got = core_nonsilent(x, np.array([0]), np.array([3000]), window=64, factor=1e-6)
    want = torch_nonsilent(torch.from_numpy(x)[None], torch.tensor([3000]), -60.0, 0.0, 64)
    assert (int(got[0][0]), int(got[1][0])) == (int(want[0]), int(want[1])) == (0, 0)


def test_operator_on_a_ragged_packed_batch_in_threads():
    signals = [speech_like(n, seed) for seed, n in enumerate([4000, 800, 0, 6000, 2500, 64])]
    want = reference(signals, -50.0, 256)
    for columns in (signals, [s[:, None] for s in signals], [s[None] for s in signals]):  # (n,), (n, 1), (1, n)
        begin, length = run_op("nonsilent_region", columns, cutoff_db=-50.0, window_length=256, num_threads=3)
        assert [(int(b), int(n)) for b, n in zip(begin, length)] == want
        assert begin.dense is not None and begin.dense.dtype == torch.int32


def test_operator_names_the_sample_that_is_not_a_signal():
    with pytest.raises(Exception, match=r"sample 1.*one-channel signal.*\(4, 2\)"):
        run_op("nonsilent_region", [np.zeros((5, 1), np.float32), np.zeros((4, 2), np.float32)])


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 8, 1001])
def test_running_sums_twin_and_torch_give_the_same_bits_near_a_sequential_sum(n):
    from sluice.native.signal import running_sums as twin
    from sluice.ops.audio.nonsilent_region import running_sums as in_torch

    sq = np.random.default_rng(n).random(n) ** 2
    c = twin(sq)
    assert c.shape == (n + 1,) and c[0] == 0.0
    np.testing.assert_array_equal(c, in_torch(torch.from_numpy(sq)[None])[0].numpy())
    np.testing.assert_allclose(c, np.concatenate([[0.0], np.cumsum(sq)]), rtol=1e-12)

"""fn.noise.{gaussian, shot, salt_and_pepper} and the counter-based generator under them: the hash against a NumPy
uint32 implementation, the distributions against scipy.stats (Kolmogorov-Smirnov, chi-square; fixed seeds, so the
tests are deterministic), and DALI's documented formulas: rounding and clamping to the input type, factor=0 as the
identity, salt/pepper defaults, channels sharing their noise unless per_channel."""

import numpy as np
import pytest
import torch

from sluice import fn
from sluice.errors import ArgumentError
from sluice.kernels.counter_rng import CounterRNG, mix32
from sluice.kernels.ragged import segments
from sluice.testing import run_op, run_pipeline

stats = pytest.importorskip("scipy.stats")

RNG = np.random.default_rng(1)
GREY = [np.full(s, 100, np.uint8) for s in ((40, 30, 3), (24, 50, 3), (10, 10, 3))]


def _mix_numpy(x):
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x21F0AAAD)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x735A2D97)
    x ^= x >> np.uint32(15)
    return x


def _rng(n, keys=((12345, 678),), device="cpu"):
    seg, local = segments(np.array([n] * len(keys)), torch.device(device))
    return CounterRNG(np.array(keys), seg, local)


def test_hash_equals_uint32_arithmetic():
    x = np.concatenate([np.arange(1000), RNG.integers(0, 1 << 32, 1000), [0xFFFFFFFF]]).astype(np.int64)
    np.testing.assert_array_equal(mix32(torch.from_numpy(x)).numpy(), _mix_numpy(x).astype(np.int64))


def test_uniform_and_normal_distributions():
    rng = _rng(20000)
    u = rng.uniform(0, dtype=torch.float64).numpy()
    assert u.min() >= 0 and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    z = rng.normal(1, torch.float64).numpy()
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.02  # neighbours uncorrelated
    other = _rng(20000, keys=((12346, 678),)).uniform(0, dtype=torch.float64).numpy()
    assert abs(np.corrcoef(u, other)[0, 1]) < 0.02  # another key: another sequence


@pytest.mark.parametrize("rate", [0.3, 3.0, 9.9, 10.0, 27.5, 400.0])
def test_poisson_matches_scipy(rate):
    n = 20000
    k = _rng(n).poisson(torch.full((n,), rate, dtype=torch.float64)).numpy()
    assert np.all(k == np.round(k)) and k.min() >= 0
    lo, hi = stats.poisson.ppf(0.001, rate), stats.poisson.ppf(0.999, rate)
    edges = np.unique(np.linspace(lo, hi + 1, 12).round())
    observed = np.histogram(np.clip(k, lo, hi), bins=edges)[0]
    cdf = stats.poisson.cdf(edges - 1, rate)
    cdf[0], cdf[-1] = 0.0, 1.0
    expected = np.diff(cdf) * n
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3
    assert abs(k.mean() - rate) < 4 * np.sqrt(rate / n) + 1e-9


def test_gaussian_statistics_rounding_and_clamping():
    out = run_op("noise.gaussian", GREY, layout="HWC", stddev=10.0, mean=5.0)
    for y in out:
        assert y.dtype == torch.uint8
        noise = y.numpy().astype(np.float64) - 100
        assert abs(noise.mean() - 5) < 1.0 and abs(noise.std() - 10) < 1.0
    out = run_op("noise.gaussian", [np.array([250, 3, 100], np.uint8)], mean=10.4, stddev=0.0)
    np.testing.assert_array_equal(out[0].numpy(), [255, 13, 110])  # rounded, clamped to uint8
    floats = [np.zeros(10000, np.float32)]
    out = run_op("noise.gaussian", floats, stddev=0.5)
    assert out.dtype == torch.float32 and stats.kstest(out[0].numpy() / 0.5, "norm").pvalue > 1e-3


def test_noise_is_seeded_and_per_sample():
    a = run_op("noise.gaussian", GREY, layout="HWC", seed=1234)
    b = run_op("noise.gaussian", GREY, layout="HWC", seed=1234)
    c = run_op("noise.gaussian", GREY, layout="HWC", seed=99)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    d = run_op("noise.gaussian", [GREY[0], GREY[2][:5]], layout="HWC", seed=1234)
    assert torch.equal(a[0], d[0])  # another second sample leaves the first one's noise as it was
    assert not torch.equal(a[0][:10, :10], a[2])  # samples get different noise


def test_gaussian_per_sample_stddev_from_the_pipeline():
    stddevs = [np.float32(0.0), np.float32(20.0), np.float32(0.0)]
    out = run_pipeline(lambda: fn.noise.gaussian(fn.external_source(source=lambda: GREY, layout="HWC", cycle=True),
                                                 stddev=fn.external_source(source=lambda: stddevs, cycle=True)),
                       batch_size=3)[0]
    assert int((out[0] != 100).sum()) == 0 and int((out[2] != 100).sum()) == 0
    assert 15 < float(out[1].float().std()) < 25


def test_shot_noise_formula():
    out = run_op("noise.shot", GREY, layout="HWC", factor=2.0)
    for y in out:
        v = y.numpy().astype(np.float64)
        assert np.all(v % 2 == 0)  # multiples of the factor
        assert abs(v.mean() - 100) < 1.5 and abs(v.var() / 200 - 1) < 0.15  # var = factor * x
    np.testing.assert_array_equal(run_op("noise.shot", GREY, layout="HWC", factor=0.0)[0].numpy(), GREY[0])
    out = run_op("noise.shot", [np.array([-5.0, 0.0], np.float32), np.array([250.0, 250.0], np.float32)],
                 factor=0.01)
    np.testing.assert_array_equal(out[0].numpy(), [0.0, 0.0])  # max(0, x / factor): negative inputs give 0
    assert out.dtype == torch.float32
    with pytest.raises(ArgumentError, match="factor"):
        fn.noise.shot(fn.random.uniform(), factor=-1.0)


def test_salt_and_pepper_defaults_and_channel_sharing():
    out = run_op("noise.salt_and_pepper", GREY, layout="HWC", prob=0.3, salt_vs_pepper=0.25)
    for y in out:
        a = y.numpy()
        assert np.all(a == a[..., :1])  # one draw per pixel
        assert set(np.unique(a)) <= {0, 100, 255}
    a = np.concatenate([y.numpy().reshape(-1) for y in out])
    assert abs((a == 255).mean() - 0.075) < 0.02 and abs((a == 0).mean() - 0.225) < 0.03
    out = run_op("noise.salt_and_pepper", GREY, layout="HWC", prob=0.3, per_channel=True)
    assert not np.all(out[0].numpy() == out[0].numpy()[..., :1])
    chw = [np.ascontiguousarray(x.transpose(2, 0, 1)) for x in GREY]
    out = run_op("noise.salt_and_pepper", chw, layout="CHW", prob=0.3)
    assert all(np.all(y.numpy() == y.numpy()[:1]) for y in out)  # the C axis found in the layout
    floats = [np.zeros(4000, np.float32)]
    out = run_op("noise.salt_and_pepper", floats, prob=0.5)
    assert set(np.unique(out[0].numpy())) == {-1.0, 0.0, 1.0}
    out = run_op("noise.salt_and_pepper", GREY, layout="HWC", prob=1.0, salt_vs_pepper=0.0, pepper_val=-7.0)
    assert set(np.unique(out[0].numpy())) == {0}  # -7 saturates to uint8's 0


CASES = [("noise.gaussian", dict(stddev=12.0)), ("noise.shot", dict(factor=3.0)),
         ("noise.salt_and_pepper", dict(prob=0.2))]


@pytest.mark.cuda
@pytest.mark.parametrize("op,kw", CASES, ids=[c[0] for c in CASES])
def test_gpu_equals_cpu(op, kw):
    data = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((40, 30, 3), (24, 50, 3))]
    cpu = run_op(op, data, layout="HWC", seed=7, **kw)
    gpu = run_op(op, data, layout="HWC", seed=7, device="gpu", **kw)
    for a, b in zip(cpu, gpu):
        diff = (a.int() - b.cpu().int()).abs()
        # the same bits on both devices; exp/log/cos may differ in the last float bit, which can move a rounding
        assert float((diff > 0).float().mean()) < 1e-3 and (int(diff.max()) <= 1 or op != "noise.gaussian")


@pytest.mark.cuda
def test_counter_rng_bits_equal_on_gpu():
    cpu, gpu = _rng(1000, keys=((1, 2), (3, 4))), _rng(1000, keys=((1, 2), (3, 4)), device="cuda")
    assert torch.equal(cpu.bits(3), gpu.bits(3).cpu())
    rate = torch.linspace(0, 50, 2000, dtype=torch.float64)
    k_cpu, k_gpu = cpu.poisson(rate), gpu.poisson(rate.cuda()).cpu()
    assert float((k_cpu != k_gpu).double().mean()) < 1e-3

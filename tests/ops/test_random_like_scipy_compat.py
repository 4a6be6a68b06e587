"""fn.random.{normal, uniform, coin_flip} given an input (one value per element, ``shape_like``): the whole batch
drawn from the counter-based generator, checked against the per-sample reference (each sample drawn alone, piece by
piece, as the CPU kernel does: the same values), the distributions against scipy.stats (Kolmogorov-Smirnov, fixed
seeds), per-sample arguments reaching their sample on ragged batches, the GPU's one-launch Triton kernel equal to
the torch ops (in Triton's interpreter without a GPU), and the GPU equal to the CPU."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import sluice
from sluice import fn
from sluice.kernels.counter_rng import CounterRNG
from sluice.ops import random as rnd
from sluice.testing import run_op

stats = pytest.importorskip("scipy.stats")

# ragged: different ranks of extents, one sample longer than a CPU piece
SHAPES = [(3, 50, 41), (1, 7, 9), (2, 190, 180), (0, 4, 4)]
DATA = [np.zeros(s, np.float32) for s in SHAPES]


def _keys(n, seed=5):
    return np.random.default_rng(seed).integers(0, 1 << 32, size=(n, 2), dtype=np.int64)


def _normal_draw(mean, std):
    return lambda rng, spread: spread(mean, torch.float32) + spread(std, torch.float32) * rng.normal(0, torch.float32)


def test_whole_batch_equals_per_sample_pieces():
    sizes = np.array([int(np.prod(s)) for s in SHAPES], np.int64)
    keys = _keys(len(sizes))
    mean, std = np.array([0.0, 1.0, -2.0, 3.0]), np.array([1.0, 0.5, 2.0, 1.0])
    draw = _normal_draw(mean, std)
    whole = rnd.draw_elements(keys, sizes, draw, torch.float32, torch.device("cpu"), pieces=False)
    pieces = rnd.draw_elements(keys, sizes, draw, torch.float32, torch.device("cpu"), pieces=True)
    assert sizes[2] > rnd._CPU_PIECE  # the pieces path really cuts a sample
    assert torch.equal(whole, pieces)
    # each sample alone (its own keys, a batch of one) gives its part of the batch: values do not depend on the batch
    start = 0
    for i, size in enumerate(sizes.tolist()):
        alone = rnd.draw_elements(keys[i:i + 1], sizes[i:i + 1], _normal_draw(mean[i:i + 1], std[i:i + 1]),
                                  torch.float32, torch.device("cpu"), pieces=False)
        assert torch.equal(alone, whole[start:start + size])
        start += size
    # and they are the generator's numbers of counter t under the sample's keys
    t = torch.arange(int(sizes[1]))
    z = CounterRNG(keys[1:2], None, t).normal(0, torch.float32)
    torch.testing.assert_close(whole[sizes[0]:sizes[0] + sizes[1]], 1.0 + 0.5 * z)


def _normal_pipe(stddev, seed, device="cpu"):
    @sluice.pipeline_def(batch_size=len(DATA), num_threads=2, device_id=0 if device == "gpu" else None, seed=seed,
                         exec_async=False)
    def pipe():
        data = fn.external_source(source=lambda: DATA, layout="DHW", cycle=True)
        sd = fn.external_source(source=lambda: [np.float32(v) for v in stddev], cycle=True)
        return fn.random.normal(data.gpu() if device == "gpu" else data, mean=1.5, stddev=sd)

    return [t.cpu() for t in pipe().run()[0]]


def test_normal_like_per_sample_stddev_matches_scipy():
    stddev = [0.5, 1.0, 2.0, 1.0]
    out = _normal_pipe(stddev, 3)
    for i, s in enumerate(SHAPES):
        assert tuple(out[i].shape) == s and out[i].dtype == torch.float32
    big = out[2].numpy().ravel().astype(np.float64)
    assert stats.kstest((big - 1.5) / stddev[2], "norm").pvalue > 1e-3
    assert stats.kstest((out[0].numpy().ravel() - 1.5) / stddev[0], "norm").pvalue > 1e-3
    assert stats.kstest(out[0].numpy().ravel() - 1.5, "norm").pvalue < 1e-3  # sample 0 took its own stddev
    again, other = _normal_pipe(stddev, 3), _normal_pipe(stddev, 4)
    assert torch.equal(again[2], out[2]) and not torch.equal(other[2], out[2])
    assert not torch.equal(out[0][0], out[0][1])  # elements differ, not one value a sample


def test_uniform_and_coin_flip_like():
    out = run_op("random.uniform", DATA, layout="DHW", range=[-2.0, 5.0])
    big = out[2].numpy().ravel()
    assert big.min() >= -2.0 and big.max() < 5.0
    assert stats.kstest((big.astype(np.float64) + 2.0) / 7.0, "uniform").pvalue > 1e-3
    picks = run_op("random.uniform", DATA, layout="DHW", values=[1.0, 2.0, 7.0])
    values, counts = np.unique(picks[2].numpy(), return_counts=True)
    assert values.tolist() == [1.0, 2.0, 7.0] and stats.chisquare(counts).pvalue > 1e-3
    coin = run_op("random.coin_flip", DATA, layout="DHW", probability=0.3)
    assert coin[2].dtype == torch.int32 and set(np.unique(coin[2].numpy())) <= {0, 1}
    assert abs(float(coin[2].float().mean()) - 0.3) < 0.01
    assert stats.binomtest(int(coin[2].sum()), coin[2].numel(), 0.3).pvalue > 1e-3


TRITON_SCRIPT = textwrap.dedent("""
    import numpy as np, torch
    from sluice.ops import random as rnd
    rnd.fused_available = lambda device: True      # the interpreter runs the kernel on CPU tensors
    sizes = np.array([3 * 50 * 41, 63, 2 * 19 * 18 + 5, 0], np.int64)
    keys = np.random.default_rng(5).integers(0, 1 << 32, size=(4, 2), dtype=np.int64)
    dev, f32 = torch.device("cpu"), torch.float32
    p0, p1 = np.array([0.0, 1.0, -2.0, 3.0]), np.array([1.0, 0.5, 2.0, 1.0])
    for kind, draw in ((rnd.DRAW_NORMAL, lambda rng, sp: sp(p0, f32) + sp(p1, f32) * rng.normal(0, f32)),
                       (rnd.DRAW_UNIFORM, lambda rng, sp: sp(p0, f32) + rng.uniform(0, dtype=torch.float64).to(f32)
                        * sp(p1, f32))):
        ref = rnd.draw_elements(keys, sizes, draw, f32, dev, pieces=False)
        got = rnd.draw_fused(kind, keys, sizes, p0, p1, f32, dev)
        assert got.dtype == f32 and got.shape == ref.shape
        assert (got - ref).abs().max().item() < 1e-5, (kind, (got - ref).abs().max().item())
    # Bernoulli: exactly u < p, also for p just above a multiple of 2**-24, and in every output type
    for p in (np.array([0.3, 0.0, 1.0, 0.5]), np.array([0.7, 1e-8, 0.999999, 0.25 + 2 ** -30])):
        for out_type in (torch.int32, torch.bool, torch.uint8, torch.float32):
            ref = rnd.draw_elements(keys, sizes, lambda rng, sp: rng.uniform(0, dtype=torch.float64)
                                    < sp(p, torch.float64), out_type, dev, pieces=False)
            got = rnd.draw_fused(rnd.DRAW_BERNOULLI, keys, sizes, p, p, out_type, dev)
            assert got.dtype == out_type and torch.equal(got, ref), out_type
    assert rnd.draw_fused(rnd.DRAW_NORMAL, keys, sizes, p0, p1, torch.float64, dev) is None  # float64: the torch ops
    print("ok")
""")


def test_triton_kernel_equals_torch_ops_in_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", TRITON_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


def test_like_checks_arguments():
    with pytest.raises(Exception, match="stddev"):
        run_op("random.normal", DATA[:2], stddev=-1.0)
    with pytest.raises(Exception, match="range"):
        run_op("random.uniform", DATA[:2], range=[3.0, 1.0])


@pytest.mark.cuda
def test_compiled_kernel_runs_on_the_gpu():
    sizes, keys = np.array([128 ** 3, 5]), np.array([[1, 2], [3, 4]])
    got = rnd.draw_fused(rnd.DRAW_NORMAL, keys, sizes, np.zeros(2), np.ones(2), torch.float32, torch.device("cuda"))
    ref = rnd.draw_elements(keys, sizes, lambda rng, sp: rng.normal(0, torch.float32), torch.float32,
                            torch.device("cpu"), pieces=False)
    assert got is not None and got.is_cuda
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
def test_gpu_per_sample_stddev_equals_cpu():
    for a, b in zip(_normal_pipe([0.5, 1.0, 2.0, 1.0], 3), _normal_pipe([0.5, 1.0, 2.0, 1.0], 3, "gpu")):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("op,kw", [("random.normal", dict(stddev=2.0, mean=1.0)),
                                   ("random.uniform", dict(range=[-1.0, 3.0])),
                                   ("random.coin_flip", dict(probability=0.4))])
def test_gpu_equals_cpu(op, kw):
    cpu = run_op(op, DATA, layout="DHW", seed=11, **kw)
    gpu = run_op(op, DATA, layout="DHW", seed=11, device="gpu", **kw)
    for a, b in zip(cpu, gpu):
        assert b.is_cuda
        # the same bits on both devices; log/cos may differ in the last float bits
        torch.testing.assert_close(a, b.cpu(), rtol=1e-5, atol=1e-5)

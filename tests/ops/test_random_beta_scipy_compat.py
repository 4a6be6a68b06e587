"""fn.random.beta against scipy.stats.beta (Kolmogorov-Smirnov on seeded draws), with DALI's arguments: per-sample
alpha and beta, shape, a shape_like input, float32 or float64."""

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.errors import ArgumentError, PipelineError
from sluice.testing import run_pipeline

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("alpha,beta", [(0.4, 0.4), (2.0, 5.0), (1.0, 1.0)])
def test_beta_distribution(alpha, beta):
    (out,) = run_pipeline(lambda: fn.random.beta(alpha=alpha, beta=beta, shape=[4000]), batch_size=2, seed=21)
    values = np.concatenate([s.numpy() for s in out])
    assert out.dtype == torch.float32 and values.min() >= 0 and values.max() <= 1
    assert stats.kstest(values, "beta", args=(alpha, beta)).pvalue > 1e-3


def test_beta_per_sample_arguments_shape_like_and_seed():
    alphas = [np.float32(0.5), np.float32(50.0)]
    out = run_pipeline(lambda: (fn.random.beta(alpha=fn.external_source(source=lambda: alphas, cycle=True), beta=50.0,
                                               shape=[2000], dtype=types.FLOAT64),
                                fn.random.beta(fn.external_source(source=lambda: [np.zeros((2, 3))] * 2, cycle=True))),
                       batch_size=2)
    assert out[0].dtype == torch.float64
    assert abs(float(out[0][0].mean()) - 0.5 / 50.5) < 0.003 and abs(float(out[0][1].mean()) - 0.5) < 0.01
    assert out[1].shape() == [(2, 3), (2, 3)]
    again = run_pipeline(lambda: fn.random.beta(shape=[5]), batch_size=3, seed=21)[0]
    assert torch.equal(again.as_tensor(), run_pipeline(lambda: fn.random.beta(shape=[5]), batch_size=3, seed=21)[0].as_tensor())


def test_beta_refuses_bad_parameters():
    with pytest.raises(PipelineError, match="positive"):
        run_pipeline(lambda: fn.random.beta(alpha=0.0), batch_size=3)
    with pytest.raises(ArgumentError, match="dtype"):
        fn.random.beta(dtype=types.INT32)


def test_random_shapes_per_sample_and_choice_shape_like():
    shapes = [np.array([2]), np.array([5]), np.array([0])]
    out = run_pipeline(lambda: (lambda shape: (fn.random.uniform(shape=shape), fn.random.beta(shape=shape),
                                               fn.random.normal(shape=shape), fn.random.coin_flip(shape=shape)))(
        fn.external_source(source=lambda: shapes, cycle=True)), batch_size=3)
    for batch in out:
        assert batch.shape() == [(2,), (5,), (0,)]
    like = [np.zeros((2, 2)), np.zeros((3,)), np.zeros(())]
    choices = [np.array([7, 8, 9])] * 3
    (out,) = run_pipeline(lambda: fn.random.choice(fn.external_source(source=lambda: choices, cycle=True),
                                                   fn.external_source(source=lambda: like, cycle=True)), batch_size=3)
    assert out.shape() == [(2, 2), (3,), ()] and set(np.concatenate([s.numpy().reshape(-1) for s in out])) <= {7, 8, 9}

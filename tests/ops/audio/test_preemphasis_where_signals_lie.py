"""``preemphasis_filter`` on a GPU over signals where they lie: the packed form at offsets with gaps (audio cut by
``slice`` and moved in one copy), and the rows of a padded form, every border policy, one coefficient or one per
sample, float and 16-bit signals, empty and one-sample signals among them. The reference is the filter's formula
in NumPy (float64, rounded to float32), sample by sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema

pytestmark = pytest.mark.cuda


def reference(x: np.ndarray, c: float, border: str) -> np.ndarray:
    x = x.astype(np.float64)
    if not len(x):
        return x.astype(np.float32)
    first = {"zero": 0.0, "clamp": x[0], "reflect": x[1] if len(x) > 1 else x[0]}[border]
    prev = np.concatenate([[first], x[:-1]])
    return (x - c * prev).astype(np.float32)


def run(batch: Batch, coeff, border: str) -> Batch:
    schema = get_schema("preemphasis_filter")
    const = {name: a.default for name, a in schema.args.items()}
    const.update(border=border)
    per_sample = {}
    if isinstance(coeff, list):
        per_sample["preemph_coeff"] = coeff
    else:
        const["preemph_coeff"] = coeff
    ctx = BatchContext("preemphasis_filter", len(batch), [""] * len(batch), [batch.layout()], torch.device("cuda"),
                       None)
    return schema.kernels["gpu"].kernel(ctx, batch, args=BatchArgs(const, per_sample, len(batch)))


@pytest.mark.parametrize("border", ["zero", "clamp", "reflect"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16])
@pytest.mark.parametrize("per_sample", [False, True])
def test_packed_at_offsets_and_padded_equal_the_formula(border, dtype, per_sample):
    g = np.random.default_rng(7)
    lengths = np.array([7001, 0, 1, 2, 40000, 513], np.int64)
    gaps = g.integers(0, 200, len(lengths))
    offsets = np.cumsum(gaps + np.concatenate([[0], lengths[:-1]]))
    buf = torch.from_numpy(g.normal(0, 3000, int(offsets[-1] + lengths[-1]))).to(dtype)
    samples = [buf[o: o + k].numpy() for o, k in zip(offsets.tolist(), lengths.tolist())]
    coeff = [0.97, 0.5, 0.9, 0.1, 0.95, 0.0] if per_sample else 0.97
    coeffs = coeff if per_sample else [coeff] * len(lengths)
    packed = Batch.from_packed(buf.cuda(), lengths[:, None], offsets=offsets)
    longest = int(lengths.max())
    rows = torch.zeros((len(lengths), longest), dtype=dtype)
    for i, s in enumerate(samples):
        rows[i, : len(s)] = torch.from_numpy(s)
    padded = Batch.from_padded(rows.cuda(), lengths[:, None])
    for batch in (packed, padded):
        out = run(batch, coeff, border)
        assert out.shape() == [(int(k),) for k in lengths]
        for got, s, c in zip(out, samples, coeffs):
            want = reference(s, c, border)
            assert got.dtype == torch.float32
            # float32 arithmetic on values of a few thousand: a few ulps of 2.4e-4 apart from the float64 formula
            np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=2e-3)

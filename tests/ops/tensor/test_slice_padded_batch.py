"""slice's GPU kernel on a ragged batch of signals padded or cut to one length (``start=[s], shape=[N]``, "pad"):
the one-call path (views stacked by pad_sequence) gives the per-sample path's values (slice_sample, checked against
DALI's semantics in test_slice*.py). The kernel is device-agnostic torch, so it runs here on CPU tensors."""

import pytest
import torch

from sluice.errors import SampleError
from sluice.ops.tensor import slice as sl
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs


def _args(n, **kw):
    const = {k: a.default for k, a in sl.SCHEMA.args.items()}
    const.update(kw)
    return BatchArgs(const, {}, n)


def _expected(samples, start, length, policy, fill):
    return torch.stack([sl.slice_sample(x, [start] + [0] * (x.dim() - 1), [start + length] + list(x.shape[1:]),
                                        policy, [fill]) for x in samples])


@pytest.mark.parametrize("start,length", [(0, 50), (0, 20), (5, 30), (0, 100)])
@pytest.mark.parametrize("trailing", [(), (2,)])
@pytest.mark.parametrize("fill", [0.0, -1.5])
def test_padded_batch_equals_each_sample_cut_on_its_own(start, length, trailing, fill):
    g = torch.Generator().manual_seed(0)
    samples = [torch.randn((n, *trailing), generator=g) for n in (40, 13, 77, 25, 40)]
    out = sl.slice_gpu(None, Batch(samples), args=_args(len(samples), start=[start], shape=[length], axes=[0],
                                                        out_of_bounds_policy="pad", fill_values=[fill]))
    assert out.dense is not None
    assert torch.equal(out.dense, _expected(samples, start, length, "pad", fill))


def test_a_region_past_the_end_still_raises_with_the_error_policy():
    samples = [torch.ones(10), torch.ones(30)]
    with pytest.raises(SampleError, match="outside the sample") as e:
        sl.slice_gpu(None, Batch(samples), args=_args(2, start=[0], shape=[20], axes=[0]))
    assert e.value.index == 0


def test_samples_cut_inside_take_the_one_call_path_too():
    samples = [torch.arange(30.0), torch.arange(50.0)]
    out = sl.slice_gpu(None, Batch(samples), args=_args(2, start=[3], shape=[20], axes=[0]))
    assert torch.equal(out.as_tensor(), torch.stack([torch.arange(3.0, 23.0)] * 2))

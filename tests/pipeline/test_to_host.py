"""Batch.as_cpu through page-locked staging buffers (sluice.pipeline.to_host) against torch's own Tensor.cpu()."""

import numpy as np
import pytest
import torch

from sluice.pipeline import to_host
from sluice.pipeline.batch import Batch
from sluice.pipeline.to_host import plan_offsets, samples_to_host


def test_offsets_are_aligned_and_do_not_overlap():
    sizes = [0, 1, 63, 64, 65, 1000, 0, 7]
    offsets, total = plan_offsets(sizes, align=64)
    assert all(o % 64 == 0 for o in offsets)
    ends = [o + s for o, s in zip(offsets, sizes)]
    assert all(e <= o for e, o in zip(ends, offsets[1:]))
    assert total >= ends[-1] and total % 64 == 0


def test_cpu_samples_come_back_unchanged():
    samples = [torch.arange(10), torch.ones(3, 4, dtype=torch.float64)]
    out = samples_to_host(samples)
    assert all(torch.equal(a, b) for a, b in zip(out, samples))


def test_host_bytes_live_as_long_as_a_view():
    host = to_host._fresh_host_bytes(1 << 16)
    view = host[128:192].view(torch.float32)
    del host
    view.fill_(2.5)
    assert float(view.sum()) == 2.5 * 16


@pytest.fixture
def small_stages(monkeypatch):
    """Staging buffers of 4 KiB and no lower bound: every batch is staged, in many pieces."""
    monkeypatch.setattr(to_host, "STAGE_BYTES", 4096)
    monkeypatch.setattr(to_host, "STAGED_FROM", 1)
    monkeypatch.setattr(to_host, "_local", type(to_host._local)())


def _mixed_samples(device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [
        torch.randint(0, 255, (5, 37, 3), generator=g, dtype=torch.uint8).to(device),
        torch.randn(13, 401, generator=g).to(device),  # 20,852 bytes: six pieces
        torch.randn(7, 9, generator=g, dtype=torch.float64).to(device).t(),  # not contiguous
        torch.empty(0, 4, dtype=torch.int16, device=device),
        torch.tensor(3, dtype=torch.int64, device=device),  # no dimensions
        torch.rand(33, generator=g).gt(0.5).to(device),  # bool
        torch.randint(-9, 9, (3, 1000), generator=g, dtype=torch.int32).to(device),
    ]


@pytest.mark.cuda
def test_staged_copies_equal_torchs(small_stages):
    samples = _mixed_samples("cuda")
    out = samples_to_host(samples)
    for got, s in zip(out, samples):
        want = s.cpu()
        assert got.device.type == "cpu" and got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)
        assert not got.is_pinned()


@pytest.mark.cuda
def test_a_second_batch_leaves_the_first_as_it_was(small_stages):
    first = samples_to_host(_mixed_samples("cuda"))
    kept = [t.clone() for t in first]
    second = samples_to_host([s.neg() if s.dtype != torch.bool else ~s for s in _mixed_samples("cuda")])
    assert all(torch.equal(a, b) for a, b in zip(first, kept))
    assert not torch.equal(first[1], second[1])


@pytest.mark.cuda
def test_samples_made_on_another_stream_are_waited_for(small_stages):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        big = torch.zeros(2048, 2048, device="cuda")
        for _ in range(50):  # queued work that takes a while: a copy that did not wait would read zeros
            big = big + 1
        out = samples_to_host([big])
    assert float(out[0].min()) == 50.0


@pytest.mark.cuda
def test_batch_as_cpu_dense_and_list(small_stages):
    dense = torch.arange(2 * 3 * 500, device="cuda", dtype=torch.float32).view(2, 3, 500)
    as_list = Batch(_mixed_samples("cuda"), "")
    got = Batch.from_dense(dense, "CHW").as_cpu()
    assert got.device == "cpu" and torch.equal(got.as_tensor(), dense.cpu())
    assert np.array_equal(np.asarray(got[1]), dense[1].cpu().numpy())
    listed = as_list.as_cpu()
    assert all(torch.equal(a, b.cpu()) for a, b in zip(listed.samples, as_list.samples))

"""Batch.as_cpu through page-locked staging buffers (sluice.pipeline.to_host) against torch's own Tensor.cpu()."""

import numpy as np
import pytest
import torch

from sluice.pipeline import to_host
from sluice.pipeline.batch import Batch
from sluice.pipeline.to_host import copy_through_stages, plan_fills, samples_to_host


class _NoEvent:
    """Stands in for a CUDA event in copies made on the CPU: the copies are done when queued."""

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


def _pairs(sizes):
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, 255, (n,), generator=g, dtype=torch.uint8), torch.zeros(n, dtype=torch.uint8))
            for n in sizes]


def test_fills_cover_every_byte_once_and_fit_the_stage():
    pairs = _pairs([10, 3, 100, 1, 64, 37])
    fills = plan_fills(pairs, 32)
    assert all(sum(src.numel() for src, _, _ in fill) <= 32 for fill in fills)
    assert sum(src.numel() for fill in fills for src, _, _ in fill) == 215
    assert len(fills) == 7  # 215 bytes in fills of 32: small samples share a fill, large ones span several
    for fill in fills:
        spans = sorted((at, at + src.numel()) for src, _, at in fill)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two segments overlap in the buffer


def test_copies_through_two_stages_reach_every_destination():
    pairs = _pairs([5000, 7, 0, 12289, 1, 4096])
    stages = (None, [torch.full((4096,), 7, dtype=torch.uint8) for _ in range(2)], [_NoEvent(), _NoEvent()])
    copy_through_stages(plan_fills([p for p in pairs if p[0].numel()], 4096), stages)
    assert all(torch.equal(src, dst) for src, dst in pairs)


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
    monkeypatch.setattr(to_host, "MAPPED_FROM", 10_000)  # both kinds of host memory
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
        assert got.untyped_storage().nbytes() == want.numel() * want.element_size()  # its own memory, no more


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

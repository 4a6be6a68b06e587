"""Batch.to / .gpu(): a batch crosses to the GPU in one copy. A list of samples of different shapes is gathered
into one staging buffer (the gathering is checked here on the CPU); on a GPU (cuda-marked) the samples arrive as
views of one device buffer, a dense batch already page-locked is not copied on the host, and staging buffers in
flight are not overwritten by the next batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.pipeline.batch import POOLED_FROM, Batch, _PinnedBlocks, gather_to, host_empty, is_page_locked, pinned_class


def ragged() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(3, 2, generator=g), torch.randn(0, 2, generator=g), torch.randn(5, 2, generator=g),
            torch.randn(1, 2, generator=g)]


def test_gather_to_packs_the_samples_back_to_back_and_a_packed_batch_views_them():
    samples = ragged()
    moved = gather_to(samples, torch.device("cpu"), pin=False)
    assert moved.shape == (18,)
    torch.testing.assert_close(moved, torch.cat([s.reshape(-1) for s in samples]), rtol=0, atol=0)
    parts = Batch.from_packed(moved, np.array([s.shape for s in samples])).samples
    for part, sample in zip(parts, samples):
        assert part.shape == sample.shape
        torch.testing.assert_close(part, sample, rtol=0, atol=0)
        assert part.untyped_storage().data_ptr() == moved.untyped_storage().data_ptr()
    scalars = [torch.tensor(1.5), torch.tensor(-2.0)]            # 0-d samples keep their shape
    parts = Batch.from_packed(gather_to(scalars, torch.device("cpu"), pin=False), np.zeros((2, 0), int)).samples
    assert [p.shape for p in parts] == [(), ()] and [p.item() for p in parts] == [1.5, -2.0]


def test_host_memory_without_pinning_and_cpu_moves_unchanged():
    buf = host_empty((4, 3), torch.float32)
    assert buf.shape == (4, 3) and not is_page_locked(buf)
    batch = Batch(ragged(), "tc")
    same = batch.to("cpu")
    assert same.layout() == "tc" and [s.data_ptr() for s in same] == [s.data_ptr() for s in batch]


@pytest.mark.cuda
def test_ragged_batch_crosses_in_one_copy_as_views_of_one_device_buffer():
    batch = Batch(ragged(), "tc", ["a", "b", "c", "d"])
    moved = batch.to("cuda", non_blocking=True)
    assert moved.device == "gpu" and moved.layout() == "tc" and moved.source_info == ["a", "b", "c", "d"]
    assert len({s.untyped_storage().data_ptr() for s in moved}) == 1
    for got, want in zip(moved, batch):
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    same_shape = Batch([torch.full((2, 3), float(i)) for i in range(4)]).to("cuda", non_blocking=True)
    assert same_shape.dense is not None and same_shape.dense[:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.cuda
def test_packed_batch_crosses_as_its_one_buffer():
    flat = torch.arange(18, dtype=torch.float32)
    shapes = np.array([[3, 2], [0, 2], [5, 2], [1, 2]])
    batch = Batch.from_packed(flat, shapes, "tc")
    moved = batch.to("cuda", non_blocking=True)
    assert moved.packed is not None and moved.packed[0].is_cuda and moved.shape() == batch.shape()
    for got, want in zip(moved, batch):
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


@pytest.mark.cuda
def test_page_locked_dense_batch_is_not_copied_on_the_host(monkeypatch):
    dense = host_empty((4, 1000), torch.float32, pin=True, device=0)
    assert is_page_locked(dense) and dense.is_pinned()
    dense.copy_(torch.arange(4000, dtype=torch.float32).view(4, 1000))

    def no_host_copy(self, *args, **kwargs):
        raise AssertionError("a page-locked batch was pinned again")

    monkeypatch.setattr(torch.Tensor, "pin_memory", no_host_copy)
    moved = Batch.from_dense(dense).to("cuda", non_blocking=True)
    torch.testing.assert_close(moved.dense.cpu(), dense, rtol=0, atol=0)


@pytest.mark.cuda
def test_staging_buffers_in_flight_are_not_overwritten():
    """The copy stream is held up by a long kernel while 20 ragged batches are queued and their staging buffers
    freed at once: each must still arrive with its own values (torch's host allocator waits for the copies)."""
    stream = torch.cuda.Stream()
    results = []
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)                       # ~0.1 s of GPU time before the copies run
        for k in range(20):
            samples = [torch.full((n,), float(k)) for n in (1000, 3000, 7)]
            results.append(Batch(samples).to("cuda", non_blocking=True))
            del samples
    stream.synchronize()
    for k, batch in enumerate(results):
        assert [float(s.min()) for s in batch] == [float(k)] * 3 and [float(s.max()) for s in batch] == [float(k)] * 3


def test_pinned_classes_share_the_largest_block_size_among_batches_of_about_one_size():
    mib = 1 << 20
    assert pinned_class(70 * mib, 0) == 128 * mib                   # the power of two holding it
    assert pinned_class(60 * mib, 128 * mib) == 128 * mib           # not its own class of 64 MiB
    assert pinned_class(33 * mib, 128 * mib) == 128 * mib
    assert pinned_class(20 * mib, 128 * mib) == 32 * mib            # a small request keeps its own class
    assert pinned_class(200 * mib, 128 * mib) == 256 * mib
    assert pinned_class(POOLED_FROM, 0) == POOLED_FROM


@pytest.mark.cuda
def test_pinned_blocks_are_page_locked_ahead_so_the_steady_state_page_locks_none():
    """Ragged requests of 40-90 MiB, up to AHEAD + 1 alive at once (the first and the last AHEAD - 1 held, then one
    more asked for): only the first page-locks (AHEAD + 1 blocks of one class); every view has its shape and lies
    in page-locked memory."""
    blocks = _PinnedBlocks()
    count = lambda: torch.cuda.host_memory_stats()["num_host_alloc"]  # noqa: E731
    rng = np.random.default_rng(0)
    held, before = [], count()
    first = blocks.empty((90 << 20,), torch.uint8)
    after_first = count()
    assert after_first - before == 1 + _PinnedBlocks.AHEAD
    for _ in range(40):
        n = int(rng.integers(40 << 18, 90 << 18))                   # float32 elements: 40-90 MiB
        t = blocks.empty((n,), torch.float32)
        assert t.shape == (n,) and t.is_pinned()
        held = (held + [t])[-(_PinnedBlocks.AHEAD - 1):]
        del t
    assert count() == after_first and first.is_pinned()

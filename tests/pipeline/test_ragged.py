"""Ragged batches: the packed and padded layouts of one buffer and the batched conversions between them
(sluice.pipeline.ragged), compared with the samples taken one by one (torch's own slicing, the reference), on
batches of mixed shapes of every rank, empty samples included; the same code runs on a GPU (cuda-marked)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def samples_of(shapes, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(tuple(s), generator=g) * 100).to(dtype) for s in shapes]


SHAPES = {
    "1d": [(5,), (0,), (9,), (1,)],
    "2d": [(3, 4), (1, 6), (0, 2), (5, 5)],
    "3d": [(2, 3, 1), (4, 1, 3), (1, 1, 1)],
    "0d": [(), (), ()],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_packed_to_padded_and_back_equal_the_samples(device, kind):
    samples = [s.to(device) for s in samples_of(SHAPES[kind])]
    shapes = np.array([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    flat = torch.cat([s.reshape(-1) for s in samples])
    padded = ragged.packed_to_padded(flat, ragged.packed_offsets(shapes), shapes, fill=-1.0)
    assert tuple(padded.shape) == (len(samples), *ragged.largest(shapes))
    for row, s in zip(padded, samples):
        corner = row[tuple(slice(0, d) for d in s.shape)]
        torch.testing.assert_close(corner, s, rtol=0, atol=0)
        assert int((row == -1).sum()) == row.numel() - s.numel()       # the rest is the fill
    torch.testing.assert_close(ragged.padded_to_packed(padded, shapes), flat, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_packed_at_offsets_reads_each_sample_where_it_lies(device):
    buf = torch.arange(40, dtype=torch.int16, device=device)
    shapes = np.array([[3], [0], [6], [2]])
    offsets = np.array([30, 1, 10, 4])
    batch = Batch.from_packed(buf, shapes, "t", offsets=offsets)
    assert batch.packed is None and batch.shape() == [(3,), (0,), (6,), (2,)]
    want = [buf[30:33], buf[1:1], buf[10:16], buf[4:6]]
    for got, w in zip(batch.samples, want):
        torch.testing.assert_close(got, w, rtol=0, atol=0)
    padded, got_shapes = Batch.from_packed(buf, shapes, "t", offsets=offsets).padded(fill=7)
    assert padded.dtype == torch.int16 and padded[1].tolist() == [7] * 6
    assert padded[0].tolist() == [30, 31, 32, 7, 7, 7] and np.array_equal(got_shapes, shapes)
    flat, _, packed_offsets = batch.packed_form()
    assert np.array_equal(packed_offsets, offsets)


def test_every_layout_gives_the_same_samples_and_padded_form():
    samples = samples_of(SHAPES["2d"])
    shapes = np.array([s.shape for s in samples])
    flat = torch.cat([s.reshape(-1) for s in samples])
    rows = ragged.packed_to_padded(flat, ragged.packed_offsets(shapes), shapes, fill=0.0)
    forms = {"list": Batch(samples, "HW"), "packed": Batch.from_packed(flat, shapes, "HW"),
             "padded": Batch.from_padded(rows, shapes, "HW", fill=0.0)}
    for name, b in forms.items():
        assert b.shape() == [tuple(s.shape) for s in samples], name
        assert np.array_equal(b.shapes_array(), shapes), name
        for got, want in zip(b.samples, samples):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        padded, _ = b.padded(fill=0.0)
        torch.testing.assert_close(padded, rows, rtol=0, atol=0)
        torch.testing.assert_close(b.packed_form()[0], flat, rtol=0, atol=0)
        refilled, _ = b.padded(fill=5.0)
        assert int((refilled == 5.0).sum()) == refilled.numel() - int(flat.numel()), name


def test_padded_of_equal_shapes_is_a_dense_batch_and_shapes_are_checked():
    t = torch.zeros(3, 4, 2)
    assert Batch.from_padded(t, np.array([[4, 2]] * 3)).dense is t
    with pytest.raises(ValueError, match="exceeds"):
        Batch.from_padded(t, np.array([[5, 2], [1, 1], [1, 1]]))
    with pytest.raises(ValueError, match="dims"):
        Batch.from_padded(t, np.array([[4], [1], [1]]))


def test_with_layout_and_as_tensor_keep_the_padded_samples():
    samples = samples_of([(2, 3), (2, 3)]) + samples_of([(1, 3)])
    b = Batch(samples, "tc")
    rows, shapes = b.padded()
    p = Batch.from_padded(rows, shapes, "tc").with_layout("xy")
    assert p.layout() == "xy" and p.shape() == [(2, 3), (2, 3), (1, 3)]
    with pytest.raises(ValueError, match="differ in shape"):
        p.as_tensor()
    same = Batch.from_packed(torch.cat([s.reshape(-1) for s in samples[:2]]), np.array([[2, 3], [2, 3]]))
    torch.testing.assert_close(same.as_tensor(), torch.stack(samples[:2]), rtol=0, atol=0)


@pytest.mark.cuda
def test_offsets_batch_crosses_to_the_gpu_as_the_span_it_covers():
    buf = torch.arange(100, dtype=torch.float32)
    batch = Batch.from_packed(buf, np.array([[5], [3]]), offsets=np.array([50, 20]))
    moved = batch.to("cuda", non_blocking=True)
    assert moved.packed_form()[0].numel() == 35      # elements 20 .. 55
    assert [s.cpu().tolist() for s in moved.samples] == [list(range(50, 55)), [20.0, 21.0, 22.0]]
    padded, _ = moved.padded(fill=0.0)
    assert padded.is_cuda and padded[1].tolist() == [20, 21, 22, 0, 0]


@pytest.mark.parametrize("device", DEVICES)
def test_long_signals_are_made_padded_by_copies_with_the_same_values(device):
    samples = [s.to(device) for s in samples_of([(9000,), (0,), (20000,), (4097,)])]
    shapes = np.array([s.shape for s in samples])
    flat = torch.cat(samples)
    for fill in (None, 2.5):
        padded = ragged.packed_to_padded(flat, ragged.packed_offsets(shapes), shapes, fill=fill)
        for row, s in zip(padded, samples):
            torch.testing.assert_close(row[: s.numel()], s, rtol=0, atol=0)
            if fill is not None:
                assert bool((row[s.numel():] == fill).all())


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.uint8, torch.float64])
@pytest.mark.parametrize("fill", [None, 0.0, 3.0])
def test_signals_at_offsets_made_padded_on_the_gpu_equal_the_host_path(dtype, fill):
    """Long 1-D samples at offsets with gaps between them (audio cut by ``slice``), some empty, one at the very end
    of the buffer: the GPU's padded form (one Triton launch where Triton is present) equals the host's, element by
    element inside each sample and, with a fill, in the padding too."""
    g = np.random.default_rng(3)
    lengths = np.array([9000, 0, 17, 40001, 5000, 1], np.int64)
    gaps = g.integers(0, 300, len(lengths))
    offsets = np.cumsum(gaps + np.concatenate([[0], lengths[:-1]]))
    total = int(offsets[-1] + lengths[-1])
    buf = (torch.rand(total, generator=torch.Generator().manual_seed(1)) * 100).to(dtype)
    host = ragged.packed_to_padded(buf, offsets, lengths[:, None], fill=fill)
    gpu = ragged.packed_to_padded(buf.cuda(), offsets, lengths[:, None], fill=fill).cpu()
    assert gpu.shape == host.shape == (len(lengths), int(lengths.max())) and gpu.dtype == dtype
    for i, k in enumerate(lengths.tolist()):
        torch.testing.assert_close(gpu[i, :k], buf[offsets[i]: offsets[i] + k], rtol=0, atol=0)
        if fill is not None:
            assert bool((gpu[i, k:] == torch.tensor(fill).to(dtype)).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 6, 5, 4), (3, 7), (9,)])
def test_equal_shapes_packed_at_equal_distances_are_viewed_not_gathered(device, shape):
    """A packed batch of one shape (a slice's patches before and after .gpu()) has its padded form and dense tensor
    as a strided view of the buffer (no index, no gather), back to back or at equal gaps; the samples are the
    reference's; a batch at unequal gaps still gathers (a new buffer) with the same samples."""
    size = int(np.prod(shape))
    flat = torch.arange(4 * size + 20, dtype=torch.float32, device=device)
    shapes = np.array([shape] * 3, np.int64)
    for offsets in (np.arange(3) * size, 2 + np.arange(3) * (size + 5), np.array([0, size + 3, 2 * size + 4])):
        batch = Batch.from_packed(flat, shapes, offsets=offsets)
        padded, _ = batch.padded(fill=0)
        ref = torch.stack([flat[o:o + size].view(shape) for o in offsets.tolist()])
        assert torch.equal(padded, ref) and torch.equal(batch.as_tensor(), ref)
        viewed = padded.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
        assert viewed == bool(len(set(np.diff(offsets).tolist())) == 1)

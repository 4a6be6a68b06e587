"""fn.flip against NumPy's flips (exact), per-sample flags, dense and ragged batches, CHW."""

import numpy as np
import pytest
import torch

from sluice.testing import run_op


def _img(h=5, w=7, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("h,v", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_flip_matches_numpy(device, h, v):
    img = _img()
    out = run_op("flip", [img], layout="HWC", horizontal=h, vertical=v, device=device)[0].cpu().numpy()
    ref = img[::-1 if v else 1, ::-1 if h else 1]
    np.testing.assert_array_equal(out, ref)


def test_chw_and_input_untouched():
    img = _img()
    chw = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    before = chw.clone()
    out = run_op("flip", [chw], layout="CHW", horizontal=1, vertical=1)[0]
    np.testing.assert_array_equal(out.permute(1, 2, 0).numpy(), img[::-1, ::-1])
    assert torch.equal(chw, before)


@pytest.mark.cuda
def test_gpu_dense_batch_with_mixed_flags():
    from sluice import fn
    from sluice.pipeline.pipeline import Pipeline

    imgs = [_img(seed=i) for i in range(4)]
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=0, seed=3, exec_async=False)
    with pipe:
        x = fn.external_source(source=lambda: imgs, layout="HWC").gpu()
        hs = fn.external_source(source=lambda: [np.int32(i % 2) for i in range(4)])
        vs = fn.external_source(source=lambda: [np.int32(i // 2) for i in range(4)])
        out = fn.flip(x, horizontal=hs, vertical=vs, device="gpu")
    pipe.set_outputs(out)
    (res,) = pipe.run()
    for i, img in enumerate(imgs):
        ref = img[::-1 if i // 2 else 1, ::-1 if i % 2 else 1]
        np.testing.assert_array_equal(res[i].cpu().numpy(), ref)


def test_gpu_kernel_flips_packed_volumes_as_one_tensor():
    """The GPU kernel (on CPU tensors) on volumes held packed with one shape flips them as one tensor (dense out,
    no per-sample path), each as NumPy flips it with its own flags (depthwise too)."""
    from sluice.ops.image.flip import flip_gpu
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext

    rng = np.random.default_rng(3)
    vols = [rng.integers(0, 256, (1, 4, 5, 6), dtype=np.uint8) for _ in range(4)]
    packed = Batch.from_packed(torch.from_numpy(np.concatenate([v.ravel() for v in vols])),
                               np.array([v.shape for v in vols]), "CDHW")
    flags = {"horizontal": [1, 0, 1, 0], "vertical": [0, 0, 1, 1], "depthwise": [1, 0, 0, 1]}
    ctx = BatchContext("flip", 4, [""] * 4, ["CDHW"], torch.device("cpu"), None)
    out = flip_gpu(ctx, packed, args=BatchArgs({}, flags, 4))
    assert out.storage == "dense"
    for i, (v, got) in enumerate(zip(vols, out)):
        ref = v[:, ::-1 if flags["depthwise"][i] else 1, ::-1 if flags["vertical"][i] else 1,
                ::-1 if flags["horizontal"][i] else 1]
        np.testing.assert_array_equal(got.numpy(), ref)



def _ragged(rng, layout, n=9):
    """Samples of ``layout`` with ragged H and W (one of H = 0) and extents around them."""
    shapes = []
    for i in range(n):
        h, w = int(rng.integers(0 if i == 3 else 1, 7)), int(rng.integers(1, 8))
        shapes.append({"HWC": (h, w, 3), "HW": (h, w), "CHW": (int(rng.integers(1, 4)), h, w),
                       "FHWC": (int(rng.integers(1, 3)), h, w, 2)}[layout])
    return [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]


def _numpy_flip(x, layout, h, v):
    idx = [slice(None)] * x.ndim
    if h:
        idx[layout.index("W")] = slice(None, None, -1)
    if v:
        idx[layout.index("H")] = slice(None, None, -1)
    return x[tuple(idx)]


@pytest.mark.parametrize("layout", ["HWC", "HW", "CHW", "FHWC"])
@pytest.mark.parametrize("held", ["packed", "offsets", "samples"])
@pytest.mark.parametrize("index", ["int32", "int64"])
def test_gpu_kernel_flips_a_ragged_batch_in_one_gather(layout, held, index, monkeypatch):
    """The GPU kernel (on CPU tensors) on a ragged batch (the mixed decoder's packed output, a packed buffer read
    from offsets as slice's, or a list): one gather into a packed batch (no per-sample path), each sample equal to
    NumPy's flip of it with its own flags, the input untouched."""
    from sluice.ops.image.flip import flip_gpu
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext

    from sluice.ops.image import flip as flip_module

    if index == "int64":  # the index arithmetic of batches too large for int32
        monkeypatch.setattr(flip_module, "_INT32_UNITS", 0)
    rng = np.random.default_rng(7)
    imgs = _ragged(rng, layout)
    n = len(imgs)
    shapes = np.array([x.shape for x in imgs])
    if held == "samples":
        batch = Batch([torch.from_numpy(x) for x in imgs], layout)
    else:
        gap = 0 if held == "packed" else 6  # offsets: unused elements between the samples
        parts, offsets, at = [], [], 0
        for x in imgs:
            offsets.append(at)
            parts += [x.ravel(), np.full(gap, 77, np.uint8)]
            at += x.size + gap
        flat = torch.from_numpy(np.concatenate(parts))
        batch = Batch.from_packed(flat, shapes, layout, offsets=None if held == "packed" else np.array(offsets))
    before = [s.clone() for s in batch.samples]
    flags = {"horizontal": rng.integers(0, 2, n).tolist(), "vertical": rng.integers(0, 2, n).tolist(),
             "depthwise": [0] * n}
    flags["horizontal"][:2], flags["vertical"][:2] = [1, 0], [1, 0]   # both flags, and neither, at least once
    ctx = BatchContext("flip", n, [""] * n, [layout], torch.device("cpu"), None)
    out = flip_gpu(ctx, batch, args=BatchArgs({}, flags, n))
    assert out.storage == "packed"
    assert [tuple(s.shape) for s in out.samples] == [x.shape for x in imgs]
    for i, (x, got) in enumerate(zip(imgs, out.samples)):
        np.testing.assert_array_equal(got.numpy(), _numpy_flip(x, layout, flags["horizontal"][i],
                                                               flags["vertical"][i]), err_msg=f"sample {i}")
    assert all(torch.equal(a, b) for a, b in zip(batch.samples, before))


def test_gpu_kernel_ragged_volumes_flipped_depthwise_go_sample_by_sample():
    """A ragged batch of volumes with a depthwise flip is not the packed gather's case: flipped per sample, as
    NumPy does."""
    from sluice.ops.image.flip import flip_gpu
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext

    rng = np.random.default_rng(4)
    vols = [rng.integers(0, 256, (int(rng.integers(1, 4)), 3, int(rng.integers(2, 5)), 2), dtype=np.uint8)
            for _ in range(3)]
    flags = {"horizontal": [1, 0, 0], "vertical": [0, 1, 0], "depthwise": [1, 1, 0]}
    ctx = BatchContext("flip", 3, [""] * 3, ["DHWC"], torch.device("cpu"), None)
    out = flip_gpu(ctx, Batch([torch.from_numpy(v) for v in vols], "DHWC"), args=BatchArgs({}, flags, 3))
    for i, (v, got) in enumerate(zip(vols, out.samples)):
        ref = v[::-1 if flags["depthwise"][i] else 1, ::-1 if flags["vertical"][i] else 1,
                ::-1 if flags["horizontal"][i] else 1]
        np.testing.assert_array_equal(got.numpy(), ref)


@pytest.mark.cuda
def test_gpu_ragged_batch_with_mixed_flags():
    """A ragged batch on the GPU (the packed gather on CUDA) against NumPy's flips, per-sample flags."""
    from sluice import fn
    from sluice.pipeline.pipeline import Pipeline

    rng = np.random.default_rng(5)
    imgs = _ragged(rng, "HWC", 8)
    pipe = Pipeline(batch_size=8, num_threads=1, device_id=0, seed=3, exec_async=False)
    with pipe:
        x = fn.external_source(source=lambda: imgs, layout="HWC").gpu()
        hs = fn.external_source(source=lambda: [np.int32(i % 2) for i in range(8)])
        vs = fn.external_source(source=lambda: [np.int32((i // 2) % 2) for i in range(8)])
        out = fn.flip(x, horizontal=hs, vertical=vs, device="gpu")
    pipe.set_outputs(out)
    (res,) = pipe.run()
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(res[i].cpu().numpy(), _numpy_flip(img, "HWC", i % 2, (i // 2) % 2))

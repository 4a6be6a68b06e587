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


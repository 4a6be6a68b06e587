"""gaussian_blur against OpenCV's ``cv2.GaussianBlur`` (BORDER_REFLECT_101, explicit window and sigma).
Tolerance: +-1 for uint8 (OpenCV blurs 8-bit images in fixed point), 1e-4 for float32."""

import cv2
import numpy as np
import pytest
import torch

from sluice.ops.image.gaussian_blur import blur_axes, gaussian_params


def _image(seed=0, shape=(21, 26, 3)):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _opencv(img, sigma, window):
    return cv2.GaussianBlur(img, (window[1], window[0]), sigmaX=sigma[1], sigmaY=sigma[0],
                            borderType=cv2.BORDER_REFLECT_101)


@pytest.mark.parametrize("sigma,window", [(1.0, 0), (0.0, 5), (2.0, 9), (3.0, 0), (0.7, 3)])
def test_uint8_matches_opencv(sigma, window):
    img = _image()
    s, w = gaussian_params(sigma, window)
    out = blur_axes(torch.from_numpy(img)[None], [1, 2], [[(s, w), (s, w)]])[0].numpy()
    assert out.dtype == np.uint8
    assert np.abs(out.astype(int) - _opencv(img, (s, s), (w, w))).max() <= 1


def test_float_anisotropic_matches_opencv():
    img = _image(1).astype(np.float32)
    params = [(1.5, 9), (0.8, 5)]  # (sigma, window) for H then W
    out = blur_axes(torch.from_numpy(img)[None], [1, 2], [params])[0].numpy()
    np.testing.assert_allclose(out, _opencv(img, (1.5, 0.8), (9, 5)), atol=1e-4)


def test_window_larger_than_image_reflects():
    img = _image(2, (4, 5, 1)).astype(np.float32)
    out = blur_axes(torch.from_numpy(img)[None], [1, 2], [[(2.0, 13), (2.0, 13)]])[0].numpy()
    ref = _opencv(img[..., 0], (2.0, 2.0), (13, 13))
    np.testing.assert_allclose(out[..., 0], ref, atol=1e-4)


def test_per_sample_sigmas_in_one_batch():
    imgs = np.stack([_image(3), _image(4)]).astype(np.float32)
    p0, p1 = gaussian_params(1.0, 0), gaussian_params(2.5, 0)
    out = blur_axes(torch.from_numpy(imgs), [1, 2], [[p0, p0], [p1, p1]]).numpy()
    np.testing.assert_allclose(out[0], _opencv(imgs[0], (p0[0],) * 2, (p0[1],) * 2), atol=1e-4)
    np.testing.assert_allclose(out[1], _opencv(imgs[1], (p1[0],) * 2, (p1[1],) * 2), atol=1e-4)


def test_params_follow_dali_rules():
    assert gaussian_params(1.0, 0) == (1.0, 7)
    assert gaussian_params(0.0, 5)[0] == pytest.approx(1.1)
    with pytest.raises(ValueError, match="odd"):
        gaussian_params(1.0, 4)
    with pytest.raises(ValueError, match="sigma or window_size"):
        gaussian_params(0.0, 0)


@pytest.mark.cuda
def test_cuda_equals_cpu():
    imgs = torch.from_numpy(np.stack([_image(5), _image(6)]))
    p = [[(1.3, 9), (1.3, 9)], [(2.0, 13), (0.5, 3)]]
    cpu = blur_axes(imgs, [1, 2], p)
    gpu = blur_axes(imgs.cuda(), [1, 2], p).cpu()
    assert (cpu.int() - gpu.int()).abs().max() <= 1


def test_operator_images_and_sequences_match_opencv():
    from sluice.testing import run_op

    img = _image(7)
    out = run_op("gaussian_blur", [img], layout="HWC", sigma=[1.2, 0.6])[0].numpy()
    s = [gaussian_params(v, 0) for v in (1.2, 0.6)]
    assert np.abs(out.astype(int) - _opencv(img, (1.2, 0.6), (s[0][1], s[1][1]))).max() <= 1
    seq = np.stack([_image(8), _image(9)]).astype(np.float32)  # FHWC: frames blurred one by one, F untouched
    out = run_op("gaussian_blur", [seq], layout="FHWC", window_size=5)[0].numpy()
    for f in range(2):
        np.testing.assert_allclose(out[f], _opencv(seq[f], (1.1, 1.1), (5, 5)), atol=1e-4)


def test_empty_images_pass_through():
    from sluice.testing import run_op

    out = run_op("gaussian_blur", [np.zeros((0, 5, 3), np.uint8), _image(10, (4, 5, 3))], layout="HWC", sigma=1.0)
    assert out.shape() == [(0, 5, 3), (4, 5, 3)]
    assert blur_axes(torch.zeros(2, 0, 5, 3), [1, 2], [[(1.0, 7), (1.0, 7)]] * 2).shape == (2, 0, 5, 3)


def test_bad_sigma_counts_are_clear_errors():
    from sluice.testing import run_op

    with pytest.raises(Exception, match="sigma has 3 values; give 1 or one per spatial axis"):
        run_op("gaussian_blur", [_image(11)], layout="HWC", sigma=[1.0, 2.0, 3.0])
    with pytest.raises(Exception, match="must not be negative"):
        run_op("gaussian_blur", [_image(11)], layout="HWC", sigma=-1.0)


def test_gpu_kernel_blurs_packed_volumes_at_once_as_sample_by_sample():
    """The GPU kernel (run on CPU tensors: its torch path) on volumes held packed with one shape (a slice's
    patches after .gpu()) blurs the whole batch as one tensor and returns it dense; each sample equals the
    per-sample reference (the same kernel on that sample alone, with its own sigma) and SciPy's separable
    convolution with the same weights (``mode="mirror"`` is reflect-101); a ragged batch still works."""
    from scipy import ndimage

    from sluice.ops.image.gaussian_blur import gaussian_blur_gpu, gaussian_weights
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs, BatchContext

    rng = np.random.default_rng(2)
    vols = [rng.normal(size=(1, 9, 8, 7)).astype(np.float32) for _ in range(3)]
    sigmas = [[0.5], [1.2], [0.8, 1.0, 1.5]]
    flat = torch.from_numpy(np.concatenate([v.ravel() for v in vols]))
    packed = Batch.from_packed(flat, np.array([v.shape for v in vols]), "CDHW")
    ctx = BatchContext("gaussian_blur", 3, [""] * 3, ["CDHW"], torch.device("cpu"), None)

    def args(s):
        return BatchArgs({"window_size": None, "dtype": None}, {"sigma": s, "window_size": [None] * len(s)}, len(s))

    out = gaussian_blur_gpu(ctx, packed, args=args(sigmas))
    assert out.storage == "dense"
    for v, s, got in zip(vols, sigmas, out):
        alone = gaussian_blur_gpu(ctx, Batch([torch.from_numpy(v)], "CDHW"), args=args([s]))[0]
        torch.testing.assert_close(got, alone, rtol=0, atol=1e-6)
        ref = v[0].astype(np.float64)
        for axis, sigma in enumerate(s * 3 if len(s) == 1 else s):
            ref = ndimage.convolve1d(ref, gaussian_weights(*gaussian_params(sigma, 0)).numpy(), axis=axis,
                                     mode="mirror")
        np.testing.assert_allclose(got[0].numpy(), ref, atol=1e-5)
    ragged = Batch([torch.from_numpy(vols[0]), torch.from_numpy(vols[1][:, :5])], "CDHW")
    out = gaussian_blur_gpu(ctx, ragged, args=args(sigmas[:2]))
    assert [tuple(t.shape) for t in out] == [(1, 9, 8, 7), (1, 5, 8, 7)]


def test_weight_table_equals_each_samples_kernel_in_float32():
    """The batch's kernels of one axis come from one NumPy pass: each row is the sample's own kernel
    (gaussian_weights, OpenCV's getGaussianKernel) centred in the widest window, equal in float32 (what the
    kernels use), for sigmas alone, windows alone and both."""
    from sluice.ops.image.gaussian_blur import _weight_table, gaussian_weights

    rng = np.random.default_rng(7)
    params = [gaussian_params(float(s), 0) for s in rng.uniform(0.3, 6.0, 40)]
    params += [gaussian_params(0.0, int(k) * 2 + 1) for k in rng.integers(0, 9, 20)]
    params += [gaussian_params(float(s), int(k) * 2 + 1)
               for s, k in zip(rng.uniform(0.3, 3.0, 20), rng.integers(0, 9, 20))]
    table = _weight_table(np.array([p[0] for p in params]), np.array([p[1] for p in params]))
    kmax = max(p[1] for p in params)
    assert table.shape == (len(params), kmax)
    for row, (sigma, window) in zip(table, params):
        pad = (kmax - window) // 2
        assert torch.equal(row[pad:pad + window].float(), gaussian_weights(sigma, window).float())
        assert not row[:pad].any() and not row[pad + window:].any()
    np.testing.assert_allclose(cv2.getGaussianKernel(params[0][1], params[0][0]).ravel(),
                               table[0, (kmax - params[0][1]) // 2:][:params[0][1]].numpy(), rtol=1e-6)

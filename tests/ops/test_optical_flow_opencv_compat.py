"""optical_flow (a torch pyramidal Lucas-Kanade standing in for NVIDIA's optical flow engine) against OpenCV's
``calcOpticalFlowFarneback`` on synthetic frames of a smooth texture moved by known sub-pixel shifts. DALI's
vectors map frame ``i + 1`` to frame ``i``, which is Farneback's flow from frame ``i + 1`` (prev) to frame ``i``
(next). Tolerance, away from the borders (where the moved content comes from outside the frame): mean endpoint
difference below 0.3 px against Farneback and below 0.25 px against the true shift, 95% of pixels within 1 px of
Farneback. Also DALI's output format: F - 1 fields of ceil(H / grid) x ceil(W / grid) block means, ragged batches,
temporal and external hints."""

import cv2
import numpy as np
import pytest
import torch

from sluice.testing import run_op

INNER = (slice(8, -8), slice(8, -8))


def _texture(h, w, seed):
    base = np.random.default_rng(seed).random((h // 4 + 2, w // 4 + 2)).astype(np.float32)
    img = cv2.resize(base, (w + 8, h + 8), interpolation=cv2.INTER_CUBIC)
    return np.clip(cv2.GaussianBlur(img, (0, 0), 1.0) * 255, 0, 255)


def _sequence(h, w, shifts, seed):
    """Frames of one texture moved by each (dx, dy): frame(x) = texture(x - d)."""
    big = _texture(h, w, seed)
    frames = []
    for dx, dy in shifts:
        m = np.float32([[1, 0, dx], [0, 1, dy]])
        f = cv2.warpAffine(big, m, (w + 8, h + 8), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        frames.append(np.repeat(np.clip(np.rint(f[4:4 + h, 4:4 + w]), 0, 255).astype(np.uint8)[..., None], 3, -1))
    return np.stack(frames)


SEQS = [((64, 80), [(0, 0), (2.5, -1.5), (4.0, -1.0)]), ((48, 56), [(0, 0), (-3.0, 2.0)])]


def _farneback(a, b):
    ga, gb = cv2.cvtColor(a, cv2.COLOR_RGB2GRAY), cv2.cvtColor(b, cv2.COLOR_RGB2GRAY)
    return cv2.calcOpticalFlowFarneback(ga, gb, None, 0.5, 3, 15, 3, 5, 1.2, 0)


def test_dense_flow_matches_farneback_and_the_shift():
    seqs = [_sequence(h, w, s, i + 1) for i, ((h, w), s) in enumerate(SEQS)]
    out = run_op("optical_flow", seqs, layout="FHWC", output_grid=1)
    assert out.layout() == "FHWC"
    for seq, (_, shifts), field in zip(seqs, SEQS, out):
        field = field.numpy()
        assert field.shape == (len(shifts) - 1,) + seq.shape[1:3] + (2,) and field.dtype == np.float32
        for k in range(len(shifts) - 1):
            ours = field[k][INNER]
            ref = _farneback(seq[k + 1], seq[k])[INNER]
            epe = np.linalg.norm(ours - ref, axis=-1)
            assert epe.mean() < 0.3 and np.percentile(epe, 95) < 1.0
            truth = -(np.array(shifts[k + 1]) - np.array(shifts[k]))
            assert np.linalg.norm(ours - truth, axis=-1).mean() < 0.25


def test_output_grid_block_means_and_ragged_shapes():
    seqs = [_sequence(h, w, s, i + 1) for i, ((h, w), s) in enumerate(SEQS)]
    dense = run_op("optical_flow", seqs, layout="FHWC", output_grid=1, preset=1.0)
    grid4 = run_op("optical_flow", seqs, layout="FHWC", preset=1.0)  # output_grid=4 by default
    for seq, d, g in zip(seqs, dense, grid4):
        f, h, w = seq.shape[0] - 1, seq.shape[1], seq.shape[2]
        assert tuple(g.shape) == (f, (h + 3) // 4, (w + 3) // 4, 2)
        means = d.numpy()[:, :h // 4 * 4, :w // 4 * 4].reshape(f, h // 4, 4, w // 4, 4, 2).mean((2, 4))
        np.testing.assert_allclose(g.numpy()[:, :h // 4, :w // 4], means, atol=1e-4)
    odd = run_op("optical_flow", [_sequence(30, 38, [(0, 0), (1, 1)], 5)], layout="FHWC", output_grid=2, preset=1.0)
    assert tuple(odd[0].shape) == (1, 15, 19, 2)


def test_temporal_and_external_hints():
    seq = _sequence(64, 80, [(0, 0), (3.0, 0.0), (6.0, 0.0), (9.0, 0.0)], 7)
    plain = run_op("optical_flow", [seq], layout="FHWC", output_grid=1, preset=0.5)[0].numpy()
    hinted = run_op("optical_flow", [seq], layout="FHWC", output_grid=1, preset=0.5,
                    enable_temporal_hints=True)[0].numpy()
    for field in (plain, hinted):
        assert np.abs(field[:, 8:-8, 8:-8, 0] + 3.0).mean() < 0.25
    hints = np.zeros((4, 16, 20, 2), np.float32)
    hints[..., 0] = -3.0
    ext = run_op("optical_flow", [seq], [hints], layout=["FHWC", "FHWC"], output_grid=1, preset=0.5,
                 enable_external_hints=True)
    assert np.abs(ext[0].numpy()[:, 8:-8, 8:-8, 0] + 3.0).mean() < 0.25
    with pytest.raises(Exception, match="at least 2"):
        run_op("optical_flow", [seq[:1]], layout="FHWC")
    with pytest.raises(Exception, match="second input"):
        run_op("optical_flow", [seq], layout="FHWC", enable_external_hints=True)


@pytest.mark.cuda
def test_gpu_equals_cpu():
    seqs = [_sequence(h, w, s, i + 1) for i, ((h, w), s) in enumerate(SEQS)]
    cpu = run_op("optical_flow", seqs, layout="FHWC")
    gpu = run_op("optical_flow", seqs, layout="FHWC", device="gpu").as_cpu()
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=0.05)

"""Dense optical flow of a batch of frame pairs: pyramidal, iterative Lucas-Kanade in torch (any device).

For each pair ``(target, reference)`` it finds, at every pixel ``x`` of the target, the displacement ``v`` with
``target(x) ~ reference(x + v)``, coarse to fine: at each level of a Gaussian pyramid (halving the size) the
reference is warped by the current flow (bilinear, the edge repeated), and the flow is corrected by the
Gaussian-windowed least-squares solution of the linearised brightness constancy (a 2 x 2 system per pixel, lightly
regularised where the image is flat). The pairs of a batch are one padded tensor with each pair's size as a tensor,
so every level and iteration is a fixed number of launches for the whole batch.

Example::

    flow = lucas_kanade(target, reference, hw, levels=4, iterations=5)    # (P, 2, H, W): x then y components
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from sluice.kernels.image2d import conv_axis, pad_axis, sample2d

__all__ = ["lucas_kanade", "pyramid_levels", "block_average"]

_DERIV = torch.tensor([[-0.5, 0.0, 0.5]], dtype=torch.float32)


def pyramid_levels(h: int, w: int, max_levels: int = 5, smallest: int = 16) -> int:
    """How many pyramid levels an ``h`` x ``w`` image takes before its shorter side drops below ``smallest``."""
    short = max(min(h, w), 1)
    return max(1, min(max_levels, int(math.floor(math.log2(short / smallest))) + 1 if short >= smallest else 1))


def _gauss(sigma: float) -> torch.Tensor:
    r = max(1, int(math.ceil(2.5 * sigma)))
    x = torch.arange(-r, r + 1, dtype=torch.float64)
    w = torch.exp(-x * x / (2 * sigma * sigma))
    return (w / w.sum()).to(torch.float32).view(1, -1)


def _filter2(x: torch.Tensor, hw: torch.Tensor, window: torch.Tensor, mode: str = "replicate") -> torch.Tensor:
    """``x`` (P, C, H, W) correlated with ``window`` along H and W, each pair bordered at its own size."""
    n = x.shape[0]
    w = window.to(x.device).expand(n, -1)
    return conv_axis(conv_axis(x, 2, w, hw[:, 0], mode), 3, w, hw[:, 1], mode)


def _downsample(x: torch.Tensor, hw: torch.Tensor) -> torch.Tensor:
    """Half size: blurred, the edge repeated past each pair's size, then 2 x 2 means."""
    x = pad_axis(pad_axis(x, 2, hw[:, 0], 0, x.shape[2] % 2, "replicate"), 3, hw[:, 1], 0, x.shape[3] % 2,
                 "replicate")
    x = _filter2(x, hw, _gauss(0.8))
    return F.avg_pool2d(x, 2)


def _grad(x: torch.Tensor, hw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    d = _DERIV.to(x.device).expand(x.shape[0], -1)
    return conv_axis(x, 3, d, hw[:, 1], "replicate"), conv_axis(x, 2, d, hw[:, 0], "replicate")


def lucas_kanade(target: torch.Tensor, reference: torch.Tensor, hw: np.ndarray, *, levels: int = 4,
                 iterations: int = 5, sigma: float = 2.0, init: torch.Tensor | None = None) -> torch.Tensor:
    """Flow ``(P, 2, H, W)`` (x, y; pixels) of float grey pairs ``target`` and ``reference`` (``(P, H, W)``, pair
    ``p`` in its leading ``hw[p]``), such that ``target(x) ~ reference(x + flow(x))``. ``init``: a starting flow
    at full size (hints), else zero."""
    p, hmax, wmax = target.shape
    dev = target.device
    sizes = [np.asarray(hw, np.int64).reshape(p, 2)]
    ims0, ims1 = [target.unsqueeze(1).float()], [reference.unsqueeze(1).float()]
    for _ in range(levels - 1):
        prev = torch.from_numpy(sizes[-1]).to(dev)
        ims0.append(_downsample(ims0[-1], prev))
        ims1.append(_downsample(ims1[-1], prev))
        sizes.append((sizes[-1] + 1) // 2)
    window = _gauss(sigma)
    flow = None
    for level in range(levels - 1, -1, -1):
        i0, i1 = ims0[level], ims1[level]
        hwl = torch.from_numpy(sizes[level]).to(dev)
        h, w = i0.shape[2], i0.shape[3]
        scale = 2.0 ** level
        if flow is None:
            if init is not None:
                flow = F.interpolate(init, size=(h, w), mode="area") / scale if level else init
            else:
                flow = torch.zeros(p, 2, h, w, device=dev)
        else:
            flow = F.interpolate(flow, size=(h, w), mode="bilinear", align_corners=False) * 2.0
        ys, xs = torch.meshgrid(torch.arange(h, device=dev, dtype=torch.float32),
                                torch.arange(w, device=dev, dtype=torch.float32), indexing="ij")
        for _ in range(iterations):
            warped = sample2d(i1, hwl, xs + flow[:, 0], ys + flow[:, 1], "linear", "replicate")
            gx, gy = _grad(warped, hwl)
            dt = warped - i0
            sums = _filter2(torch.cat([gx * gx, gx * gy, gy * gy, gx * dt, gy * dt], dim=1), hwl, window)
            a11, a12, a22, b1, b2 = sums.unbind(1)
            reg = 1e-3 * (a11 + a22).mean(dim=(1, 2), keepdim=True) + 1e-6
            a11, a22 = a11 + reg, a22 + reg
            det = a11 * a22 - a12 * a12
            du = -(a22 * b1 - a12 * b2) / det
            dv = -(a11 * b2 - a12 * b1) / det
            flow = flow + torch.stack([du, dv], dim=1)
    return flow


def block_average(flow: torch.Tensor, hw: np.ndarray, grid: int) -> tuple[torch.Tensor, np.ndarray]:
    """The mean flow of every ``grid`` x ``grid`` block of each pair's own area (partial blocks at the edges
    average the pixels they hold): ``(P, 2, ceil(H / grid), ceil(W / grid))`` and the per-pair output sizes."""
    hw = np.asarray(hw, np.int64).reshape(-1, 2)
    out_hw = (hw + grid - 1) // grid
    if grid == 1:
        return flow, out_hw
    ext = torch.from_numpy(hw).to(flow.device)
    ys = torch.arange(flow.shape[2], device=flow.device).view(1, 1, -1, 1)
    xs = torch.arange(flow.shape[3], device=flow.device).view(1, 1, 1, -1)
    mask = ((ys < ext[:, 0].view(-1, 1, 1, 1)) & (xs < ext[:, 1].view(-1, 1, 1, 1))).to(flow.dtype)
    total = F.avg_pool2d(flow * mask, grid, ceil_mode=True, divisor_override=1)
    count = F.avg_pool2d(mask, grid, ceil_mode=True, divisor_override=1)
    return total / count.clamp_min(1.0), out_hw

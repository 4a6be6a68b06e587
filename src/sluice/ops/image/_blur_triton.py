"""Separable convolution along one axis of contiguous samples, one Triton launch per axis for a dense batch: the
GPU path of ``fn.gaussian_blur``.

A sample is seen as ``outer x L x inner`` around the blurred axis (so the same kernel blurs H or W of HWC, CHW,
FHWC or DHWC data); each output element is ``sum_k w[n, k] * in[reflect101(l + k - r)]`` with sample ``n``'s
weights. Intermediate passes write float32; the last pass rounds (ties to even) and clamps for integer outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sluice.ops.image._color_affine import _SUPPORTED, _kernels, triton_available
from sluice.pipeline.ragged import host_to_device

__all__ = ["blur_axes_triton"]

def _pass(x: torch.Tensor, axis: int, weights: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """One pass over ``axis`` (of the N x ... stack ``x``) with weights N x K (float32, on x's device)."""
    n = x.shape[0]
    shape = x.shape[1:]
    a = axis - 1
    length = shape[a]
    inner = 1
    for e in shape[a + 1:]:
        inner *= e
    total = x[0].numel() if n else 0
    out = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    if n == 0 or total == 0:
        return out
    k = weights.shape[1]
    out_int = not out_dtype.is_floating_point
    lo, hi = (float(torch.iinfo(out_dtype).min), float(torch.iinfo(out_dtype).max)) if out_int else (0.0, 0.0)
    block = 1024
    period = max(2 * (length - 1), 1)
    _kernels().blur_axis_kernel[(-(-total // block), n)](x, weights, out, total, length, inner, period, k, k // 2,
                                                         lo, hi, OUT_INT=out_int, BLOCK=block)
    return out


def blur_axes_triton(x: torch.Tensor, axes: Sequence[int], weights: Sequence[torch.Tensor],
                     out_dtype: torch.dtype) -> torch.Tensor | None:
    """Blur the contiguous stack ``x`` (N x ...) along ``axes`` with ``weights[a]`` (N x K_a, odd K_a, centred);
    None when Triton cannot run it (the caller then uses the torch path)."""
    if not triton_available(x) or out_dtype not in _SUPPORTED or not x.is_contiguous():
        return None
    y = x
    for a, axis in enumerate(axes):
        last = a == len(axes) - 1
        # page-locked and asynchronous: a copy from pageable memory would wait for the work queued on the stream
        w = host_to_device(weights[a].to(torch.float32).numpy(), x.device)
        y = _pass(y, axis, w, out_dtype if last else torch.float32)
    return y

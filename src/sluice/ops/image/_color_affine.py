"""One Triton kernel for every colour operator on the GPU: a per-sample affine map of the channels,
``out[p] = M @ in[p] + offset`` (M is C_out x C_in with C in {1, 3}), then DALI's rounding (to nearest, ties to
even) and clamping for integer outputs.

brightness/contrast are the 1 x 1 case over every element; hsv, hue, saturation and color_twist are 3 x 3;
colour space conversions are 3 x 3, 1 x 3 (to gray) or 3 x 1 (from gray), with the input and output type ranges
folded into M and the offset. A dense batch is one launch; samples of a ragged batch are launched one by one
(no copies). Without Triton (or on the CPU) the operators use their torch path, which computes the same values.
The kernel itself is in :mod:`sluice.kernels._triton_channels`, imported on the first CUDA batch.
"""

from __future__ import annotations

import functools

import torch

from sluice.ops.tensor._util import convert_saturate

__all__ = ["triton_available", "affine_channels", "affine_channels_cpu", "opencv"]

_SUPPORTED = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.int32, torch.float16, torch.bfloat16,
              torch.float32)


def triton_available(x: torch.Tensor) -> bool:
    """Whether the Triton kernel can run on ``x`` (a CUDA tensor of a supported type, Triton installed). Triton is
    imported here, on the first CUDA tensor, not when sluice is."""
    return x.is_cuda and x.dtype in _SUPPORTED and _kernels() is not None


@functools.cache
def _kernels():
    """:mod:`sluice.kernels._triton_channels`, or None without Triton (the operators then use the torch path)."""
    try:
        from sluice.kernels import _triton_channels  # optional dependency: Triton
    except ImportError:  # Triton is optional: present on GPU machines, absent on CPU-only installs
        return None
    return _triton_channels


def _launch(x: torch.Tensor, m: torch.Tensor, o: torch.Tensor, out: torch.Tensor, c_in: int, c_out: int) -> None:
    n = x.shape[0]
    p = x[0].numel() // c_in if n else 0
    if n == 0 or p == 0:
        return
    out_int = not out.dtype.is_floating_point
    lo, hi = (float(torch.iinfo(out.dtype).min), float(torch.iinfo(out.dtype).max)) if out_int else (0.0, 0.0)
    block = 1024
    grid = (-(-p // block), n)
    _kernels().affine_kernel[grid](x, m, o, out, p, lo, hi, C_IN=c_in, C_OUT=c_out, OUT_INT=out_int, BLOCK=block)


def affine_channels(samples: list[torch.Tensor], matrices: torch.Tensor, offsets: torch.Tensor,
                    out_dtype: torch.dtype, c_in: int, c_out: int, dense: torch.Tensor | None = None
                    ) -> list[torch.Tensor] | torch.Tensor:
    """Apply ``matrices[i]`` (C_out x C_in, float32) and ``offsets[i]`` (C_out) to the channel-last sample ``i``.
    ``c_in == c_out == 1`` treats every element as a pixel (layout-agnostic pointwise ops). Returns the dense
    N x ... output when ``dense`` (the batch as one contiguous tensor) is given, else a list of samples.

    Example::

        out = affine_channels([img], torch.eye(3)[None] * 1.2, torch.zeros(1, 3), torch.uint8, 3, 3)
    """
    if out_dtype not in _SUPPORTED:
        raise ValueError(f"colour kernel: output type {out_dtype} is not supported; supported: {_SUPPORTED}")
    m = matrices.to(torch.float32).contiguous()
    o = offsets.to(torch.float32).contiguous()

    def out_shape(shape):
        return (*shape[:-1], c_out) if c_in != 1 or c_out != 1 else tuple(shape)

    if dense is not None and dense.is_contiguous():
        out = torch.empty(out_shape(dense.shape), dtype=out_dtype, device=dense.device)
        _launch(dense, m, o, out, c_in, c_out)
        return out
    result = []
    for i, s in enumerate(samples):
        s = s.contiguous()
        out = torch.empty(out_shape(s.shape), dtype=out_dtype, device=s.device)
        _launch(s.unsqueeze(0), m[i:i + 1], o[i:i + 1], out.unsqueeze(0), c_in, c_out)
        result.append(out)
    return result


@functools.cache
def opencv():
    """The ``cv2`` module, or None when OpenCV is not installed (the CPU kernels then use their torch path)."""
    try:
        import cv2
    except ImportError:  # pragma: no cover - OpenCV is part of the image extra
        return None
    return cv2


def affine_channels_cpu(x: torch.Tensor, matrix: torch.Tensor, offset: torch.Tensor, out_dtype: torch.dtype
                        ) -> torch.Tensor | None:
    """The CPU counterpart for one channel-last sample: OpenCV's ``cv2.transform`` (vectorised, releases the GIL)
    on uint8 or float32 data, ``matrix`` C_out x C_in and ``offset`` C_out. Integer results are rounded and
    saturated by OpenCV (within one level of the float formula). None where OpenCV does not apply.

    Example::

        gray = affine_channels_cpu(rgb_u8, torch.tensor([[0.299, 0.587, 0.114]]), torch.zeros(1), torch.uint8)
    """
    cv2 = opencv()
    if cv2 is None:
        return None
    c_out, c_in = matrix.shape
    if x.dim() == 0 or x.shape[-1] != c_in or not 1 <= c_in <= 4 or x.dtype not in (torch.uint8, torch.float32):
        return None
    if c_out > 4 or x.numel() == 0:
        return None
    work = x if out_dtype == x.dtype else x.to(torch.float32)
    m = torch.cat([matrix.double().cpu(), offset.double().cpu().reshape(c_out, 1)], 1).numpy()
    src = work.contiguous().numpy().reshape(-1, 1, c_in)
    out = torch.from_numpy(cv2.transform(src, m).reshape(*x.shape[:-1], c_out))
    if out.dtype != out_dtype:
        out = convert_saturate(out, out_dtype)
    return out

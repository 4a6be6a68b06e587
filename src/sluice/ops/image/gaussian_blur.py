"""``fn.gaussian_blur``: separable Gaussian convolution over the spatial axes of images, volumes and sequences.

Window and sigma follow DALI: with only ``sigma`` the radius is ``ceil(3 * sigma)`` (window ``2 * radius + 1``);
with only ``window_size`` the sigma is ``(radius - 1) * 0.3 + 0.8`` where ``radius = (window_size - 1) / 2``
(OpenCV's rule). Both may be one value for all spatial axes or one per axis, outermost first; ``C`` and ``F`` are
not spatial. Borders are reflected without repeating the edge (OpenCV's ``BORDER_REFLECT_101``, DALI's default).
Math is float32; integer outputs are rounded to nearest and clamped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from sluice import types
from sluice.ops.image._blur_triton import blur_axes_triton
from sluice.ops.image._color_affine import opencv
from sluice.ops.tensor._util import as_float_list, convert_saturate, map_groups, to_batch
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["gaussian_params", "gaussian_weights", "blur_axes", "spatial_axes"]


def gaussian_params(sigma: float, window: int) -> tuple[float, int]:
    """Complete a (sigma, window_size) pair by DALI's rules; 0 means "not given".

    Example::

        gaussian_params(1.0, 0)    # (1.0, 7)
        gaussian_params(0.0, 5)    # (1.1, 5)
    """
    window = int(window)
    if sigma < 0 or window < 0:
        raise ValueError(f"gaussian_blur: sigma ({sigma}) and window_size ({window}) must not be negative")
    if sigma == 0 and window == 0:
        raise ValueError("gaussian_blur: give sigma or window_size (or both); neither was set")
    if window == 0:
        window = 2 * math.ceil(3 * sigma) + 1
    elif window % 2 == 0:
        raise ValueError(f"gaussian_blur: window_size must be odd, got {window}")
    if sigma == 0:
        sigma = ((window - 1) / 2 - 1) * 0.3 + 0.8
    return float(sigma), window


def gaussian_weights(sigma: float, window: int) -> torch.Tensor:
    """The normalised 1-D Gaussian kernel (float64), as OpenCV's ``getGaussianKernel(window, sigma)``."""
    r = (window - 1) / 2
    x = torch.arange(window, dtype=torch.float64) - r
    w = torch.exp(-(x * x) / (2 * sigma * sigma))
    return w / w.sum()


def _weight_table(sigmas: np.ndarray, windows: np.ndarray) -> torch.Tensor:
    """Every sample's kernel of one axis in one NumPy pass (no torch call a sample): an ``(n, max window)`` float64
    table, row ``i`` holding :func:`gaussian_weights` ``(sigmas[i], windows[i])`` centred and zeros around (the same
    values in float32, which the kernels use; float64 may differ in the last bit)."""
    kmax = int(windows.max())
    x = np.arange(kmax, dtype=np.float64) - (kmax - 1) / 2
    w = np.exp(-(x * x)[None, :] / (2 * sigmas[:, None] * sigmas[:, None]))
    w[np.abs(x)[None, :] > (windows[:, None] - 1) / 2] = 0.0
    return torch.from_numpy(w / w.sum(1, keepdims=True))


def _reflect101(n: int, r: int, device: torch.device) -> torch.Tensor:
    """Source indices of a length-``n`` axis padded by ``r`` on each side with reflect-101 borders."""
    idx = torch.arange(-r, n + r, device=device)
    if n == 1:
        return torch.zeros_like(idx)
    period = 2 * (n - 1)
    idx = idx.remainder(period)
    return torch.where(idx >= n, period - idx, idx)


def _blur_axis(x: torch.Tensor, axis: int, weights: torch.Tensor) -> torch.Tensor:
    """Convolve float stack ``x`` (N x ...) along ``axis`` with per-sample odd-length ``weights`` (N x K)."""
    n, length = x.shape[0], x.shape[axis]
    k = weights.shape[1]
    r = k // 2
    xp = x.index_select(axis, _reflect101(length, r, x.device)).movedim(axis, -1)
    moved_shape = xp.shape
    flat = xp.reshape(n, -1, length + 2 * r)
    w = weights.to(x.device, torch.float32)
    if n == 1 or bool((weights == weights[:1]).all()):
        out = F.conv1d(flat.reshape(-1, 1, length + 2 * r), w[:1].reshape(1, 1, k)).reshape(n, -1, length)
    else:  # per-sample kernels: one grouped (depthwise) convolution, each row with its sample's kernel
        m = flat.shape[1]
        out = F.conv1d(flat.reshape(1, n * m, length + 2 * r), w.repeat_interleave(m, 0).reshape(n * m, 1, k),
                       groups=n * m).reshape(n, m, length)
    return out.reshape(*moved_shape[:-1], length).movedim(-1, axis)


def spatial_axes(ndim: int, layout: str, op: str = "gaussian_blur") -> list[int]:
    """Axes of a sample that are filtered: every axis except ``C`` and ``F``."""
    if layout:
        if len(layout) != ndim:
            raise ValueError(f"{op}: layout {layout!r} does not match a {ndim}-D input")
        return [i for i, c in enumerate(layout) if c not in "CF"]
    if ndim == 3:  # no layout: treat 3-D data as HWC, the common image case
        return [0, 1]
    return list(range(ndim))


def _per_axis(values: Sequence[float], naxes: int, name: str) -> list[float]:
    if len(values) == 1:
        return values * naxes
    if len(values) != naxes:
        raise ValueError(f"gaussian_blur: {name} has {len(values)} values; give 1 or one per spatial axis ({naxes})")
    return list(values)


def blur_axes(x: torch.Tensor, axes: Sequence[int], params: Sequence[Sequence[tuple[float, int]]],
              out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Blur a stack ``x`` (N x ...) along ``axes`` (indices into the stack, i.e. sample axis + 1).
    ``params[i][a]`` is the (sigma, window) of sample ``i`` on axis ``axes[a]``. Any device.

    Example::

        out = blur_axes(imgs, [1, 2], [[(1.5, 11), (1.5, 11)]] * len(imgs))
    """
    out_dtype = out_dtype or x.dtype
    if x.numel() == 0:  # nothing to blur (e.g. a 0 x W image)
        return x.to(out_dtype, copy=True)
    weights = [_weight_table(np.array([p[a][0] for p in params]), np.array([p[a][1] for p in params]))
               for a in range(len(axes))]
    fused = blur_axes_triton(x, axes, weights, out_dtype)  # CUDA + Triton: one launch per axis
    if fused is not None:
        return fused
    y = x.to(torch.float32)
    for axis, w in zip(axes, weights):
        y = _blur_axis(y, axis, w)
    return convert_saturate(y, out_dtype)


def _sample_params(ndim: int, layout: str, sigma, window_size) -> tuple[list[int], list[tuple[float, int]]]:
    axes = spatial_axes(ndim, layout)
    sig = _per_axis(as_float_list(sigma) or [0.0], len(axes), "sigma")
    win = _per_axis([int(v) for v in as_float_list(window_size)] or [0], len(axes), "window_size")
    return axes, [gaussian_params(s, w) for s, w in zip(sig, win)]


def _run_batch(images, sigma, window_size, dtype=None):
    """The blurred samples: a list, or one N x ... tensor when the samples share a shape (the whole batch blurred
    at once, no stacking before nor unbinding after)."""
    layout = images.layout()
    out_dtype = None if dtype is None or dtype == types.NO_TYPE else types.to_torch_dtype(dtype)
    if len(images) and images.is_dense_tensor():
        dense = images.as_tensor()
        axes, first = _sample_params(dense.dim() - 1, layout, sigma[0], window_size[0])
        params = [first] + [_sample_params(dense.dim() - 1, layout, sigma[i], window_size[i])[1]
                            for i in range(1, len(images))]
        return blur_axes(dense, [a + 1 for a in axes], params, out_dtype)
    samples = list(images.samples)
    per = [_sample_params(s.dim(), layout, sigma[i], window_size[i]) for i, s in enumerate(samples)]

    def run(stack, idx):
        axes = [a + 1 for a in per[idx[0]][0]]
        return blur_axes(stack, axes, [per[i][1] for i in idx], out_dtype)

    return map_groups(samples, run)


SCHEMA = OpSchema(
    "gaussian_blur",
    sequences="frames",  # frames blur as images (OpenCV on the CPU): a clip's frames as its images would
    doc="""Applies a Gaussian blur over the spatial axes (every axis but ``C`` and ``F``).

    With only ``sigma``, the window is ``2 * ceil(3 * sigma) + 1``; with only ``window_size``, sigma is
    ``((window_size - 1) / 2 - 1) * 0.3 + 0.8``. Either may be one value or one per spatial axis, outermost first.
    Borders reflect without repeating the edge (OpenCV's BORDER_REFLECT_101). Example::

        images = fn.gaussian_blur(images, sigma=fn.random.uniform(range=[0.5, 2.0]))
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("sigma", "float_list", None, "Standard deviation of the kernel: one value or one per spatial axis.",
            per_sample=True),
        Arg("window_size", "int_list", None, "Odd kernel size: one value or one per spatial axis.",
            per_sample=True, min=1),
        Arg("dtype", types.DALIDataType, None, "Output type (float32 or the input type); None keeps the input "
            "type."),
    ],
)


_CV2_TYPES = (torch.uint8, torch.uint16, torch.int16, torch.float32, torch.float64)


def _blur_opencv(image: torch.Tensor, params: list[tuple[float, int]], out_dtype: torch.dtype | None):
    """2-D images (HW, HWC) with OpenCV, which releases the GIL and blurs 8-bit data in fixed point (within one
    level of the float path); None where OpenCV does not apply."""
    cv2 = opencv()
    if cv2 is None:
        return None
    if image.dtype not in _CV2_TYPES or image.dim() not in (2, 3) or (image.dim() == 3 and image.shape[2] > 512):
        return None
    (sy, wy), (sx, wx) = params
    src = image.numpy()
    out = cv2.GaussianBlur(src, (wx, wy), sigmaX=sx, sigmaY=sy, borderType=cv2.BORDER_REFLECT_101)
    result = torch.from_numpy(out.reshape(src.shape))
    if out_dtype is not None and out_dtype != result.dtype:
        result = convert_saturate(result.to(torch.float32), out_dtype)
    return result


@SCHEMA.sample_kernel("cpu")
def gaussian_blur_cpu(ctx, image, *, sigma, window_size, dtype, **_):
    axes, params = _sample_params(image.dim(), ctx.layout, sigma, window_size)
    if axes == [0, 1] and image.numel():
        out = _blur_opencv(image, params, None if dtype is None or dtype == types.NO_TYPE
                           else types.to_torch_dtype(dtype))
        if out is not None:
            return out
    return _run_batch(Batch([image], ctx.layout), [sigma], [window_size], dtype)[0]


@SCHEMA.batch_kernel("gpu")
def gaussian_blur_gpu(ctx, images, *, args):
    return to_batch(_run_batch(images, args["sigma"], args["window_size"], args.const("dtype")), images.layout())

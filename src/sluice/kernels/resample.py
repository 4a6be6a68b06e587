"""Separable resampling with antialiasing: the one algorithm behind resize, random_resized_crop and the fused
crop-resize-mirror-normalize kernel.

Coordinates follow DALI and Pillow: pixel ``i`` covers ``[i, i + 1)``, an output of size ``out`` sampling the
source region ``[lo, hi)`` has its pixel ``o`` centred at ``lo + (o + 0.5) * (hi - lo) / out``. A filter of
radius ``r`` is widened to ``r * |scale|`` when downscaling with ``antialias`` (the support is then a box over
all source pixels that fall under the output pixel, as Pillow and ``torch.nn.functional.interpolate(...,
antialias=True)`` do). Taps outside the image are dropped and the remaining weights renormalised (Pillow's
edge rule), so a constant image stays constant.

Filters (:data:`FILTERS`): ``nn`` (nearest, ``floor(centre)``), ``linear`` (triangle, radius 1), ``cubic``
(Keys, a = -0.5, radius 2, as Pillow's BICUBIC), ``lanczos3`` (radius 3), ``gaussian`` (sigma 0.5, shifted to reach 0 at
radius 1.5), ``triangular`` (= linear, always antialiased).

Everything here is a pure function of tensors; the CPU path (:func:`resample`) works on any torch device and
is also the reference the Triton kernels in :mod:`sluice.kernels.triton_resample` are tested against.

Example::

    >>> img = torch.arange(16, dtype=torch.uint8).reshape(4, 4, 1)
    >>> resample(img, (0, 0, 4, 4), (2, 2), "linear", "linear", antialias=True).shape
    torch.Size([2, 2, 1])
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

__all__ = ["FILTERS", "FILTER_IDS", "filter_id", "filter_radius", "filter_table", "resample", "cast_round", "epilogue",
           "resample_axis_batch", "filter_tables_batch", "pad_tables"]

FILTERS = ("nn", "linear", "cubic", "lanczos3", "gaussian", "triangular")
#: Integer ids used by the Triton kernels (triangular is linear with antialiasing forced on).
FILTER_IDS = {"nn": 0, "linear": 1, "cubic": 2, "lanczos3": 3, "gaussian": 4, "triangular": 5}
_RADIUS = {0: 0.5, 1: 1.0, 2: 2.0, 3: 3.0, 4: 1.5, 5: 1.0}


def filter_id(interp) -> int:
    """The kernel id of an interpolation given as a ``types.DALIInterpType`` member or its value/name string."""
    name = getattr(interp, "value", interp)
    if isinstance(name, str):
        key = name.lower().replace("interp_", "")
        if key in FILTER_IDS:
            return FILTER_IDS[key]
    raise ValueError(f"Invalid interpolation type ({interp!r}). Supported values are "
                     "INTERP_NN, INTERP_LINEAR, INTERP_CUBIC, INTERP_LANCZOS3, INTERP_TRIANGULAR, INTERP_GAUSSIAN.")


def filter_radius(fid: int) -> float:
    """Support radius (in source pixels, before antialias widening) of filter ``fid``."""
    return _RADIUS[fid]


def _weights(fid: int, d: np.ndarray) -> np.ndarray:
    """Filter ``fid`` evaluated at distances ``d`` (float64 array)."""
    a = np.abs(d)
    if fid == 1:
        return np.maximum(0.0, 1.0 - a)
    if fid == 2:
        c = -0.5
        return np.where(a < 1.0, ((c + 2.0) * a - (c + 3.0)) * a * a + 1.0,
                        np.where(a < 2.0, (((a - 5.0) * a + 8.0) * a - 4.0) * c, 0.0))
    if fid == 3:
        with np.errstate(invalid="ignore", divide="ignore"):
            px = np.pi * d
            w = np.where(a < 1e-8, 1.0, 3.0 * np.sin(px) * np.sin(px / 3.0) / (px * px))
        return np.where(a < 3.0, w, 0.0)
    if fid == 4:
        return np.maximum(np.exp(-2.0 * a * a) - math.exp(-4.5), 0.0)  # zero at the radius, no step
    raise ValueError(f"no weights for filter id {fid}")


def filter_table(lo: float, hi: float, in_size: int, out_size: int, fid: int,
                 antialias: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights, each ``(out_size, taps)``, for one axis.

    Padding taps have weight 0 and index 0. ``hi < lo`` samples the region flipped.
    """
    scale = (hi - lo) / out_size
    centre = lo + (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    if fid == 0:
        idx = np.clip(np.floor(centre), 0, in_size - 1).astype(np.int64)[:, None]
        return idx, np.ones_like(idx, dtype=np.float32)
    if fid == 5:  # triangular: linear, always antialiased
        fid, antialias = 1, True
    fscale = max(abs(scale), 1.0) if antialias else 1.0
    support = _RADIUS[fid] * fscale
    taps = int(math.ceil(support)) * 2 + 1
    xmin = np.floor(centre - support + 0.5)
    xs = xmin[:, None] + np.arange(taps)[None, :]
    valid = (xs >= 0) & (xs < in_size) & (xs < np.floor(centre + support + 0.5)[:, None])
    w = np.where(valid, _weights(fid, (xs + 0.5 - centre[:, None]) / fscale), 0.0)
    total = w.sum(1, keepdims=True)
    empty = np.abs(total[:, 0]) < 1e-12
    if empty.any():  # region entirely outside the image: replicate the nearest edge pixel
        near = np.clip(np.floor(centre[empty]), 0, in_size - 1)
        xs[empty] = near[:, None]
        w[empty] = 0.0
        w[empty, 0] = 1.0
        total[empty] = 1.0
    idx = np.where(w != 0, xs, 0).astype(np.int64)
    return idx, (w / total).astype(np.float32)


def cast_round(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float -> ``dtype`` the DALI way: integers round to nearest (halves away from zero) and saturate."""
    if dtype.is_floating_point:
        return x.to(dtype)
    if dtype == torch.bool:
        return x != 0
    info = torch.iinfo(dtype)
    r = torch.where(x >= 0, torch.floor(x + 0.5), -torch.floor(0.5 - x))
    return r.clamp_(info.min, info.max).to(dtype)


def _axis(x: torch.Tensor, dim: int, idx: np.ndarray, w: np.ndarray) -> torch.Tensor:
    """Resample float tensor ``x`` along ``dim`` with a filter table."""
    ti = torch.from_numpy(idx).to(x.device)
    tw = torch.from_numpy(w).to(x.device)
    if idx.shape[1] == 1:
        return x.index_select(dim, ti[:, 0])
    x = x.movedim(dim, 0)
    g = x.index_select(0, ti.reshape(-1)).reshape(*ti.shape, *x.shape[1:])
    tw = tw.reshape(*tw.shape, *([1] * (x.dim() - 1)))
    return (g * tw).sum(1).movedim(0, dim)


def _pillow_linear(image: torch.Tensor, roi, out_size, fy: int, fx: int, antialias: bool, layout: str,
                   out_dtype: torch.dtype) -> torch.Tensor | None:
    """Pillow's SIMD resize for the common CPU case (uint8 HWC with 1, 3 or 4 channels, linear on both axes,
    antialiased, region inside the image, not flipped): the same triangle filter, within 1 grey level of the
    float path (Pillow rounds its intermediate pass). ``None`` when the case does not apply."""
    if (image.device.type != "cpu" or image.dtype != torch.uint8 or out_dtype != torch.uint8 or layout != "HWC"
            or image.dim() != 3 or image.shape[2] not in (1, 3, 4) or not antialias
            or fy not in (1, 5) or fx not in (1, 5)):
        return None
    y0, x0, y1, x1 = roi
    h, w = int(image.shape[0]), int(image.shape[1])
    if not (0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w):
        return None
    try:
        from PIL import Image
    except ImportError:  # Pillow comes with the image extra; without it the float path below resizes
        return None

    c = int(image.shape[2])
    arr = image.contiguous().numpy()
    pil = Image.fromarray(arr[..., 0] if c == 1 else arr, {1: "L", 3: "RGB", 4: "RGBA"}[c])
    out = np.asarray(pil.resize((int(out_size[1]), int(out_size[0])), Image.BILINEAR, box=(x0, y0, x1, y1)))
    return torch.from_numpy(out.reshape(int(out_size[0]), int(out_size[1]), c).copy())


def resample(image: torch.Tensor, roi: Sequence[float], out_size: Sequence[int], min_filter, mag_filter,
             antialias: bool = True, dtype: torch.dtype | None = None, layout: str = "HWC") -> torch.Tensor:
    """Resample one image.

    Args:
        image: ``HWC`` (or ``CHW`` with ``layout="CHW"``; ``HW`` also accepted) tensor of any real dtype.
        roi: ``(y0, x0, y1, x1)`` source region in pixels (may exceed the image or be flipped).
        out_size: ``(out_h, out_w)``.
        min_filter / mag_filter: filter (name, id or ``DALIInterpType``) used on axes that shrink / grow.
        antialias: widen the filter when shrinking.
        dtype: output dtype; default: the input's.

    Returns the resampled image in the input layout.
    """
    fmin = min_filter if isinstance(min_filter, int) else filter_id(min_filter)
    fmag = mag_filter if isinstance(mag_filter, int) else filter_id(mag_filter)
    hdim, wdim = (1, 2) if layout == "CHW" else (0, 1)
    in_h, in_w = int(image.shape[hdim]), int(image.shape[wdim])
    y0, x0, y1, x1 = (float(v) for v in roi)
    oh, ow = int(out_size[0]), int(out_size[1])
    out_dtype = dtype or image.dtype
    if oh <= 0 or ow <= 0 or in_h == 0 or in_w == 0:
        shape = list(image.shape)
        shape[hdim], shape[wdim] = max(oh, 0), max(ow, 0)
        return torch.zeros(shape, dtype=out_dtype, device=image.device)
    fy = fmin if abs(y1 - y0) > oh else fmag
    fx = fmin if abs(x1 - x0) > ow else fmag
    fast = _pillow_linear(image, (y0, x0, y1, x1), (oh, ow), fy, fx, antialias, layout, out_dtype)
    if fast is not None:
        return fast
    x = image.to(torch.float32)
    # horizontal first, on the rows the vertical filter needs only (as Pillow does)
    iy, wy = filter_table(y0, y1, in_h, oh, fy, antialias)
    used = np.unique(iy)
    if used.size < in_h:
        x = x.index_select(hdim, torch.from_numpy(used).to(x.device))
        iy = np.searchsorted(used, iy)
    ix, wx = filter_table(x0, x1, in_w, ow, fx, antialias)
    x = _axis(x, wdim, ix, wx)
    x = _axis(x, hdim, iy, wy)
    return cast_round(x, out_dtype)


def epilogue(x: torch.Tensor, norm: np.ndarray | None, mirror: bool, output_layout: str,
             dtype: torch.dtype) -> torch.Tensor:
    """Mirror, normalise, pad channels, permute and cast a float32 ``HWC`` image (what the fused kernel does last).

    ``norm`` is ``(C_out, 3)`` float32 rows ``(mean, mul, add)``: ``out = (x - mean) * mul + add``; ``C_out`` may
    exceed the input's channels (the padded channels read 0). ``None`` skips normalisation.
    """
    if mirror:
        x = x.flip(1)
    if norm is not None:
        c, cout = x.shape[2], norm.shape[0]
        if cout > c:
            x = torch.cat([x, x.new_zeros(x.shape[0], x.shape[1], cout - c)], dim=2)
        t = torch.from_numpy(np.ascontiguousarray(norm, dtype=np.float32)).to(x.device)
        x = (x - t[:, 0]) * t[:, 1] + t[:, 2]
    if output_layout != "HWC":
        x = x.permute(["HWC".index(ch) for ch in output_layout])
    return cast_round(x, dtype).contiguous()


def resample_axis_batch(x: torch.Tensor, axis: int, index: np.ndarray, weights: np.ndarray) -> torch.Tensor:
    """Resample a float batch ``x`` (dim 0: samples) along ``axis`` with per-sample filter tables ``index`` and
    ``weights`` (``(n, out, taps)``, from :func:`filter_table`; samples with fewer outputs or taps are padded with
    weight 0): one gather and one weighted sum for the whole batch. The result has ``out`` elements along
    ``axis``."""
    n, out, taps = index.shape
    ti = torch.from_numpy(np.ascontiguousarray(index, np.int64)).to(x.device, non_blocking=True)
    tw = torch.from_numpy(np.ascontiguousarray(weights, np.float32)).to(x.device, non_blocking=True)
    view = [1] * x.dim()
    view[0], view[axis] = n, out * taps
    shape = list(x.shape)
    shape[axis] = out * taps
    g = torch.gather(x, axis, ti.view(view).expand(shape))
    g = g.unflatten(axis, (out, taps))
    wview = [1] * g.dim()
    wview[0], wview[axis], wview[axis + 1] = n, out, taps
    return (g * tw.view(wview)).sum(axis + 1)


def filter_tables_batch(lo: np.ndarray, hi: np.ndarray, in_sizes: np.ndarray, out_sizes: np.ndarray,
                        fids: np.ndarray, antialias: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`filter_table` of every sample of a batch along one axis, padded into ``(n, max out, max taps)``
    tables for :func:`resample_axis_batch`."""
    return pad_tables([filter_table(float(a), float(b), max(int(s), 1), max(int(o), 1), int(f), antialias)
                       for a, b, s, o, f in zip(lo, hi, in_sizes, out_sizes, fids)])


def pad_tables(tables: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample ``(index, weights)`` filter tables padded into one ``(n, max out, max taps)`` index and weight
    array (padding rows and taps: index 0, weight 0)."""
    n = len(tables)
    out = max([t[0].shape[0] for t in tables] + [0])
    taps = max([t[0].shape[1] for t in tables] + [1])
    index = np.zeros((n, out, taps), np.int64)
    weights = np.zeros((n, out, taps), np.float32)
    for i, (idx, w) in enumerate(tables):
        index[i, :idx.shape[0], :idx.shape[1]] = idx
        weights[i, :w.shape[0], :w.shape[1]] = w
    return index, weights

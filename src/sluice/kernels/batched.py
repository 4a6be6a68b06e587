"""Batched resampling of ragged image batches: crop -> antialiased resize -> mirror -> normalise -> layout -> cast.

:func:`resample_batch` is the one entry point of ``fn.resize``, ``fn.crop_mirror_normalize``,
``fn.random_resized_crop`` and the fused chain built by :mod:`sluice.pipeline.passes.fusion`. On CUDA with Triton it
runs two kernel launches for the whole batch (:mod:`sluice.kernels._triton_resample`); elsewhere (CPU, no Triton,
``SLUICE_EAGER=1``, or a layout the kernel does not take) it runs the same arithmetic per sample with
:func:`sluice.kernels.resample.resample` and :func:`sluice.kernels.resample.epilogue`.

Example::

    >>> imgs = [torch.zeros(40, 60, 3, dtype=torch.uint8), torch.zeros(30, 20, 3, dtype=torch.uint8)]
    >>> rois = np.array([[0, 0, 40, 60], [0, 0, 30, 20]], dtype=np.float64)
    >>> out = resample_batch(imgs, rois, np.array([[8, 8], [8, 8]]), "linear", "linear", dense=True,
    ...                      output_layout="CHW", dtype=torch.float16)
    >>> tuple(out.shape)
    (2, 3, 8, 8)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from sluice import env
from sluice.kernels.resample import epilogue, filter_id, filter_radius, resample

__all__ = ["resample_batch", "triton_available", "Packed"]

logger = logging.getLogger(__name__)
_TRITON_STATE: dict[str, object] = {}


def triton_available(device: torch.device) -> bool:
    """Whether the Triton path can run on ``device`` (CUDA, Triton importable, not disabled, not failed)."""
    if device.type != "cuda" or env.eager() or _TRITON_STATE.get("broken"):
        return False
    if "module" not in _TRITON_STATE:
        try:
            from sluice.kernels import _triton_resample  # optional dependency: Triton
            _TRITON_STATE["module"] = _triton_resample
        except Exception as e:  # noqa: BLE001 - Triton missing or broken: use the torch path
            logger.info("Triton kernels unavailable (%s); using the per-sample torch path", e)
            _TRITON_STATE["module"] = None
    return _TRITON_STATE["module"] is not None


def _strides(layout: str, oh: np.ndarray, ow: np.ndarray, cout: int) -> tuple[np.ndarray, ...]:
    """Element strides (c, y, x) and sizes of contiguous per-sample outputs in ``layout``."""
    size = {"H": oh, "W": ow, "C": np.full_like(oh, cout)}
    stride = {}
    acc = np.ones_like(oh)
    for ch in reversed(layout):
        stride[ch] = acc.copy()
        acc = acc * size[ch]
    return stride["C"], stride["H"], stride["W"], acc


def _ids(min_filter, mag_filter, antialias: bool) -> tuple[int, int, bool]:
    fmin = min_filter if isinstance(min_filter, int) else filter_id(min_filter)
    fmag = mag_filter if isinstance(mag_filter, int) else filter_id(mag_filter)
    aa = antialias or fmin == 5
    fmin = 1 if fmin == 5 else fmin
    fmag = 1 if fmag == 5 else fmag
    return fmin, fmag, aa and fmin != 0


def resample_batch(images: Sequence[torch.Tensor], rois: np.ndarray, out_sizes: np.ndarray, min_filter,
                   mag_filter, antialias: bool = True, *, dtype: torch.dtype | None = None,
                   mirror: Sequence[bool] | np.ndarray | None = None, norm: np.ndarray | None = None,
                   output_layout: str = "HWC", dense: bool = False, layout: str = "HWC",
                   mid_dtype: torch.dtype | None = None) -> torch.Tensor | list[torch.Tensor]:
    """Resample every image of a ragged batch.

    Args:
        images: ``HWC`` tensors (``layout="CHW"`` is accepted on the torch path) with the same channel count and
            dtype, all on one device; or a :class:`Packed` batch (read whole, no per-image view is made).
        rois: ``(N, 4)`` float source regions ``(y0, x0, y1, x1)``; ``y1 < y0`` flips.
        out_sizes: ``(N, 2)`` ints ``(out_h, out_w)``.
        min_filter / mag_filter: interpolation for shrinking / growing axes.
        antialias: widen the filter when shrinking.
        dtype: output dtype (default: the input's).
        mirror: per-sample horizontal flip of the output.
        norm: ``(N, C_out, 3)`` float32 ``(mean, mul, add)`` per sample and output channel, or ``None``.
        output_layout: permutation of ``"HWC"``.
        dense: return one ``(N, ...)`` tensor (all outputs must have one size) instead of a list.
        mid_dtype: an integer dtype rounds and saturates the resampled value before the epilogue, as an unfused
            integer ``resize`` followed by ``crop_mirror_normalize`` would.
    """
    if isinstance(images, Packed):
        packed, n = images, len(images.hw)
        images = None
    else:
        packed, n = None, len(images)
    first = packed.flat if packed is not None else (images[0] if n else None)
    dtype = dtype or (first.dtype if n else torch.float32)
    out_sizes = np.asarray(out_sizes, dtype=np.int64).reshape(n, 2)
    rois = np.asarray(rois, dtype=np.float64).reshape(n, 4)
    mirror_a = np.zeros(n, dtype=bool) if mirror is None else np.asarray(mirror, dtype=bool).reshape(n)
    if dense and n and not (out_sizes == out_sizes[0]).all():
        sizes = sorted(set(map(tuple, out_sizes.tolist())))
        raise ValueError(f"a dense output needs one output size for the batch, got {sizes}")
    if n == 0:
        return torch.empty(0) if dense else []
    device = first.device
    if packed is not None:
        c = packed.channels
        uniform = layout == "HWC"
    else:
        c = int(first.shape[2 if layout == "HWC" else 0]) if first.dim() == 3 else 1
        uniform = (layout == "HWC" and first.dim() == 3
                   and all(im.dtype == first.dtype and im.shape[2] == c for im in images))
    if triton_available(device) and uniform:
        try:
            return _triton_batch(images if packed is None else packed, rois, out_sizes, min_filter, mag_filter,
                                 antialias, dtype, mirror_a, norm, output_layout, dense, c, mid_dtype)
        except Exception as e:  # noqa: BLE001 - compile/launch failure: fall back once, loudly
            logger.warning("Triton resample kernel failed (%s: %s); falling back to the torch path",
                           type(e).__name__, e)
            _TRITON_STATE["broken"] = True
    if packed is not None:
        images = packed.views()
    outs = []
    for i, im in enumerate(images):
        mid = mid_dtype if mid_dtype is not None and not mid_dtype.is_floating_point else torch.float32
        x = resample(im, rois[i], out_sizes[i], min_filter, mag_filter, antialias, mid, layout).to(torch.float32)
        if x.dim() == 2:
            x = x.unsqueeze(2)
        elif layout == "CHW":
            x = x.permute(1, 2, 0)
        outs.append(epilogue(x, None if norm is None else norm[i], bool(mirror_a[i]), output_layout, dtype))
    return torch.stack(outs) if dense else outs


@dataclass(frozen=True)
class Packed:
    """A ragged batch of HWC images lying back to back in one contiguous 1-D tensor: image ``i`` is the next
    ``hw[i, 0] * hw[i, 1] * channels`` elements of ``flat`` (the mixed image decoders' output)."""

    flat: torch.Tensor
    hw: np.ndarray
    channels: int

    def views(self) -> list[torch.Tensor]:
        sizes = (self.hw[:, 0] * self.hw[:, 1] * self.channels).tolist()
        return [p.view(h, w, self.channels) for p, (h, w) in zip(self.flat[: sum(sizes)].split(sizes),
                                                                  self.hw.tolist())]


def _back_to_back(images: Sequence[torch.Tensor], sizes: np.ndarray) -> torch.Tensor | None:
    """The images as one flat tensor without a copy when they lie back to back in one storage, in order, each
    contiguous (the mixed image decoders hand out such batches); else None."""
    first = images[0]
    storage = first.untyped_storage()
    end = first.data_ptr()
    item = first.element_size()
    for im in images:
        if im.data_ptr() != end or not im.is_contiguous():
            return None
        end += im.numel() * item
    start = (first.data_ptr() - storage.data_ptr()) // item
    if end - storage.data_ptr() > storage.nbytes():
        return None
    return first.new_empty(0).set_(storage, start, (int(sizes.sum()),), (1,))


def _triton_batch(images, rois, out_sizes, min_filter, mag_filter, antialias, dtype, mirror, norm, output_layout,
                  dense, c, mid_dtype=None):
    mod = _TRITON_STATE["module"]
    if isinstance(images, Packed):
        hw, device = images.hw, images.flat.device
    else:
        hw = np.array([(im.shape[0], im.shape[1]) for im in images], dtype=np.int64)
        device = images[0].device
    n = len(hw)
    fmin, fmag, aa = _ids(min_filter, mag_filter, antialias)
    rmin, rmag = filter_radius(fmin), filter_radius(fmag)
    H, W = hw[:, 0], hw[:, 1]
    oh, ow = out_sizes[:, 0], out_sizes[:, 1]
    ip = np.zeros((n, mod.NI), dtype=np.int64)

    def axis(lo, hi, size, out):
        scale = (hi - lo) / np.maximum(out, 1)
        shrink = np.abs(scale) > 1.0
        fscale = np.where(shrink & aa, np.abs(scale), 1.0)
        radius = np.where(shrink, rmin, rmag) * fscale
        taps = np.ceil(radius).astype(np.int64) * 2 + 1
        c0, c1 = lo + 0.5 * scale, lo + (out - 0.5) * scale
        first = np.floor(np.minimum(c0, c1) - radius + 0.5) - 1
        last = np.floor(np.maximum(c0, c1) + radius + 0.5) + 1
        return taps, first, last

    taps_x, _, _ = axis(rois[:, 1], rois[:, 3], W, ow)
    taps_y, first, last = axis(rois[:, 0], rois[:, 2], H, oh)
    row_lo = np.clip(first, 0, H - 1).astype(np.int64)
    rows = (np.clip(last + 1, row_lo + 1, H) - row_lo).astype(np.int64)
    sizes = H * W * c
    ip[:, 0] = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    ip[:, 1], ip[:, 2], ip[:, 3], ip[:, 4] = H, W, oh, ow
    ip[:, 5], ip[:, 6], ip[:, 7], ip[:, 8] = row_lo, rows, taps_x, taps_y
    ip[:, 9] = mirror
    cout = c if norm is None else int(norm.shape[1])
    sc, sy, sx, total = _strides(output_layout, oh, ow, cout)
    ip[:, 10] = 0 if dense else np.concatenate([[0], np.cumsum(total)[:-1]])
    if dense:
        ip[:, 10] = np.arange(n) * total[0]
    ip[:, 11], ip[:, 12], ip[:, 13] = sc, sy, sx
    rmax, owmax, ohmax = int(rows.max()), int(ow.max()), int(oh.max())
    flat = images.flat[: int(sizes.sum())] if isinstance(images, Packed) else _back_to_back(images, sizes)
    if flat is None:
        flat = images[0].contiguous().reshape(-1) if n == 1 else torch.cat([im.reshape(-1) for im in images])
    tmp = torch.empty(n * rmax * owmax * c, dtype=torch.float32, device=device)
    out = torch.empty(int(total.sum()), dtype=dtype, device=device)
    ip_t = torch.from_numpy(ip).to(device, non_blocking=True)
    fp_t = torch.from_numpy(np.ascontiguousarray(rois)).to(device, non_blocking=True)
    nrm_t = (torch.from_numpy(np.ascontiguousarray(norm, dtype=np.float32)).to(device, non_blocking=True)
             if norm is not None else tmp)
    is_int = not dtype.is_floating_point
    lo, hi = (float(torch.iinfo(dtype).min), float(torch.iinfo(dtype).max)) if is_int else (0.0, 0.0)
    mid = None
    if mid_dtype is not None and not mid_dtype.is_floating_point:
        mid = (float(torch.iinfo(mid_dtype).min), float(torch.iinfo(mid_dtype).max))
    mod.launch(flat, tmp, out, ip_t, fp_t, nrm_t, normalize=norm is not None, n=n, rmax=rmax, owmax=owmax,
               ohmax=ohmax, c=c, cout=cout, fmin=fmin, fmag=fmag, rmin=rmin, rmag=rmag, antialias=aa,
               is_int=is_int, lo=lo, hi=hi, mid=mid)
    shape_of = {"H": None, "W": None, "C": cout}
    if dense:
        shape_of["H"], shape_of["W"] = int(oh[0]), int(ow[0])
        return out.view(n, *[shape_of[ch] for ch in output_layout])
    res = []
    for i, chunk in enumerate(torch.split(out, total.tolist())):
        shape_of["H"], shape_of["W"] = int(oh[i]), int(ow[i])
        res.append(chunk.view(*[shape_of[ch] for ch in output_layout]))
    return res

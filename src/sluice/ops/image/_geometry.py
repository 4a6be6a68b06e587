"""Shared geometry of the image operators: DALI's resize size rules, crop windows, normalisation parameters.

All functions are pure and work on plain numbers, so the CPU kernels, the GPU kernels and the fusion pass compute
exactly the same windows.

Example::

    >>> resize_params(480, 640, resize_shorter=256)
    ((0.0, 0.0, 480.0, 640.0), (256, 341))
    >>> crop_window(480, 640, 224, 224, 0.5, 0.5)
    (128, 208, 224, 224)
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from sluice import types
from sluice.kernels.resample import cast_round
from sluice.pipeline.batch import Batch
from sluice.pipeline.ragged import host_to_device, valid_mask


__all__ = ["round_half_away", "resize_params", "crop_window", "apply_crop", "norm_params", "spatial_dims",
           "reject_volume", "as_list", "flip_dims", "flip_image", "out_dtype", "warp_affine_images", "fill_channels",
           "resize_params_batch", "crop_windows_batch", "warp_affine_padded",
           "channel_last_padded", "from_channel_last", "region_and_size", "CROP_RESIZE_NORMALIZE"]

#: The chain ``[crop ->] resize -> crop_mirror_normalize`` on the GPU (the operators' ``FusionStage.chain``), which
#: :mod:`sluice.ops.image.fused_crop_resize_normalize` computes as one node.
CROP_RESIZE_NORMALIZE = "crop_resize_normalize"

_MODES = ("default", "stretch", "not_larger", "not_smaller")


def round_half_away(x: float) -> int:
    """Round to nearest, halves away from zero (C's ``roundf``, which DALI uses for sizes and anchors)."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def as_list(value, n: int | None = None, name: str = "argument") -> list[float]:
    """A scalar, list, tuple, numpy array or tensor as a flat list of floats; repeated to ``n`` if one long."""
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    out = [float(v) for v in arr]
    if n is not None and len(out) == 1:
        out = out * n
    if n is not None and len(out) not in (0, n):
        raise ValueError(f"Invalid {name} ({out}): expected 1 or {n} values.")
    return out


def spatial_dims(layout: str, ndim: int) -> tuple[int, int, int | None]:
    """Indices of H, W and C (or None) of a 2-D image sample with ``layout`` (default ``HWC`` / ``HW``)."""
    layout = layout or ("HWC" if ndim == 3 else "HW")
    if len(layout) != ndim or "H" not in layout or "W" not in layout:
        raise ValueError(f"Unsupported layout '{layout}' for a {ndim}-D sample; supported: HWC, CHW, HW.")
    c = layout.find("C")
    return layout.find("H"), layout.find("W"), (c if c >= 0 else None)


def reject_volume(op: str, layout: str, supported: str = "HWC, CHW, HW and their sequences FHWC, FCHW, CFHW") -> None:
    """Raise for a volume (a ``D`` in ``layout``: ``DHWC``, ``CDHW``, the frames of ``FDHWC``) given to ``op``,
    whose volumetric form is not implemented (the 2-D kernels would treat the depth as rows or channels)."""
    if "D" in (layout or ""):
        raise ValueError(f"fn.{op}: volumetric input (layout '{layout}') is not implemented; supported layouts: "
                         f"{supported}.")


def _adjust_output_size(req: list[float], in_size: list[float], mode: str, max_size: list[float] | None) -> None:
    """DALI's AdjustOutputSize, in place: fill unspecified extents and apply ``mode`` and ``max_size``."""
    nd = len(req)
    mask = [req[d] != 0 and in_size[d] != 0 for d in range(nd)]
    scale = [req[d] / in_size[d] if in_size[d] else 1.0 for d in range(nd)]
    provided = sum(mask)
    if provided == 0:
        req[:] = list(in_size)
        return
    if mode in ("default", "stretch"):
        if provided < nd:
            if mode == "default":
                avg = 1.0
                for d in range(nd):
                    if mask[d]:
                        avg *= abs(scale[d])
                if provided > 1:
                    avg = avg ** (1.0 / provided)
            else:
                avg = 1.0
            for d in range(nd):
                if not mask[d]:
                    req[d] = in_size[d] * avg
        if max_size:
            for d in range(nd):
                if max_size[d] > 0 and abs(req[d]) > max_size[d]:
                    req[d] = math.copysign(max_size[d], req[d])
        return
    final = None
    for d in range(nd):
        if mask[d]:
            s = abs(scale[d])
            if final is None or (mode == "not_smaller" and s > final) or (mode == "not_larger" and s < final):
                final = s
    if max_size:
        for d in range(nd):
            if max_size[d] > 0:
                final = min(final, max_size[d] / in_size[d])
    for d in range(nd):
        if not mask[d] or abs(scale[d]) != final:
            req[d] = math.copysign(final, scale[d]) * in_size[d]


def resize_params(in_h: int, in_w: int, *, resize_x: float = 0.0, resize_y: float = 0.0,
                  size: Sequence[float] | float | None = None, resize_shorter: float = 0.0,
                  resize_longer: float = 0.0, max_size: Sequence[float] | float | None = None,
                  mode: str = "default", roi_start: Sequence[float] | None = None,
                  roi_end: Sequence[float] | None = None, roi_relative: bool = False,
                  subpixel_scale: bool = True) -> tuple[tuple[float, float, float, float], tuple[int, int]]:
    """Source region ``(y0, x0, y1, x1)`` and output size ``(out_h, out_w)`` of one sample, as DALI computes them.

    Exactly one way of giving the size: ``resize_x``/``resize_y``, ``size`` (``(H, W)`` or a scalar),
    ``resize_shorter`` (= all extents with ``not_smaller``) or ``resize_longer`` (= ``not_larger``). Missing
    extents (0) keep the aspect ratio (mode ``default``: geometric mean of the given scales; ``stretch``: scale 1).
    ``max_size`` caps extents (scalar or per axis); with ``not_smaller``/``resize_shorter`` it wins and the
    aspect ratio is kept. Negative sizes and ``roi_start > roi_end`` flip. With ``subpixel_scale`` a fractional
    size keeps the exact scale by adjusting the source region around its centre.
    """
    if mode not in _MODES:
        raise ValueError(f"Invalid mode ('{mode}'). Supported values are {', '.join(repr(m) for m in _MODES)}.")
    size_l = as_list(size, 2, "size")
    separate = bool(resize_x) or bool(resize_y)
    methods = separate + bool(size_l) + bool(resize_shorter) + bool(resize_longer)
    if methods != 1:
        raise ValueError("Exactly one method of specifying the size must be used: resize_x/resize_y, size, "
                         "resize_shorter or resize_longer" + (" (none was given)." if methods == 0 else "."))
    if (resize_shorter or resize_longer) and mode != "default":
        raise ValueError("resize_shorter, resize_longer and mode are mutually exclusive.")
    if resize_shorter:
        req, mode = [float(resize_shorter)] * 2, "not_smaller"
    elif resize_longer:
        req, mode = [float(resize_longer)] * 2, "not_larger"
    elif size_l:
        req = list(size_l)
    else:
        req = [float(resize_y), float(resize_x)]
    max_l = as_list(max_size, 2, "max_size") or None
    lo = [0.0, 0.0]
    hi = [float(in_h), float(in_w)]
    if roi_start is not None or roi_end is not None:
        rs = as_list(roi_start if roi_start is not None else [0.0, 0.0], 2, "roi_start")
        re_ = as_list(roi_end if roi_end is not None else ([1.0, 1.0] if roi_relative else hi), 2, "roi_end")
        if roi_relative:
            rs = [rs[0] * in_h, rs[1] * in_w]
            re_ = [re_[0] * in_h, re_[1] * in_w]
        lo, hi = list(rs), list(re_)
    lo, hi, out = region_and_size(lo, hi, req, mode, max_l, in_h == 0 or in_w == 0, subpixel_scale)
    return (lo[0], lo[1], hi[0], hi[1]), (out[0], out[1])


def region_and_size(lo: list[float], hi: list[float], req: list[float], mode: str, max_size: list[float] | None,
                    empty: bool, subpixel_scale: bool) -> tuple[list[float], list[float], list[int]]:
    """DALI's last steps of a resize, in any number of dimensions: a region given backwards (``lo > hi``) flips
    the requested size, :func:`_adjust_output_size` fills it in, sizes round half away from zero (at least 1 unless
    the input is ``empty``), a negative size swaps the region back, and with ``subpixel_scale`` a fractional size
    keeps its exact scale by scaling the region around its centre. Returns the region and the output size."""
    lo, hi, req = list(lo), list(hi), list(req)
    nd = len(req)
    in_size = []
    for d in range(nd):
        sz = hi[d] - lo[d]
        if sz < 0:
            lo[d], hi[d] = hi[d], lo[d]
            req[d] = -req[d]
            sz = -sz
        in_size.append(sz)
    _adjust_output_size(req, in_size, mode, max_size)
    out = []
    for d in range(nd):
        if lo[d] == hi[d] and req[d] != 0:
            raise ValueError("Cannot produce a non-empty output from an empty region of interest.")
        n = max(0 if empty else 1, round_half_away(abs(req[d])))
        if req[d] < 0:
            lo[d], hi[d] = hi[d], lo[d]
        if subpixel_scale and req[d] != 0 and n != abs(req[d]):
            adj = min(max(n / abs(req[d]), -10.0), 10.0)
            centre = (lo[d] + hi[d]) * 0.5
            lo[d] = centre + (lo[d] - centre) * adj
            hi[d] = centre + (hi[d] - centre) * adj
        out.append(n)
    return lo, hi, out


def crop_window(in_h: int, in_w: int, crop_h: float, crop_w: float, pos_y: float = 0.5, pos_x: float = 0.5,
                rounding: str = "round") -> tuple[int, int, int, int]:
    """``(y0, x0, h, w)`` of DALI's crop window: ``anchor = round(pos * (in - crop))``; 0 keeps the whole extent.

    ``pos`` must lie in [0, 1]. ``rounding`` is ``'round'`` (half away from zero) or ``'truncate'``.
    """
    if rounding not in ("round", "truncate"):
        raise ValueError(f"Invalid rounding ('{rounding}'). Supported values are 'round', 'truncate'.")
    out = []
    for size, crop, pos, name in ((in_h, crop_h, pos_y, "crop_pos_y"), (in_w, crop_w, pos_x, "crop_pos_x")):
        c = int(crop) if crop and crop > 0 else size
        p = float(pos) if crop and crop > 0 else 0.5
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Invalid {name} ({p}): the relative anchor must be in [0, 1].")
        a = p * (size - c)
        out.append((round_half_away(a) if rounding == "round" else int(a), c))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def apply_crop(image: torch.Tensor, window: tuple[int, int, int, int], layout: str = "HWC",
               out_of_bounds_policy: str = "error", fill_values: Sequence[float] | float = 0.0) -> torch.Tensor:
    """Cut ``window = (y0, x0, h, w)`` out of ``image`` following ``out_of_bounds_policy``.

    ``'error'`` raises when the window leaves the image, ``'trim_to_shape'`` intersects it with the image,
    ``'pad'`` fills the outside with ``fill_values`` (one value, or one per channel).
    """
    hd, wd, cd = spatial_dims(layout, image.dim())
    H, W = image.shape[hd], image.shape[wd]
    y0, x0, h, w = window
    inside = y0 >= 0 and x0 >= 0 and y0 + h <= H and x0 + w <= W
    if not inside:
        if out_of_bounds_policy == "error":
            raise ValueError(f"Crop window (y={y0}, x={x0}, h={h}, w={w}) is out of bounds of the input of size "
                             f"{H}x{W}; use out_of_bounds_policy='pad' or 'trim_to_shape' to allow this.")
        if out_of_bounds_policy == "trim_to_shape":
            ya, xa = max(y0, 0), max(x0, 0)
            yb, xb = min(y0 + h, H), min(x0 + w, W)
            y0, x0, h, w = ya, xa, max(yb - ya, 0), max(xb - xa, 0)
            inside = True
        elif out_of_bounds_policy != "pad":
            raise ValueError(f"Invalid out_of_bounds_policy ('{out_of_bounds_policy}'). Supported values are "
                             "'error', 'pad', 'trim_to_shape'.")
    if inside:
        return image.narrow(hd, y0, h).narrow(wd, x0, w)
    shape = list(image.shape)
    shape[hd], shape[wd] = h, w
    out = fill_channels(torch.empty(shape, dtype=image.dtype, device=image.device), as_list(fill_values), cd)
    ya, xa = max(y0, 0), max(x0, 0)
    yb, xb = min(y0 + h, H), min(x0 + w, W)
    if yb > ya and xb > xa:
        src = image.narrow(hd, ya, yb - ya).narrow(wd, xa, xb - xa)
        out.narrow(hd, ya - y0, yb - ya).narrow(wd, xa - x0, xb - xa).copy_(src)
    return out


def norm_params(channels: int, mean, std, scale: float = 1.0, shift: float = 0.0, pad_output: bool = False,
                fill_values=0.0) -> np.ndarray:
    """Per-output-channel float32 ``(mean, mul, add)`` rows, shape ``(C_out, 3)``: ``out = (x - mean) * mul + add``.

    ``mul = scale / std`` (in float32), ``add = shift``. With ``pad_output`` the channel count is rounded up to a
    power of two and the extra channels get ``mul = 0, add = fill``.
    """
    m = np.asarray(as_list(mean, channels, "mean") or [0.0] * channels, dtype=np.float32)
    s = np.asarray(as_list(std, channels, "std") or [1.0] * channels, dtype=np.float32)
    if np.any(s == 0):
        raise ValueError(f"Invalid std ({s.tolist()}): values must be non-zero.")
    mul = np.float32(scale) / s
    add = np.full(channels, shift, dtype=np.float32)
    if pad_output:
        cout = 1 << max(channels - 1, 0).bit_length()
        if cout > channels:
            fill = as_list(fill_values) or [0.0]
            extra = cout - channels
            pad_fill = [fill[0]] * extra if len(fill) == 1 else fill[channels:cout] + [0.0] * extra
            m = np.concatenate([m, np.zeros(extra, np.float32)])
            mul = np.concatenate([mul, np.zeros(extra, np.float32)])
            add = np.concatenate([add, np.asarray(pad_fill[:extra], np.float32)])
    return np.stack([m, mul.astype(np.float32), add], axis=1)


def out_dtype(dtype, default: torch.dtype) -> torch.dtype:
    """The torch dtype of a ``dtype`` argument (``types.DALIDataType`` or None / NO_TYPE for ``default``)."""
    if dtype is None or dtype == types.NO_TYPE:
        return default
    return types.to_torch_dtype(dtype)


def flip_dims(layout: str, ndim: int, horizontal: bool, vertical: bool, depthwise: bool = False) -> list[int]:
    """The axes to mirror of a sample with ``layout``: W, H and (for volumes, layouts with ``D``) D."""
    hd, wd, _ = spatial_dims(layout, ndim)
    dd = (layout or "").find("D")
    return ([wd] if horizontal else []) + ([hd] if vertical else []) + ([dd] if depthwise and dd >= 0 else [])


def flip_image(image: torch.Tensor, layout: str, horizontal: bool, vertical: bool,
               depthwise: bool = False) -> torch.Tensor:
    """Mirror an image or a volume (any layout with H and W, and D for ``depthwise``) along the requested axes."""
    dims = flip_dims(layout, image.dim(), horizontal, vertical, depthwise)
    return image.flip(dims) if dims else image


def warp_affine_images(images: Sequence[torch.Tensor], matrices: np.ndarray, out_sizes: np.ndarray, interp: str,
                       fill: Sequence[float] | None, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """:func:`warp_affine_padded` of a list of ``HWC`` images (padded into one tensor); one output per image."""
    n = len(images)
    if n == 0:
        return []
    c = int(images[0].shape[2])
    hw = np.array([[im.shape[0], im.shape[1]] for im in images], np.int64).reshape(n, 2)
    x = images[0].new_zeros((n, int(hw[:, 0].max()), int(hw[:, 1].max()), c))
    for i, im in enumerate(images):
        x[i, :im.shape[0], :im.shape[1]] = im
    out = warp_affine_padded(x, hw, matrices, out_sizes, interp, fill, dtype or images[0].dtype)
    return [out[i, :int(out_sizes[i, 0]), :int(out_sizes[i, 1])] for i in range(n)]


def warp_affine_padded(x: torch.Tensor, hw: np.ndarray, matrices: np.ndarray, out_sizes: np.ndarray, interp: str,
                       fill: Sequence[float] | None, dtype: torch.dtype) -> torch.Tensor:
    """Affine warp of a padded batch of ``HWC`` images, one ``grid_sample`` for the whole batch.

    ``x`` is ``(N, H, W, C)`` with sample ``i`` in its leading ``hw[i]`` corner (zeros around it). ``matrices`` is
    ``(N, 2, 3)`` mapping output to input coordinates, ``(x, y)`` order, pixel centres at ``+0.5`` (DALI's
    convention): ``src = M @ (x + 0.5, y + 0.5, 1)``. ``interp`` is ``"nn"``, ``"linear"`` or ``"cubic"``.
    ``fill=None`` repeats the border pixel (source coordinates clamped); otherwise taps outside the image read
    ``fill`` (one value or one per channel). Returns ``(N, OH, OW, C)`` of ``dtype`` (the largest ``out_sizes``;
    sample ``i`` in its leading ``out_sizes[i]`` corner).
    """
    n, hmax, wmax, c = x.shape
    dev = x.device
    hw = np.asarray(hw, np.int64).reshape(n, 2)
    inside = valid_mask(hw, (hmax, wmax), dev).expand(n, hmax, wmax)
    planes = torch.cat([x.permute(0, 3, 1, 2).to(torch.float32), inside.unsqueeze(1).to(torch.float32)], 1)
    oh, ow = int(out_sizes[:, 0].max()), int(out_sizes[:, 1].max())
    # the matrices and the sizes in one asynchronous copy (a pageable one would wait for the stream)
    table = host_to_device(np.concatenate([np.asarray(matrices, np.float64).reshape(n, 6), hw[:, ::-1]], 1), dev)
    m = table[:, :6].view(n, 2, 3)
    ys, xs = torch.meshgrid(torch.arange(oh, device=dev, dtype=torch.float64) + 0.5,
                            torch.arange(ow, device=dev, dtype=torch.float64) + 0.5, indexing="ij")
    pts = torch.stack([xs, ys, torch.ones_like(xs)], dim=-1).reshape(1, -1, 3)
    src = torch.einsum("nij,npj->npi", m, pts.expand(n, -1, -1))  # (N, P, 2) as (x, y)
    if fill is None:
        sizes = table[:, 6:].view(n, 1, 2)  # (w, h)
        src = torch.minimum(src.clamp_min(0.5), sizes - 0.5)
    grid = torch.stack([src[..., 0] * (2.0 / wmax), src[..., 1] * (2.0 / hmax)], -1).sub_(1.0).to(torch.float32)
    mode = {"nn": "nearest", "linear": "bilinear", "cubic": "bicubic"}[interp]
    y = torch.nn.functional.grid_sample(planes, grid.reshape(n, oh, ow, 2), mode=mode, padding_mode="zeros",
                                        align_corners=False)
    if fill is not None:
        f = float(fill[0]) if len(fill) == 1 else \
            host_to_device(np.asarray(fill, np.float32)[:c], dev).view(1, c, 1, 1)
        y = y[:, :c] + (1.0 - y[:, c:c + 1]) * f
    else:
        y = y[:, :c] / y[:, c:c + 1].clamp_min(1e-6) if mode != "nearest" else y[:, :c]
    return cast_round(y.permute(0, 2, 3, 1), dtype).contiguous()


def fill_channels(t: torch.Tensor, fill: Sequence[float], cd: int | None, name: str = "fill_values") -> torch.Tensor:
    """Fill ``t`` in place with one value, or one value per channel along dimension ``cd``."""
    if cd is not None and len(fill) > 1:
        if len(fill) != t.shape[cd]:
            raise ValueError(f"Invalid {name} ({list(fill)}): expected 1 or {t.shape[cd]} values.")
        view = [1] * t.dim()
        view[cd] = t.shape[cd]
        t.copy_(torch.tensor(list(fill), dtype=torch.float64).to(t.dtype).reshape(view).expand_as(t))
    else:
        t.fill_(fill[0] if len(fill) else 0.0)
    return t


# ---- batch forms: the same arithmetic vectorised over a batch (GPU kernels' host side) ---------------------
_SIZE_ARGS = ("resize_x", "resize_y", "size", "resize_shorter", "resize_longer", "roi_start", "roi_end")


def _round_arr(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def resize_params_batch(hw: np.ndarray, args, sample_args=None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`resize_params` for a batch: ``hw`` is ``(N, 2)``; ``args`` has ``__getitem__`` (per-sample lists)
    and ``is_const`` (like :class:`sluice.schema.BatchArgs`). Returns ``rois (N, 4)`` and ``outs (N, 2)``.

    Constant sizes without ROI or flips are computed with NumPy over the batch; anything else goes sample by
    sample through :func:`resize_params` (``sample_args(i)`` gives sample ``i``'s arguments)."""
    n = len(hw)
    const = all(args.is_const(k) for k in _SIZE_ARGS)
    c = {k: args[k][0] if n else None for k in _SIZE_ARGS + ("mode", "max_size", "subpixel_scale")}
    size_l = as_list(c["size"], 2, "size") if const else []
    req = None
    if const and c["roi_start"] is None and c["roi_end"] is None:
        if c["resize_shorter"] and not (c["resize_x"] or c["resize_y"] or size_l or c["resize_longer"]):
            req, mode = [float(c["resize_shorter"])] * 2, "not_smaller"
        elif c["resize_longer"] and not (c["resize_x"] or c["resize_y"] or size_l or c["resize_shorter"]):
            req, mode = [float(c["resize_longer"])] * 2, "not_larger"
        elif size_l and not (c["resize_x"] or c["resize_y"]):
            req, mode = size_l, c["mode"] or "default"
        elif (c["resize_x"] or c["resize_y"]) and not size_l:
            req, mode = [float(c["resize_y"] or 0.0), float(c["resize_x"] or 0.0)], c["mode"] or "default"
        if (req is not None and (min(req) < 0 or ((c["resize_shorter"] or c["resize_longer"])
                                                  and (c["mode"] or "default") != "default"))):
            req = None
    if req is None or n == 0 or (hw == 0).any():
        rois, outs = np.zeros((n, 4)), np.zeros((n, 2), dtype=np.int64)
        for i in range(n):
            rois[i], outs[i] = resize_params(int(hw[i, 0]), int(hw[i, 1]), **{
                k: v for k, v in sample_args(i).items() if k in _SIZE_ARGS + ("mode", "max_size", "roi_relative",
                                                                              "subpixel_scale") and v is not None})
        return rois, outs
    insz = hw.astype(np.float64)
    reqa = np.asarray(req, dtype=np.float64)
    mask = reqa != 0
    scale = reqa[None, :] / insz
    max_l = as_list(c["max_size"], 2, "max_size") or None
    out = np.where(mask[None, :], reqa[None, :], insz)
    if mask.all() and mode in ("not_larger", "not_smaller"):
        final = scale.max(1) if mode == "not_smaller" else scale.min(1)
    elif mask.any() and mode in ("not_larger", "not_smaller", "default"):
        final = scale[:, int(np.argmax(mask))]
    else:
        final = None
    if mode in ("not_larger", "not_smaller") and final is not None:
        if max_l:
            for d in range(2):
                if max_l[d] > 0:
                    final = np.minimum(final, max_l[d] / insz[:, d])
        out = final[:, None] * insz
    else:
        if final is not None and mode == "default" and not mask.all():
            out = np.where(mask[None, :], reqa[None, :], insz * final[:, None])
        if max_l:
            for d in range(2):
                if max_l[d] > 0:
                    out[:, d] = np.minimum(out[:, d], max_l[d])
    outs = np.maximum(_round_arr(out), 1).astype(np.int64)
    lo, hi = np.zeros_like(insz), insz.copy()
    if c["subpixel_scale"] is None or c["subpixel_scale"]:
        adj = np.clip(outs / out, -10.0, 10.0)
        centre = insz * 0.5
        lo, hi = centre - centre * adj, centre + centre * adj
    return np.stack([lo[:, 0], lo[:, 1], hi[:, 0], hi[:, 1]], 1), outs


def crop_windows_batch(hw: np.ndarray, args) -> np.ndarray:
    """:func:`crop_window` for a batch (``crop``, ``crop_h``/``crop_w``, ``crop_pos_x``/``_y``, ``rounding`` from
    ``args`` as in :func:`resize_params_batch`); returns ``(N, 4)`` int windows ``(y0, x0, h, w)``."""
    n = len(hw)
    if n == 0:
        return np.zeros((0, 4), dtype=np.int64)
    crops, chs, cws = args["crop"], args["crop_h"], args["crop_w"]
    same = args.is_const("crop") and args.is_const("crop_h") and args.is_const("crop_w")
    ch, cw = np.zeros(n), np.zeros(n)
    for i in ([0] if same else range(n)):
        crop = as_list(crops[i], 2, "crop")
        if crop and (chs[i] or cws[i]):
            raise ValueError("crop is incompatible with crop_h and crop_w; give one or the other.")
        h, w = crop if crop else (chs[i] or 0.0, cws[i] or 0.0)
        if same:
            ch[:], cw[:] = h, w
        else:
            ch[i], cw[i] = h, w
    py = np.asarray(args["crop_pos_y"], dtype=np.float64)
    px = np.asarray(args["crop_pos_x"], dtype=np.float64)
    rounding = args["rounding"][0] or "round"
    out = np.zeros((n, 4), dtype=np.int64)
    for d, (size, crop, pos, name) in enumerate(((hw[:, 0], ch, py, "crop_pos_y"), (hw[:, 1], cw, px, "crop_pos_x"))):
        use = crop > 0
        c = np.where(use, np.trunc(crop), size).astype(np.int64)
        p = np.where(use, pos, 0.5)
        if ((p < 0) | (p > 1)).any():
            raise ValueError(f"Invalid {name} ({p[(p < 0) | (p > 1)][0]}): the relative anchor must be in [0, 1].")
        a = p * (size - c)
        out[:, d] = _round_arr(a) if rounding == "round" else np.trunc(a)
        out[:, d + 2] = c
    return out


# ---- whole batches of 2-D images in one channel-last padded tensor (the GPU kernels' form) -----------------------
def channel_last_padded(images, layout: str, fill: float | None, op: str) -> tuple[torch.Tensor, np.ndarray, str]:
    """A batch of ``HWC``, ``CHW`` or ``HW`` images as one ``(N, H, W, C)`` tensor (a view of the padded batch:
    sample ``i`` in its leading corner, the rest ``fill``), each sample's ``(H, W)`` (``(N, 2)``) and the layout
    (the default one for an empty ``layout``). Other layouts raise, naming ``op``."""
    x, shapes = images.padded(fill)
    layout = layout or ("HWC" if shapes.shape[1] == 3 else "HW")
    if layout not in ("HWC", "CHW", "HW") or len(layout) != shapes.shape[1]:
        raise ValueError(f"fn.{op}: unsupported layout '{layout}' of {shapes.shape[1]}-D samples; supported: HWC, "
                         "CHW, HW and the sequences FHWC, FCHW, FHW")
    if layout == "HW":
        return x.unsqueeze(-1), shapes, layout
    if layout == "CHW":
        return x.permute(0, 2, 3, 1), shapes[:, 1:], layout
    return x, shapes[:, :2], layout


def from_channel_last(out: torch.Tensor, out_hw: np.ndarray, images, layout: str):
    """The :class:`Batch` of ``out`` (``(N, H, W, C)``, sample ``i`` in its leading ``out_hw[i]`` corner) in
    ``layout`` (as :func:`channel_last_padded` gave it), with ``images``' channel counts, layout and sources."""
    shapes = images.shapes_array()
    out_hw = np.asarray(out_hw, np.int64)
    if layout == "HW":
        return Batch.from_padded(out[..., 0], out_hw, images.layout(), images.source_info)
    if layout == "CHW":
        return Batch.from_padded(out.permute(0, 3, 1, 2).contiguous(), np.concatenate([shapes[:, :1], out_hw], 1),
                                 images.layout(), images.source_info)
    return Batch.from_padded(out, np.concatenate([out_hw, shapes[:, 2:]], 1), images.layout(), images.source_info)

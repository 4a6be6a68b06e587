"""Volumes (layouts with ``D``: ``DHWC``, ``CDHW``, ``DHW``) in ``crop``, ``crop_mirror_normalize`` and ``resize``:
DALI's 3-D crop windows and resize sizes, and whole-batch kernels over the padded batch that run alike on the CPU
and the GPU (one gather per batch for a crop; one gather-and-weight per spatial axis for a resize).

Example::

    anchors, sizes = crop_windows_nd(shapes, "DHWC", args)            # (n, 4) each: D, H, W windows, C whole
    out, out_shapes = gather_windows(padded, shapes, anchors, sizes, policy="pad", fill=[0.0], channel_dim=3)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sluice.kernels.resample import filter_table, pad_tables
from sluice.ops.image._geometry import as_list, region_and_size, round_half_away
from sluice.pipeline.ragged import host_to_device

__all__ = ["is_volume", "spatial_axes", "crop_windows_nd", "gather_windows", "resize_params_3d",
           "resample_volumes", "apply_policy", "VOLUME_LAYOUTS"]

VOLUME_LAYOUTS = "DHWC, CDHW, DHW (and FDHWC, FCDHW sequences)"


def is_volume(layout: str | None) -> bool:
    """Whether ``layout`` names a volume (it has a ``D``)."""
    return "D" in (layout or "")


def spatial_axes(layout: str) -> tuple[int, int, int]:
    """Indices of D, H and W in ``layout``."""
    dims = tuple(layout.find(c) for c in "DHW")
    if min(dims) < 0:
        raise ValueError(f"Unsupported volumetric layout '{layout}'; supported: {VOLUME_LAYOUTS}.")
    return dims  # type: ignore[return-value]


def crop_windows_nd(shapes: np.ndarray, layout: str, args) -> tuple[np.ndarray, np.ndarray]:
    """DALI's crop windows of a batch of volumes: ``(anchors, sizes)``, each ``(n, ndim)`` int64 over every axis
    of ``layout`` (axes other than D, H, W whole). ``args`` has ``__getitem__`` giving per-sample values of
    ``crop`` (2 or 3 values: (h, w) or (d, h, w)), ``crop_d``, ``crop_h``, ``crop_w``, ``crop_pos_x/y/z`` and
    ``rounding``. A window extent of 0 keeps the axis whole; ``anchor = round(pos * (in - crop))``."""
    shapes = np.asarray(shapes, np.int64)
    n, ndim = shapes.shape
    dd, hd, wd = spatial_axes(layout)
    anchors = np.zeros((n, ndim), np.int64)
    sizes = shapes.copy()
    rounding = (args["rounding"][0] if n else None) or "round"
    for i in range(n):
        crop = as_list(args["crop"][i])
        cd, ch, cw = (float(args["crop_d"][i] or 0.0), float(args["crop_h"][i] or 0.0),
                      float(args["crop_w"][i] or 0.0))
        if crop:
            if ch or cw or cd:
                raise ValueError("crop is incompatible with crop_d, crop_h and crop_w; give one or the other.")
            if len(crop) not in (2, 3):
                raise ValueError(f"Invalid crop ({crop}): give (crop_h, crop_w) or (crop_d, crop_h, crop_w).")
            cd, ch, cw = ([0.0] + crop) if len(crop) == 2 else crop
        for axis, c, pos, name in ((dd, cd, args["crop_pos_z"][i], "crop_pos_z"),
                                   (hd, ch, args["crop_pos_y"][i], "crop_pos_y"),
                                   (wd, cw, args["crop_pos_x"][i], "crop_pos_x")):
            if not c or c <= 0:
                continue
            p = float(as_list(pos)[0]) if pos is not None else 0.5
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"Invalid {name} ({p}): the relative anchor must be in [0, 1].")
            size = int(c)
            a = p * (int(shapes[i, axis]) - size)
            anchors[i, axis] = round_half_away(a) if rounding == "round" else int(a)
            sizes[i, axis] = size
    return anchors, sizes


def apply_policy(shapes: np.ndarray, anchors: np.ndarray, sizes: np.ndarray, policy: str, op: str
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Check or trim windows that leave their sample: ``error`` raises naming the sample, ``trim_to_shape``
    intersects, ``pad`` keeps them (the gather fills the outside)."""
    outside = (anchors < 0) | (anchors + sizes > shapes)
    if not outside.any() or policy == "pad":
        return anchors, sizes
    if policy == "error":
        i = int(np.argmax(outside.any(1)))
        raise ValueError(f"{op}: the crop window (anchor {anchors[i].tolist()}, shape {sizes[i].tolist()}) of sample "
                         f"{i} is out of bounds of its input {shapes[i].tolist()}; use out_of_bounds_policy='pad' or "
                         "'trim_to_shape' to allow this.")
    if policy != "trim_to_shape":
        raise ValueError(f"Invalid out_of_bounds_policy ('{policy}'). Supported values are 'error', 'pad', "
                         "'trim_to_shape'.")
    lo = np.maximum(anchors, 0)
    hi = np.minimum(anchors + sizes, shapes)
    return lo, np.maximum(hi - lo, 0)


def gather_windows(x: torch.Tensor, shapes: np.ndarray, anchors: np.ndarray, sizes: np.ndarray, *,
                   fill: Sequence[float] = (0.0,), channel_dim: int | None = None, mirror_dim: int | None = None,
                   mirror: np.ndarray | None = None) -> tuple[torch.Tensor, np.ndarray, torch.Tensor]:
    """Cut window ``anchors[i], sizes[i]`` out of sample ``i`` of the padded batch ``x (n, *largest)`` in one
    gather: returns the padded output ``(n, *max(sizes))``, the output shapes (``sizes``), and the ``(n, *out)``
    bool mask of the elements that came from inside their sample (the rest hold ``fill``, one value or one per
    channel along ``channel_dim``). ``mirror[i]`` reverses the window along ``mirror_dim``."""
    n, ndim = sizes.shape
    dev = x.device
    out_ext = tuple(int(v) for v in sizes.max(0)) if n else (0,) * ndim
    # page-locked, asynchronous copies: from pageable memory a copy waits for the work queued on the stream
    table = host_to_device(np.concatenate([anchors, sizes, shapes], 1).astype(np.int64), dev)
    flip = host_to_device(np.zeros(n, bool) if mirror is None else np.asarray(mirror, bool), dev)
    index = []
    inside = torch.ones((n,) + (1,) * ndim, dtype=torch.bool, device=dev)
    for k in range(ndim):
        view = [n] + [1] * ndim
        view[k + 1] = out_ext[k]
        pos = torch.arange(out_ext[k], device=dev).unsqueeze(0)  # (1, out_k)
        if mirror_dim == k:
            pos = torch.where(flip.unsqueeze(1), table[:, ndim + k].unsqueeze(1) - 1 - pos, pos)
        src = table[:, k].unsqueeze(1) + pos  # (n, out_k)
        ok = (src >= 0) & (src < table[:, 2 * ndim + k].unsqueeze(1))
        index.append(src.clamp(0, max(x.shape[k + 1] - 1, 0)).view(view))
        inside = inside & ok.view(view)
    batch = torch.arange(n, device=dev).view([n] + [1] * ndim)
    out = x[(batch, *index)] if x.numel() else x.new_zeros((n, *out_ext))
    if not bool(np.all((anchors >= 0) & (anchors + sizes <= shapes))):
        values = list(fill) or [0.0]
        if len(values) > 1 and channel_dim is not None:
            view = [1] * (ndim + 1)
            view[channel_dim + 1] = len(values)
            f = host_to_device(np.asarray(values, np.float64), dev).to(out.dtype).view(view)
            if out.shape[channel_dim + 1] != len(values):
                raise ValueError(f"Invalid fill_values ({values}): expected 1 or {out.shape[channel_dim + 1]} values.")
        else:
            f = torch.full((), float(values[0]), dtype=torch.float64, device=dev).to(out.dtype)  # made there: no copy
        out = torch.where(inside, out, f)
    return out, sizes, inside


# ---- resize -----------------------------------------------------------------------------------------------------
def resize_params_3d(in_shape: Sequence[int], *, resize_x: float = 0.0, resize_y: float = 0.0, resize_z: float = 0.0,
                     size=None, resize_shorter: float = 0.0, resize_longer: float = 0.0, max_size=None,
                     mode: str = "default", roi_start=None, roi_end=None, roi_relative: bool = False,
                     subpixel_scale: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source region ``(lo, hi)`` (each ``(3,)`` float, D, H, W order) and output size ``(3,)`` int of one volume of
    spatial shape ``in_shape`` (D, H, W), with DALI's rules of :func:`resize_params` in three dimensions: one way of
    giving the size (``resize_x/y/z``, ``size`` as (D, H, W), ``resize_shorter``, ``resize_longer``); missing
    extents keep the aspect ratio; ``max_size``; flips by negative sizes or ``roi_start > roi_end``; subpixel
    scale."""
    size_l = as_list(size, 3, "size")
    separate = bool(resize_x) or bool(resize_y) or bool(resize_z)
    methods = separate + bool(size_l) + bool(resize_shorter) + bool(resize_longer)
    if methods != 1:
        raise ValueError("Exactly one method of specifying the size must be used: resize_x/resize_y/resize_z, size, "
                         "resize_shorter or resize_longer" + (" (none was given)." if methods == 0 else "."))
    if (resize_shorter or resize_longer) and mode != "default":
        raise ValueError("resize_shorter, resize_longer and mode are mutually exclusive.")
    if resize_shorter:
        req, mode = [float(resize_shorter)] * 3, "not_smaller"
    elif resize_longer:
        req, mode = [float(resize_longer)] * 3, "not_larger"
    elif size_l:
        req = list(size_l)
    else:
        req = [float(resize_z or 0.0), float(resize_y or 0.0), float(resize_x or 0.0)]
    max_l = as_list(max_size, 3, "max_size") or None
    shape = [float(s) for s in in_shape]
    lo, hi = [0.0] * 3, list(shape)
    if roi_start is not None or roi_end is not None:
        rs = as_list(roi_start if roi_start is not None else [0.0] * 3, 3, "roi_start")
        re_ = as_list(roi_end if roi_end is not None else ([1.0] * 3 if roi_relative else shape), 3, "roi_end")
        if roi_relative:
            rs = [a * s for a, s in zip(rs, shape)]
            re_ = [a * s for a, s in zip(re_, shape)]
        lo, hi = list(rs), list(re_)
    lo, hi, out = region_and_size(lo, hi, req, mode, max_l, min(shape) == 0, subpixel_scale)
    return np.array(lo), np.array(hi), np.array(out, np.int64)


def _tables(lo: np.ndarray, hi: np.ndarray, in_size: np.ndarray, out_size: np.ndarray, fmin: int, fmag: int,
            antialias: bool) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per-sample filter tables of one axis, padded to one ``(n, max_out, max_taps)`` index and weight array
    (padding rows and taps: index 0, weight 0), and whether every sample's table is the identity."""
    n = len(lo)
    parts = []
    for i in range(n):
        o = int(out_size[i])
        fid = fmin if abs(hi[i] - lo[i]) > o else fmag
        parts.append(filter_table(float(lo[i]), float(hi[i]), int(in_size[i]), o, fid, antialias) if o and in_size[i]
                     else (np.zeros((o, 1), np.int64), np.zeros((o, 1), np.float32)))
    identity = all(_is_identity(idx, w, int(size)) for (idx, w), size in zip(parts, in_size))
    return (*pad_tables(parts), identity)


def _is_identity(idx: np.ndarray, w: np.ndarray, in_size: int) -> bool:
    """Whether the table ``(out, taps)`` takes output ``o`` from input ``o`` alone with weight 1 (a resize to the
    same size over the whole axis with a filter that is exact at the pixels: NN, linear, cubic), so that filtering
    would copy the axis."""
    if idx.shape[0] != in_size:
        return False
    hit = (idx == np.arange(in_size)[:, None]) & (w == 1)
    return bool((hit.sum(1) == 1).all() and ((w == 0) | hit).all())


def _resample_axis(x: torch.Tensor, dim: int, idx: np.ndarray, w: np.ndarray) -> torch.Tensor:
    """Resample the padded float batch ``x (n, ...)`` along ``dim`` (>= 1) with per-sample tables: one gather
    and one weighted sum for the whole batch."""
    n = x.shape[0]
    dev = x.device
    moved = x.movedim(dim, 1)
    rest = moved.shape[2:]
    flat = moved.reshape(n, moved.shape[1], -1)
    _, out, taps = idx.shape
    ti = host_to_device(idx.reshape(n, out * taps), dev)  # asynchronous: a pageable copy would wait for the stream
    tw = host_to_device(w, dev)
    if taps == 1 and not (w != 1).any():  # nearest neighbour: a plain gather
        g = torch.gather(flat, 1, ti.unsqueeze(2).expand(n, out, flat.shape[2]))
        return g.reshape(n, out, *rest).movedim(1, dim)
    g = torch.gather(flat, 1, ti.unsqueeze(2).expand(n, out * taps, flat.shape[2])).reshape(n, out, taps, -1)
    res = (g * tw.unsqueeze(3)).sum(2)
    return res.reshape(n, out, *rest).movedim(1, dim)


def resample_volumes(x: torch.Tensor, in_shapes: np.ndarray, axes: Sequence[int], lo: np.ndarray, hi: np.ndarray,
                     out_sizes: np.ndarray, fmin: int, fmag: int, antialias: bool) -> tuple[torch.Tensor, np.ndarray]:
    """Resample the padded batch ``x (n, *largest)`` along the spatial ``axes`` (sample dims, D, H, W order),
    sample ``i`` from region ``lo[i]..hi[i]`` (``(n, 3)``) to ``out_sizes[i]``: the separable filters of
    :mod:`sluice.kernels.resample` (DALI's interpolation types, antialiased when shrinking), one gather and weighted
    sum per axis for the whole batch. An axis whose every table is the identity (the same size, the whole axis,
    a filter exact at the pixels) is not filtered. Returns the padded float32 output (``x`` itself, of its own
    type, when no axis was filtered) and the output shapes."""
    shapes = np.asarray(in_shapes, np.int64).copy()
    # the axis that shrinks most goes first: fewer elements for the others to filter
    ratio = out_sizes / np.maximum(shapes[:, list(axes)], 1)
    order = np.argsort(ratio.max(0), kind="stable")
    for k in order.tolist():
        dim = axes[k]
        idx, w, identity = _tables(lo[:, k], hi[:, k], shapes[:, dim], out_sizes[:, k], fmin, fmag, antialias)
        if identity:
            continue
        x = _resample_axis(x if x.dtype == torch.float32 else x.to(torch.float32), dim + 1, idx, w)
        shapes[:, dim] = out_sizes[:, k]
    return x, shapes

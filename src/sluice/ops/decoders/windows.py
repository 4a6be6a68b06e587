"""The image decoders' pure helpers, shared by the decoder operators (:mod:`sluice.ops.decoders.image`) and the CPU
decoder's batch path (:mod:`sluice.ops.decoders._image_cpu`): the output type conversion, the crop window of each
decoder variant, and a sample's encoded bytes as NumPy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from sluice import types
from sluice.native.crop_window import random_crop_window
from sluice.errors import SampleError
from sluice.ops.tensor.slice import coordinate_rows, slice_bounds, slice_bounds_batch

__all__ = ["convert_image_dtype", "WindowFn", "WINDOWS", "sample_bytes", "Roi", "slice_windows"]

Roi = tuple[int, int, int, int]

def convert_image_dtype(image: torch.Tensor, dtype: types.DALIDataType) -> torch.Tensor:
    """Convert a decoded uint8/uint16 image to ``dtype`` (UINT8, UINT16 or FLOAT in [0, 1]) on its own device.

    Example::

        convert_image_dtype(torch.full((2, 2, 3), 255, dtype=torch.uint8), types.FLOAT)   # all 1.0
    """
    src16 = image.dtype == torch.uint16
    if dtype is types.FLOAT:
        return image.to(torch.float32) / (65535.0 if src16 else 255.0)
    if dtype is types.UINT8:
        if not src16:
            return image
        return ((image.to(torch.int32) + 128) // 257).to(torch.uint8)
    if dtype is types.UINT16:
        return image if src16 else (image.to(torch.int32) * 257).to(torch.uint16)
    raise ValueError(f"Invalid dtype ({dtype!r}). Supported values are types.UINT8, types.UINT16, types.FLOAT.")


def _window_crop(sample_args: dict, h: int, w: int) -> Roi:
    """The fixed-size window of image_crop: size from ``crop`` or ``crop_h``/``crop_w``, placed at
    ``crop_pos_*`` and clamped to the image (an image smaller than the crop is kept whole on that side)."""
    crop = sample_args.get("crop")
    ch = float(sample_args.get("crop_h") or 0.0)
    cw = float(sample_args.get("crop_w") or 0.0)
    if crop:
        crop = [float(c) for c in np.asarray(crop).reshape(-1)]
        if len(crop) == 1:
            crop = crop * 2
        if len(crop) != 2:
            raise ValueError(f"Invalid crop ({crop}). Give (height, width) or one value for both.")
        ch, cw = ch or crop[0], cw or crop[1]
    if ch <= 0 or cw <= 0:
        raise ValueError("image_crop needs a window size: give crop=(height, width) or crop_h and crop_w > 0")
    ch_i, cw_i = min(int(round(ch)), h), min(int(round(cw)), w)
    px, py = float(sample_args["crop_pos_x"]), float(sample_args["crop_pos_y"])
    if not (0 <= px <= 1 and 0 <= py <= 1):
        raise ValueError(f"Invalid crop_pos_x/crop_pos_y ({px}, {py}). They must lie in [0, 1].")
    y = int(round(py * (h - ch_i)))
    x = int(round(px * (w - cw_i)))
    return y, x, ch_i, cw_i


def _window_slice(sample_args: dict, h: int, w: int, anchor=None, shape=None) -> Roi:
    """The window of image_slice: from the anchor and shape inputs (normalised or in pixels), or from the
    ``start``/``rel_start`` and ``end``/``rel_end``/``shape``/``rel_shape`` arguments, with values in the order of
    ``axis_names`` (or ``axes`` when given). Coordinates round as in ``fn.slice`` (DALI's rules)."""
    if (anchor is None) != (shape is None):
        raise ValueError("image_slice: give both the anchor and the shape inputs, or neither (then the window "
                         "comes from start/rel_start and end/rel_end/shape/rel_shape)")
    if sample_args.get("axes") is not None:
        if not sample_args["axes"] or any(a not in (0, 1) for a in sample_args["axes"]):
            raise ValueError(f"Invalid axes ({sample_args['axes']}). Use 0 (height) and/or 1 (width).")
        axes = [int(a) for a in sample_args["axes"]]
    else:
        axis_names = sample_args["axis_names"]
        if not axis_names or len(set(axis_names)) != len(axis_names) or set(axis_names) - {"H", "W"}:
            raise ValueError(f"Invalid axis_names ({axis_names!r}). Use 'WH', 'HW', 'H' or 'W'.")
        axes = ["HW".index(c) for c in axis_names]
    try:
        (y, x), (y1, x1) = slice_bounds(
            (h, w), axes, anchor=anchor, sl_shape=shape, normalized_anchor=sample_args["normalized_anchor"],
            normalized_shape=sample_args["normalized_shape"], start=sample_args.get("start"),
            rel_start=sample_args.get("rel_start"), end=sample_args.get("end"), rel_end=sample_args.get("rel_end"),
            shape_arg=sample_args.get("shape"), rel_shape=sample_args.get("rel_shape"))
    except ValueError as exc:
        raise ValueError(f"image_{exc}") from None  # slice_bounds' messages start with "slice: "
    hh, ww = y1 - y, x1 - x
    if hh <= 0 or ww <= 0:
        raise ValueError(f"image_slice: empty window (height {hh}, width {ww})")
    if y < 0 or x < 0 or y + hh > h or x + ww > w:
        if sample_args["out_of_bounds_policy"] == "error":
            raise ValueError(f"image_slice: window (y={y}, x={x}, h={hh}, w={ww}) lies outside the {h} x {w} image; "
                             "pass out_of_bounds_policy='trim_to_shape' to cut it to the image")
        y0, x0 = max(y, 0), max(x, 0)
        hh, ww = min(y + hh, h) - y0, min(x + ww, w) - x0
        y, x = y0, x0
        if hh <= 0 or ww <= 0:
            raise ValueError("image_slice: the window does not overlap the image")
    return y, x, hh, ww


_SLICE_COORDS = ("start", "rel_start", "end", "rel_end", "shape", "rel_shape")
_SLICE_CONST = ("axes", "axis_names", "normalized_anchor", "normalized_shape", "out_of_bounds_policy")


def slice_windows(args, hw: np.ndarray, anchor=None, shape=None, sources: list[str] | None = None) -> list[Roi]:
    """image_slice's windows of a whole batch (``args``: the batch's ``BatchArgs``; ``hw``: ``(n, 2)`` upright
    image sizes; ``anchor``/``shape``: the anchor and shape input batches or None): one
    :func:`~sluice.ops.tensor.slice.slice_bounds_batch` call and NumPy checks, the windows of
    :func:`_window_slice` sample by sample. Where a check fails (or the arguments need per-sample handling: axes
    that vary per sample, ragged coordinates), the per-sample function runs, which raises its error naming the
    sample (and its ``sources`` entry).

    Example::

        rois = slice_windows(args, np.array([[480, 640]]), anchors, shapes)   # [(y, x, h, w)]
    """
    hw = np.asarray(hw, dtype=np.int64).reshape(-1, 2)
    n = len(hw)
    samples = None
    if n and all(args.is_const(k) for k in _SLICE_CONST) and (anchor is None) == (shape is None):
        try:
            samples = _slice_windows_batch(args, hw, anchor, shape)
        except (ValueError, SampleError):
            samples = None  # the per-sample function raises the error, naming the sample
    if samples is not None:
        return samples
    extra = [b for b in (anchor, shape) if b is not None]
    out = []
    for i, (h, w) in enumerate(hw.tolist()):
        try:
            out.append(_window_slice(args.sample(i), h, w, *(b[i].numpy() for b in extra)))
        except Exception as exc:  # noqa: BLE001 - re-raised naming the sample, as sample kernels do
            raise SampleError(i, sources[i] if sources else "", exc) from exc
    return out


def _slice_windows_batch(args, hw: np.ndarray, anchor, shape) -> list[Roi] | None:
    """:func:`slice_windows` in one pass, or None where any window would raise (the caller then runs the
    per-sample function, which says why)."""
    if args.const("axes") is not None:
        axes_arg = args.const("axes")
        if not axes_arg or any(a not in (0, 1) for a in axes_arg):
            return None
        axes = [int(a) for a in axes_arg]
    else:
        axis_names = args.const("axis_names")
        if not axis_names or len(set(axis_names)) != len(axis_names) or set(axis_names) - {"H", "W"}:
            return None
        axes = ["HW".index(c) for c in axis_names]
    given = {k: (None if args.is_const(k) and args.const(k) is None else args[k]) for k in _SLICE_COORDS}
    if any(v is not None and any(x is None for x in v) for v in given.values()):
        return None  # given for some samples only: each sample on its own
    lo, hi = slice_bounds_batch(
        hw, axes, anchor=coordinate_rows(anchor)[0], sl_shape=coordinate_rows(shape)[0],
        normalized_anchor=args.const("normalized_anchor"), normalized_shape=args.const("normalized_shape"),
        start=given["start"], rel_start=given["rel_start"], end=given["end"], rel_end=given["rel_end"],
        shape_arg=given["shape"], rel_shape=given["rel_shape"])
    size = hi - lo
    if (size <= 0).any():
        return None
    outside = (lo < 0).any(1) | (hi > hw).any(1)
    if outside.any():
        if args.const("out_of_bounds_policy") == "error":
            return None
        lo, hi = np.maximum(lo, 0), np.minimum(hi, hw)
        size = hi - lo
        if (size <= 0).any():
            return None
    return [tuple(r) for r in np.concatenate([lo, size], 1).tolist()]


def _window_random(sample_args: dict, h: int, w: int, rng: np.random.Generator) -> Roi:
    return random_crop_window(rng, h, w, sample_args["random_area"], sample_args["random_aspect_ratio"],
                              sample_args["num_attempts"])


# A window function: (sample_args, upright_h, upright_w, rng_or_None, extra_sample_inputs) -> roi or None.
WindowFn = Callable[[dict, int, int, "np.random.Generator | None", tuple], "Roi | None"]

WINDOWS: dict[str, WindowFn] = {
    "decoders.image": lambda a, h, w, rng, extra: None,
    "decoders.image_crop": lambda a, h, w, rng, extra: _window_crop(a, h, w),
    "decoders.image_slice": lambda a, h, w, rng, extra: _window_slice(a, h, w, *extra),
    "decoders.image_random_crop": lambda a, h, w, rng, extra: _window_random(a, h, w, rng),
}


def sample_bytes(sample: torch.Tensor) -> np.ndarray:
    if sample.device.type != "cpu":
        raise ValueError("decoders take encoded bytes on the CPU (1-D uint8 samples, e.g. from fn.readers.file); "
                         "this input is on the GPU")
    if sample.dtype != torch.uint8:
        raise ValueError(f"decoders take encoded bytes as uint8 samples; got {sample.dtype}")
    # Each torch call may release the GIL, and getting it back in a busy pipeline is what costs: one call here.
    return sample.numpy() if sample.dim() == 1 else sample.reshape(-1).numpy()

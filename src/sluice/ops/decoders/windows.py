"""The image decoders' pure helpers, shared by the decoder operators (:mod:`sluice.ops.decoders.image`) and the CPU
decoder's batch path (:mod:`sluice.ops.decoders._image_cpu`): the output type conversion, the crop window of each
decoder variant, and a sample's encoded bytes as NumPy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from sluice import types
from sluice.native.crop_window import random_crop_window
from sluice.ops.tensor.slice import slice_bounds

__all__ = ["convert_image_dtype", "WindowFn", "WINDOWS", "sample_bytes", "Roi"]

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

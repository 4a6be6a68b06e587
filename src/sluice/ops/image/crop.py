"""``fn.crop``: cut a window out of each image, DALI's way.

The window is ``crop = (crop_h, crop_w)`` (or ``crop_h``/``crop_w``) placed at the relative anchor
``crop_pos_y``/``crop_pos_x`` in [0, 1]: ``y0 = round(crop_pos_y * (H - crop_h))``. A window that leaves the
image raises (``out_of_bounds_policy='error'``), is padded with ``fill_values`` (``'pad'``) or is intersected
with the image (``'trim_to_shape'``). Inside the image the result is a view (no copy) on both devices.
"""

from __future__ import annotations

import torch

from sluice import types
from sluice.kernels.resample import cast_round
from sluice.ops.image._geometry import apply_crop, as_list, crop_window, out_dtype, spatial_dims
from sluice.schema import Arg, OpSchema

__all__ = ["SCHEMA", "CROP_ARGS", "window_of"]

CROP_ARGS = [
    Arg("crop", "float_list", None, "Window size (crop_h, crop_w); excludes crop_h/crop_w.", per_sample=True, min=0),
    Arg("crop_h", float, 0.0, "Window height in pixels (0: the whole height).", per_sample=True, min=0),
    Arg("crop_w", float, 0.0, "Window width in pixels (0: the whole width).", per_sample=True, min=0),
    Arg("crop_pos_x", float, 0.5, "Relative horizontal anchor in [0, 1]: x0 = round(pos * (W - crop_w)).",
        per_sample=True),
    Arg("crop_pos_y", float, 0.5, "Relative vertical anchor in [0, 1].", per_sample=True),
    Arg("out_of_bounds_policy", str, "error", "Window outside the image: 'error', 'pad' or 'trim_to_shape'.",
        choices=("error", "pad", "trim_to_shape")),
    Arg("fill_values", "float_list", [0.0], "Padding value(s), one or one per channel."),
    Arg("rounding", str, "round", "Anchor rounding: 'round' or 'truncate'.", choices=("round", "truncate")),
]

SCHEMA = OpSchema(
    "crop",
    sequences="axis",
    doc="""Crop images with a window of fixed size at a relative position.

    Example::

        patches = fn.crop(images, crop=(224, 224), crop_pos_x=fn.random.uniform(range=(0, 1)))
    """,
    devices=("cpu", "gpu"),
    args=CROP_ARGS + [Arg("dtype", types.DALIDataType, None, "Output type (default: the input's).")],
)


def window_of(shape: tuple[int, ...], layout: str, args: dict) -> tuple[int, int, int, int]:
    """``(y0, x0, h, w)`` of the crop window of one sample."""
    hd, wd, _ = spatial_dims(layout, len(shape))
    if len(as_list(args.get("crop"))) == 3:
        raise ValueError(f"Invalid crop ({as_list(args.get('crop'))}): a volumetric crop (crop_d, crop_h, crop_w) is "
                         f"not implemented (input layout '{layout}'); give (crop_h, crop_w), volumes keep their depth.")
    crop = as_list(args.get("crop"), 2, "crop")
    if crop and (args.get("crop_h") or args.get("crop_w")):
        raise ValueError("crop is incompatible with crop_h and crop_w; give one or the other.")
    ch, cw = crop if crop else (args.get("crop_h") or 0.0, args.get("crop_w") or 0.0)
    return crop_window(int(shape[hd]), int(shape[wd]), ch, cw, args.get("crop_pos_y", 0.5),
                       args.get("crop_pos_x", 0.5), args.get("rounding") or "round")


def _crop_one(image: torch.Tensor, layout: str, args: dict) -> torch.Tensor:
    win = window_of(tuple(image.shape), layout, args)
    out = apply_crop(image, win, layout, args.get("out_of_bounds_policy") or "error", args.get("fill_values"))
    dtype = out_dtype(args.get("dtype"), image.dtype)
    return out if dtype == image.dtype else cast_round(out.to(torch.float32), dtype)


@SCHEMA.sample_kernel("cpu")
@SCHEMA.sample_kernel("gpu")
def crop(ctx, image: torch.Tensor, **args) -> torch.Tensor:
    """One sample, on its device: a view of the window (a copy only when padding or casting)."""
    return _crop_one(image, ctx.layout or ("HWC" if image.dim() == 3 else "HW"), args)

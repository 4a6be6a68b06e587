"""``fn.paste``: place each image on a larger canvas filled with ``fill_value``.

Canvas side = ``max(round(ratio * side), min_canvas_size)``; the image's top-left corner sits at
``round(paste_x * (canvas_w - w))``, ``round(paste_y * (canvas_h - h))``.
"""

from __future__ import annotations

import torch

from sluice.ops.image._geometry import as_list, fill_channels, round_half_away, spatial_dims
from sluice.schema import REQUIRED, Arg, OpSchema

__all__ = ["SCHEMA", "paste_one"]

SCHEMA = OpSchema(
    "paste",
    sequences="axis",
    doc="""Paste images onto a bigger canvas (zoom-out augmentation).

    Example::

        canvas = fn.paste(images, ratio=fn.random.uniform(range=(1, 4)), paste_x=fn.random.uniform(range=(0, 1)),
                          fill_value=(118, 118, 118))
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("ratio", float, REQUIRED, "Canvas size / image size (>= 1).", per_sample=True),
        Arg("paste_x", float, 0.5, "Horizontal position of the image on the canvas, in [0, 1].", per_sample=True),
        Arg("paste_y", float, 0.5, "Vertical position, in [0, 1].", per_sample=True),
        Arg("fill_value", "float_list", REQUIRED, "Canvas colour: one value or one per channel."),
        Arg("min_canvas_size", float, 0.0, "Lower bound of both canvas sides.", per_sample=True),
        Arg("n", int, None, "Accepted for DALI compatibility (the channel count is taken from the input)."),
    ],
)


def paste_one(image: torch.Tensor, layout: str, args: dict) -> torch.Tensor:
    """One sample, on its device."""
    layout = layout or ("HWC" if image.dim() == 3 else "HW")
    hd, wd, cd = spatial_dims(layout, image.dim())
    ratio = float(args["ratio"])
    if ratio < 1.0:
        raise ValueError(f"Invalid ratio ({ratio}): the canvas must be at least as big as the image (ratio >= 1).")
    h, w = int(image.shape[hd]), int(image.shape[wd])
    m = float(args.get("min_canvas_size") or 0.0)
    ch, cw = max(round_half_away(ratio * h), int(m)), max(round_half_away(ratio * w), int(m))
    px, py = float(args.get("paste_x", 0.5)), float(args.get("paste_y", 0.5))
    for name, v in (("paste_x", px), ("paste_y", py)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"Invalid {name} ({v}): it must be in [0, 1].")
    y0, x0 = round_half_away(py * (ch - h)), round_half_away(px * (cw - w))
    shape = list(image.shape)
    shape[hd], shape[wd] = ch, cw
    out = fill_channels(torch.empty(shape, dtype=image.dtype, device=image.device), as_list(args["fill_value"]), cd,
                        "fill_value")
    out.narrow(hd, y0, h).narrow(wd, x0, w).copy_(image)
    return out


@SCHEMA.sample_kernel("cpu")
@SCHEMA.sample_kernel("gpu")
def paste(ctx, image: torch.Tensor, **args) -> torch.Tensor:
    """One sample, on its device: a fill and a copy (outputs differ in size, so one launch would not pay)."""
    return paste_one(image, ctx.layout, args)

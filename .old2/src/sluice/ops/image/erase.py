"""``fn.erase``: fill rectangular regions of each image with ``fill_value``.

``anchor`` and ``shape`` hold one (start, extent) pair per erased axis and region, in ``axis_names`` order
(default ``"HW"``): ``anchor=[y0, x0, y1, x1]`` with ``shape=[h0, w0, h1, w1]`` erases two rectangles. With
``normalized_anchor`` / ``normalized_shape`` (or ``normalized``) the values are fractions of the image size;
``centered_anchor`` makes the anchor the region's centre. Regions are clipped to the image.
"""

from __future__ import annotations

import torch

from sluice.ops.image._geometry import as_list, fill_channels, spatial_dims
from sluice.schema import Arg, OpSchema

__all__ = ["SCHEMA", "erase_one"]

SCHEMA = OpSchema(
    "erase",
    sequences="axis",
    doc="""Erase rectangles (cutout / random erasing).

    Example::

        images = fn.erase(images, anchor=[10, 20], shape=[30, 40], fill_value=[0])
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("anchor", "float_list", [], "Region starts, one per erased axis per region.", per_sample=True),
        Arg("shape", "float_list", [], "Region extents, one per erased axis per region.", per_sample=True),
        Arg("axis_names", str, "HW", "The axes the anchor/shape values refer to, in order (letters of the layout)."),
        Arg("axes", "int_list", None, "The same by dimension index; overrides axis_names."),
        Arg("fill_value", "float_list", [0.0], "One value, or one per channel."),
        Arg("normalized_anchor", bool, False, "Anchors are fractions of the extents."),
        Arg("normalized_shape", bool, False, "Shapes are fractions of the extents."),
        Arg("normalized", bool, False, "Both anchors and shapes are fractions."),
        Arg("centered_anchor", bool, False, "The anchor is the centre of the region."),
    ],
)


def erase_one(image: torch.Tensor, layout: str, args: dict) -> torch.Tensor:
    """One sample; returns a modified copy."""
    layout = layout or ("HWC" if image.dim() == 3 else "HW")
    _, _, cd = spatial_dims(layout, image.dim())
    axes = args.get("axes")
    if axes:
        dims = [int(a) for a in axes]
    else:
        names = args.get("axis_names") or "HW"
        bad = [a for a in names if a not in layout]
        if bad:
            raise ValueError(f"Invalid axis_names ('{names}'): {bad} not in the layout '{layout}'.")
        dims = [layout.index(a) for a in names]
    anchor, shape = as_list(args.get("anchor")), as_list(args.get("shape"))
    k = len(dims)
    if len(anchor) != len(shape) or len(anchor) % k:
        raise ValueError(f"anchor ({len(anchor)} values) and shape ({len(shape)} values) must both hold a multiple "
                         f"of {k} values (one per axis in {args.get('axis_names') or 'HW'} per region).")
    norm_a = bool(args.get("normalized_anchor") or args.get("normalized"))
    norm_s = bool(args.get("normalized_shape") or args.get("normalized"))
    fill = as_list(args.get("fill_value")) or [0.0]
    out = image.clone()
    for r in range(len(anchor) // k):
        region = out
        for j, d in enumerate(dims):
            size = int(image.shape[d])
            a, s = anchor[r * k + j], shape[r * k + j]
            a, s = (a * size if norm_a else a), (s * size if norm_s else s)
            if args.get("centered_anchor"):
                a -= s / 2.0
            lo, hi = max(int(round(a)), 0), min(int(round(a + s)), size)
            region = region.narrow(d, lo, max(hi - lo, 0))
        if region.numel():
            fill_channels(region, fill, cd, "fill_value")
    return out


@SCHEMA.sample_kernel("cpu")
@SCHEMA.sample_kernel("gpu")
def erase(ctx, image: torch.Tensor, **args) -> torch.Tensor:
    """One sample, on its device: one clone and one fill per region."""
    return erase_one(image, ctx.layout, args)

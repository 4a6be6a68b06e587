"""``fn.crop``: cut a window out of each image, DALI's way.

The window is ``crop = (crop_h, crop_w)`` (or ``crop_h``/``crop_w``) placed at the relative anchor
``crop_pos_y``/``crop_pos_x`` in [0, 1]: ``y0 = round(crop_pos_y * (H - crop_h))``. A window that leaves the
image raises (``out_of_bounds_policy='error'``), is padded with ``fill_values`` (``'pad'``) or is intersected
with the image (``'trim_to_shape'``). Inside the image the result is a view (no copy) on both devices.

Volumes (layouts with ``D``: ``DHWC``, ``CDHW``) take ``crop=(d, h, w)`` or ``crop_d`` with ``crop_pos_z``; the
whole batch is then cut in one gather over its padded form (:mod:`sluice.ops.image._volume`).
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.kernels.resample import cast_round
from sluice.errors import SampleError
from sluice.ops.image._geometry import (CROP_RESIZE_NORMALIZE, apply_crop, as_list, crop_window, out_dtype,
                                        spatial_dims)
from sluice.ops.image._volume import apply_policy, crop_windows_nd, gather_windows, is_volume
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all
from sluice.schema import Arg, BatchArgs, BatchContext, FusionStage, OpSchema

__all__ = ["SCHEMA", "CROP_ARGS", "window_of", "crop_volumes", "crop_one"]

CROP_ARGS = [
    Arg("crop", "float_list", None, "Window size (crop_h, crop_w), or (crop_d, crop_h, crop_w) for volumes; "
        "excludes crop_d/crop_h/crop_w.", per_sample=True, min=0),
    Arg("crop_d", float, 0.0, "Window depth of volumes (layouts with D; 0: the whole depth).", per_sample=True, min=0),
    Arg("crop_h", float, 0.0, "Window height in pixels (0: the whole height).", per_sample=True, min=0),
    Arg("crop_w", float, 0.0, "Window width in pixels (0: the whole width).", per_sample=True, min=0),
    Arg("crop_pos_x", float, 0.5, "Relative horizontal anchor in [0, 1]: x0 = round(pos * (W - crop_w)).",
        per_sample=True),
    Arg("crop_pos_y", float, 0.5, "Relative vertical anchor in [0, 1].", per_sample=True),
    Arg("crop_pos_z", float, 0.5, "Relative depth anchor in [0, 1] (volumes).", per_sample=True),
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
    fusion=FusionStage(CROP_RESIZE_NORMALIZE, 0, "k.", flag="has_crop"),
)


def window_of(shape: tuple[int, ...], layout: str, args: dict) -> tuple[int, int, int, int]:
    """``(y0, x0, h, w)`` of the crop window of one sample."""
    hd, wd, _ = spatial_dims(layout, len(shape))
    if len(as_list(args.get("crop"))) == 3:
        raise ValueError(f"Invalid crop ({as_list(args.get('crop'))}): a volumetric crop (crop_d, crop_h, crop_w) needs "
                         f"a volume (a layout with D, e.g. DHWC or CDHW); the input layout is '{layout}'.")
    crop = as_list(args.get("crop"), 2, "crop")
    if crop and (args.get("crop_h") or args.get("crop_w")):
        raise ValueError("crop is incompatible with crop_h and crop_w; give one or the other.")
    ch, cw = crop if crop else (args.get("crop_h") or 0.0, args.get("crop_w") or 0.0)
    return crop_window(int(shape[hd]), int(shape[wd]), ch, cw, args.get("crop_pos_y", 0.5),
                       args.get("crop_pos_x", 0.5), args.get("rounding") or "round")


def crop_volumes(volumes: Batch, layout: str, args) -> Batch:
    """A batch of volumes (``layout`` with D, H, W): DALI's 3-D windows cut in one gather on the batch's device;
    windows outside a volume follow ``out_of_bounds_policy``."""
    n = len(volumes)
    shapes = volumes.shapes_array()
    anchors, sizes = crop_windows_nd(shapes, layout, args)
    anchors, sizes = apply_policy(shapes, anchors, sizes, args["out_of_bounds_policy"][0] or "error", "fn.crop")
    dtype = out_dtype(args["dtype"][0] if n else None, volumes.dtype)
    if dtype == volumes.dtype and not anchors.any() and np.array_equal(sizes, shapes):
        return volumes.with_layout(layout)  # every window is its whole volume (nnU-Net's unzoomed case): no cut
    data, _ = volumes.padded(fill=None)
    c = layout.find("C")
    out, out_shapes, _ = gather_windows(data, shapes, anchors, sizes, fill=as_list(args["fill_values"][0] if n else 0),
                                        channel_dim=c if c >= 0 else None)
    dtype = out_dtype(args["dtype"][0] if n else None, out.dtype)
    if dtype != out.dtype:
        out = cast_round(out.to(torch.float32), dtype)
    return Batch.from_padded(out, out_shapes, layout)


def crop_one(image: torch.Tensor, layout: str, args: dict) -> torch.Tensor:
    """One sample cropped by its own arguments (``args``: one sample's values of fn.crop's arguments)."""
    if is_volume(layout):
        return crop_volumes(Batch([image], layout), layout, BatchArgs(args, {}, 1))[0]
    win = window_of(tuple(image.shape), layout, args)
    out = apply_crop(image, win, layout, args.get("out_of_bounds_policy") or "error", args.get("fill_values"))
    dtype = out_dtype(args.get("dtype"), image.dtype)
    return out if dtype == image.dtype else cast_round(out.to(torch.float32), dtype)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def crop(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """Images: a view of each window (a copy only when padding or casting), in the pool's threads on the CPU.
    Volumes: the whole batch in one gather (:func:`crop_volumes`)."""
    n = len(images)
    layout = ctx.layout_of(images)
    if n == 0:
        return Batch([], layout)
    if is_volume(layout):
        return crop_volumes(images, layout, args)
    samples = images.samples

    def one(i: int) -> torch.Tensor:
        s = samples[i]
        try:
            return crop_one(s, layout or ("HWC" if s.dim() == 3 else "HW"), args.sample(i))
        except Exception as exc:  # noqa: BLE001 - re-raised naming the sample
            raise SampleError(i, ctx.source_info[i] if ctx.source_info else "", exc) from exc

    pool = ctx.thread_pool if ctx.device.type == "cpu" else None
    return Batch(map_all(pool, one, list(range(n))), layout)

"""``fn.rotate``: rotate images by ``angle`` degrees counter-clockwise about their centre.

The output is the bounding box of the rotated image (``ceil(|w cos| + |h sin|)`` by ``ceil(|w sin| + |h cos|)``)
unless ``keep_size`` or ``size`` say otherwise; outside the source, ``fill_value`` (not given: the source
coordinates are clamped and the border pixel repeats, as in DALI). Implemented as
:mod:`sluice.ops.image.warp_affine`'s batched warp.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sluice import types
from sluice.ops.image._geometry import as_list, out_dtype, warp_affine_images
from sluice.ops.image.warp_affine import image_hw, hwc_batch, interp_name, restore_layout, warp_batch
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, OpSchema

__all__ = ["SCHEMA", "rotation_matrix", "rotated_size"]

SCHEMA = OpSchema(
    "rotate",
    sequences="frames",
    doc="""Rotate images counter-clockwise by ``angle`` degrees.

    Example::

        images = fn.rotate(images, angle=fn.random.uniform(range=(-10, 10)), fill_value=0)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("angle", float, REQUIRED, "Angle in degrees, counter-clockwise.", per_sample=True),
        Arg("fill_value", float, None, "Value outside the source image; default: repeat the border pixel."),
        Arg("keep_size", bool, False, "Keep the input size (corners are cut) instead of the bounding box."),
        Arg("size", "float_list", None, "Output size (H, W); overrides keep_size.", per_sample=True),
        Arg("interp_type", types.DALIInterpType, types.INTERP_LINEAR, "INTERP_NN, INTERP_LINEAR or INTERP_CUBIC."),
        Arg("dtype", types.DALIDataType, None, "Output type (default: the input's)."),
    ],
)


def rotated_size(h: int, w: int, angle: float) -> tuple[int, int]:
    """Bounding box (H, W) of an ``h`` x ``w`` image rotated by ``angle`` degrees."""
    a = math.radians(angle)
    c, s = abs(math.cos(a)), abs(math.sin(a))
    return max(1, math.ceil(h * c + w * s - 1e-6)), max(1, math.ceil(w * c + h * s - 1e-6))


def rotation_matrix(h: int, w: int, oh: int, ow: int, angle: float) -> np.ndarray:
    """Output -> input matrix (x, y order, pixel centres at +0.5) of a counter-clockwise rotation about the
    centres."""
    a = math.radians(angle)
    c, s = math.cos(a), math.sin(a)
    # y points down, so a counter-clockwise turn on screen maps input offset (dx, dy) to (c dx + s dy, -s dx + c dy)
    rot = np.array([[c, -s], [s, c]])
    t = np.array([w / 2.0, h / 2.0]) - rot @ np.array([ow / 2.0, oh / 2.0])
    return np.hstack([rot, t[:, None]])


def _run(samples, layout, args_of) -> list[torch.Tensor]:
    xs, layout = hwc_batch(samples, layout, "rotate")
    n = len(xs)
    mats, sizes = [], []
    for i, x in enumerate(xs):
        a = args_of(i)
        h, w = int(x.shape[0]), int(x.shape[1])
        size = as_list(a.get("size"), 2, "size")
        if size:
            oh, ow = int(size[0]), int(size[1])
        elif a.get("keep_size"):
            oh, ow = h, w
        else:
            oh, ow = rotated_size(h, w, float(a["angle"]))
        mats.append(rotation_matrix(h, w, oh, ow, float(a["angle"])))
        sizes.append((oh, ow))
    if n == 0:
        return []
    a0 = args_of(0)
    fill = a0.get("fill_value")
    outs = warp_affine_images(xs, np.stack(mats), np.asarray(sizes, dtype=np.int64), interp_name(a0.get("interp_type")),
                              None if fill is None else [fill], out_dtype(a0.get("dtype"), samples[0].dtype))
    return restore_layout(outs, layout)


@SCHEMA.sample_kernel("cpu")
def rotate_cpu(ctx, image: torch.Tensor, **args) -> torch.Tensor:
    """One sample."""
    return _run([image], ctx.layout, lambda i: args)[0]


@SCHEMA.batch_kernel("gpu")
def rotate_gpu(ctx, images: Batch, *, args) -> Batch:
    """The batch in one grid_sample over its padded form."""
    layout = ctx.layout_of(images)
    n = len(images)
    if n == 0:
        return images
    hw = image_hw(images.shapes_array(), layout)
    mats, sizes = np.zeros((n, 2, 3)), np.zeros((n, 2), np.int64)
    angles, given, keep = args["angle"], args["size"], args.const("keep_size")
    for i in range(n):
        h, w = int(hw[i, 0]), int(hw[i, 1])
        size = as_list(given[i], 2, "size")
        if size:
            oh, ow = int(size[0]), int(size[1])
        elif keep:
            oh, ow = h, w
        else:
            oh, ow = rotated_size(h, w, float(angles[i]))
        mats[i] = rotation_matrix(h, w, oh, ow, float(angles[i]))
        sizes[i] = oh, ow
    return warp_batch(images, layout, mats, sizes, interp_name(args.const("interp_type")), args.const("fill_value"),
                      out_dtype(args.const("dtype"), images.dtype), "rotate")

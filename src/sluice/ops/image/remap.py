"""``fn.experimental.remap``: sample every output pixel at a position given per pixel, ``out(x, y) = in(mapx(x, y),
mapy(x, y))``, as DALI's operator (and OpenCV's ``remap``) does.

``mapx`` and ``mapy`` are float inputs of the output's size (``HW``, or ``HW1``); one per sample, or one per frame
of a sequence. ``pixel_origin="corner"`` (DALI's default) reads a map value ``v`` as the position ``v`` measured from
the top-left corner of the image (pixel ``i`` spans ``[i, i + 1)``); ``"center"`` measures from the top-left pixel's
centre, as OpenCV does. Outside the image the output is 0 (DALI's constant border). Interpolation: INTERP_NN,
INTERP_LINEAR, INTERP_CUBIC.

The CPU kernel is ``cv2.remap`` per sample; the GPU kernel samples the whole padded batch at once
(:func:`sluice.kernels.image2d.sample2d`, float32 positions where OpenCV quantises them to 1/32 pixel).
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.ops.image._padded import channels_first, image_layout, resampled
from sluice.ops.image.warp_affine import interp_name
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA"]

_LAYOUTS = ("HWC", "HW")

SCHEMA = OpSchema(
    "experimental.remap",
    sequences="frames",
    doc="""Remaps images: ``output(x, y) = input(mapx(x, y), mapy(x, y))``.

    ``mapx`` and ``mapy`` (float, the output's ``H x W``, one per sample or one per frame) give the source position
    of every output pixel; ``pixel_origin`` says whether positions are measured from the image's corner (DALI's
    default) or from the first pixel's centre (``"center"``, OpenCV). Outside the image the output is 0. Layout HWC
    (1 or 3 channels) or HW. Example::

        out = fn.experimental.remap(images, mapx, mapy, pixel_origin="center")
    """,
    inputs=3,
    input_names=["input", "mapx", "mapy"],
    devices=("cpu", "gpu"),
    requires={"cpu": ("cv2",)},
    args=[
        Arg("pixel_origin", str, "corner", "'corner' (positions from the image's corner) or 'center' (from the first "
            "pixel's centre, OpenCV).", choices=("corner", "center")),
        Arg("interp", types.DALIInterpType, types.INTERP_LINEAR, "INTERP_NN, INTERP_LINEAR or INTERP_CUBIC."),
    ],
)

_CV_INTERP = {"nn": 0, "linear": 1, "cubic": 2}


def _map(m: np.ndarray | torch.Tensor, name: str, shape=None) -> np.ndarray | torch.Tensor:
    if m.dim() == 3 and m.shape[2] == 1:
        m = m[..., 0]
    if m.dim() != 2:
        raise ValueError(f"experimental.remap: {name} must be an H x W (or H x W x 1) map, got shape {tuple(m.shape)}")
    if shape is not None and tuple(m.shape) != tuple(shape):
        raise ValueError(f"experimental.remap: mapx is {tuple(shape)} but mapy is {tuple(m.shape)}; they must agree")
    return m


@SCHEMA.sample_kernel("cpu")
def remap_cpu(ctx, image: torch.Tensor, mapx: torch.Tensor, mapy: torch.Tensor, *, pixel_origin, interp,
              **_) -> torch.Tensor:
    """One sample with ``cv2.remap`` (GIL released)."""
    import cv2

    image_layout(ctx.layout, image.dim(), "experimental.remap", _LAYOUTS)
    mx = _map(mapx, "mapx").to(torch.float32).numpy()
    my = _map(mapy, "mapy", mx.shape).to(torch.float32).numpy()
    if pixel_origin == "corner":
        mx, my = mx - 0.5, my - 0.5
    src = np.ascontiguousarray(image.numpy())
    out = cv2.remap(src, np.ascontiguousarray(mx), np.ascontiguousarray(my), _CV_INTERP[interp_name(interp)],
                    borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return torch.from_numpy(out.reshape(mx.shape + src.shape[2:]))


@SCHEMA.batch_kernel("gpu")
def remap_gpu(ctx: BatchContext, images: Batch, mapx: Batch, mapy: Batch, *, args: BatchArgs) -> Batch:
    """The whole padded batch sampled at its padded maps in one pass."""
    n = len(images)
    if not n:
        return images
    layout = ctx.layout_of(images)
    x, hw, layout = channels_first(images, layout, "experimental.remap", fill=None, supported=_LAYOUTS)
    shapes = []
    for i in range(n):  # shapes only: no data is read here
        sx, sy = tuple(mapx.shape()[i]), tuple(mapy.shape()[i])
        if sx[:2] != sy[:2] or len(sx) not in (2, 3) or (len(sx) == 3 and sx[2] != 1) or len(sy) != len(sx):
            raise ValueError(f"experimental.remap: maps of shapes {sx} and {sy} for sample {i}; they must be equal, "
                             "H x W or H x W x 1")
        shapes.append(sx[:2])
    out_hw = np.array(shapes, np.int64).reshape(n, 2)
    px, _ = mapx.padded(fill=None)
    py, _ = mapy.padded(fill=None)
    px, py = px.reshape(px.shape[:3]).to(x.device), py.reshape(py.shape[:3]).to(x.device)
    if args.const("pixel_origin") == "corner":
        px, py = px - 0.5, py - 0.5
    return resampled(x, hw, layout, px, py, out_hw, interp_name(args.const("interp")), "constant", 0.0)

"""``fn.water`` and ``fn.sphere``: DALI's displacement effects, each output pixel read from a displaced source
position.

Positions follow DALI's sampler: pixel ``i`` spans ``[i, i + 1)``, so the output pixel ``(h, w)`` has its centre
at ``(h + 0.5, w + 0.5)``. For that centre ``(yc, xc)``:

* ``water``: the source is ``(xc + ampl_x * sin(freq_x * yc + phase_x), yc + ampl_y * cos(freq_y * xc +
  phase_y))``, a wave along each axis;
* ``sphere``: with the image's middle ``(H / 2, W / 2)``, ``d = int(max(H / 2, W / 2))`` and the offset ``t =
  centre - middle``, the source is ``middle + t * |t| / d``: the centre stays, the rim is pulled in.

``interp_type`` INTERP_NN (DALI's default for these) takes the pixel the source position falls in, INTERP_LINEAR
blends the four nearest; sources outside the image read ``fill_value``. A sample whose ``mask`` is 0 passes
unchanged. Both kernels, CPU and GPU, are one padded-batch pass of :func:`sluice.kernels.image2d.sample2d`, every
sample with its own size and arguments.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sluice import types
from sluice.ops.image._padded import channels_first, output_grid, resampled
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["WATER", "SPHERE", "water_source", "sphere_source"]

_COMMON = [
    Arg("mask", int, 1, "1: apply the effect to this sample; 0: pass it unchanged.", per_sample=True, min=0, max=1),
    Arg("interp_type", types.DALIInterpType, types.INTERP_NN, "INTERP_NN or INTERP_LINEAR."),
    Arg("fill_value", float, 0.0, "Value of source positions outside the image."),
]

WATER = OpSchema(
    "water",
    doc="""Makes images look as seen through water: each pixel is read from a position moved by a sine wave along
    x (whose phase runs with y) and a cosine wave along y (whose phase runs with x). HWC images. Example::

        out = fn.water(images, ampl_x=5, freq_x=0.1)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("ampl_x", float, 10.0, "Amplitude of the wave in the x direction (pixels).", per_sample=True),
        Arg("ampl_y", float, 10.0, "Amplitude of the wave in the y direction (pixels).", per_sample=True),
        Arg("freq_x", float, 2.0 * math.pi / 128, "Frequency of the wave in the x direction (radians per pixel).",
            per_sample=True),
        Arg("freq_y", float, 2.0 * math.pi / 128, "Frequency of the wave in the y direction (radians per pixel).",
            per_sample=True),
        Arg("phase_x", float, 0.0, "Phase of the wave in the x direction (radians).", per_sample=True),
        Arg("phase_y", float, 0.0, "Phase of the wave in the y direction (radians).", per_sample=True),
    ] + _COMMON,
)

SPHERE = OpSchema(
    "sphere",
    doc="""A sphere effect: the image seen as if bulging out of a sphere; pixels at distance ``r`` from the middle
    read the source at distance ``r * r / d`` (``d``: half the longer side). HWC images. Example::

        out = fn.sphere(images, interp_type=types.INTERP_LINEAR)
    """,
    devices=("cpu", "gpu"),
    args=list(_COMMON),
)


def _per_sample(args: BatchArgs, names, device) -> list[torch.Tensor]:
    return [torch.tensor([float(v) for v in args[name]], dtype=torch.float64).to(device).view(-1, 1, 1)
            for name in names]


def water_source(xs: torch.Tensor, ys: torch.Tensor, ampl_x, ampl_y, freq_x, freq_y, phase_x,
                 phase_y) -> tuple[torch.Tensor, torch.Tensor]:
    """Water's source positions (OpenCV coordinates) for output pixels at OpenCV coordinates ``xs``, ``ys``."""
    xc, yc = xs + 0.5, ys + 0.5
    return (xc + ampl_x * torch.sin(freq_x * yc + phase_x) - 0.5,
            yc + ampl_y * torch.cos(freq_y * xc + phase_y) - 0.5)


def sphere_source(xs: torch.Tensor, ys: torch.Tensor, hw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sphere's source positions (OpenCV coordinates) for output pixels at ``xs``, ``ys`` of samples sized ``hw``
    (``(n, 2)`` float)."""
    mid_y, mid_x = hw[:, 0].view(-1, 1, 1) * 0.5, hw[:, 1].view(-1, 1, 1) * 0.5
    d = torch.trunc(torch.maximum(mid_x, mid_y)).clamp_min(1)
    tx, ty = xs + 0.5 - mid_x, ys + 0.5 - mid_y
    rad = torch.sqrt(tx * tx + ty * ty) / d
    return mid_x + rad * tx - 0.5, mid_y + rad * ty - 0.5


def _interp(args: BatchArgs, op: str) -> str:
    interp = args.const("interp_type")
    if interp not in (types.INTERP_NN, types.INTERP_LINEAR):
        raise ValueError(f"{op}: invalid interp_type ({interp!r}). Supported values are INTERP_NN, INTERP_LINEAR.")
    return "nn" if interp == types.INTERP_NN else "linear"


def _displaced(ctx: BatchContext, images: Batch, args: BatchArgs, op: str, source) -> Batch:
    if not len(images):
        return images
    layout = ctx.layout_of(images)
    x, hw, layout = channels_first(images, layout, op, fill=None, supported=("HWC",))
    interp = _interp(args, op)
    xs, ys = output_grid(hw, x.device)
    px, py = source(xs, ys)
    on = torch.tensor([int(v) != 0 for v in args["mask"]]).to(x.device).view(-1, 1, 1)
    px, py = torch.where(on, px, xs), torch.where(on, py, ys)
    return resampled(x, hw, layout, px, py, hw, interp, "constant", float(args.const("fill_value")))


@WATER.batch_kernel("cpu")
@WATER.batch_kernel("gpu")
def water(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The whole padded batch in one sampling pass, each sample with its own wave."""
    device = images.torch_device
    waves = _per_sample(args, ("ampl_x", "ampl_y", "freq_x", "freq_y", "phase_x", "phase_y"), device)
    return _displaced(ctx, images, args, "water", lambda xs, ys: water_source(xs, ys, *waves))


@SPHERE.batch_kernel("cpu")
@SPHERE.batch_kernel("gpu")
def sphere(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The whole padded batch in one sampling pass, each sample about its own middle."""
    if not len(images):
        return images
    shapes = images.shapes_array()
    hw = torch.from_numpy(np.ascontiguousarray(shapes[:, :2], np.float64)).to(images.torch_device)
    return _displaced(ctx, images, args, "sphere", lambda xs, ys: sphere_source(xs, ys, hw))

"""``fn.grid_mask``: GridMask augmentation (https://arxiv.org/abs/2001.04086), DALI's operator.

Pixels are zeroed in a grid of squares: in the grid's frame, ``(u, v) = R(angle) (x - shift_x, y - shift_y) /
tile`` (pixel ``(x, y)`` at its integer coordinates, ``R`` the rotation ``[[cos, -sin], [sin, cos]]``), a pixel is
black when both ``u - floor(u)`` and ``v - floor(v)`` are below ``ratio``: each ``tile`` x ``tile`` cell has a black
square of side ``ratio * tile`` in its corner. All arguments may vary per sample. The whole padded batch is masked
in one pass (float64 positions), on the CPU and the GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.ops.image._padded import channels_first, from_channels_first, output_grid
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "grid_keep"]

SCHEMA = OpSchema(
    "grid_mask",
    sequences="frames",
    doc="""GridMask: zeroes pixels in a grid of squares repeating every ``tile`` pixels in x and y, squares of side
    ``ratio * tile``, the grid rotated by ``angle`` (radians) about the origin and then moved by ``(shift_x,
    shift_y)``. Layouts HWC, CHW, HW. Example::

        out = fn.grid_mask(images, tile=40, ratio=0.4, angle=fn.random.uniform(range=(0, 3.14)))
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("tile", int, 100, "Side of one grid cell (black square plus spacing), in pixels.", per_sample=True, min=1),
        Arg("ratio", float, 0.5, "Side of the black square as a fraction of the tile.", per_sample=True, min=0,
            max=1),
        Arg("angle", float, 0.0, "Rotation of the grid, in radians.", per_sample=True),
        Arg("shift_x", float, 0.0, "x of the translation applied after the rotation.", per_sample=True),
        Arg("shift_y", float, 0.0, "y of the translation applied after the rotation.", per_sample=True),
    ],
)


def grid_keep(xs: torch.Tensor, ys: torch.Tensor, tile, ratio, angle, shift_x, shift_y) -> torch.Tensor:
    """Bool ``(n, H, W)``: which pixels (integer coordinates ``xs``, ``ys``) the grid keeps; the parameters are
    ``(n, 1, 1)`` float64 tensors."""
    c, s = torch.cos(angle), torch.sin(angle)
    dx, dy = xs - shift_x, ys - shift_y
    u = (dx * c - dy * s) / tile
    v = (dx * s + dy * c) / tile
    return (u - torch.floor(u) >= ratio) | (v - torch.floor(v) >= ratio)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def grid_mask(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The whole padded batch multiplied by its masks in one pass."""
    if not len(images):
        return images
    layout = ctx.layout_of(images)
    x, hw, layout = channels_first(images, layout, "grid_mask", fill=None)
    params = torch.from_numpy(np.array([[float(v) for v in args[name]] for name in
                                        ("tile", "ratio", "angle", "shift_x", "shift_y")], np.float64))
    params = params.to(x.device, non_blocking=True)
    xs, ys = output_grid(hw, x.device)
    keep = grid_keep(xs, ys, *(params[k].view(-1, 1, 1) for k in range(5)))
    y = torch.where(keep.unsqueeze(1), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return from_channels_first(y, hw, layout)

"""``fn.coord_flip``: mirrors normalised point coordinates around a centre, as DALI's ``fn.coord_flip``.

Input rows are points with 1, 2 or 3 coordinates, named by ``layout`` (``"x"``, ``"xy"``, ``"xyz"``, or any
order such as ``"yx"``). A flip of coordinate ``c`` maps it to ``2 * center_c - c`` (``1 - c`` for the default
centre 0.5).
"""

from __future__ import annotations

import torch

from sluice.ops.tensor._util import arg_tensor
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["coord_flip_kernel"]


def coord_flip_kernel(coords: torch.Tensor, layout: str, flip: dict[str, torch.Tensor],
                      center: dict[str, torch.Tensor]) -> torch.Tensor:
    """Flip the columns of ``coords`` (... x D, D = len(layout)) named in ``flip`` where its flag is non-zero.
    Flags and centres broadcast against ``coords[..., 0]``.

    Example::

        coord_flip_kernel(torch.tensor([[0.2, 0.3]]), "xy", {"x": torch.tensor(1.0)}, {"x": torch.tensor(0.5)})
        # tensor([[0.8, 0.3]])
    """
    if coords.shape[-1] != len(layout):
        raise ValueError(f"coord_flip: layout {layout!r} names {len(layout)} coordinates but the input has "
                         f"{coords.shape[-1]} per point (shape {tuple(coords.shape)})")
    cols = list(coords.to(torch.float32).unbind(-1))
    for k, name in enumerate(layout):
        if name in flip:
            f = flip[name].to(coords.device).bool()
            c = center[name].to(coords.device, torch.float32)
            cols[k] = torch.where(f, 2 * c - cols[k], cols[k])
    out = torch.stack(cols, -1)
    return out.to(coords.dtype) if coords.dtype.is_floating_point else out


def _layout(layout: str | None, coords: torch.Tensor) -> str:
    if layout:
        if sorted(set(layout)) != sorted(layout) or not set(layout) <= set("xyz"):
            raise ValueError(f"coord_flip: layout {layout!r} must be made of distinct letters x, y, z")
        return layout
    d = coords.shape[-1] if coords.dim() else 1
    if d not in (1, 2, 3):
        raise ValueError(f"coord_flip: points must have 1, 2 or 3 coordinates, got {d}")
    return "xyz"[:d]


SCHEMA = OpSchema(
    "coord_flip",
    doc="""Flips normalised coordinates (rows of x, y[, z]) around ``center_*`` where ``flip_*`` is set.

    Example::

        flip = fn.random.coin_flip()
        images = fn.flip(images, horizontal=flip)
        keypoints = fn.coord_flip(keypoints, layout="xy", flip_x=flip)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("layout", str, None, "Names of the coordinates, e.g. \"xy\"; default \"x\", \"xy\" or \"xyz\" by "
            "their count."),
        Arg("flip_x", int, 1, "Flip the x coordinate.", per_sample=True),
        Arg("flip_y", int, 0, "Flip the y coordinate.", per_sample=True),
        Arg("flip_z", int, 0, "Flip the z coordinate.", per_sample=True),
        Arg("center_x", float, 0.5, "Centre of the x flip.", per_sample=True),
        Arg("center_y", float, 0.5, "Centre of the y flip.", per_sample=True),
        Arg("center_z", float, 0.5, "Centre of the z flip.", per_sample=True),
    ],
    output_layout="",
)


@SCHEMA.sample_kernel("cpu")
def coord_flip_cpu(ctx, coords, *, layout, **a):
    lay = _layout(layout, coords)
    flip = {c: arg_tensor([a[f"flip_{c}"]], coords.device)[0] for c in lay}
    center = {c: arg_tensor([a[f"center_{c}"]], coords.device)[0] for c in lay}
    return coord_flip_kernel(coords, lay, flip, center)


@SCHEMA.batch_kernel("gpu")
def coord_flip_gpu(ctx, coords: Batch, *, args) -> Batch:
    samples = list(coords.samples)
    if not samples:
        return Batch([])
    lay = _layout(args.const("layout"), samples[0])
    d = len(lay)
    counts = [s.numel() // d for s in samples]
    dev = samples[0].device
    rep = torch.tensor(counts, device=dev)
    flip = {c: arg_tensor(args[f"flip_{c}"], dev).repeat_interleave(rep, output_size=sum(counts)) for c in lay}
    center = {c: arg_tensor(args[f"center_{c}"], dev).repeat_interleave(rep, output_size=sum(counts)) for c in lay}
    flat = torch.cat([s.reshape(-1, d) for s in samples])
    out = coord_flip_kernel(flat, lay, flip, center).split(counts)
    return Batch([o.reshape(s.shape) for o, s in zip(out, samples)])

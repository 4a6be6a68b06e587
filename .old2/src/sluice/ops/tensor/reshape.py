"""``fn.reshape`` and ``fn.transpose``: change how a sample's elements are viewed, without touching them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice.schema import Arg, OpSchema, SampleContext

RESHAPE = OpSchema(
    "reshape",
    doc="""Gives each sample a new shape with the same number of elements.

    ``shape`` may hold one -1 (inferred); ``rel_shape`` scales the input's extents instead. Example::

        flat = fn.reshape(images, shape=[-1])
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("shape", "int_list", None, "The output shape; one extent may be -1.", per_sample=True),
        Arg("rel_shape", "float_list", None, "The output shape relative to the input's.", per_sample=True),
        Arg("src_dims", "int_list", None, "Input dimensions to keep, in order (-1 inserts a unit dim)."),
        Arg("layout", str, None, "The output layout; default: the input's when the rank is kept, else none."),
    ],
    output_layout=lambda args, layouts: args["layout"] if args["layout"] is not None else "",
)


@RESHAPE.sample_kernel("cpu")
@RESHAPE.sample_kernel("gpu")
def reshape(ctx: SampleContext, data: torch.Tensor, *, shape: Any, rel_shape: Any, src_dims: Any,
            **_: Any) -> torch.Tensor:
    if src_dims is not None:
        new = [1 if d == -1 else data.shape[d] for d in src_dims]
        if int(np.prod(new)) != data.numel():
            raise ValueError(f"src_dims {src_dims} drop dimensions of size > 1 from shape {tuple(data.shape)}")
        return data.reshape(new)
    if shape is not None and rel_shape is not None:
        raise ValueError("give either 'shape' or 'rel_shape', not both")
    if rel_shape is not None:
        if len(rel_shape) != data.dim():
            raise ValueError(f"rel_shape has {len(rel_shape)} extents for a sample of {data.dim()} dimensions")
        shape = [int(round(r * s)) for r, s in zip(rel_shape, data.shape)]
    if shape is None:
        raise ValueError("missing 'shape' (or 'rel_shape' / 'src_dims')")
    shape = [int(s) for s in shape]
    known = int(np.prod([s for s in shape if s != -1]))
    if shape.count(-1) > 1:
        raise ValueError(f"shape {shape} has more than one -1")
    if (-1 in shape and (known == 0 or data.numel() % known)) or (-1 not in shape and known != data.numel()):
        raise ValueError(f"cannot reshape a sample of shape {tuple(data.shape)} ({data.numel()} elements) to {shape}")
    return data.reshape(shape)


def _transpose_layout(args: dict[str, Any], layouts: list[str]) -> str:
    if args["output_layout"]:
        return args["output_layout"]
    layout = layouts[0] if layouts else ""
    if args["transpose_layout"] and layout and len(layout) == len(args["perm"]):
        return "".join(layout[p] for p in args["perm"])
    return ""


TRANSPOSE = OpSchema(
    "transpose",
    doc="""Reorders the dimensions of each sample (a copy in the new order, as DALI makes).

    Example::

        chw = fn.transpose(hwc, perm=[2, 0, 1])
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("perm", "int_list", None, "The new order of the dimensions; default: reversed."),
        Arg("transpose_layout", bool, True, "Permute the layout name too."),
        Arg("output_layout", str, "", "Set the output layout explicitly."),
    ],
    output_layout=_transpose_layout,
)


@TRANSPOSE.sample_kernel("cpu")
@TRANSPOSE.sample_kernel("gpu")
def transpose(ctx: SampleContext, data: torch.Tensor, *, perm: Any, **_: Any) -> torch.Tensor:
    perm = list(range(data.dim()))[::-1] if perm is None else perm
    if sorted(perm) != list(range(data.dim())):
        raise ValueError(f"perm {perm} is not a permutation of the {data.dim()} dimensions of shape "
                         f"{tuple(data.shape)}")
    return data.permute(perm).contiguous()

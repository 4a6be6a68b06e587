"""``fn.reshape`` and ``fn.transpose``: change how a sample's elements are viewed, without touching them.

``fn.reshape`` follows DALI's shape rules, which it shares with ``fn.reinterpret`` (:mod:`.reinterpret`)."""

from __future__ import annotations

from typing import Any

import torch

from sluice.ops.tensor.reinterpret import SHAPE_ARGS, layout_arg, view_kernel
from sluice.schema import Arg, OpSchema, SampleContext

RESHAPE = OpSchema(
    "reshape",
    doc="""Gives each sample a new shape with the same number of elements; nothing is copied.

    ``shape`` may hold one negative extent (inferred); ``rel_shape`` scales the input's extents instead, and
    ``src_dims`` picks and orders the input's dimensions (-1 inserts an extent of 1). The second input, when given,
    holds each sample's shape. Example::

        flat = fn.reshape(images, shape=[-1])
    """,
    inputs=(1, 2),
    input_names=["data", "shape_input"],
    devices=("cpu", "gpu"),
    args=SHAPE_ARGS,
    output_layout=layout_arg,
)

RESHAPE.batch_kernel("cpu")(view_kernel("reshape"))
RESHAPE.batch_kernel("gpu")(view_kernel("reshape"))


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

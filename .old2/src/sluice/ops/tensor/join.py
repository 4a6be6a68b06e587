"""``fn.stack`` and ``fn.cat``: join several inputs sample by sample."""

from __future__ import annotations

from typing import Any

import torch

from sluice.schema import Arg, OpSchema, SampleContext


def _join_layout(new_axis: bool):
    def layout(args: dict[str, Any], layouts: list[str]) -> str:
        base = layouts[0] if layouts else ""
        if not new_axis:
            return base
        if not base or not args["axis_name"]:
            return ""
        axis = args["axis"] if args["axis"] >= 0 else len(base) + 1 + args["axis"]
        return base[:axis] + args["axis_name"] + base[axis:]
    return layout


STACK = OpSchema(
    "stack",
    doc="""Stacks the inputs along a new axis.

    Example::

        pair = fn.stack(left, right, axis=0)
    """,
    inputs=(1, 64),
    devices=("cpu", "gpu"),
    args=[Arg("axis", int, 0, "Where the new axis goes."), Arg("axis_name", str, "", "Layout name of the new axis.")],
    output_layout=_join_layout(True),
)

CAT = OpSchema(
    "cat",
    doc="""Concatenates the inputs along an existing axis.

    Example::

        both = fn.cat(a, b, axis=0)
    """,
    inputs=(1, 64),
    devices=("cpu", "gpu"),
    args=[Arg("axis", int, 0, "The axis to join along."), Arg("axis_name", str, "", "Name of that axis in the layout.")],
    output_layout=_join_layout(False),
)


def _check(name: str, tensors: tuple[torch.Tensor, ...], axis: int, concat: bool) -> None:
    ref = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        if t.dtype != ref.dtype:
            raise TypeError(f"{name}: input {i} is {t.dtype}, input 0 is {ref.dtype}; cast them to one type")
        if t.dim() != ref.dim():
            raise ValueError(f"{name}: input {i} has {t.dim()} dimensions, input 0 has {ref.dim()}")
        a = list(t.shape)
        b = list(ref.shape)
        if concat:
            a.pop(axis)
            b.pop(axis)
        if a != b:
            raise ValueError(f"{name}: input {i} has shape {tuple(t.shape)}, input 0 {tuple(ref.shape)}; they must "
                             f"match{' except along axis ' + str(axis) if concat else ''}")


@STACK.sample_kernel("cpu")
@STACK.sample_kernel("gpu")
def stack(ctx: SampleContext, *tensors: torch.Tensor, axis: int, **_: Any) -> torch.Tensor:
    _check("fn.stack", tensors, 0, False)
    if not -tensors[0].dim() - 1 <= axis <= tensors[0].dim():
        raise ValueError(f"fn.stack: axis {axis} is out of range for samples of {tensors[0].dim()} dimensions")
    return torch.stack(tensors, dim=axis)


@CAT.sample_kernel("cpu")
@CAT.sample_kernel("gpu")
def cat(ctx: SampleContext, *tensors: torch.Tensor, axis: int, **_: Any) -> torch.Tensor:
    if not -tensors[0].dim() <= axis < tensors[0].dim():
        raise ValueError(f"fn.cat: axis {axis} is out of range for samples of {tensors[0].dim()} dimensions")
    _check("fn.cat", tensors, axis % tensors[0].dim(), True)
    return torch.cat(tensors, dim=axis)

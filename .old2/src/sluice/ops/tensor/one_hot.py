"""``fn.one_hot``: integer labels to one-hot vectors along a new axis, as DALI's ``fn.one_hot``."""

from __future__ import annotations

import torch

from sluice import types
from sluice.ops.tensor._util import map_groups
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, OpSchema

__all__ = ["one_hot_kernel"]


def one_hot_kernel(labels: torch.Tensor, num_classes: int, axis: int = -1, on_value: float = 1.0,
                   off_value: float = 0.0, dtype: torch.dtype = torch.float32, batched: bool = False) -> torch.Tensor:
    """One-hot encode ``labels`` (any integer or float tensor holding whole numbers; any device).

    The new axis of size ``num_classes`` goes at ``axis`` of each sample (-1: last). A single-element sample
    (shape () or (1,)) gives a vector of ``num_classes``, as in DALI. Labels outside [0, num_classes) give rows of
    ``off_value``. ``batched``: ``labels`` is a stack whose dim 0 is the batch.

    Example::

        one_hot_kernel(torch.tensor([2]), 4)    # tensor([0., 0., 1., 0.])
    """
    if num_classes < 1:
        raise ValueError(f"one_hot: num_classes must be positive, got {num_classes}")
    lead = 1 if batched else 0
    sample_shape = labels.shape[lead:]
    if sample_shape.numel() == 1 and len(sample_shape) <= 1:
        labels = labels.reshape(labels.shape[:lead])
        sample_shape = torch.Size()
    nd = len(sample_shape)
    if not -1 <= axis <= nd:
        raise ValueError(f"one_hot: axis {axis} is out of range for {nd}-D labels (valid: -1..{nd})")
    ax = nd if axis < 0 else axis
    classes = torch.arange(num_classes, device=labels.device)
    hit = labels.to(torch.int64).unsqueeze(-1) == classes  # ... x num_classes
    out = torch.full(hit.shape, off_value, dtype=dtype, device=labels.device).masked_fill_(hit, on_value)
    return out.movedim(-1, lead + ax)


SCHEMA = OpSchema(
    "one_hot",
    doc="""Encodes integer labels as one-hot vectors: ``on_value`` at the label's index, ``off_value`` elsewhere.

    The new axis (``num_classes`` long) is inserted at ``axis`` (-1: appended). Scalar or single-element labels
    give a ``num_classes`` vector. Example::

        onehot = fn.one_hot(labels, num_classes=10)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("num_classes", int, REQUIRED, "Number of classes (length of the new axis).", min=1),
        Arg("axis", int, -1, "Where the new axis goes; -1 appends it."),
        Arg("axis_name", str, None, "Layout letter of the new axis."),
        Arg("on_value", float, 1.0, "Value at the label's index."),
        Arg("off_value", float, 0.0, "Value elsewhere."),
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type."),
    ],
    output_layout=lambda a, layouts: _out_layout(a, layouts[0] if layouts else ""),
)


def _out_layout(args: dict, layout: str) -> str:
    name = args.get("axis_name")
    if not name or not layout:
        return name if name and not layout else ""
    axis = args.get("axis", -1)
    pos = len(layout) if axis < 0 else axis
    return layout[:pos] + name + layout[pos:]


def _kwargs(a) -> dict:
    get = a.const if hasattr(a, "const") else a.__getitem__
    return dict(num_classes=get("num_classes"), axis=get("axis"), on_value=get("on_value"),
                off_value=get("off_value"), dtype=types.to_torch_dtype(get("dtype")))


@SCHEMA.sample_kernel("cpu")
def one_hot_cpu(ctx, labels, **args):
    return one_hot_kernel(labels, **_kwargs(args))


@SCHEMA.batch_kernel("gpu")
def one_hot_gpu(ctx, labels: Batch, *, args) -> Batch:
    kw = _kwargs(args)
    return Batch(map_groups(list(labels.samples), lambda s, _: one_hot_kernel(s, batched=True, **kw),
                            labels.dense))

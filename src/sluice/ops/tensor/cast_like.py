"""``fn.cast_like``: the first input converted to the element type of the second, as DALI's operator (the
conversion of ``fn.cast``: floats to integers round to nearest and saturate)."""

from __future__ import annotations

from sluice.ops.arithmetic import convert_saturate
from sluice.ops.tensor._views import flat_or_joined, like
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA"]

SCHEMA = OpSchema(
    "cast_like",
    doc="""Converts the first input to the type of the second (the shape and layout of the first are kept).

    Example::

        labels = fn.cast_like(labels, images)    # labels with the images' element type
    """,
    inputs=2,
    devices=("cpu", "gpu"),
    input_names=["input_0", "input_1"],
)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def cast_like(ctx: BatchContext, data: Batch, other: Batch, *, args: BatchArgs) -> Batch:
    dtype = other.dtype
    if dtype is None or data.dtype == dtype:
        return data
    if not len(data):
        return data
    return like(data, convert_saturate(flat_or_joined(data), dtype))  # one conversion over the whole batch

"""``fn.shapes``: the shape of each sample, as a 1-D tensor (on the host, ready to be an argument input)."""

from __future__ import annotations

import torch

from sluice import types
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

SHAPES = OpSchema(
    "shapes",
    doc="""The shape of each input sample as a 1-D tensor.

    For audio, ``fn.shapes(audio)[0]`` is each clip's length. Example::

        lengths = fn.shapes(audio, dtype=types.INT32)
    """,
    devices=("cpu", "gpu"),
    args=[Arg("dtype", types.DALIDataType, types.INT64, "Type of the output.")],
    output_layout="",
)


@SHAPES.batch_kernel("cpu")
@SHAPES.batch_kernel("gpu")
def shapes(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    dtype = types.to_torch_dtype(args.const("dtype"))
    rows = [torch.tensor(s.shape, dtype=dtype) for s in data]
    if rows and all(r.shape == rows[0].shape for r in rows):
        dense = torch.stack(rows)
        return Batch.from_dense(dense.to(ctx.device) if ctx.device.type == "cuda" else dense)
    return Batch([r.to(ctx.device) for r in rows])

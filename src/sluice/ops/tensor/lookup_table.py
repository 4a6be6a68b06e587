"""``fn.lookup_table``: integer inputs mapped through a table of ``keys`` -> ``values``, as DALI's operator.

The table has ``max(keys) + 1`` entries, ``default_value`` where no key sets one (the last of repeated keys wins);
inputs outside it give ``default_value``. The whole batch is one gather, on the CPU and the GPU alike.
"""

from __future__ import annotations

import torch

from sluice import types
from sluice.ops.arithmetic import convert_saturate
from sluice.ops.tensor._views import flat_or_joined, like
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "lookup"]

SCHEMA = OpSchema(
    "lookup_table",
    doc="""Maps integer inputs through a lookup table: ``out = values[keys.index(x)]`` for a key ``x``, else
    ``default_value``.

    Example::

        weights = fn.lookup_table(labels, keys=[0, 1, 2], values=[0.2, 1.0, 3.5], default_value=0.0)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("keys", "int_list", [], "The input values that the table maps.", min=0, max=65535),
        Arg("values", "float_list", [], "The output value of each key (as many as keys)."),
        Arg("default_value", float, 0.0, "The output for inputs that are not keys."),
        Arg("dtype", types.DALIDataType, types.FLOAT, "The output type."),
    ],
)


def lookup(x: torch.Tensor, keys: list[int], values: list[float], default_value: float,
           dtype: torch.dtype) -> torch.Tensor:
    """``x`` (integers, any shape and device) through the table of ``keys`` -> ``values``.

    Example::

        lookup(torch.tensor([1, 4, 0, 100]), [0, 2, 3, 4], [0.2, 0.4, 0.5, 0.6], 0.99, torch.float32)
        # tensor([0.9900, 0.6000, 0.2000, 0.9900])
    """
    if x.dtype.is_floating_point or x.dtype == torch.bool:
        raise TypeError(f"lookup_table: the input must hold integers, got {x.dtype}")
    if len(keys) != len(values):
        raise ValueError(f"lookup_table: {len(keys)} keys but {len(values)} values; give one value per key")
    size = max(keys) + 1 if keys else 0
    table = torch.full((size + 1,), float(default_value), dtype=torch.float64)
    for k, v in zip(keys, values):  # in order: the last of repeated keys wins
        table[k] = float(v)
    table = convert_saturate(table, dtype).to(x.device, non_blocking=True)
    # inputs outside [0, size) read the extra last entry, which holds the default
    index = x.to(torch.int64)
    index = torch.where((index >= 0) & (index < size), index, size)
    return table[index]


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def lookup_table(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    if not len(data):
        return Batch([], data.layout())
    out = lookup(flat_or_joined(data), args.const("keys"), args.const("values"), args.const("default_value"),
                 types.to_torch_dtype(args.const("dtype")))
    return like(data, out)

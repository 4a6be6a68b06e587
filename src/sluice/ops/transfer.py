"""Moving batches between host and GPU (``node.gpu()``, ``node.cpu()``), ``fn.copy`` and ``fn.constant``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice import types
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, Operator, OpSchema, OpSpec

TRANSFER = OpSchema(
    "_transfer",
    doc="Copies a batch to the GPU or to the host; made by DataNode.gpu() and DataNode.cpu().",
    devices=("gpu", "cpu"),
    args=[Arg("to", str, "gpu", "Where the batch goes.", choices=("gpu", "cpu"))],
    transfer=True,
)


@TRANSFER.batch_kernel("gpu")
def to_gpu(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    # One asynchronous copy per batch on the pipeline's stream (Batch.to): a dense or packed batch from its
    # page-locked buffer when an operator made one (no host copy), else from a page-locked copy; a list of samples
    # of different shapes through one staging buffer, split into views on the device.
    return data.to(ctx.device, non_blocking=True)


@TRANSFER.batch_kernel("cpu")
def to_cpu(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    return data.as_cpu()


COPY = OpSchema(
    "copy",
    doc="""Copies the data (a new buffer with the same contents).

    Example::

        b = fn.copy(a)
    """,
    devices=("cpu", "gpu"),
)


@COPY.batch_kernel("cpu")
@COPY.batch_kernel("gpu")
def copy(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    if data.dense is not None:
        return Batch.from_dense(data.dense.clone(), data.layout())
    return Batch([s.clone() for s in data], data.layout())


CONSTANT = OpSchema(
    "constant",
    doc="""A batch in which every sample is the same constant tensor.

    Give the values as ``fdata`` (floats) or ``idata`` (integers), or, as a sluice extension, ``value`` (any
    array). Example::

        mean = fn.constant(fdata=[0.485, 0.456, 0.406], shape=[3])
    """,
    inputs=0,
    devices=("cpu", "gpu"),
    args=[
        Arg("fdata", "float_list", None, "Float values."),
        Arg("idata", "int_list", None, "Integer values."),
        Arg("value", object, None, "Any array (sluice extension)."),
        Arg("shape", "int_list", None, "Shape of the constant; default: the shape of the data."),
        Arg("dtype", types.DALIDataType, None, "Type; default FLOAT for fdata, INT32 for idata."),
        Arg("layout", str, "", "Layout of the constant."),
    ],
    output_layout=lambda args, layouts: args["layout"] or "",
)


def _constant_array(args: dict[str, Any]) -> np.ndarray:
    given = [k for k in ("fdata", "idata", "value") if args[k] is not None]
    if len(given) != 1:
        raise ValueError(f"fn.constant needs exactly one of fdata, idata, value; got {given or 'none'}")
    key = given[0]
    if key == "fdata":
        arr = np.asarray(args["fdata"], np.float32)
    elif key == "idata":
        arr = np.asarray(args["idata"], np.int32)
    else:
        arr = np.asarray(args["value"])
    if args["dtype"] is not None:
        arr = arr.astype(types.to_numpy_dtype(args["dtype"]))
    if args["shape"] is not None:
        shape = tuple(args["shape"])
        if arr.size == 1:
            arr = np.broadcast_to(arr.reshape(()), shape)
        elif arr.size == int(np.prod(shape)):
            arr = arr.reshape(shape)
        else:
            raise ValueError(f"fn.constant: {arr.size} values do not fill shape {list(shape)}")
    return arr.copy() if arr.ndim == 0 else np.ascontiguousarray(arr)  # (ascontiguousarray makes 0-d arrays 1-d)


@CONSTANT.operator_class("cpu")
@CONSTANT.operator_class("gpu")
class ConstantOperator(Operator):
    """Makes its tensor once (on its device); every iteration returns views of it."""

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self.array = torch.from_numpy(_constant_array(spec.args))
        self._on: dict[torch.device, torch.Tensor] = {}

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        if ctx.device not in self._on:
            self._on[ctx.device] = self.array.to(ctx.device)
        arr = self._on[ctx.device]
        return Batch.from_dense(arr.unsqueeze(0).expand(ctx.batch_size, *arr.shape))

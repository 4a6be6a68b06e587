"""``fn.preemphasis_filter``: ``y[t] = x[t] - coeff * x[t - 1]``."""

from __future__ import annotations

import torch

from sluice import types
from sluice.kernels.audio.batching import make_batch, pad_stack
from sluice.ops.tensor._util import convert_saturate
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, SampleContext

__all__ = ["SCHEMA", "preemphasis"]

SCHEMA = OpSchema(
    "preemphasis_filter",
    doc="""Applies a preemphasis filter along the first (time) axis::

        Y[t] = X[t] - coeff * X[t - 1]     for t > 0
        Y[0] = X[0] - coeff * X_border

    with ``X_border`` 0 (``border="zero"``), ``X[0]`` (``"clamp"``) or ``X[1]`` (``"reflect"``). Integer
    outputs are rounded and saturated. On the GPU the whole batch (with per-sample coefficients) is filtered at
    once. Example::

        audio = fn.preemphasis_filter(audio, preemph_coeff=0.97)
    """,
    inputs=1,
    outputs=1,
    devices=("cpu", "gpu"),
    args=[
        Arg("border", str, "clamp", "Border value policy: 'zero', 'clamp' or 'reflect'.",
            choices=("zero", "clamp", "reflect")),
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type."),
        Arg("preemph_coeff", float, 0.97, "Preemphasis coefficient.", per_sample=True),
    ],
)


def preemphasis(x: torch.Tensor, coeff: torch.Tensor | float, border: str) -> torch.Tensor:
    """Filter ``x`` along axis 1 (axis 0 is the batch); ``coeff`` is a number or one value per row."""
    xf = x if x.dtype == torch.float64 else x.float()
    if xf.shape[1] == 0:
        return xf.clone()
    c = torch.as_tensor(coeff, dtype=xf.dtype, device=xf.device)
    if c.dim():
        c = c.view((-1,) + (1,) * (xf.dim() - 1))
    if border == "zero":
        first = torch.zeros_like(xf[:, :1])
    elif border == "reflect" and xf.shape[1] > 1:
        first = xf[:, 1:2]
    else:  # clamp (and reflect of a one-sample signal)
        first = xf[:, :1]
    prev = torch.cat([first, xf[:, :-1]], dim=1)
    return xf - c * prev


@SCHEMA.sample_kernel("cpu")
def preemphasis_cpu(ctx: SampleContext, x: torch.Tensor, *, border, dtype, preemph_coeff, **_) -> torch.Tensor:
    if x.dim() == 0:
        raise ValueError("preemphasis_filter: expected a signal, got a scalar")
    y = preemphasis(x[None], float(preemph_coeff), border)[0]
    return convert_saturate(y, types.to_torch_dtype(dtype))


@SCHEMA.batch_kernel("gpu")
def preemphasis_gpu(ctx: BatchContext, x: Batch, *, args: BatchArgs) -> Batch:
    if not len(x):
        return Batch([], x.layout())
    border, dtype = args.const("border"), args.const("dtype")
    dense, shapes = pad_stack(x)
    if dense.dim() < 2:
        raise ValueError("preemphasis_filter: expected signals, got scalars")
    coeff = torch.tensor([float(c) for c in args["preemph_coeff"]], dtype=torch.float64)
    y = preemphasis(dense, coeff.to(dense.device), border)
    return make_batch(convert_saturate(y, types.to_torch_dtype(dtype)), shapes, x.layout())

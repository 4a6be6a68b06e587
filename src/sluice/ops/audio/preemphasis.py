"""``fn.preemphasis_filter``: ``y[t] = x[t] - coeff * x[t - 1]``."""

from __future__ import annotations

import numpy as np
import torch

from sluice import env, types
from sluice.kernels.audio.spectral import triton_audio
from sluice.ops.tensor._util import convert_saturate
from sluice.pipeline import ragged
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
    once, over its padded form. Example::

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


def preemphasis(x: torch.Tensor, coeff: torch.Tensor | float, border: str,
                lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Filter ``x`` along axis 1 (axis 0 is the batch); ``coeff`` is a number or one value per row. ``lengths``:
    each row's signal length, for a padded batch (only the reflect border of a one-sample signal reads it)."""
    xf = x if x.dtype == torch.float64 else x.float()
    if xf.shape[1] == 0:
        return xf.clone()
    if isinstance(coeff, torch.Tensor):      # one per row (a number stays a number: no copy to the device)
        c = coeff.to(dtype=xf.dtype, device=xf.device)
        c = c.view((-1,) + (1,) * (xf.dim() - 1)) if c.dim() else c
    else:
        c = float(coeff)
    if border == "zero":
        first = torch.zeros_like(xf[:, :1])
    elif border == "reflect" and xf.shape[1] > 1:
        first = xf[:, 1:2]
        if lengths is not None:   # a one-sample signal reflects onto itself (clamp)
            one = (lengths == 1).view((-1,) + (1,) * (xf.dim() - 1))
            first = torch.where(one, xf[:, :1], first)
    else:  # clamp (and reflect of a one-sample signal)
        first = xf[:, :1]
    prev = torch.cat([first, xf[:, :-1]], dim=1)
    if isinstance(c, float):
        return torch.sub(xf, prev, alpha=c)      # x - c * prev in one launch
    return xf - c * prev


@SCHEMA.sample_kernel("cpu")
def preemphasis_cpu(ctx: SampleContext, x: torch.Tensor, *, border, dtype, preemph_coeff, **_) -> torch.Tensor:
    if x.dim() == 0:
        raise ValueError("preemphasis_filter: expected a signal, got a scalar")
    y = preemphasis(x[None], float(preemph_coeff), border)[0]
    return convert_saturate(y, types.to_torch_dtype(dtype))


@SCHEMA.batch_kernel("gpu")
def preemphasis_gpu(ctx: BatchContext, x: Batch, *, args: BatchArgs) -> Batch:
    """The whole batch at once over its padded form (per-sample coefficients as a tensor)."""
    if not len(x):
        return Batch([], x.layout())
    border, dtype = args.const("border"), args.const("dtype")
    fast = _preemphasis_rows(x, args, border)
    if fast is not None:
        y, shapes = fast
        return Batch.from_padded(convert_saturate(y, types.to_torch_dtype(dtype)), shapes, x.layout(), fill=0.0)
    padded, shapes = x.padded(fill=None)
    if padded.dim() < 2:
        raise ValueError("preemphasis_filter: expected signals, got scalars")
    if args.is_const("preemph_coeff"):
        coeff: torch.Tensor | float = float(args.const("preemph_coeff"))
    else:
        coeff = ragged.host_to_device(np.asarray(args["preemph_coeff"], np.float64), padded.device)
    lengths = ragged.host_to_device(shapes[:, 0], padded.device) if border == "reflect" else None
    y = preemphasis(padded, coeff, border, lengths)
    return Batch.from_padded(convert_saturate(y, types.to_torch_dtype(dtype)), shapes, x.layout())


#: Sample types the Triton kernel reads (it computes in float32, as the torch path does for these types).
_KERNEL_TYPES = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.int16, torch.int32, torch.uint8,
                           torch.int8})


def _preemphasis_rows(x: Batch, args: BatchArgs, border: str) -> tuple[torch.Tensor, np.ndarray] | None:
    """The filtered batch ``((n, longest) float32, shapes)`` by one Triton launch over the signals where they lie
    (:mod:`sluice.kernels.audio._triton_audio`); None where the torch path runs instead (no Triton, not a CUDA
    batch of 1-D signals of a type the kernel reads)."""
    if x.torch_device.type != "cuda" or env.eager() or triton_audio() is None:
        return None
    rows = x.signal_rows()
    if rows is None or rows[0].dtype not in _KERNEL_TYPES:
        return None
    flat, starts, lengths = rows
    n, extent, dev = len(x), int(lengths.max()), flat.device
    out = torch.empty((n, extent), dtype=torch.float32, device=dev)
    if extent == 0:
        return out, lengths[:, None]
    k = triton_audio()
    if args.is_const("preemph_coeff"):
        coeffs, coeff, per_sample = out, float(args.const("preemph_coeff")), False   # coeffs unused
    else:
        coeffs = ragged.host_to_device(np.asarray(args["preemph_coeff"], np.float32), dev)
        coeff, per_sample = 0.0, True
    table = ragged.row_table(starts, lengths, dev)
    k.preemphasis_kernel[(-(-extent // k.BLOCK), n)](flat, table, coeffs, out, extent, coeff, PER_SAMPLE=per_sample,
                                                     BORDER=k.BORDERS[border], BLOCK=k.BLOCK)
    return out, lengths[:, None]

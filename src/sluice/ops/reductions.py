"""``fn.reductions.{min, max, sum, mean, mean_square, rms, std_dev, variance}``: reductions of each sample along
some of its axes, as DALI's operators of those names.

``axes`` (negative counting from the back) or ``axis_names`` (letters of the layout) pick the axes; with neither,
every axis is reduced; an empty list reduces none (each element on its own; ``std_dev`` and ``variance`` then give
0, as DALI does). ``keep_dims`` keeps the reduced axes as extents of 1. ``std_dev`` and ``variance`` take the means
as a second input, one per output element (or one per sample), and divide by ``N - ddof``.

Output types follow DALI: ``sum`` of 8-32-bit integers gives 64-bit integers of the same signedness, ``mean``,
``mean_square``, ``rms``, ``std_dev`` and ``variance`` give float32, ``min`` and ``max`` the input's type; ``dtype``
overrides it where DALI has that argument. The kernels (:mod:`sluice.kernels.reduce`) cover the whole batch at once,
ragged or not, on the CPU and the GPU alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice import types
from sluice.kernels.reduce import reduce_dense, reduce_flat, reduced_shape
from sluice.ops.arithmetic import convert_saturate
from sluice.ops.tensor._views import flat_or_joined
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMAS", "reduction_axes"]

_DOCS = {
    "min": "the smallest element",
    "max": "the largest element",
    "sum": "the sum of the elements",
    "mean": "the mean of the elements",
    "mean_square": "the mean of the squares of the elements",
    "rms": "the root mean square of the elements",
    "std_dev": "the standard deviation of the elements around the given means",
    "variance": "the variance of the elements around the given means",
}
_WITH_DTYPE = ("sum", "mean", "mean_square", "rms")
_CENTRED = ("std_dev", "variance")
_WIDE_SUM = {torch.uint8: torch.uint64, torch.uint16: torch.uint64, torch.uint32: torch.uint64,
             torch.int8: torch.int64, torch.int16: torch.int64, torch.int32: torch.int64}


def reduction_axes(ndim: int, layout: str, axes: list[int] | None, axis_names: str | None, op: str) -> list[int]:
    """DALI's axes rule: ``axes`` or ``axis_names`` (not both); neither: all axes; an empty one: none."""
    if axes is not None and axis_names is not None:
        raise ValueError(f"{op}: give either axes or axis_names, not both")
    if axis_names is not None:
        if axis_names and not layout:
            raise ValueError(f"{op}: axis_names={axis_names!r} needs an input with a layout; the input has none")
        missing = [c for c in axis_names if c not in layout]
        if missing:
            raise ValueError(f"{op}: axis names {missing} are not in the input layout {layout!r}")
        out = [layout.index(c) for c in axis_names]
    elif axes is not None:
        bad = [a for a in axes if not -ndim <= a < ndim]
        if bad:
            raise ValueError(f"{op}: axes {bad} are out of range for {ndim}-D samples (valid: {-ndim}..{ndim - 1})")
        out = [a % ndim for a in axes]
    else:
        out = list(range(ndim))
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: the axes {axes if axis_names is None else axis_names!r} name an axis twice")
    return sorted(out)


def _out_layout(args: dict[str, Any], layouts: list[str]) -> str:
    layout = layouts[0] if layouts else ""
    if not layout or args["keep_dims"]:
        return layout
    try:
        axes = reduction_axes(len(layout), layout, args["axes"], args["axis_names"], "reductions")
    except ValueError:
        return ""  # the kernel reports it
    return "".join(c for d, c in enumerate(layout) if d not in axes)


def _out_dtype(kind: str, in_dtype: torch.dtype, dtype_arg: Any) -> torch.dtype:
    if dtype_arg is not None:
        return types.to_torch_dtype(dtype_arg)
    if kind in ("min", "max"):
        return in_dtype
    if kind == "sum":
        return _WIDE_SUM.get(in_dtype, in_dtype)
    return torch.float32


def _convert(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if x.dtype == dtype:
        return x
    if not x.dtype.is_floating_point and not dtype.is_floating_point and dtype != torch.bool:
        return x.to(dtype)  # an integer sum in a narrower integer type wraps, as accumulating in that type does
    return convert_saturate(x, dtype)


def _means(op: str, mean: Batch, out_shapes: list[tuple[int, ...]], device: torch.device) -> torch.Tensor:
    """The means, float64, one per output element back to back: the mean input holds one per output element of
    each sample, or one per sample."""
    if len(mean) != len(out_shapes):
        raise ValueError(f"{op}: the mean input has {len(mean)} samples for a batch of {len(out_shapes)}")
    sizes = [int(np.prod(s)) if s else 1 for s in out_shapes]
    counts = [int(np.prod(s)) if s else 1 for s in mean.shape()]
    for i, (c, size) in enumerate(zip(counts, sizes)):
        if c not in (size, 1):
            raise ValueError(f"{op}: sample {i}: the mean has {c} values for an output of shape {out_shapes[i]} "
                             f"({size} values); give one mean per output element or one per sample")
    values = flat_or_joined(mean).to(device, torch.float64)
    if counts == sizes:
        return values
    if all(c == 1 for c in counts):
        return values.repeat_interleave(torch.tensor(sizes, device=device), output_size=sum(sizes))
    parts = values.split(counts)
    return torch.cat([p.expand(size) for p, size in zip(parts, sizes)])


def _make(kind: str) -> OpSchema:
    centred = kind in _CENTRED
    args = [
        Arg("axes", "int_list", None, "The axes to reduce (negative counts from the back); default: all; an empty "
            "list reduces none."),
        Arg("axis_names", str, None, "Layout letters of the axes to reduce (instead of axes)."),
        Arg("keep_dims", bool, False, "Keep the reduced axes as extents of 1."),
    ]
    if kind in _WITH_DTYPE:
        args.append(Arg("dtype", types.DALIDataType, None, "The output type, also the type the result is "
                        "accumulated in; default: as DALI (64-bit integers for sums of integers, float32 for means)."))
    if centred:
        args.append(Arg("ddof", int, 0, "Delta degrees of freedom: the divisor is N - ddof."))
    example = (f"mean = fn.reductions.mean(images, axis_names=\"HW\")\n"
               f"            std = fn.reductions.{kind}(images, mean, axis_names=\"HW\")" if centred else
               f"out = fn.reductions.{kind}(images, axis_names=\"HW\", keep_dims=True)")
    schema = OpSchema(
        f"reductions.{kind}",
        doc=f"""Reduces each sample along ``axes`` (or ``axis_names``) to {_DOCS[kind]}.

        Example::

            {example}
        """,
        inputs=2 if centred else 1,
        input_names=["data", "mean"] if centred else ["input"],
        devices=("cpu", "gpu"),
        args=args,
        output_layout=_out_layout,
    )

    def kernel(ctx: BatchContext, data: Batch, mean: Batch | None = None, *, args: BatchArgs) -> Batch:
        op = f"reductions.{kind}"
        in_layout = ctx.layout_of(data)
        shapes = data.shape()
        ndims = {len(s) for s in shapes}
        if len(ndims) > 1:
            raise ValueError(f"{op}: the samples differ in rank ({sorted(ndims)})")
        ndim = ndims.pop() if ndims else len(in_layout)
        axes = reduction_axes(ndim, in_layout, args.const("axes"), args.const("axis_names"), op)
        keep = args.const("keep_dims")
        layout = _out_layout({"keep_dims": keep, "axes": axes, "axis_names": None}, [in_layout])
        if not len(data):
            return Batch([], layout)
        out_dtype = _out_dtype(kind, data.dtype, args.const("dtype") if kind in _WITH_DTYPE else None)
        ddof = args.const("ddof") if centred else 0
        out_shapes = [reduced_shape(s, axes, keep) for s in shapes]
        means = _means(op, mean, [reduced_shape(s, axes, True) for s in shapes], data.torch_device) \
            if centred else None
        if data.dense is not None:
            m = means.view(len(shapes), *reduced_shape(shapes[0], axes, True)) if centred else None
            out = reduce_dense(data.dense, axes, kind, keep_dims=keep, mean=m, ddof=ddof)
            return Batch.from_dense(_convert(out, out_dtype), layout)
        flat, flat_shapes = reduce_flat(flat_or_joined(data), np.array(shapes, np.int64).reshape(len(shapes), -1),
                                        axes, kind, keep_dims=keep, mean=means,
                                        ddof=ddof)
        flat = _convert(flat, out_dtype)
        if all(s == out_shapes[0] for s in out_shapes):
            return Batch.from_dense(flat.view(len(out_shapes), *out_shapes[0]), layout)
        return Batch.from_packed(flat, flat_shapes, layout)

    kernel.__name__ = kernel.__qualname__ = kind
    schema.batch_kernel("cpu")(kernel)
    schema.batch_kernel("gpu")(kernel)
    return schema


SCHEMAS = {kind: _make(kind) for kind in ("min", "max", "sum", "mean", "mean_square", "rms", "std_dev", "variance")}

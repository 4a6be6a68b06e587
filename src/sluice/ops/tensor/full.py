"""``fn.zeros``, ``fn.ones``, ``fn.full`` and their ``*_like`` forms: new samples filled with one value (or a
broadcast fill tensor), as DALI's operators of those names.

A batch whose samples share one shape is one dense tensor made by one fill (or one broadcast copy); a ragged batch
one packed buffer: one launch sequence per batch on the GPU. Values are converted to the output type as DALI's
``ConvertSat`` does (rounded, clamped to the type's range).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from sluice import types
from sluice.errors import SampleError
from sluice.ops.arithmetic import convert_saturate
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["ZEROS", "ONES", "FULL", "ZEROS_LIKE", "ONES_LIKE", "FULL_LIKE", "filled"]

_SHAPE = Arg("shape", "int_list", None, "Shape of each output sample; default: a scalar.", per_sample=True)
_LAYOUT = Arg("layout", str, None, "Layout of the output; it must have one letter per dimension.")


def _batch(shapes: list[tuple[int, ...]], make_flat: Callable[[int], torch.Tensor], layout: str) -> Batch:
    """A batch of ``shapes`` over ``make_flat(total)`` (a 1-D tensor of all elements): dense or packed."""
    n = len(shapes)
    if not n:
        return Batch([], layout)
    total = sum(math.prod(s) for s in shapes)
    flat = make_flat(total)
    if all(s == shapes[0] for s in shapes):
        return Batch.from_dense(flat.view(n, *shapes[0]), layout)
    return Batch.from_packed(flat, np.array(shapes, np.int64).reshape(n, -1), layout)


def filled(shapes: Sequence[tuple[int, ...]], value: float, dtype: torch.dtype, device: torch.device,
           layout: str = "") -> Batch:
    """A batch of samples of ``shapes`` holding ``value`` (converted with saturation to ``dtype``) on ``device``.

    Example::

        filled([(2, 3), (4,)], 1, torch.int32, torch.device("cpu")).shape()    # [(2, 3), (4,)]
    """
    scalar = convert_saturate(torch.tensor(float(value), dtype=torch.float64), dtype).item()
    return _batch([tuple(s) for s in shapes], lambda total: torch.full((total,), scalar, dtype=dtype, device=device),
                  layout)


def _check_layout(op: str, layout: str | None, shapes: list[tuple[int, ...]]) -> str:
    if not layout:
        return ""
    for s in shapes:
        if len(s) != len(layout):
            raise ValueError(f"{op}: layout {layout!r} does not fit output samples of shape {s}")
    return layout


def _shapes(ctx: BatchContext, args: BatchArgs) -> list[tuple[int, ...]]:
    out = []
    for v in args["shape"]:
        shape = () if v is None else tuple(int(d) for d in np.asarray(v).reshape(-1))
        if any(d < 0 for d in shape):
            raise ValueError(f"shape {list(shape)} has a negative extent")
        out.append(shape)
    return out


def _constant_schema(name: str, value: int) -> OpSchema:
    word = "zeros" if value == 0 else "ones"
    schema = OpSchema(
        name,
        doc=f"""New samples of ``shape`` and ``dtype`` filled with {word}.

        Example::

            {word} = fn.{name}(shape=[2, 3], dtype=types.FLOAT)
        """,
        inputs=0,
        devices=("cpu", "gpu"),
        args=[_SHAPE, Arg("dtype", types.DALIDataType, types.INT32, "Output type."), _LAYOUT],
        output_layout=lambda a, layouts: a["layout"] or "",
    )

    def kernel(ctx: BatchContext, *, args: BatchArgs) -> Batch:
        shapes = _shapes(ctx, args)
        layout = _check_layout(name, args.const("layout"), shapes)
        return filled(shapes, value, types.to_torch_dtype(args.const("dtype")), ctx.device, layout)

    kernel.__name__ = kernel.__qualname__ = name
    schema.batch_kernel("cpu")(kernel)
    schema.batch_kernel("gpu")(kernel)
    return schema


def _constant_like_schema(name: str, value: int) -> OpSchema:
    word = "zeros" if value == 0 else "ones"
    schema = OpSchema(
        name,
        doc=f"""New samples of the shape, type and layout of ``data_like``, filled with {word}.

        Example::

            mask = fn.{name}(images, dtype=types.UINT8)
        """,
        devices=("cpu", "gpu"),
        input_names=["data_like"],
        args=[Arg("dtype", types.DALIDataType, None, "Output type; default: the type of data_like.")],
    )

    def kernel(ctx: BatchContext, like: Batch, *, args: BatchArgs) -> Batch:
        dtype_arg = args.const("dtype")
        dtype = types.to_torch_dtype(dtype_arg) if dtype_arg is not None else (like.dtype or torch.int32)
        return filled(like.shape(), value, dtype, ctx.device, ctx.layout_of(like))

    kernel.__name__ = kernel.__qualname__ = name
    schema.batch_kernel("cpu")(kernel)
    schema.batch_kernel("gpu")(kernel)
    return schema


ZEROS = _constant_schema("zeros", 0)
ONES = _constant_schema("ones", 1)
ZEROS_LIKE = _constant_like_schema("zeros_like", 0)
ONES_LIKE = _constant_like_schema("ones_like", 1)


# ------------------------------------------------------------------------------------------------------------
def _broadcast_fill(op: str, ctx: BatchContext, fill: Batch, shapes: list[tuple[int, ...]], dtype: torch.dtype,
                    layout: str) -> Batch:
    """Sample ``i`` is ``fill[i]`` broadcast (NumPy's rules) to ``shapes[i]`` and converted to ``dtype``."""
    fill = fill.to(ctx.device) if fill.torch_device != ctx.device else fill
    n = len(shapes)
    fshapes = fill.shape()
    if len(fshapes) != n:
        raise ValueError(f"{op}: fill_value has {len(fshapes)} samples for a batch of {n}")
    for i, (fs, s) in enumerate(zip(fshapes, shapes)):
        try:
            np.broadcast_shapes(fs, s)
            ok = len(fs) <= len(s) and np.broadcast_shapes(fs, s) == tuple(s)
        except ValueError:
            ok = False
        if not ok:
            raise SampleError(i, ctx.source_info[i] if ctx.source_info else "",
                              ValueError(f"{op}: a fill_value of shape {fs} cannot be broadcast to the output shape "
                                         f"{s}"))
    if not n:
        return Batch([], layout)
    same_out = all(s == shapes[0] for s in shapes)
    if all(math.prod(fs) == 1 for fs in fshapes):
        values = convert_saturate(_joined(fill).reshape(n), dtype)  # one value per sample
        if same_out:
            return Batch.from_dense(values.view(n, *[1] * len(shapes[0])).expand(n, *shapes[0]).contiguous(), layout)
        counts = torch.tensor([math.prod(s) for s in shapes], device=values.device)
        return _batch(shapes, lambda total: values.repeat_interleave(counts, output_size=total), layout)
    if same_out and all(fs == fshapes[0] for fs in fshapes):
        f = convert_saturate(_joined(fill).view(n, *fshapes[0]), dtype)
        f = f.view(n, *[1] * (len(shapes[0]) - len(fshapes[0])), *fshapes[0])
        return Batch.from_dense(f.expand(n, *shapes[0]).contiguous(), layout)
    samples = [convert_saturate(f, dtype).broadcast_to(s) for f, s in zip(fill.samples, shapes)]
    return _batch(shapes, lambda total: torch.cat([x.reshape(-1) for x in samples]), layout)


def _joined(batch: Batch) -> torch.Tensor:
    if batch.dense is not None:
        return batch.dense.reshape(-1)
    return torch.cat([s.reshape(-1) for s in batch.samples])


FULL = OpSchema(
    "full",
    doc="""New samples of ``shape`` filled with ``fill_value`` (broadcast by NumPy's rules: a scalar fills the
    whole sample, a ``(3,)`` fill gives every pixel of an HWC sample those 3 values). The output has the type of
    ``fill_value``; without ``shape`` it has the shape of ``fill_value``.

    Example::

        grey = fn.full(np.array([128, 128, 128], np.uint8), shape=[224, 224, 3], layout="HWC")
    """,
    devices=("cpu", "gpu"),
    input_names=["fill_value"],
    args=[_SHAPE, _LAYOUT],
    output_layout=lambda a, layouts: a["layout"] or "",
)


@FULL.batch_kernel("cpu")
@FULL.batch_kernel("gpu")
def full(ctx: BatchContext, fill: Batch, *, args: BatchArgs) -> Batch:
    fshapes = fill.shape()
    shapes = [fs if v is None else s for v, s, fs in zip(args["shape"], _shapes(ctx, args), fshapes)]
    layout = _check_layout("full", args.const("layout"), shapes)
    return _broadcast_fill("full", ctx, fill, shapes, fill.dtype or torch.float32, layout)


FULL_LIKE = OpSchema(
    "full_like",
    doc="""New samples of the shape, type and layout of ``data_like``, filled with ``fill_value`` (broadcast by
    NumPy's rules and converted to the type of ``data_like``).

    Example::

        grey = fn.full_like(images, np.array([128, 128, 128], np.uint8))
    """,
    inputs=2,
    devices=("cpu", "gpu"),
    input_names=["data_like", "fill_value"],
)


@FULL_LIKE.batch_kernel("cpu")
@FULL_LIKE.batch_kernel("gpu")
def full_like(ctx: BatchContext, like: Batch, fill: Batch, *, args: BatchArgs) -> Batch:
    layout = ctx.layout_of(like)
    return _broadcast_fill("full_like", ctx, fill, like.shape(), like.dtype or fill.dtype or torch.float32, layout)

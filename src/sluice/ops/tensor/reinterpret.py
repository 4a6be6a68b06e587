"""``fn.reinterpret``: the same bytes under another element type, shape and/or layout, as DALI's operator (which
shares its shape rules with ``fn.reshape``; :func:`reshaped_shape` serves both, :func:`view_kernel` is the kernel of
both).

The output is a view of the input's memory: a dense or packed batch stays one, on the CPU and the GPU alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sluice import types
from sluice.errors import SampleError
from sluice.ops.tensor._views import viewed
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["REINTERPRET", "SHAPE_ARGS", "reshaped_shape", "layout_arg", "view_kernel", "view_layout"]


def _round(x: float) -> int:
    """DALI's round_int: to nearest, halves away from zero."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def reshaped_shape(in_shape: Sequence[int], in_size: int, out_size: int, *, shape: Sequence[int] | None = None,
                   rel_shape: Sequence[float] | None = None, src_dims: Sequence[int] | None = None) -> tuple[int, ...]:
    """The output shape of one sample under DALI's reshape rules.

    ``shape``: the new extents, one of them may be negative (inferred). ``rel_shape``: extents relative to the
    input's (``out[i] = round(in[src_dims[i]] * rel_shape[i])``, or ``in[i]`` without ``src_dims``); one may be
    negative (inferred), and a negative last entry may add a dimension. ``src_dims`` alone: the input's dimensions in
    a new order, -1 inserting an extent of 1. With none of them the shape is kept, and a change of element size
    (``in_size`` to ``out_size`` bytes) scales the innermost extent. The output must hold the input's bytes.

    Example::

        reshaped_shape((480, 640, 3), 1, 1, rel_shape=[0.5, -1])    # (240, 3840)
    """
    ndim = len(in_shape)
    if shape is not None and rel_shape is not None:
        raise ValueError("give either 'shape' or 'rel_shape', not both")
    if src_dims is not None:
        bad = [d for d in src_dims if not -1 <= d < ndim]
        if bad:
            raise ValueError(f"src_dims {list(src_dims)}: {bad} out of range; use dimension indices 0..{ndim - 1} "
                             "or -1 to insert a dimension")
        if shape is not None:
            raise ValueError("'src_dims' combines with 'rel_shape' only, not with 'shape'")
    in_bytes = math.prod(in_shape) * in_size
    if shape is None and rel_shape is None:
        if src_dims is not None:
            out = [1 if d == -1 else in_shape[d] for d in src_dims]
            if math.prod(out) != math.prod(in_shape):
                raise ValueError(f"src_dims {list(src_dims)} drop dimensions of extent > 1 from shape "
                                 f"{tuple(in_shape)}")
        else:
            out = list(in_shape)
        if in_size != out_size:
            if not out or (out[-1] * in_size) % out_size:
                raise ValueError(f"cannot view a sample of shape {tuple(in_shape)} with {in_size}-byte elements as "
                                 f"{out_size}-byte elements: the innermost dimension's bytes are not a multiple of "
                                 f"{out_size}")
            out[-1] = out[-1] * in_size // out_size
        return tuple(out)
    wild = -1
    if shape is not None:
        out = [int(s) for s in shape]
        if any(s == 0 for s in out):
            raise ValueError(f"shape {out}: an extent of 0 is not allowed")
    else:
        rel = [float(r) for r in rel_shape]
        if not rel:
            raise ValueError("rel_shape is empty")
        if src_dims is not None and len(src_dims) != len(rel):
            raise ValueError(f"src_dims and rel_shape differ in length ({len(src_dims)} vs {len(rel)})")
        if src_dims is None and len(rel) > ndim and not (len(rel) == ndim + 1 and rel[-1] < 0):
            raise ValueError(f"rel_shape has {len(rel)} extents for a {ndim}-D sample (only a negative last extent "
                             "may add a dimension)")
        out = []
        for i, r in enumerate(rel):
            if r < 0:
                out.append(-1)
                continue
            if r == 0:
                raise ValueError(f"rel_shape {rel}: an extent of 0 is not allowed")
            src = i if src_dims is None else src_dims[i]
            out.append(_round(r * (1 if src == -1 else in_shape[src])))
    negative = [i for i, s in enumerate(out) if s < 0]
    if len(negative) > 1:
        raise ValueError(f"shape {out}: only one extent may be negative (inferred)")
    if negative:
        wild = negative[0]
        out[wild] = 1
        other = math.prod(out) * out_size
        out[wild] = in_bytes // other if other else 0
    if math.prod(out) * out_size != in_bytes:
        raise ValueError(f"cannot reshape a sample of shape {tuple(in_shape)} ({in_bytes} bytes) to {tuple(out)} "
                         f"({math.prod(out) * out_size} bytes of {out_size}-byte elements)")
    return tuple(out)


def view_layout(layout_arg: str | None, in_layout: str, out_ndim: int) -> str:
    """DALI's reshape layout rule: ``layout`` when given (it must fit the output's rank; "" clears it), else the
    input's when the rank is kept, else none."""
    if layout_arg is not None:
        if layout_arg and len(layout_arg) != out_ndim:
            raise ValueError(f"layout {layout_arg!r} does not fit the {out_ndim}-D output")
        return layout_arg
    return in_layout if len(in_layout) == out_ndim else ""


SHAPE_ARGS = [
    Arg("shape", "int_list", None, "The output shape; one extent may be negative (inferred).", per_sample=True),
    Arg("rel_shape", "float_list", None, "The output shape relative to the input's (out[i] = in[i] * rel_shape[i], "
        "or in[src_dims[i]] * rel_shape[i]); one extent may be negative (inferred).", per_sample=True),
    Arg("src_dims", "int_list", None, "Input dimensions to keep, in order; -1 inserts an extent of 1.",
        per_sample=True),
    Arg("layout", str, None, "The output layout; default: the input's when the rank is kept, else none; '' clears "
        "it."),
]


def _shape_input(batch: Batch | None, n: int) -> list[list[int] | None]:
    """The per-sample shapes of the optional second input (1-D tensors, or one 2-D tensor of n rows)."""
    if batch is None:
        return [None] * n
    cpu = batch.as_cpu()
    if len(cpu) == 1 and cpu[0].dim() == 2 and n != 1:
        rows = cpu[0].tolist()
    else:
        rows = [s.reshape(-1).tolist() for s in cpu.samples]
    if len(rows) != n:
        raise ValueError(f"the shape input has {len(rows)} shapes for a batch of {n}")
    return [[int(v) for v in r] for r in rows]


def view_kernel(op: str) -> Callable[..., Batch]:
    """The batch kernel of ``fn.reshape`` / ``fn.reinterpret``: new shapes (and type) over the input's memory."""

    def kernel(ctx: BatchContext, data: Batch, shape_input: Batch | None = None, *, args: BatchArgs) -> Batch:
        n = len(data)
        dtype_arg = args.const("dtype") if "dtype" in args else None
        in_dtype = data.dtype
        dtype = types.to_torch_dtype(dtype_arg) if dtype_arg is not None else None
        in_size = in_dtype.itemsize if in_dtype is not None else 1
        out_size = dtype.itemsize if dtype is not None else in_size
        given = _shape_input(shape_input, n)
        layout_in = ctx.layout_of(data)
        shapes = []
        for i, (in_shape, sample) in enumerate(zip(data.shape(), args.samples())):
            shape = given[i] if given[i] is not None else _ints(sample["shape"])
            try:
                shapes.append(reshaped_shape(in_shape, in_size, out_size, shape=shape,
                                             rel_shape=_floats(sample["rel_shape"]), src_dims=_ints(sample["src_dims"])))
            except ValueError as e:
                raise SampleError(i, ctx.source_info[i] if ctx.source_info else "", ValueError(f"{op}: {e}")) from e
        ndims = {len(s) for s in shapes}
        if len(ndims) > 1:
            raise ValueError(f"{op}: the output samples differ in rank ({sorted(ndims)}); every sample of a batch must "
                             "have the same number of dimensions")
        layout = view_layout(args.const("layout"), layout_in, ndims.pop() if ndims else len(layout_in))
        return viewed(data, shapes, layout, dtype if dtype != in_dtype else None)

    kernel.__name__ = kernel.__qualname__ = f"{op}_kernel"
    return kernel


def _ints(v: Any) -> list[int] | None:
    return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]


def _floats(v: Any) -> list[float] | None:
    return None if v is None else [float(x) for x in np.asarray(v).reshape(-1)]


def layout_arg(args: dict[str, Any], layouts: list[str]) -> str:
    """The output layout known before running (the ``layout`` argument); the kernel sets the rest."""
    return args["layout"] if args["layout"] is not None else ""


REINTERPRET = OpSchema(
    "reinterpret",
    doc="""Views each sample's bytes as another element type (``dtype``), shape and/or layout; nothing is copied.

    With a new ``dtype`` and no shape the innermost extent scales by the ratio of element sizes (a (4, 8) uint8
    sample becomes (4, 2) of int32). The shape arguments follow ``fn.reshape``; the second input, when given, holds
    each sample's shape. Example::

        words = fn.reinterpret(raw_bytes, dtype=types.INT32)
    """,
    inputs=(1, 2),
    input_names=["data", "shape_input"],
    devices=("cpu", "gpu"),
    args=[*SHAPE_ARGS, Arg("dtype", types.DALIDataType, None, "The output type; default: the input's. The output "
                           "must hold the input's bytes.")],
    output_layout=layout_arg,
)

REINTERPRET.batch_kernel("cpu")(view_kernel("reinterpret"))
REINTERPRET.batch_kernel("gpu")(view_kernel("reinterpret"))

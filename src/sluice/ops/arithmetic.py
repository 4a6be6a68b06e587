"""Element-wise arithmetic on DataNodes (``a + b``, ``-a``, ``a < 3``...), ``fn.cast`` and per-sample subscripts.

Types follow DALI's promotion table: equal types stay; a float and a non-float give the float; two floats,
two signed or two unsigned integers give the wider; a signed intX with an unsigned uintY gives int(2Y) when
X <= Y, else intX. Python ``int`` constants count as int32 and ``float`` constants as float32, as in DALI;
``types.Constant(value, dtype)`` gives a constant another type. ``/`` is true division (float32 for integers),
``//`` is floor division, comparisons give BOOL.

On a uniform batch one vectorised operation covers the whole batch (one kernel launch on the GPU); ragged
batches are processed sample by sample.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice import types
from sluice.pipeline.batch import Batch
from sluice.pipeline.ragged import host_to_device
from sluice.errors import SampleError
from sluice.schema import Arg, BatchArgs, BatchContext, Operator, OpSchema, OpSpec

_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "fdiv": torch.true_divide,
    "div": lambda a, b: torch.div(a, b, rounding_mode="floor"), "pow": torch.pow, "mod": torch.remainder,
    "bitand": torch.bitwise_and, "bitor": torch.bitwise_or, "bitxor": torch.bitwise_xor,
    "eq": torch.eq, "neq": torch.ne, "lt": torch.lt, "leq": torch.le, "gt": torch.gt, "geq": torch.ge,
    "min": torch.minimum, "max": torch.maximum, "atan2": torch.atan2, "fpow": torch.pow,
}
_UNARY = {"minus": torch.neg, "abs": torch.abs, "fabs": torch.abs, "floor": torch.floor, "ceil": torch.ceil,
          "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "cbrt": lambda x: torch.sign(x) * torch.abs(x).pow(1 / 3),
          "exp": torch.exp, "log": torch.log, "log2": torch.log2, "log10": torch.log10, "sin": torch.sin,
          "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan,
          "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh, "acosh": torch.acosh,
          "atanh": torch.atanh}
_TERNARY = {"clamp": lambda x, lo, hi: torch.minimum(torch.maximum(x, lo), hi)}
# Functions whose result is a float whatever the input (integers are computed in float32, as in DALI).
_FLOAT_FUNCTIONS = {"fabs", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "asin",
                    "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "atan2", "fpow"}
_COMPARISONS = {"eq", "neq", "lt", "leq", "gt", "geq"}
_BITWISE = {"bitand", "bitor", "bitxor"}

ARITHMETIC = OpSchema(
    "_arithmetic",
    doc="Element-wise arithmetic; made by the operators of DataNode (+, -, *, /, //, **, %, &, |, ^, comparisons).",
    inputs=(1, 3),
    devices=("cpu", "gpu"),
    args=[
        Arg("op", str, "add", "The operation.", choices=tuple(_BINARY) + tuple(_UNARY) + tuple(_TERNARY)),
        Arg("constants", object, (), "Constant operands (NumPy arrays)."),
        Arg("positions", str, "n", "Order of operands: 'n' a node input, 'c' a constant."),
    ],
)

_INT_BY_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def promote(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """DALI's type promotion for two operands."""
    if a == b:
        return a
    fa, fb = a.is_floating_point, b.is_floating_point
    if fa and fb:
        return a if a.itemsize >= b.itemsize else b
    if fa or fb:
        return a if fa else b
    if a == torch.bool or b == torch.bool:
        return b if a == torch.bool else a
    if a.is_signed == b.is_signed:
        return a if a.itemsize >= b.itemsize else b
    signed, unsigned = (a, b) if a.is_signed else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return _INT_BY_SIZE[min(8, 2 * unsigned.itemsize)]


def result_type(op: str, dtypes: list[torch.dtype]) -> tuple[torch.dtype, torch.dtype]:
    """(type the operands are computed in, type of the result)."""
    compute = dtypes[0]
    for d in dtypes[1:]:
        compute = promote(compute, d)
    if (op == "fdiv" or op in _FLOAT_FUNCTIONS) and not compute.is_floating_point:
        compute = torch.float32
    if op in _BITWISE and compute.is_floating_point:
        raise TypeError(f"bitwise '{op}' needs integer or boolean operands, got {compute}")
    if op == "minus" and compute == torch.bool:
        raise TypeError("unary minus is not defined for BOOL")
    out = torch.bool if op in _COMPARISONS else compute
    return compute, out


def _apply(op: str, operands: list[torch.Tensor]) -> torch.Tensor:
    if op in _UNARY:
        return _UNARY[op](operands[0])
    if op in _TERNARY:
        return _TERNARY[op](*operands)
    return _BINARY[op](operands[0], operands[1])


def _operands(positions: str, nodes: list[Any], constants: list[Any]) -> list[Any]:
    it_n, it_c = iter(nodes), iter(constants)
    return [next(it_n) if p == "n" else next(it_c) for p in positions]


@ARITHMETIC.operator_class("cpu")
@ARITHMETIC.operator_class("gpu")
class Arithmetic(Operator):
    """Keeps its constants as tensors on the right device and type, so an iteration costs one operation."""

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self.op = spec.args["op"]
        self.positions = spec.args["positions"]
        self.arrays = [np.asarray(c) for c in spec.args["constants"]]
        self._consts: dict[tuple, list[torch.Tensor]] = {}
        #: (compute type, result type) per tuple of input types; the constants' types, worked out once
        self._types: dict[tuple[torch.dtype, ...], tuple[torch.dtype, torch.dtype]] = {}
        self._const_dtypes: list[torch.dtype] | None = None

    def types(self, dtypes: tuple[torch.dtype, ...]) -> tuple[torch.dtype, torch.dtype]:
        """``result_type`` of the inputs' types and the constants', remembered per input types."""
        found = self._types.get(dtypes)
        if found is None:
            if self._const_dtypes is None:
                self._const_dtypes = [torch.from_numpy(a.reshape(-1)[:0]).dtype for a in self.arrays]
            found = self._types[dtypes] = result_type(self.op, list(dtypes) + self._const_dtypes)
        return found

    def constants(self, device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
        key = (device, dtype)
        if key not in self._consts:
            self._consts[key] = [torch.as_tensor(a).to(device=device, dtype=dtype) for a in self.arrays]
        return self._consts[key]

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        n = len(inputs[0])
        if any(len(b) != n for b in inputs):
            raise ValueError(f"operands have different batch sizes: {[len(b) for b in inputs]}")
        if n == 0:
            return Batch([])
        compute, out_type = self.types(tuple([b.dtype for b in inputs]))
        consts = self.constants(inputs[0].torch_device, compute)
        if len(inputs) == 1 and inputs[0].dense is not None and all(c.dim() < inputs[0].dense.dim() for c in consts):
            # the common case (``images * 0.5``) in fewer steps: one dense operand whose rank no constant exceeds
            dense = [_as(inputs[0].dense, compute)]
            result = _apply(self.op, _operands(self.positions, dense, consts))
            return Batch.from_dense(_as(result, out_type), inputs[0].layout())
        if all(b.is_dense_tensor() for b in inputs):
            # One operation for the whole batch: align every operand's sample dims to the right.
            dense = [_as(b.as_tensor(), compute) for b in inputs]
            ndim = max([d.dim() - 1 for d in dense] + [c.dim() for c in consts])
            dense = [d if d.dim() == ndim + 1 else d.reshape(d.shape[:1] + (1,) * (ndim - d.dim() + 1) + d.shape[1:])
                     for d in dense]
            result = _apply(self.op, _operands(self.positions, dense, consts))
            return Batch.from_dense(_as(result, out_type), inputs[0].layout())
        ragged = _ragged_operands(inputs, consts)
        if ragged is not None:
            # One operation on the padded batch: per-sample scalars and small tensors broadcast against it.
            shapes, rank = ragged
            fill = 1 if self.op in ("div", "mod", "fdiv", "pow") else None  # no integer division by 0 in the padding
            padded = [_as(b.padded(fill)[0] if not b.is_dense_tensor() else
                          _right_aligned(b.as_tensor(), rank), compute) for b in inputs]
            result = _apply(self.op, _operands(self.positions, padded, consts))
            layout = next(b.layout() for b in inputs if not b.is_dense_tensor())
            return Batch.from_padded(_as(result, out_type), shapes, layout)
        samples = []
        for i in range(n):
            operands = _operands(self.positions, [_as(b[i], compute) for b in inputs], consts)
            samples.append(_as(_apply(self.op, operands), out_type))
        return Batch(samples, inputs[0].layout())


def _right_aligned(dense: torch.Tensor, rank: int) -> torch.Tensor:
    """A dense N x ... operand with its sample dimensions aligned to the right of ``rank`` dimensions."""
    extra = rank - (dense.dim() - 1)
    return dense.reshape(dense.shape[:1] + (1,) * extra + dense.shape[1:]) if extra > 0 else dense


def _ragged_operands(inputs: tuple[Batch, ...], consts: list[torch.Tensor]) -> tuple[np.ndarray, int] | None:
    """``(shapes, rank)`` when the operands can be computed on the padded batch: the ragged ones share one shape
    table, and every dense operand and constant broadcasts against each of their samples (extents of 1, or the
    extent every sample has); else None (computed sample by sample)."""
    ragged = [b for b in inputs if not b.is_dense_tensor()]
    try:
        shapes = ragged[0].shapes_array()
        if any(not np.array_equal(b.shapes_array(), shapes) for b in ragged[1:]):
            return None
    except ValueError:  # samples of different ranks
        return None
    rank = shapes.shape[1]
    others = [tuple(b.as_tensor().shape[1:]) for b in inputs if b.is_dense_tensor()] + [tuple(c.shape) for c in consts]
    for shape in others:
        if len(shape) > rank:
            return None
        for d, extent in enumerate(shape, rank - len(shape)):
            if extent != 1 and not (shapes[:, d] == extent).all():
                return None
    return shapes, rank


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x if x.dtype == dtype else x.to(dtype)


# ------------------------------------------------------------------------------------------------------------
CAST = OpSchema(
    "cast",
    doc="""Converts the data to another type. Floats become integers by rounding to nearest and clamping to the
    target's range (saturation), as DALI does.

    Example::

        labels = fn.cast(labels, dtype=types.INT64)
    """,
    devices=("cpu", "gpu"),
    args=[Arg("dtype", types.DALIDataType, types.FLOAT, "The output type.")],
)


def convert_saturate(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Convert with rounding and saturation (floats to integers) or clamping (wide to narrow integers)."""
    if x.dtype == dtype:
        return x
    if dtype == torch.bool:
        return x != 0
    if dtype.is_floating_point:
        return x.to(dtype)
    info = torch.iinfo(dtype)
    if x.dtype.is_floating_point:
        y = torch.round(x.to(torch.float64) if info.bits > 16 else x)
        return torch.nan_to_num(y, nan=0.0).clamp(info.min, info.max).to(dtype)
    if x.dtype == torch.bool:
        return x.to(dtype)
    src = torch.iinfo(x.dtype)
    if src.min >= info.min and src.max <= info.max:
        return x.to(dtype)
    return x.to(torch.int64).clamp(max(info.min, -(2**63)), min(info.max, 2**63 - 1)).to(dtype)


@CAST.batch_kernel("cpu")
@CAST.batch_kernel("gpu")
def cast(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    dtype = types.to_torch_dtype(args.const("dtype"))
    if data.dense is not None:
        return Batch.from_dense(convert_saturate(data.dense, dtype), data.layout())
    return Batch([convert_saturate(s, dtype) for s in data], data.layout())


# ------------------------------------------------------------------------------------------------------------
#: how many subscript positions may take a DataNode (DALI's ``at_<d>`` / ``lo_<d>`` / ``hi_<d>`` argument inputs)
MAX_SUBSCRIPT_DIMS = 8

SUBSCRIPT = OpSchema(
    "_subscript",
    doc="""Per-sample subscript; made by ``DataNode[...]``. Integers drop a dimension, slices keep it; an index or
    a slice bound may be a CPU DataNode of one integer per sample (``params[idx]``), as in DALI.""",
    devices=("cpu", "gpu"),
    args=[Arg("spec", object, (), "The subscript: ('index', i), ('slice', start, stop), ('ellipsis',); i, start "
              "and stop are integers, None, or ('arg', name) for a per-sample argument.")]
    + [Arg(f"{kind}_{d}", int, None, f"Per-sample {what} of subscript position {d}.", per_sample=True)
       for d in range(MAX_SUBSCRIPT_DIMS) for kind, what in (("at", "index"), ("lo", "slice start"),
                                                            ("hi", "slice stop"))],
    output_layout=lambda args, layouts: _subscript_layout(args["spec"], layouts[0] if layouts else ""),
)


def _is_arg(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and value[0] == "arg"


def _subscript_index(spec: list[tuple], sample: dict[str, Any] | None = None) -> tuple:
    """The subscript as a Python index, with per-sample values taken from ``sample`` (its arguments)."""
    def value(v: Any) -> Any:
        return sample[v[1]] if _is_arg(v) else v

    out: list[Any] = []
    for item in spec:
        if item[0] == "index":
            out.append(value(item[1]))
        elif item[0] == "slice":
            out.append(slice(value(item[1]), value(item[2])))
        else:
            out.append(Ellipsis)
    return tuple(out)


def _subscript_layout(spec: list[tuple], layout: str) -> str:
    if not layout or any(item[0] == "ellipsis" for item in spec):
        return ""
    dropped = {i for i, item in enumerate(spec) if item[0] == "index"}
    return "".join(c for i, c in enumerate(layout) if i not in dropped)


def _check_subscript(spec: list[tuple], shape: tuple[int, ...], index: tuple) -> None:
    n_index = sum(1 for item in spec if item[0] != "ellipsis")
    if n_index > len(shape):
        raise IndexError(f"subscript with {n_index} indices on a sample of {len(shape)} dimensions "
                         f"(shape {tuple(shape)})")
    for item, i, dim in zip(spec, index, shape):
        if item[0] == "index" and not -dim <= i < dim:
            raise IndexError(f"index {i} is out of range for a dimension of size {dim}")


@SUBSCRIPT.batch_kernel("cpu")
@SUBSCRIPT.batch_kernel("gpu")
def subscript(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    """A dense batch in one indexing operation (per-sample indices gathered with one advanced index); other
    batches, and per-sample slice bounds, sample by sample."""
    spec = args.const("spec")
    layout = _subscript_layout(spec, data.layout())
    n = len(data)
    if n == 0:
        return Batch([], layout)
    dense = data.dense
    bounds_vary = any(item[0] == "slice" and (_is_arg(item[1]) or _is_arg(item[2])) for item in spec)
    if dense is not None and not bounds_vary and all(item[0] != "ellipsis" for item in spec):
        shape = tuple(dense.shape[1:])
        names = [item[1][1] for item in spec if item[0] == "index" and _is_arg(item[1])]
        static = _subscript_index(spec, {name: 0 for name in names})
        _check_subscript(spec, shape, static)
        if not names:
            return Batch.from_dense(dense[(slice(None),) + static], layout)
        index: list[Any] = [torch.arange(n, device=dense.device)]
        for item, i in zip(spec, static):
            if item[0] == "index" and _is_arg(item[1]):
                values = np.asarray(args[item[1][1]], np.int64)
                dim = shape[len(index) - 1]
                bad = np.flatnonzero((values < -dim) | (values >= dim))
                if len(bad):
                    raise SampleError(int(bad[0]), data.source_info[int(bad[0])], IndexError(
                        f"index {int(values[bad[0]])} is out of range for a dimension of size {dim}"))
                index.append(host_to_device(values % dim, dense.device))
            else:
                index.append(i)
        return Batch.from_dense(dense[tuple(index)], layout)
    per_sample = args.samples()
    out = []
    for i, sample in enumerate(data.samples):
        index = _subscript_index(spec, per_sample[i])
        try:
            _check_subscript(spec, tuple(sample.shape), index)
        except IndexError as e:
            raise SampleError(i, data.source_info[i], e) from e
        out.append(sample[index])
    return Batch(out, layout)


# ------------------------------------------------------------------------------------------------------------
TABLE_ROW = OpSchema(
    "_table_row",
    doc="""Row ``index[i]`` of a constant ``table`` for sample ``i``: ``types.Constant(table)[index]`` in one node.
    Made by :mod:`sluice.auto_aug` for its parameter look-ups; inside an ``if`` on DataNodes only the index is
    split, not a batch of copies of the table.""",
    inputs=0,
    devices=("cpu", "gpu"),
    args=[Arg("table", object, None, "The table (a NumPy array; its first axis is indexed)."),
          Arg("index", int, 0, "The row of each sample (negative counts from the end).", per_sample=True)],
    output_layout="",
)


@TABLE_ROW.operator_class("cpu")
@TABLE_ROW.operator_class("gpu")
class TableRow(Operator):
    """Keeps the table on its device; a batch is one ``index_select``."""

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self.table = torch.from_numpy(np.ascontiguousarray(spec.args["table"]))
        if self.table.dim() == 0 or len(self.table) == 0:
            raise ValueError(f"_table_row: the table must have at least one row, got shape {tuple(self.table.shape)}")
        self._on: dict[torch.device, torch.Tensor] = {}

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        index = np.asarray(args["index"], np.int64).reshape(-1)
        rows = len(self.table)
        bad = np.flatnonzero((index < -rows) | (index >= rows))
        if len(bad):
            i = int(bad[0])
            raise SampleError(i, ctx.source_info[i] if i < len(ctx.source_info) else "",
                              IndexError(f"index {int(index[i])} is out of range for a table of {rows} rows"))
        table = self._on.get(ctx.device)
        if table is None:
            table = self._on[ctx.device] = self.table.to(ctx.device)
        picked = host_to_device(index % rows, ctx.device)
        return Batch.from_dense(table.index_select(0, picked))

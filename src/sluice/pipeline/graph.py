"""The traced graph: DataNodes (symbolic batches) and the operator nodes that make them.

Calling ``fn.resize(images, ...)`` inside a pipeline definition does not process data: it records an
:class:`OpNode` and returns :class:`DataNode` handles to its outputs. The pipeline later walks back from its
outputs to find the nodes to run. Arithmetic on DataNodes records element-wise operator nodes, with DALI's
type promotion.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np

from sluice import types
from sluice.errors import ArgumentError
from sluice.ops.arithmetic import MAX_SUBSCRIPT_DIMS
from sluice.schema import OpSchema, get_schema

__all__ = ["DataNode", "OpNode", "make_node", "Constant", "current_pipeline", "types_constant"]

#: The pipelines being defined on this thread (``with pipe:``), innermost last: graph nodes are recorded into the
#: innermost one. Held here, where nodes are made; :class:`sluice.pipeline.pipeline.Pipeline` pushes and pops.
_defining = threading.local()


def current_pipeline() -> Any:
    """The pipeline being defined on this thread (``with pipe:``), or None."""
    stack = getattr(_defining, "stack", [])
    return stack[-1] if stack else None


def enter_pipeline(pipe: Any) -> None:
    _defining.stack = getattr(_defining, "stack", []) + [pipe]


def exit_pipeline() -> None:
    _defining.stack.pop()

_ids = itertools.count()
_ids_lock = threading.Lock()


def _next_id() -> int:
    with _ids_lock:
        return next(_ids)


class OpNode:
    """One operator instance in a traced graph."""

    def __init__(self, schema: OpSchema, device: str, inputs: list[DataNode], const_args: dict[str, Any],
                 arg_inputs: dict[str, DataNode], name: str | None):
        self.id = _next_id()
        self.schema = schema
        self.device = device
        self.inputs = inputs
        self.const_args = const_args
        self.arg_inputs = arg_inputs
        self.name = name or f"__{schema.name.replace('.', '_')}_{self.id}"
        self.explicit_name = name is not None
        n_out = schema.num_outputs(const_args, len(inputs))
        out_device = "gpu" if device in ("gpu", "mixed") else "cpu"
        self.outputs = [DataNode(self, i, out_device) for i in range(n_out)]

    def __repr__(self) -> str:
        return f"OpNode({self.schema.name}, device={self.device!r}, name={self.name!r})"

    def describe(self) -> str:
        """How errors name this node: ``fn.resize (device 'gpu')``, plus its name when the user gave one."""
        named = f", name '{self.name}'" if self.explicit_name else ""
        return f"fn.{self.schema.name} (device '{self.device}'{named})"


class DataNode:
    """A symbolic batch: output ``index`` of operator node ``op``. Supports ``.gpu()``, ``.cpu()``, arithmetic
    and comparisons (element-wise, per sample), and subscripts (``node[1:3, 0]``, per sample)."""

    __array_priority__ = 1000  # make NumPy defer to our operators in `np_scalar * node`

    def __init__(self, op: OpNode, index: int, device: str):
        self.op = op
        self.index = index
        self.device = device

    @property
    def name(self) -> str:
        """The producing operator's name (``[i]`` for output ``i`` of several). A ``.gpu()`` / ``.cpu()`` copy keeps
        the name of what it copies, as in DALI (``DataNode._to_backend`` of ``nvidia/dali/data_node.py``)."""
        source = self.moved_from()
        if source is not self:
            return source.name
        return self.op.name if len(self.op.outputs) == 1 else f"{self.op.name}[{self.index}]"

    def moved_from(self) -> DataNode:
        """The node this one copies between devices (through ``.gpu()`` / ``.cpu()``), or this node itself."""
        node = self
        while node.op.schema.transfer and node.op.inputs:
            node = node.op.inputs[0]
        return node

    def __repr__(self) -> str:
        return f"DataNode({self.name}, device={self.device!r})"

    def __hash__(self) -> int:
        return hash((self.op.id, self.index))

    def __bool__(self) -> bool:
        raise TypeError(f"{self!r} stands for a batch that does not exist yet; it has no truth value. To run `if`, "
                        "`and`, `or`, `not` per sample, define the pipeline with "
                        "pipeline_def(enable_conditionals=True); or choose per sample with element-wise operators "
                        "(&, |, ^, comparisons) and operator arguments (e.g. mirror=fn.random.coin_flip()).")

    # ---- devices ----------------------------------------------------------------------------------------
    def gpu(self) -> DataNode:
        """This batch copied to the pipeline's GPU."""
        if self.device == "gpu":
            return self
        return _call("_transfer", [self], {"to": "gpu"}, device="gpu")

    def cpu(self) -> DataNode:
        """This batch copied to host memory."""
        if self.device == "cpu":
            return self
        return _call("_transfer", [self], {"to": "cpu"}, device="cpu")

    # ---- arithmetic -------------------------------------------------------------------------------------
    def _binary(self, other: Any, op: str, reflected: bool = False) -> DataNode:
        return arithmetic(op, other, self) if reflected else arithmetic(op, self, other)

    def __add__(self, o): return self._binary(o, "add")
    def __radd__(self, o): return self._binary(o, "add", True)
    def __sub__(self, o): return self._binary(o, "sub")
    def __rsub__(self, o): return self._binary(o, "sub", True)
    def __mul__(self, o): return self._binary(o, "mul")
    def __rmul__(self, o): return self._binary(o, "mul", True)
    def __truediv__(self, o): return self._binary(o, "fdiv")
    def __rtruediv__(self, o): return self._binary(o, "fdiv", True)
    def __floordiv__(self, o): return self._binary(o, "div")
    def __rfloordiv__(self, o): return self._binary(o, "div", True)
    def __pow__(self, o): return self._binary(o, "pow")
    def __rpow__(self, o): return self._binary(o, "pow", True)
    def __mod__(self, o): return self._binary(o, "mod")
    def __rmod__(self, o): return self._binary(o, "mod", True)
    def __and__(self, o): return self._binary(o, "bitand")
    def __rand__(self, o): return self._binary(o, "bitand", True)
    def __or__(self, o): return self._binary(o, "bitor")
    def __ror__(self, o): return self._binary(o, "bitor", True)
    def __xor__(self, o): return self._binary(o, "bitxor")
    def __rxor__(self, o): return self._binary(o, "bitxor", True)
    def __eq__(self, o): return self._binary(o, "eq")  # type: ignore[override]
    def __ne__(self, o): return self._binary(o, "neq")  # type: ignore[override]
    def __lt__(self, o): return self._binary(o, "lt")
    def __le__(self, o): return self._binary(o, "leq")
    def __gt__(self, o): return self._binary(o, "gt")
    def __ge__(self, o): return self._binary(o, "geq")
    def __neg__(self): return arithmetic("minus", self)
    def __pos__(self): return self
    def __abs__(self): return arithmetic("abs", self)

    def shape(self, dtype: Any = None, device: str = "cpu") -> DataNode:
        """The shape of each sample (DALI's shortcut for ``fn.shapes``)."""
        node = make_node(get_schema("shapes"), [self], {"dtype": dtype or types.INT64})
        return node.cpu() if device == "cpu" else node.gpu()

    def __getitem__(self, index: Any) -> DataNode:
        """Per-sample subscript, as DALI's ``node[...]``: integers drop a dimension, slices keep it. An index or a
        slice bound may be a CPU DataNode of one integer per sample: ``table[idx]`` picks row ``idx[i]`` of sample
        ``i``."""
        if not isinstance(index, tuple):
            index = (index,)
        spec: list[tuple] = []
        arg_nodes: dict[str, DataNode] = {}

        def bound(value: Any, kind: str, position: int) -> Any:
            if isinstance(value, DataNode):
                name = f"{kind}_{position}"
                arg_nodes[name] = value
                return ("arg", name)
            if value is None or isinstance(value, (int, np.integer)):
                return None if value is None else int(value)
            raise ArgumentError(f"DataNode subscripts take integers, slices, ... and DataNodes of integers, got "
                                f"{type(value).__name__}")

        for position, item in enumerate(index):
            if isinstance(item, slice):
                if item.step not in (None, 1):
                    raise ArgumentError("DataNode subscripts support slices with step 1 only")
                spec.append(("slice", bound(item.start, "lo", position), bound(item.stop, "hi", position)))
            elif item is Ellipsis:
                if arg_nodes or any(isinstance(x, DataNode) for x in index):
                    raise ArgumentError("DataNode subscripts with DataNode indices cannot use ...")
                spec.append(("ellipsis",))
            elif isinstance(item, (bool, np.bool_)):
                raise ArgumentError("DataNode subscripts take integers, slices and ..., got bool")
            else:
                spec.append(("index", bound(item, "at", position)))
        if arg_nodes and len(index) > MAX_SUBSCRIPT_DIMS:
            raise ArgumentError(f"DataNode subscripts with DataNode indices take at most {MAX_SUBSCRIPT_DIMS} "
                                "positions")
        return _call("_subscript", [self], {"spec": spec, **arg_nodes}, device=self.device)


class Constant:
    """A typed constant for arithmetic (DALI's ``types.Constant``): ``node * Constant([1, 2, 3], types.FLOAT)``."""

    def __init__(self, value: Any, dtype: Any = None, device: str | None = None):
        self.dtype = dtype
        self.device = device
        self.value = constant_array(value, dtype)

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"


def constant_array(value: Any, dtype: Any = None) -> np.ndarray:
    """``value`` as the array of a DALI constant: of ``dtype`` when given, else its own type with 64-bit types made
    32-bit (Python floats float32, ints int32), as DALI's ``types.Constant`` does."""
    arr = np.asarray(value)
    if dtype is not None:
        return arr.astype(types.to_numpy_dtype(dtype))
    narrower = {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32, np.dtype(np.uint64): np.uint32}
    return arr.astype(narrower[arr.dtype]) if arr.dtype in narrower else arr


def types_constant(value: Any, dtype: Any = None, shape: Any = None, layout: str | None = None,
                   device: str | None = None, **kwargs: Any) -> Constant | DataNode:
    """DALI's ``types.Constant``: a scalar without ``device``/``shape``/``layout`` stays a typed constant for
    arithmetic (``node * types.Constant(2, types.UINT8)``); anything else becomes an ``fn.constant`` node,
    usable as an operator input (``fn.spectrogram(types.Constant(signal, device="gpu"), ...)``)."""
    if kwargs:
        raise TypeError(f"types.Constant: unexpected arguments {sorted(kwargs)}")
    array = np.asarray(value)
    if device is None and shape is None and layout is None and array.ndim == 0:
        return Constant(value, dtype)
    # 64-bit arrays become 32-bit ones unless a dtype says otherwise, as in DALI
    args = {"value": constant_array(array), "dtype": dtype, "shape": list(shape) if shape is not None else None,
            "layout": layout or "", "device": device or "cpu"}
    return make_node(get_schema("constant"), [], args)  # type: ignore[return-value]


def arithmetic(op: str, *operands: Any) -> DataNode:
    """Record an element-wise operation; constants are folded into the node's arguments."""
    nodes = [x for x in operands if isinstance(x, DataNode)]
    if not nodes:
        raise ArgumentError("arithmetic needs at least one DataNode operand")
    device = "gpu" if any(n.device == "gpu" for n in nodes) else "cpu"
    consts = []
    positions = []
    for i, x in enumerate(operands):
        if isinstance(x, DataNode):
            positions.append("n")
        else:
            if not isinstance(x, Constant):
                if not isinstance(x, (bool, int, float, np.generic, np.ndarray, list, tuple)):
                    raise ArgumentError(f"cannot use {type(x).__name__} in an arithmetic expression; use DataNodes, "
                                        "Python numbers or types.Constant")
                x = Constant(x)
            consts.append(x.value)
            positions.append("c")
    return _call("_arithmetic", nodes, {"op": op, "constants": consts, "positions": "".join(positions)},
                 device=device)


def _call(op_name: str, inputs: list[DataNode], args: dict[str, Any], device: str) -> DataNode:
    outs = make_node(get_schema(op_name), inputs, dict(args, device=device))
    return outs if isinstance(outs, DataNode) else outs[0]


def make_node(schema: OpSchema, inputs: list[Any], kwargs: dict[str, Any]) -> DataNode | list[DataNode] | dict[str, DataNode]:
    """Validate a call of ``fn.<schema.name>`` and record it. Returns one DataNode, or a list for operators with
    several outputs (as DALI does), or a dict for operators whose outputs are named (readers.tfrecord)."""
    kwargs = dict(kwargs)
    inputs = list(inputs)
    sets = [i for i, x in enumerate(inputs) if _is_input_set(x)]
    if sets:
        return _per_input_set(schema, inputs, sets, kwargs)
    device = kwargs.pop("device", None)
    name = kwargs.pop("name", None)
    while inputs and inputs[-1] is None:  # optional inputs left out, as the signatures show them (anchor=None)
        inputs.pop()
    n = len(inputs)
    if not schema.min_inputs <= n <= schema.max_inputs:
        want = (str(schema.min_inputs) if schema.min_inputs == schema.max_inputs
                else f"{schema.min_inputs} to {schema.max_inputs}")
        raise ArgumentError(f"fn.{schema.name} takes {want} input(s), got {n}")
    current = current_pipeline()
    conditions = getattr(current, "_conditions", None)  # tracing a pipeline_def(enable_conditionals=True)
    nodes: list[DataNode] = []
    for i, x in enumerate(inputs):
        if isinstance(x, DataNode):
            nodes.append(x)
        else:
            nodes.append(make_node(get_schema("constant"), [], {"value": np.asarray(x)}))  # type: ignore[arg-type]
    if conditions is not None:  # inside an `if` on a DataNode: the inputs as this branch sees them (split)
        nodes = [conditions.localize(x) for x in nodes]
    if device is None:
        device = "gpu" if any(x.device == "gpu" for x in nodes) and "gpu" in schema.devices else \
            schema.default_device
    if device not in schema.devices:
        raise ArgumentError(f"fn.{schema.name}: invalid device ('{device}'). Supported values are "
                            f"{', '.join(repr(d) for d in schema.devices)}.")
    for i, x in enumerate(nodes):
        if x.device == "gpu" and device in ("cpu", "mixed") and not schema.transfer:
            raise ArgumentError(f"fn.{schema.name}(device='{device}'): input {i} ({x.op.describe()}) is on the GPU; "
                                f"use device='gpu' for this operator or move the input with .cpu()")
        if x.device == "cpu" and device == "gpu" and not schema.transfer:
            nodes[i] = x.gpu()  # GPU operators take CPU inputs by copying them, as DALI's newer versions do
    const, arg_nodes = schema.validate(kwargs, lambda v: isinstance(v, DataNode))
    for key, node in arg_nodes.items():
        if node.device != "cpu":
            raise ArgumentError(f"fn.{schema.name}: argument input '{key}' must be a CPU DataNode; call .cpu() on it")
    if conditions is not None:
        arg_nodes = {key: conditions.localize(node) for key, node in arg_nodes.items()}
    op = OpNode(schema, device, nodes, const, arg_nodes, name)
    if conditions is not None:
        conditions.register(op.outputs, bool(nodes or arg_nodes))
    if current is not None:
        current._register_node(op)
    if schema.output_names is not None:
        return dict(zip(schema.output_names(const), op.outputs))
    return op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)


def _is_input_set(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(e, DataNode) for e in x)


def _per_input_set(schema: OpSchema, inputs: list[Any], sets: list[int], kwargs: dict[str, Any]) -> list[Any]:
    """DALI's multiple input sets: an input given as a list of DataNodes makes the operator run once per element
    (``fn.slice([image, label], anchor, shape)``), with the other inputs and every argument shared; the result is
    a list with one entry per set. A random operator draws the same values for every set (one seed for all, as
    DALI's one operator instance does), so that an image and its mask get the same crop or flip."""
    sizes = {len(inputs[i]) for i in sets}
    if len(sizes) != 1:
        raise ArgumentError(f"fn.{schema.name}: the input sets (lists of DataNodes) differ in length: "
                            + ", ".join(f"input {i} has {len(inputs[i])}" for i in sets))
    count = sizes.pop()
    shared = dict(kwargs)
    if "seed" in schema.args and (shared.get("seed") is None or shared.get("seed", -1) < 0):
        shared["seed"] = _shared_seed()
    name = shared.pop("name", None)
    return [make_node(schema, [x[k] if i in sets else x for i, x in enumerate(inputs)],
                      dict(shared, name=name if k == 0 else None)) for k in range(count)]


def _shared_seed() -> int:
    """One seed for the nodes of one multi-set call, derived from the pipeline's seed and the call's rank among
    such calls in its definition: the same program with the same seed draws the same values."""
    current = current_pipeline()
    base, rank = (current.seed, getattr(current, "_input_set_calls", 0)) if current is not None else (0, 0)
    if current is not None:
        current._input_set_calls = rank + 1
    return derive_seed(base, 0x5E75, rank)


def derive_seed(pipeline_seed: int, *keys: int) -> int:
    """A non-negative 63-bit seed derived from the pipeline's seed and ``keys`` (an operator's rank among the
    seeded ones, or a multi-set call's): the same program with the same seed gets the same seeds."""
    state = np.random.SeedSequence([pipeline_seed & 0xFFFFFFFF, *keys]).generate_state(2, np.uint32)
    return int(state.view(np.uint64)[0] & 0x7FFFFFFFFFFFFFFF)

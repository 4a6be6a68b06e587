"""Conditional execution: ``if``/``elif``/``else``, ``and``, ``or``, ``not`` and ``x if c else y`` on DataNodes in a
``pipeline_def(enable_conditionals=True)`` function, as in DALI.

Example::

    @sluice.pipeline_def(enable_conditionals=True, batch_size=8, num_threads=2, device_id=None, seed=3)
    def pipe():
        images = fn.external_source(source=..., layout="HWC")
        if fn.reductions.mean(images) > 128:    # per sample
            images = fn.flip(images)
        else:
            images = fn.rotate(images, angle=fn.random.uniform(range=(-10, 10)))
        return images

The function's source is rewritten (:mod:`sluice.pipeline.if_rewrite`) into calls of this module. An ``if``
whose condition is a DataNode (one boolean per sample, on the CPU) opens a *scope*: both branches are traced once
each, every DataNode a branch uses is split by the condition (``_conditional.split``: the samples of the branch,
in order) where it comes from outside, and every variable the branches assign is merged afterwards
(``_conditional.merge``: each sample from its branch, in the original order). Python conditions keep Python's
meaning. Operators of a branch therefore run on the branch's samples only, in batches smaller than the
pipeline's; the executor runs them like any other node.

Where DALI's rules apply:

* The condition must be a CPU DataNode of scalar booleans (integers are taken as non-zero = true); a GPU one is
  refused where the ``if`` is written, another kind of data when the pipeline runs, in DALI's words.
* Operators without inputs (``fn.random.uniform()``, constants) made in a branch run for the whole batch and are
  split where used, so their draws do not depend on the split. Random operators that take the branch's data draw
  per sample of the branch's batch: the same seed gives the same result, whatever the threads.
* A variable set in only one branch (and not before the ``if``) is undefined after it: using it raises. A Python
  number on one side and a DataNode on the other is made a constant batch; Python values that differ between the
  branches and are not numbers are ambiguous, and using them raises.
* ``and``/``or`` on DataNodes evaluate their right operand only for the samples that need it; ``not`` and the
  operands of ``and``/``or`` take scalar booleans on the CPU.
* A DataNode made in a branch and used outside it without going through a variable (kept in a list, say) is
  refused, naming it.
"""

from __future__ import annotations

import sys as _sys
from collections.abc import Callable
from typing import Any

import numpy as np

from sluice.errors import ArgumentError
from sluice.ops.conditional import restriction_message
from sluice.pipeline.graph import Constant, DataNode, OpNode, current_pipeline, make_node
from sluice.pipeline.if_rewrite import SourceUnavailable, convert, do_not_convert
from sluice.schema import get_schema

__all__ = ["ConditionStack", "If", "Switch", "Undefined", "and_", "or_", "not_", "ifexp", "call", "split", "merge",
           "logical_not", "trace", "do_not_convert", "condition_stack"]

_Key = tuple[int, int]


def _key(node: DataNode) -> _Key:
    return (node.op.id, node.index)


class Undefined:
    """What a variable holds after an ``if`` on a DataNode that left it undefined or ambiguous: any use raises,
    saying why."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        object.__setattr__(self, "message", message)

    def __repr__(self) -> str:
        return f"<undefined: {self.message}>"

    def fail(self, *args: Any, **kwargs: Any) -> Any:
        raise ArgumentError(self.message)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol probes (copy, pickle, NumPy) look for dunders with getattr
        self.fail()


for _dunder in ("__bool__", "__len__", "__iter__", "__call__", "__getitem__", "__array__", "__float__", "__int__",
                "__index__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__",
                "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__lt__", "__le__", "__gt__",
                "__ge__", "__neg__", "__pos__", "__abs__", "__invert__", "__contains__"):
    setattr(Undefined, _dunder, Undefined.fail)


def _no_truth_value(node: DataNode, why: str = "") -> TypeError:
    return TypeError(f"{node!r} is used as the condition of `if`, `and`, `or`, `not` or `x if c else y`, but this "
                     f"pipeline was not defined with conditionals{why}. Pass enable_conditionals=True to "
                     "pipeline_def to run such statements per sample, or choose per sample with element-wise "
                     "operators (&, |, ^, comparisons) and operator arguments (e.g. mirror=fn.random.coin_flip()).")


# ------------------------------------------------------------------------------------------------------------
# Scopes
# ------------------------------------------------------------------------------------------------------------
class _Scope:
    """One ``if`` (or :class:`Switch`) being traced: its condition (valid in the enclosing scope), how many
    branches it has, the branch being traced (for an ``if``: 0 its ``if`` branch, 1 its ``else``), and the splits
    made for it (a part per branch), by the key of the node split (and of the node it came from)."""

    __slots__ = ("predicate", "branch", "splits", "ways")

    def __init__(self, predicate: DataNode, ways: int = 2):
        self.predicate = predicate
        self.ways = ways
        self.branch = 0
        self.splits: dict[_Key, tuple[DataNode, ...]] = {}

    kind = "an `if` on a DataNode"

    def branch_name(self, part: int) -> str:
        return "if" if part == 0 else "else"


class _SwitchScope(_Scope):
    """A :class:`Switch` being traced: its predicate is the index of each sample's branch, its splits are
    ``_conditional.split_n``."""

    __slots__ = ()
    kind = "a per-sample choice"

    def branch_name(self, part: int) -> str:
        return f"branch {part}"


class ConditionStack:
    """The ``if`` scopes open while a pipeline function is traced, and where each DataNode made in a branch
    belongs. :func:`sluice.pipeline.graph.make_node` asks it to :meth:`localize` every input of a new operator
    and to :meth:`register` the operator's outputs."""

    def __init__(self) -> None:
        self.scopes: list[_Scope] = []
        #: the scope and branch each node made in a branch belongs to; nodes absent belong to no branch
        self.origin: dict[_Key, tuple[_Scope, bool]] = {}

    def localize(self, node: DataNode) -> DataNode:
        """``node`` as the current branch sees it: itself where it was made in this branch, else split by the
        conditions of every scope between where it was made and here (splits are made once and reused)."""
        if not self.scopes:
            self._check_not_from_branch(node)
            return node
        key = _key(node)
        start = -1
        found = node
        for level in range(len(self.scopes) - 1, -1, -1):
            scope = self.scopes[level]
            parts = scope.splits.get(key)
            if parts is not None:
                found, start = parts[scope.branch], level
                break
            where = self.origin.get(key)
            if where is not None and where[0] is scope:
                if where[1] != scope.branch:
                    raise ArgumentError(f"{node!r} was made in the `{scope.branch_name(where[1])}` branch of "
                                        f"{scope.kind} and is used in the `{scope.branch_name(scope.branch)}` "
                                        "branch; a branch sees only its own samples")
                start = level
                break
        else:
            self._check_not_from_branch(node)
        for level in range(start + 1, len(self.scopes)):
            scope = self.scopes[level]
            if not isinstance(scope, _SwitchScope):
                parts = _make_split(found, scope.predicate)
            else:
                parts = tuple(_add_node("_conditional.split_n", [found, scope.predicate],
                                        {"num_parts": scope.ways}, found.device))
            scope.splits[key] = scope.splits[_key(found)] = parts
            for part, out in enumerate(parts):
                self.origin[_key(out)] = (scope, part)
            found = parts[scope.branch]
        return found

    def _check_not_from_branch(self, node: DataNode) -> None:
        if _key(node) in self.origin:
            raise ArgumentError(f"{node!r} was made inside a branch of an `if` on a DataNode and is used outside "
                                "it. Assign it to a variable in every branch (variables are merged after the "
                                "`if`) instead of keeping it in a container.")

    def register(self, outputs: list[DataNode], has_inputs: bool) -> None:
        """Record that ``outputs`` were made in the current branch. Operators without inputs run for the whole
        batch (they belong to no branch) and are split where used, as in DALI."""
        if self.scopes and has_inputs:
            scope = self.scopes[-1]
            for out in outputs:
                self.origin[_key(out)] = (scope, scope.branch)

    def push(self, predicate: DataNode, what: str = "if", ways: int = 2) -> _Scope:
        if predicate.device != "cpu":
            rule, where = restriction_message(what, "left" if what in ("and", "or") else "")
            raise ArgumentError(f"{rule} Got a GPU input{where} ({predicate!r}); move it with .cpu().")
        scope = (_SwitchScope if what == "select" else _Scope)(self.localize(predicate), ways)
        self.scopes.append(scope)
        return scope

    def pop(self) -> None:
        self.scopes.pop()


def condition_stack() -> ConditionStack | None:
    """The condition stack of the pipeline being traced in this thread, if it has conditionals enabled."""
    pipe = current_pipeline()
    return getattr(pipe, "_conditions", None) if pipe is not None else None


def _add_node(schema_name: str, inputs: list[DataNode], args: dict[str, Any], device: str) -> list[DataNode]:
    """An operator node made directly (not through make_node: its inputs are already where they belong, and the
    predicate stays on the CPU for a GPU split or merge)."""
    schema = get_schema(schema_name)
    const, _ = schema.validate(args, lambda v: False)
    op = OpNode(schema, device, inputs, const, {}, None)
    pipe = current_pipeline()
    if pipe is not None:
        pipe._register_node(op)
    return op.outputs


def _make_split(node: DataNode, predicate: DataNode, what: str = "if") -> tuple[DataNode, DataNode]:
    true_part, false_part = _add_node("_conditional.split", [node, predicate], {"expression_name": what},
                                      node.device)
    return true_part, false_part


# ------------------------------------------------------------------------------------------------------------
# What rewritten code calls
# ------------------------------------------------------------------------------------------------------------
_UNSET = object()


class If:
    """One ``if`` statement (or ``and``/``or``/``x if c else y``) being traced; see :mod:`.if_rewrite` for the
    calls the rewritten code makes. With a condition that is not a DataNode it only remembers Python's truth
    value of it."""

    def __init__(self, test: Any, jump: str | None = None, what: str = "if"):
        self.dynamic = isinstance(test, DataNode)
        if not self.dynamic:
            self.value = bool(test)
            return
        stack = condition_stack()
        if stack is None:
            raise _no_truth_value(test)
        if jump is not None:
            raise ArgumentError(f"`{jump}` inside an `if` whose condition is a DataNode ({test!r}) is not "
                                "supported: both branches are traced for their samples. Only a `return` at the "
                                "end of a branch is; assign the result to a variable instead.")
        self.stack = stack
        self.what = what
        self.scope = stack.push(test, what)
        self.before: dict[str, Any] = {}
        self.kept: tuple[dict[str, Any], dict[str, Any]] = ({}, {})  # else, if
        self.results: dict[str, Any] = {}

    def enter(self, branch: bool) -> bool:
        """Whether to run the branch (``True``: the ``if`` branch); for a DataNode condition, both run in turn."""
        if not self.dynamic:
            return self.value is branch
        self.scope.branch = 0 if branch else 1
        return True

    def save(self, name: str, value: Any) -> None:
        self.before[name] = value

    def keep(self, branch: bool, name: str, value: Any) -> None:
        self.kept[branch][name] = value

    def restore(self, name: str) -> Any:
        """The value ``name`` had before the ``if``, for the ``else`` branch to start from."""
        if name in self.before:
            return self.before[name]
        return Undefined(f"variable '{name}' is set in the `if` branch of an `if` on a DataNode but not before it, "
                         "so the `else` branch cannot read it")

    def finish(self) -> None:
        """Merge every variable the branches left, and leave the scope."""
        names = set(self.kept[True]) | set(self.kept[False]) | set(self.before)
        try:
            for name in sorted(names):
                self.results[name] = self._merge(name, self.kept[True].get(name, _UNSET),
                                                 self.kept[False].get(name, _UNSET))
        finally:
            self.stack.pop()

    def result(self, name: str) -> Any:
        value = self.results.get(name, _UNSET)
        if value is _UNSET:
            return Undefined(f"variable '{name}' is not set by either branch of the `if` on a DataNode")
        return value

    # ---- merging ------------------------------------------------------------------------------------------
    def _merge(self, name: str, t: Any, f: Any) -> Any:
        if t is f:
            return t
        if t is _UNSET or f is _UNSET or isinstance(t, Undefined) or isinstance(f, Undefined):
            missing = "if" if (t is _UNSET or isinstance(t, Undefined)) else "else"
            return Undefined(f"variable '{name}' is set in only one branch of an `if` on a DataNode: it must also "
                             f"be set in the `{missing}` branch (or before the `if`) to be used after it")
        t_node, f_node = isinstance(t, DataNode), isinstance(f, DataNode)
        if not t_node and not f_node:
            if isinstance(t, (tuple, list)) and type(t) is type(f) and len(t) == len(f):
                parts = [self._merge(f"{name}[{i}]", a, b) for i, (a, b) in enumerate(zip(t, f))]
                return t._make(parts) if hasattr(t, "_make") else type(t)(parts)  # namedtuples too
            if _same_value(t, f):
                return t
            if not (_promotable(t) and _promotable(f)):
                return Undefined(f"variable '{name}' holds different Python values in the branches of an `if` on "
                                 f"a DataNode ({_short(t)} and {_short(f)}); only DataNodes and numbers may differ "
                                 "between the branches")
        elif not (t_node or _promotable(t)) or not (f_node or _promotable(f)):
            return Undefined(f"variable '{name}' is a DataNode in one branch of an `if` on a DataNode and "
                             f"{_short(f if t_node else t)} in the other")
        t = self._in_branch(True, t)
        f = self._in_branch(False, f)
        if t.device != f.device:  # a GPU result in one branch: the other's moves there too, in its branch
            if t.device == "cpu":
                t = self._in_branch(True, t, to_gpu=True)
            else:
                f = self._in_branch(False, f, to_gpu=True)
        src = t.op
        if (src is f.op and src.schema.name == "_conditional.split" and (t.index, f.index) == (0, 1)
                and src.inputs[1] is self.scope.predicate):
            return src.inputs[0]  # both branches kept it as it was
        merged = _add_node("_conditional.merge", [t, f, self.scope.predicate], {}, t.device)[0]
        return _merged_here(self.stack, self.scope, merged)  # it belongs to the branch that holds this `if`

    def _in_branch(self, branch: bool, value: Any, to_gpu: bool = False) -> DataNode:
        """``value`` as a DataNode of ``branch``: split there if it comes from outside, a constant batch if it is
        a number, moved to the GPU with ``to_gpu``."""
        return _in_part(self.stack, self.scope, 0 if branch else 1, value, to_gpu)


def _in_part(stack: ConditionStack, scope: _Scope, part: int, value: Any, to_gpu: bool = False) -> DataNode:
    """``value`` as a DataNode of branch ``part`` of ``scope``: split there if it comes from outside, a constant
    batch if it is a number, moved to the GPU with ``to_gpu``."""
    scope.branch = part
    if not isinstance(value, DataNode):
        array = value.value if isinstance(value, Constant) else Constant(value).value
        value = make_node(_schema("constant"), [], {"value": array, "device": "cpu"})
    value = stack.localize(value)
    return value.gpu() if to_gpu else value


def _merged_here(stack: ConditionStack, scope: _Scope, merged: DataNode) -> DataNode:
    """Record that ``merged`` (the merge of ``scope``'s branches) belongs to the branch that holds ``scope``."""
    level = stack.scopes.index(scope)
    if level > 0:
        outer = stack.scopes[level - 1]
        stack.origin[_key(merged)] = (outer, outer.branch)
    return merged


class Switch:
    """A per-sample choice among ``ways`` branches: sample ``i`` takes branch ``index[i]`` (a CPU batch of
    integers; below 0 counts as 0, above ``ways - 1`` as the last). The many-way form of an ``if`` on a DataNode,
    for a pipeline with conditionals: each branch is traced once, in turn; a DataNode it uses from outside is split
    once into a part per branch (``_conditional.split_n``), and the branches' results are merged back in one
    ``_conditional.merge_n``. A tree of ``if`` statements on the index (as DALI's ``select`` writes it) does the
    same with ``ways - 1`` splits of every input and ``ways - 1`` merges, each copying its samples.

    Example (what :func:`sluice.auto_aug.core.select` does)::

        switch = Switch(index, len(ops))
        for k, op in enumerate(ops):
            switch.enter(k)
            switch.keep(op(images))
        images = switch.finish()
    """

    def __init__(self, index: DataNode, ways: int):
        stack = condition_stack()
        if stack is None:
            raise _no_truth_value(index, " (a per-sample choice among branches needs them)")
        if index.device != "cpu":
            raise ArgumentError(f"the index of a per-sample choice must be a CPU DataNode of integers, got a GPU "
                                f"one ({index!r}); move it with .cpu().")
        if ways < 1:
            raise ArgumentError(f"a per-sample choice needs at least one branch, got {ways}")
        self.stack = stack
        self.scope = stack.push(index, "select", ways)
        self.values: list[Any] = [_UNSET] * ways

    def enter(self, part: int) -> None:
        """Trace branch ``part`` next: the operators made until the next call run on its samples."""
        self.scope.branch = part

    def keep(self, value: Any) -> None:
        """The result of the branch being traced (a DataNode or a number)."""
        self.values[self.scope.branch] = value

    def close(self) -> None:
        """Leave the scope without merging (the tracing failed)."""
        if self.stack.scopes and self.stack.scopes[-1] is self.scope:
            self.stack.pop()

    def finish(self) -> DataNode:
        """The branches' results merged into one batch in the original order; leaves the scope."""
        try:
            missing = [k for k, v in enumerate(self.values) if v is _UNSET]
            if missing:
                raise ArgumentError(f"branch {missing[0]} of a per-sample choice gave no result")
            for k, v in enumerate(self.values):
                if not (isinstance(v, DataNode) or _promotable(v)):
                    raise ArgumentError(f"branch {k} of a per-sample choice gave {_short(v)}; every branch must "
                                        "give a DataNode (or a number)")
            parts = [_in_part(self.stack, self.scope, k, v) for k, v in enumerate(self.values)]
            if any(p.device != "cpu" for p in parts):  # a GPU result in one branch: the others' move there too
                parts = [p if p.device != "cpu" else _in_part(self.stack, self.scope, k, p, to_gpu=True)
                         for k, p in enumerate(parts)]
            src = parts[0].op
            if (src.schema.name == "_conditional.split_n" and src.inputs[1] is self.scope.predicate
                    and all(p.op is src and p.index == k for k, p in enumerate(parts))):
                return src.inputs[0]  # every branch kept it as it was
            if len(parts) == 1:
                return parts[0]
            merged = _add_node("_conditional.merge_n", [*parts, self.scope.predicate],
                               {"num_parts": len(parts)}, parts[0].device)[0]
            return _merged_here(self.stack, self.scope, merged)
        finally:
            self.close()


def _schema(name: str):
    return get_schema(name)


def _promotable(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.generic, np.ndarray, Constant))


def _same_value(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    try:
        if isinstance(a, np.ndarray):
            return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare are different
        return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _validated(node: DataNode, what: str, side: str) -> DataNode:
    if node.device != "cpu":
        rule, where = restriction_message(what, side)
        raise ArgumentError(f"{rule} Got a GPU input{where} ({node!r}); move it with .cpu().")
    return make_node(_schema("_conditional.validate_logical"), [node],
                     {"expression_name": what, "expression_side": side})


def _logical(what: str, left: Any, right: Callable[[], Any]) -> Any:
    left = _validated(left, what, "left")
    cond = If(left, what=what)
    cond.enter(True)
    value = right() if what == "and" else left
    if what == "and" and isinstance(value, DataNode):
        value = _validated(value, what, "right")
    cond.keep(True, "value", value)
    cond.enter(False)
    value = right() if what == "or" else left
    if what == "or" and isinstance(value, DataNode):
        value = _validated(value, what, "right")
    cond.keep(False, "value", value)
    cond.finish()
    return cond.result("value")


def and_(left: Any, right: Callable[[], Any]) -> Any:
    """``left and right()``: for a DataNode ``left``, ``right`` is traced for the samples where ``left`` is true,
    and the result is ``left`` (false) elsewhere."""
    if not isinstance(left, DataNode):
        return left and right()
    return _logical("and", left, right)


def or_(left: Any, right: Callable[[], Any]) -> Any:
    """``left or right()``: for a DataNode ``left``, ``right`` is traced for the samples where ``left`` is false."""
    if not isinstance(left, DataNode):
        return left or right()
    return _logical("or", left, right)


def not_(value: Any) -> Any:
    """``not value``; for a DataNode of scalar booleans, a DataNode of their negations."""
    if not isinstance(value, DataNode):
        return not value
    if condition_stack() is None:
        raise _no_truth_value(value)
    return logical_not(value)


def ifexp(test: Any, body: Callable[[], Any], orelse: Callable[[], Any]) -> Any:
    """``body() if test else orelse()``, per sample for a DataNode ``test``."""
    if not isinstance(test, DataNode):
        return body() if test else orelse()
    cond = If(test)
    cond.enter(True)
    cond.keep(True, "value", body())
    cond.enter(False)
    cond.keep(False, "value", orelse())
    cond.finish()
    return cond.result("value")


def call(func: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)``; while a pipeline with conditionals is traced, user functions are rewritten
    first (once) so that they may branch on DataNodes too."""
    if condition_stack() is not None:
        func = convert(func, _sys.modules[__name__])
    return func(*args, **kwargs)


# ------------------------------------------------------------------------------------------------------------
# DALI's fn._conditional, and tracing a pipeline function
# ------------------------------------------------------------------------------------------------------------
def _inputs_here(*nodes: Any) -> list[DataNode]:
    for i, node in enumerate(nodes):
        if not isinstance(node, DataNode):
            raise ArgumentError(f"fn._conditional: input {i} must be a DataNode, got {type(node).__name__}")
    stack = condition_stack()
    return [stack.localize(n) for n in nodes] if stack is not None else list(nodes)


def logical_not(input: DataNode) -> DataNode:
    """DALI's ``fn._conditional.not_``: the negation of a CPU batch of scalar booleans."""
    if not isinstance(input, DataNode):
        raise ArgumentError(f"fn._conditional.not_: the input must be a DataNode, got {type(input).__name__}")
    if input.device != "cpu":
        rule, where = restriction_message("not")
        raise ArgumentError(f"{rule} Got a GPU input{where} ({input!r}); move it with .cpu().")
    return make_node(_schema("_conditional.not_"), [input], {})


def split(input: DataNode, *, predicate: DataNode) -> tuple[DataNode, DataNode]:
    """DALI's ``fn._conditional.split``: the samples of ``input`` whose ``predicate`` is true, and the others."""
    node, pred = _inputs_here(input, predicate)
    if pred.device != "cpu":
        raise ArgumentError("fn._conditional.split: the predicate must be a CPU DataNode")
    parts = _make_split(node, pred)
    stack = condition_stack()
    if stack is not None:
        stack.register(list(parts), True)
    return parts


def merge(true_input: DataNode, false_input: DataNode, *, predicate: DataNode) -> DataNode:
    """DALI's ``fn._conditional.merge``: one batch with sample ``i`` from ``true_input`` where ``predicate[i]`` is
    true, else from ``false_input`` (each taken in order)."""
    t, f, pred = _inputs_here(true_input, false_input, predicate)
    if pred.device != "cpu":
        raise ArgumentError("fn._conditional.merge: the predicate must be a CPU DataNode")
    if t.device != f.device:
        t, f = t.gpu(), f.gpu()
    out = _add_node("_conditional.merge", [t, f, pred], {}, t.device)[0]
    stack = condition_stack()
    if stack is not None:
        stack.register([out], True)
    return out


def trace(pipe: Any, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Run the pipeline function ``func`` for ``pipe`` with conditionals: rewritten, with a condition stack
    open. Returns what it returns; a variable left undefined by an ``if`` raises when returned."""
    try:
        rewritten = convert(func, _sys.modules[__name__], force=True)
    except SourceUnavailable as e:
        raise ArgumentError(f"pipeline_def(enable_conditionals=True): cannot rewrite {func.__qualname__} ({e}); "
                            "define the pipeline function with `def` in a file") from None
    stack = pipe._conditions = ConditionStack()
    try:
        with pipe:
            outputs = rewritten(*args, **kwargs)
        for out in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
            if isinstance(out, Undefined):
                out.fail()
            if isinstance(out, DataNode):
                stack.localize(out)  # refuses a node made in a branch (kept in a container)
    finally:
        pipe._conditions = None
    return outputs

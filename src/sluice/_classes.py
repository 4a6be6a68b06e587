"""The class form of the operators (DALI's ``ops`` API), attached to :mod:`sluice.ops` and its subpackages.

A front end: the classes build graph nodes (the pipeline layer), so :mod:`sluice.ops` itself, the operator
layer, cannot make them. ``import sluice`` imports this module once the operators are registered.

Example::

    resize = ops.Resize(device="gpu", resize_shorter=256)
    images = resize(images)
"""

from __future__ import annotations as _annotations

import importlib as _importlib
import sys as _sys
import types as _pytypes
from typing import Any as _Any

import sluice.ops as _ops
from sluice.pipeline.graph import DataNode
from sluice.pipeline.graph import make_node as _make_node
from sluice.schema import REGISTRY as _REGISTRY
from sluice.schema import OpSchema as _OpSchema
from sluice.schema import _camel

__all__: list[str] = []


class _OperatorClass:
    """The class form of an operator: arguments at construction, inputs (and more arguments) at call."""

    schema: _OpSchema

    def __init__(self, *, device: str | None = None, **kwargs: _Any):
        self.device = device
        # Check the arguments now, so that a mistake is reported where the operator is made.
        self.schema.validate({k: v for k, v in kwargs.items() if k != "name"}, lambda v: isinstance(v, DataNode))
        self._kwargs = kwargs

    def __call__(self, *inputs: _Any, **kwargs: _Any) -> _Any:
        merged = dict(self._kwargs)
        merged.update(kwargs)
        if self.device is not None:
            merged.setdefault("device", self.device)
        return _make_node(self.schema, list(inputs), merged)

    def __repr__(self) -> str:
        return f"ops.{type(self).__qualname__}(device={self.device!r}, {self._kwargs})"


def _namespace(root: str, path: list[str]) -> _pytypes.ModuleType:
    module = _sys.modules[root]
    name = root
    for part in path:
        name = f"{name}.{part}"
        child = _sys.modules.get(name)
        if child is None:
            try:
                child = _importlib.import_module(name)
            except ImportError:
                child = _pytypes.ModuleType(name, f"sluice operators under '{'.'.join(path)}'")
                _sys.modules[name] = child
        if getattr(module, part, None) is not child:
            setattr(module, part, child)
        module = child
    return module


def _make_class(schema: _OpSchema) -> type[_OperatorClass]:
    cls_name = _camel(schema.name)
    cls = type(cls_name, (_OperatorClass,), {"schema": schema, "__doc__": schema.docstring(),
                                           "__module__": "sluice.ops"})
    return cls


def _attach_classes() -> None:
    for name, schema in sorted(_REGISTRY.items()):
        if name.startswith("_"):
            continue
        *path, _ = name.split(".")
        target = _namespace(_ops.__name__, path)
        cls = _make_class(schema)
        setattr(target, cls.__name__, cls)
        if not path:
            _ops.__all__.append(cls.__name__)


_attach_classes()

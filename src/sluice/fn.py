"""The functional operator API (DALI's ``fn``): ``fn.resize(images, resize_x=224)``.

Each function is made from its operator's schema: its signature, docstring and argument checks all come from
there. Dotted operator names become submodules: ``fn.readers.file``, ``fn.decoders.image``,
``fn.random.coin_flip``.
"""

from __future__ import annotations as _annotations

import sys as _sys
import types as _pytypes
from collections.abc import Callable as _Callable
from typing import Any as _Any

import sluice.ops as _ops  # noqa: F401 - registers every operator
from sluice.pipeline import conditionals
from sluice.pipeline.graph import make_node as _make_node
from sluice.schema import OpSchema as _OpSchema
from sluice.schema import REGISTRY as _REGISTRY

__all__: list[str] = []


def _make_function(schema: _OpSchema) -> _Callable[..., _Any]:
    def operator(*inputs: _Any, **kwargs: _Any) -> _Any:
        return _make_node(schema, list(inputs), kwargs)

    leaf = schema.name.rsplit(".", 1)[-1]
    operator.__name__ = operator.__qualname__ = leaf
    operator.__doc__ = schema.docstring()
    operator.__signature__ = schema.signature()  # type: ignore[attr-defined]
    operator.__module__ = "sluice.fn" + ("." + schema.name.rsplit(".", 1)[0] if "." in schema.name else "")
    return operator


def _build() -> None:
    this = _sys.modules[__name__]
    for name, schema in sorted(_REGISTRY.items()):
        if name.startswith("_"):
            continue
        *path, leaf = name.split(".")
        module = this
        full = __name__
        for part in path:
            full = f"{full}.{part}"
            child = _sys.modules.get(full)
            if child is None:
                child = _pytypes.ModuleType(full, f"sluice operators under '{full[len(__name__) + 1:]}'")
                _sys.modules[full] = child
                setattr(module, part, child)
            module = child
        setattr(module, leaf, _make_function(schema))
        if not path:
            __all__.append(leaf)


def _conditional_namespace() -> None:
    """``fn._conditional.split`` / ``merge`` / ``not_``: the operators behind ``if`` on DataNodes, under DALI's
    names and signatures (the predicate a keyword)."""
    name = f"{__name__}._conditional"
    module = _pytypes.ModuleType(name, "The operators of conditional execution (DALI's fn._conditional).")
    module.split = conditionals.split  # type: ignore[attr-defined]
    module.merge = conditionals.merge  # type: ignore[attr-defined]
    module.not_ = conditionals.logical_not  # type: ignore[attr-defined]
    _sys.modules[name] = module
    setattr(_sys.modules[__name__], "_conditional", module)


_build()
_conditional_namespace()

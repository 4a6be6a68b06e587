"""Builds the ``fn`` and ``ops`` trees of :mod:`sluice.compat.dali` from sluice's operator registry.

Every registered operator appears under its DALI name (``fn.readers.file``, ``ops.readers.File``) wrapped with
the argument rules of :mod:`sluice.compat._legacy`, every deprecated DALI name of :data:`FN_ALIASES` /
:data:`OPS_ALIASES` as a warning alias, and DALI's other current names (``fn.experimental.decoders.video``).
Each namespace answers a name it lacks with NotSupportedError.
"""

from __future__ import annotations

import sys
import types as _pytypes
from typing import Any

from sluice.compat._legacy import (
    FN_ALIASES,
    FN_OTHER_NAMES,
    OPS_ALIASES,
    OPS_OTHER_NAMES,
    class_path,
    make_class,
    make_function,
)
from sluice.compat._missing import module_getattr, public_names
from sluice.schema import REGISTRY, get_schema

__all__ = ["build_tree"]


def _namespace(root: _pytypes.ModuleType, path: list[str]) -> _pytypes.ModuleType:
    module = root
    for part in path:
        child = module.__dict__.get(part)
        if child is None:
            name = f"{module.__name__}.{part}"
            child = _pytypes.ModuleType(name, f"DALI's {name.split('.', 3)[-1]} namespace, made of sluice's "
                                              "operators.")
            child.__path__ = []  # a package, so that `import nvidia.dali.fn.readers` works
            child.__getattr__ = module_getattr(name, lambda m=child: public_names(m))
            sys.modules[name] = child
            setattr(module, part, child)
        module = child
    return module


#: operators DALI keeps in a plugin, not in ``nvidia.dali.fn`` / ``ops`` (see :mod:`sluice.compat.dali.plugin`)
PLUGIN_ONLY = frozenset({"torch_python_function"})
#: operators whose DALI class takes the function first, positionally: ``ops.PythonFunction(f, num_outputs=2)``
FUNCTION_FIRST = frozenset({"python_function", "dl_tensor_python_function", "torch_python_function"})


def function_first(cls: type) -> type:
    """``cls`` whose constructor takes DALI's positional order ``(function, num_outputs=1, device='cpu',
    batch_processing=<default>, **kwargs)``."""

    def __init__(self: Any, function: Any = None, num_outputs: int = 1, device: str | None = None,
                 batch_processing: bool | None = None, **kwargs: Any) -> None:
        if function is not None:
            kwargs["function"] = function
        if batch_processing is not None:
            kwargs["batch_processing"] = batch_processing
        cls.__init__(self, device=device, num_outputs=num_outputs, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})


def build_tree(root: _pytypes.ModuleType, kind: str) -> None:
    """Fill ``root`` (the compat ``fn`` or ``ops`` module) with every operator and every legacy alias."""
    make = make_function if kind == "fn" else make_class
    for name, schema in sorted(REGISTRY.items()):
        if name.startswith("_") or name in PLUGIN_ONLY:
            continue
        dali_name = name if kind == "fn" else class_path(name)
        *path, leaf = dali_name.split(".")
        made = make(schema, dali_name)
        if kind == "ops" and name in FUNCTION_FIRST:
            made = function_first(made)
        setattr(_namespace(root, path), leaf, made)
    for alias, (target, device) in (FN_ALIASES if kind == "fn" else OPS_ALIASES).items():
        *path, leaf = alias.split(".")
        setattr(_namespace(root, path), leaf, make(get_schema(target), alias, legacy=True, default_device=device))
    for alias, target in (FN_OTHER_NAMES if kind == "fn" else OPS_OTHER_NAMES).items():
        *path, leaf = alias.split(".")
        setattr(_namespace(root, path), leaf, make(get_schema(target), alias))

"""The import hook behind :func:`sluice.compat.install`: ``nvidia.dali[.x.y]`` resolves to
``sluice.compat.dali[.x.y]`` (the very same module objects) when NVIDIA DALI itself is not installed.

The hook sits first on ``sys.meta_path`` but only answers for ``nvidia.dali`` and below, and for ``nvidia``
itself when no real ``nvidia`` package exists; a real ``nvidia`` namespace package (``nvidia.nvimgcodec``,
``nvidia.cuda_runtime`` ...) is left to the ordinary finders, and a real DALI always wins.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types as _pytypes
from typing import Any

log = logging.getLogger(__name__)

ALIAS = "nvidia.dali"
TARGET = "sluice.compat.dali"


def _target_module(fullname: str) -> _pytypes.ModuleType:
    """The sluice module that stands for ``fullname`` (``nvidia.dali.fn`` -> ``sluice.compat.dali.fn``)."""
    target = TARGET + fullname[len(ALIAS):]
    if target in sys.modules:
        return sys.modules[target]
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if e.name != target:
            raise
    # Namespaces made at run time (fn.readers, ops.decoders) are attributes of their parent.
    parent, _, leaf = target.rpartition(".")
    module = getattr(_target_module(ALIAS + parent[len(TARGET):]), leaf, None)
    if isinstance(module, _pytypes.ModuleType):
        return module
    raise ModuleNotFoundError(f"No module named {fullname!r}: "
                              f"{fullname} is not provided by sluice's DALI compatibility layer", name=fullname)


class _AliasLoader(importlib.abc.Loader):
    """Hands back the existing sluice module, keeping its own ``__spec__`` (it stays importable as itself)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> _pytypes.ModuleType:
        module = _target_module(spec.name)
        spec.loader_state = ("own spec", module.__dict__.get("__spec__"))
        return module

    def exec_module(self, module: _pytypes.ModuleType) -> None:
        state = getattr(module.__spec__, "loader_state", None)
        if isinstance(state, tuple) and state[:1] == ("own spec",):
            module.__spec__ = state[1]


class _SyntheticNvidia(importlib.abc.Loader):
    """An empty ``nvidia`` package, made only when no real one exists."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: _pytypes.ModuleType) -> None:
        module.__doc__ = "Stand-in 'nvidia' package made by sluice.compat.install() (no real one is installed)."
        module.__path__ = [os.path.join(p, "nvidia") for p in sys.path if os.path.isdir(os.path.join(p, "nvidia"))]
        module.__sluice_synthetic__ = True


class DaliFinder(importlib.abc.MetaPathFinder):
    """Resolves ``nvidia.dali`` and its submodules to :mod:`sluice.compat.dali` (see the module docstring)."""

    sluice_dali_finder = True  # recognised by marker: child processes load this module without importing sluice

    def _others_find(self, fullname: str, path: Any) -> bool:
        for finder in sys.meta_path:
            if getattr(finder, "sluice_dali_finder", False) or not hasattr(finder, "find_spec"):
                continue
            try:
                if finder.find_spec(fullname, path) is not None:
                    return True
            except (ImportError, ValueError):
                continue
        return False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "nvidia":
            if self._others_find(fullname, path):
                return None
            return importlib.machinery.ModuleSpec(fullname, _SyntheticNvidia(), is_package=True)
        if fullname == ALIAS:
            if self._others_find(fullname, path):
                log.info("a real NVIDIA DALI is installed; 'import nvidia.dali' gives it, not sluice")
                return None
        elif fullname.startswith(ALIAS + "."):
            parent = sys.modules.get(ALIAS)
            if parent is None or not parent.__name__.startswith(TARGET):
                return None  # the real DALI's submodules
        else:
            return None
        module_is_package = hasattr(_target_module(fullname), "__path__")
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(), is_package=module_is_package)


def real_dali_available() -> bool:
    """Whether a real ``nvidia.dali`` can be imported (asked of the finders other than ours)."""
    mod = sys.modules.get(ALIAS)
    if mod is not None:
        return not mod.__name__.startswith(TARGET)
    try:
        nvidia = sys.modules.get("nvidia")
        if nvidia is None:
            spec = importlib.machinery.PathFinder.find_spec("nvidia")
            if spec is None:
                return False
            paths = list(spec.submodule_search_locations or [])
        else:
            if getattr(nvidia, "__sluice_synthetic__", False):
                return False
            paths = list(getattr(nvidia, "__path__", []))
        return importlib.machinery.PathFinder.find_spec(ALIAS, paths) is not None
    except (ImportError, ValueError):
        return False


def installed_finder() -> DaliFinder | None:
    """The hook on ``sys.meta_path``, if any (also one loaded by the runner's sitecustomize)."""
    for finder in sys.meta_path:
        if getattr(finder, "sluice_dali_finder", False):
            return finder
    return None


def install() -> bool:
    """Put the hook on ``sys.meta_path`` unless a real DALI is importable. Idempotent. Returns whether
    ``nvidia.dali`` now resolves to sluice."""
    if installed_finder() is not None:
        return True
    if real_dali_available():
        log.info("NVIDIA DALI is installed; sluice.compat.install() leaves 'nvidia.dali' to it")
        return False
    sys.meta_path.insert(0, DaliFinder())
    return True


def uninstall() -> None:
    """Remove the hook and forget the ``nvidia.dali`` modules it made (and the stand-in ``nvidia`` package)."""
    finder = installed_finder()
    while finder is not None:
        sys.meta_path.remove(finder)
        finder = installed_finder()
    for name in list(sys.modules):
        if (name == ALIAS or name.startswith(ALIAS + ".")) and sys.modules[name].__name__.startswith(TARGET):
            del sys.modules[name]
    nvidia = sys.modules.get("nvidia")
    if nvidia is not None:
        dali = getattr(nvidia, "dali", None)
        if dali is not None and getattr(dali, "__name__", "").startswith(TARGET):
            delattr(nvidia, "dali")
        if getattr(nvidia, "__sluice_synthetic__", False):
            del sys.modules["nvidia"]

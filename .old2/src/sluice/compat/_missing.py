"""How the DALI compatibility layer reports what sluice does not provide: never a silent wrong result.

Every module of :mod:`sluice.compat.dali` answers a name it does not have with :class:`NotSupportedError`,
which is both a ``NotImplementedError`` (what the caller should catch) and an ``AttributeError`` (so that
``hasattr`` and ``getattr(module, name, default)`` keep working).

Example::

    from sluice.compat.dali import fn
    fn.readers.caffe(path="x")   # NotSupportedError: nvidia.dali.fn.readers.caffe is not provided by ...
"""

from __future__ import annotations

import types as _pytypes
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

__all__ = ["NotSupportedError", "dali_name", "missing", "module_getattr", "unsupported_callable"]

_PREFIX = "sluice.compat.dali"


class NotSupportedError(NotImplementedError, AttributeError):
    """A DALI name, argument or value that sluice does not implement."""


def dali_name(module_name: str, name: str = "") -> str:
    """``sluice.compat.dali.fn.readers`` + ``caffe`` -> ``nvidia.dali.fn.readers.caffe``."""
    base = "nvidia.dali" + module_name[len(_PREFIX):] if module_name.startswith(_PREFIX) else module_name
    return f"{base}.{name}" if name else base


def missing(what: str, available: Iterable[str] = (), hint: str = "") -> NoReturn:
    """Raise :class:`NotSupportedError` for ``what``, listing what exists instead."""
    names = sorted(n for n in available if not n.startswith("_"))
    shown = ", ".join(names[:40]) + (", ..." if len(names) > 40 else "")
    message = f"{what} is not provided by sluice's DALI compatibility layer (sluice.compat.dali)."
    if hint:
        message += " " + hint
    if shown:
        message += f" Available here: {shown}."
    raise NotSupportedError(message)


def module_getattr(module_name: str, available: Callable[[], Iterable[str]]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` that reports missing public names with :func:`missing`; dunder and private
    names get a plain AttributeError (tools probe those)."""

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        missing(dali_name(module_name, name), available())

    return __getattr__


def unsupported_callable(qualname: str, hint: str = "") -> Callable[..., NoReturn]:
    """A stand-in for a DALI function or class that sluice lacks: importing it works, using it raises."""

    def stub(*_args: Any, **_kwargs: Any) -> NoReturn:
        missing(qualname, hint=hint)

    stub.__name__ = stub.__qualname__ = qualname.rsplit(".", 1)[-1]
    stub.__doc__ = f"Not provided by sluice: calling it raises NotSupportedError. {hint}".strip()
    return stub


def public_names(module: _pytypes.ModuleType) -> list[str]:
    """The public names of ``module`` (its ``__all__``, else its attributes; for the error messages)."""
    names = vars(module).get("__all__") or list(vars(module))
    return [n for n in names if not n.startswith("_")]

"""Which keyword arguments of an automatic augmentation reach which augmentation: each augmentation takes, besides
the samples and its parameter, the extra arguments its function names (``shape``, ``fill_value``,
``interp_type``...); the others are not passed to it."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["MissingArgException", "UnusedArgException", "accepted_kwargs", "missing_kwargs", "num_positional_args",
           "forbid_unused_kwargs"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class MissingArgException(Exception):
    """An augmentation needs a keyword argument (``shape`` for the relative translations) the call did not give."""

    def __init__(self, message: str, augmentation: Any, missing_args: list[str]):
        super().__init__(message)
        self.augmentation = augmentation
        self.missing_args = missing_args


class UnusedArgException(Exception):
    """A keyword argument of an automatic augmentation that none of its augmentations takes."""

    def __init__(self, message: str, unused_args: list[str]):
        super().__init__(message)
        self.unused_args = unused_args


def _extra_params(fun: Callable[..., Any], skip_positional: int) -> list[inspect.Parameter]:
    """The parameters of ``fun`` after its first ``skip_positional`` positional ones, that can be named."""
    params = list(inspect.signature(fun).parameters.values())
    skipped = 0
    out = []
    for p in params:
        if p.kind in _POSITIONAL and skipped < skip_positional:
            skipped += 1
            continue
        if p.kind in _NAMED:
            out.append(p)
    return out


def accepted_kwargs(fun: Callable[..., Any], kwargs: dict[str, Any], skip_positional: int = 0) -> dict[str, Any]:
    """The items of ``kwargs`` that ``fun`` names as parameters (past its first ``skip_positional``)."""
    names = {p.name for p in _extra_params(fun, skip_positional)}
    return {k: v for k, v in kwargs.items() if k in names}


def missing_kwargs(fun: Callable[..., Any], kwargs: dict[str, Any], skip_positional: int = 0) -> list[str]:
    """The parameters of ``fun`` without a default that ``kwargs`` does not give."""
    return [p.name for p in _extra_params(fun, skip_positional)
            if p.default is inspect.Parameter.empty and p.name not in kwargs]


def num_positional_args(fun: Callable[..., Any]) -> int:
    """How many arguments ``fun`` takes by position."""
    return sum(p.kind in _POSITIONAL for p in inspect.signature(fun).parameters.values())


def forbid_unused_kwargs(augmentations: Iterable[Any], kwargs: dict[str, Any], call_name: str) -> None:
    """Raise :class:`UnusedArgException` for keyword arguments that no augmentation in ``augmentations`` takes."""
    used: set[str] = set()
    for aug in augmentations:
        used.update(accepted_kwargs(aug.op, kwargs, 2))
    unused = [k for k in kwargs if k not in used]
    if unused:
        what = "argument" if len(unused) == 1 else "arguments"
        raise UnusedArgException(f"{call_name} got the keyword {what} {', '.join(repr(k) for k in unused)}, which "
                                 "none of its augmentations takes", unused_args=unused)

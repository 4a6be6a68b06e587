"""``nvidia.dali.math`` on sluice: the element-wise functions sluice's arithmetic implements (``abs``, ``pow``).
DALI's other math functions (``clamp``, ``sqrt``, ``exp``, ``min``, ``max`` ...) raise NotImplementedError.

Example::

    from nvidia.dali import math           # after sluice.compat.install()
    magnitude = math.abs(audio)
"""

from __future__ import annotations

import sys as _sys
from typing import Any

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.pipeline.graph import DataNode, arithmetic

__all__ = ["abs", "pow"]


def abs(input: DataNode) -> DataNode:
    """Element-wise absolute value."""
    return arithmetic("abs", input)


def pow(base: Any, exponent: Any) -> DataNode:
    """Element-wise ``base ** exponent`` (at least one of them a DataNode), with DALI's type promotion."""
    return arithmetic("pow", base, exponent)


__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))

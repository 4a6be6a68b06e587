"""Element-wise math functions on DataNodes (DALI's ``nvidia.dali.math``).

Example::

    from sluice import math
    clipped = math.clamp(images * 1.25, 0, 255)
    magnitude = math.sqrt(re * re + im * im)

Integer inputs to functions with a real result (``sqrt``, ``exp``, ``sin`` ...) are computed in FLOAT, as in
DALI; ``min``, ``max`` and ``clamp`` follow the usual type promotion.
"""

from __future__ import annotations

from typing import Any

from sluice.pipeline.graph import DataNode, arithmetic

__all__ = ["abs", "fabs", "floor", "ceil", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10", "sin", "cos",
           "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "pow", "fpow", "min",
           "max", "atan2", "clamp"]


def _unary(op: str):
    def function(x: DataNode) -> DataNode:
        return arithmetic(op, x)

    function.__name__ = op
    function.__doc__ = f"Element-wise {op} of ``x``."
    return function


def _binary(op: str):
    def function(a: Any, b: Any) -> DataNode:
        return arithmetic(op, a, b)

    function.__name__ = op
    function.__doc__ = f"Element-wise {op} of ``a`` and ``b`` (DataNodes or constants)."
    return function


abs = _unary("abs")  # noqa: A001 - DALI's name
fabs = _unary("fabs")
floor = _unary("floor")
ceil = _unary("ceil")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
cbrt = _unary("cbrt")
exp = _unary("exp")
log = _unary("log")
log2 = _unary("log2")
log10 = _unary("log10")
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
asin = _unary("asin")
acos = _unary("acos")
atan = _unary("atan")
sinh = _unary("sinh")
cosh = _unary("cosh")
tanh = _unary("tanh")
asinh = _unary("asinh")
acosh = _unary("acosh")
atanh = _unary("atanh")
pow = _binary("pow")  # noqa: A001
fpow = _binary("fpow")
min = _binary("min")  # noqa: A001
max = _binary("max")  # noqa: A001
atan2 = _binary("atan2")


def clamp(x: Any, lo: Any, hi: Any) -> DataNode:
    """``x`` limited to ``[lo, hi]``, element-wise."""
    return arithmetic("clamp", x, lo, hi)

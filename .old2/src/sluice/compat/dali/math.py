"""``nvidia.dali.math`` on sluice: DALI's element-wise math functions, from :mod:`sluice.math`.

Example::

    from nvidia.dali import math           # after sluice.compat.install()
    magnitude = math.sqrt(re * re + im * im)
"""

from __future__ import annotations

import sys as _sys

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.math import *  # noqa: F403 - DALI's math module is sluice's
from sluice.math import __all__  # noqa: F401

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))

"""``nvidia.dali.types`` on sluice: the same enums and constants (``types.FLOAT``, ``types.RGB``,
``types.INTERP_LINEAR``, the legacy layout constants ``types.NCHW`` / ``types.NHWC``), ``types.Constant``,
``SampleInfo`` and ``BatchInfo``.

Example::

    from nvidia.dali import types          # after sluice.compat.install()
    cmn = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout=types.NCHW)
"""

from __future__ import annotations

import sys as _sys
from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.pipeline.graph import Constant as ScalarConstant
from sluice.pipeline.graph import types_constant as Constant
from sluice.types import *
from sluice.types import __all__ as _all

CPU_ONLY_DEVICE_ID = None
"""What DALI's ``types.CPU_ONLY_DEVICE_ID`` means: a pipeline without a GPU (``device_id=None``)."""



__all__ = [*_all, "Constant", "ScalarConstant", "CPU_ONLY_DEVICE_ID"]  # noqa: PLE0604 - sluice.types' names

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
